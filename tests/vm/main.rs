//! Every check that needs a stock kernel with ESP, WireGuard and crypto_user, in ONE
//! virtme-ng boot: under TCG a boot costs about 30 s, and one per group made the VM boots
//! a large share of the suite. The first `in_vm_*` test (on the host) boots the VM, which
//! runs each guest group (an ignored test of this same binary) as its own process; each
//! `in_vm_*` test then reports its own group's outcome, so one failing group hides no
//! other. Each group is a module here and says what it checks. The host-side tests of the
//! modules (refusals, `matrix --vm`, which boots its own guest through the product) run as
//! usual. `IPSEC_LAB_VM_GROUPS=ipv6,encap` boots for those groups only (the others skip).
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

use std::sync::OnceLock;
use std::time::Duration;

/// One host test per guest group, and the list of groups from the same lines, so no
/// group runs without its own reported result.
macro_rules! guest_groups {
    ($($test:ident => $group:literal,)*) => {
        /// The guest side of every group, in the order they run.
        const GUEST_GROUPS: &[&str] = &[$($group),*];
        $(
            #[test]
            fn $test() {
                in_vm($group);
            }
        )*
    };
}

// The groups leave nothing of theirs behind, and xfrm, whose foreign SAs must survive
// `ipsec-lab clean`, runs last.
guest_groups! {
    in_vm_encap => "encap::guest_encap_checks",
    in_vm_ipv6 => "ipv6::guest_ipv6_checks",
    in_vm_matrix_killed_priorities => "matrix::killed_matrix_priorities_restored_in_guest",
    in_vm_modes => "modes::guest_modes_checks",
    in_vm_multi_sa => "multi_sa::guest_multi_sa_checks",
    in_vm_netem => "netem::guest_netem_checks",
    in_vm_remote => "remote::guest_remote_xfrm",
    in_vm_strongswan => "strongswan::guest_checks",
    in_vm_wireguard => "wireguard::guest_checks",
    in_vm_xfrm => "xfrm::guest_checks",
}

/// The groups together take about five minutes under TCG; a hung guest must still end,
/// and a hung group must leave time for the ones after it.
const VM_TIMEOUT: Duration = Duration::from_secs(1500);
const GROUP_TIMEOUT: Duration = Duration::from_secs(600);

/// The groups `IPSEC_LAB_VM_GROUPS` names (by module), else all.
fn selected() -> Vec<&'static str> {
    match std::env::var("IPSEC_LAB_VM_GROUPS") {
        Ok(list) => GUEST_GROUPS
            .iter()
            .copied()
            .filter(|g| list.split(',').any(|m| g.split("::").next() == Some(m.trim())))
            .collect(),
        Err(_) => GUEST_GROUPS.to_vec(),
    }
}

/// The one boot all `in_vm_*` tests share: the first to get here boots, the rest wait.
static BOOT: OnceLock<common::GuestGroups> = OnceLock::new();

/// Reports guest group `group`'s outcome from the shared boot.
fn in_vm(group: &str) {
    if std::env::var_os(common::IN_VM).is_some() || !common::vm_or_skip(group) {
        return;
    }
    let groups = selected();
    if !groups.contains(&group) {
        testcap::skip(group, "not in IPSEC_LAB_VM_GROUPS");
        return;
    }
    let boot = BOOT.get_or_init(|| {
        let _vm = common::vm_lock();
        common::boot_guest_groups(&groups, GROUP_TIMEOUT, VM_TIMEOUT)
    });
    boot.assert_passed(group);
}
