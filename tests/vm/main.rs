//! Every check that needs a stock kernel with ESP, WireGuard and crypto_user, in ONE
//! virtme-ng boot: under TCG a boot costs about 30 s, and one per group made the VM boots
//! a large share of the suite. `every_guest_group_in_one_vm_boot` (on the host) boots the
//! VM and runs this same test binary inside it with only the guest groups selected; each
//! group is a module here and says what it checks. The host-side tests of the modules
//! (refusals, `matrix --vm`, which boots its own guest through the product) run as usual.
//! Needs root, vng and a kernel image in /boot; skips with the reason otherwise.

#[path = "../common/mod.rs"]
mod common;
#[path = "../remote_common/mod.rs"]
mod remote_common;

mod encap;
mod ipv6;
mod matrix;
mod modes;
mod multi_sa;
mod netem;
mod remote;
mod strongswan;
mod wireguard;
mod xfrm;

use std::time::Duration;

/// The guest side of every group, in the order they run (libtest sorts by name). The
/// groups leave nothing of theirs behind, and xfrm, whose foreign SAs must survive
/// `ipsec-lab clean`, runs last.
const GUEST_GROUPS: [&str; 10] = [
    "encap::guest_encap_checks",
    "ipv6::guest_ipv6_checks",
    "matrix::killed_matrix_priorities_restored_in_guest",
    "modes::guest_modes_checks",
    "multi_sa::guest_multi_sa_checks",
    "netem::guest_netem_checks",
    "remote::guest_remote_xfrm",
    "strongswan::guest_checks",
    "wireguard::guest_checks",
    "xfrm::guest_checks",
];

/// The groups together take about five minutes under TCG; a hung guest must still end.
const VM_TIMEOUT: Duration = Duration::from_secs(1500);

#[test]
fn every_guest_group_in_one_vm_boot() {
    let _vm = common::vm_lock();
    common::run_guest_tests(&GUEST_GROUPS, VM_TIMEOUT);
}
