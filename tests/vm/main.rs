//! Every check that needs a kernel with ESP (and WireGuard, crypto_user, pcrypt) the host
//! lacks, in ONE boot per kernel: the groups user-mode Linux can carry (ESP at native
//! speed, booted in seconds) in one UML boot; what it cannot (WireGuard; pcrypt and SA pairs
//! over several CPUs) in ONE virtme-ng boot of the stock kernel (TCG: about 30 s to boot,
//! a few MB/s). The first `in_vm_*` test of a kernel (on the host) boots it, and the guest
//! runs each of its groups (an ignored test of this same binary) as its own process; each
//! `in_vm_*` test then reports its own group's outcome, so one failing group hides no
//! other. Each group is a module here and says what it checks. The host-side tests of the
//! modules (refusals, `matrix --vm`, which boots its own guest through the product) run as
//! usual. `IPSEC_LAB_VM_GROUPS=ipv6,encap` boots for those groups only (the others skip).
//! Needs root, and user-mode-linux or vng with a kernel image in /boot; skips with the
//! reason otherwise.

#[path = "../common/mod.rs"]
mod common;
#[path = "../remote_common/mod.rs"]
mod remote_common;

mod clean;
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

use std::sync::{Once, OnceLock};
use std::time::Duration;

/// Which kernel a guest group boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Boot {
    /// User-mode Linux: kernel ESP at native speed, booted in seconds; one CPU, generic C
    /// crypto, no WireGuard.
    Uml,
    /// The stock kernel under virtme-ng (TCG where KVM cannot boot it): what UML lacks.
    Stock,
    /// Whichever has two `cbc(aes)` drivers: UML where its kernel ships aes_ti (before
    /// 7.x), else the stock kernel (aesni and aes-generic). On AVX-512 hosts only sid's UML
    /// 7.x runs, and its AES library is its one driver.
    TwoDrivers,
}

impl Boot {
    /// The kernel this group boots on this host.
    fn resolved(self) -> Boot {
        match self {
            Boot::TwoDrivers => {
                match lab::uml::UmlKernel::installed().is_some_and(|k| k.has_module("aes_ti")) {
                    true => Boot::Uml,
                    false => Boot::Stock,
                }
            }
            b => b,
        }
    }
}

/// One host test per guest group, and the list of groups from the same lines, so no
/// group runs without its own reported result.
macro_rules! guest_groups {
    ($($test:ident => $group:literal in $boot:ident,)*) => {
        /// Every group's host test, its guest side (in the order they run) and the kernel it
        /// boots.
        const GUEST_GROUPS: &[(&str, &str, Boot)] = &[$((stringify!($test), $group, Boot::$boot)),*];
        $(
            #[test]
            fn $test() {
                in_vm($group, Boot::$boot);
            }
        )*
    };
}

// The groups leave nothing of theirs behind, and xfrm, whose foreign SAs must survive
// `ipsec-lab clean`, runs last in its boot.
guest_groups! {
    in_vm_clean => "clean::guest_clean_checks" in Uml,
    in_vm_encap => "encap::guest_encap_checks" in Uml,
    in_vm_ipv6 => "ipv6::guest_ipv6_checks" in Uml,
    in_vm_matrix_killed_priorities => "matrix::killed_matrix_priorities_restored_in_guest" in TwoDrivers,
    in_vm_modes => "modes::guest_modes_checks" in Uml,
    in_vm_multi_sa => "multi_sa::guest_multi_sa_checks" in Stock,
    in_vm_netem => "netem::guest_netem_checks" in Uml,
    in_vm_remote => "remote::guest_remote_xfrm" in Uml,
    in_vm_strongswan => "strongswan::guest_checks" in Uml,
    in_vm_wireguard => "wireguard::guest_checks" in Stock,
    in_vm_xfrm => "xfrm::guest_checks" in Uml,
}

/// The groups together take about five minutes under TCG; a hung guest must still end,
/// and a hung group must leave time for the ones after it.
const VM_TIMEOUT: Duration = Duration::from_secs(1500);
const GROUP_TIMEOUT: Duration = Duration::from_secs(600);

/// The groups of `boot` that `IPSEC_LAB_VM_GROUPS` names (by module), else all of them.
fn selected(boot: Boot) -> Vec<&'static str> {
    let named = |group: &str| match std::env::var("IPSEC_LAB_VM_GROUPS") {
        Ok(list) => list
            .split(',')
            .any(|m| group.split("::").next() == Some(m.trim())),
        Err(_) => true,
    };
    GUEST_GROUPS
        .iter()
        .filter(|(_, group, b)| b.resolved() == boot && named(group))
        .map(|(_, group, _)| *group)
        .collect()
}

/// The one boot per kernel all `in_vm_*` tests of it share: the first to get here boots,
/// the rest wait.
static UML_BOOT: OnceLock<common::GuestGroups> = OnceLock::new();
static STOCK_BOOT: OnceLock<common::GuestGroups> = OnceLock::new();

/// Whether `boot`'s kernel can be booted here; prints why not under `test`'s name.
fn capable(boot: Boot, test: &str) -> bool {
    match boot.resolved() {
        Boot::Uml => common::uml_or_skip(test),
        _ => common::vm_or_skip(test),
    }
}

/// The outcome of `boot`'s groups, booting it if no test has yet.
fn booted(boot: Boot) -> &'static common::GuestGroups {
    let groups = selected(boot);
    match boot.resolved() {
        Boot::Uml => {
            UML_BOOT.get_or_init(|| common::boot_guest_groups_uml(&groups, GROUP_TIMEOUT, VM_TIMEOUT))
        }
        _ => STOCK_BOOT.get_or_init(|| common::boot_guest_groups(&groups, GROUP_TIMEOUT, VM_TIMEOUT)),
    }
}

/// Reports guest group `group`'s outcome from the shared boot of its kernel.
fn in_vm(group: &str, boot: Boot) {
    if std::env::var_os(common::IN_VM).is_some() {
        return;
    }
    let boot = boot.resolved();
    if !capable(boot, group) {
        return;
    }
    if !selected(boot).contains(&group) {
        testcap::skip(group, "not in IPSEC_LAB_VM_GROUPS");
        return;
    }
    // The other kernel boots meanwhile, where a test of it is to run (a boot no test waits
    // for would be cut off when the tests end): user-mode Linux keeps one core busy, a TCG
    // guest the other, so the two take the time of the longer, not of both.
    static OTHER: Once = Once::new();
    OTHER.call_once(|| {
        let other = match boot {
            Boot::Uml => Boot::Stock,
            _ => Boot::Uml,
        };
        let first = GUEST_GROUPS.iter().find(|(test, group, b)| {
            b.resolved() == other && selected(other).contains(group) && chosen(test)
        });
        if let Some(&(_, first, _)) = first {
            std::thread::spawn(move || {
                if capable(other, first) {
                    booted(other);
                }
            });
        }
    });
    booted(boot).assert_passed(group);
}

/// Whether the test harness runs `test`: no name filter on its command line, or one that
/// `test` contains (`--skip NAME` and option values err towards "not run", never booting
/// a guest no test waits for).
fn chosen(test: &str) -> bool {
    let mut args = std::env::args().skip(1);
    let mut filters = Vec::new();
    let mut exact = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--exact" => exact = true,
            "--skip" => {
                if args.next().is_some_and(|skipped| test.contains(&skipped)) {
                    return false;
                }
            }
            a if a.starts_with('-') => {}
            _ => filters.push(arg),
        }
    }
    filters.is_empty()
        || filters.iter().any(|f| {
            if exact {
                f == test
            } else {
                test.contains(f.as_str())
            }
        })
}
