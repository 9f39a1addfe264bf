//! Rekeying under load (`--rekey-every`) by charon itself: each switch is VICI's `rekey`
//! command (what `swanctl --rekey` sends) to the initiator's charon (end b), then a bounded
//! wait until the rekey is done, so the switch's time is the rekey's own:
//!
//! * a CHILD_SA: a CREATE_CHILD_SA exchange; done when end b's kernel holds an SA each way
//!   with an SPI it did not hold before (charon installs the new inbound SA first and
//!   deletes the old outbound one once the new outbound one is in: RFC 7296's
//!   make-before-break, in charon's own order);
//! * the IKE_SA: done when charon reports the new IKE_SA established (VICI's `ike-rekey`
//!   event; the CHILD_SA moves to it with its keys).
//!
//! Over one VICI session of its own, not `swanctl` processes: in a one-CPU guest each
//! process would take CPU from the transfer being measured.
//!
//! Nothing to retire: charon deletes the old SAs itself. Each rekey seen done is counted
//! for the evidence (end a's [`Rekeys`]).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use model::rekey::RekeyTarget;
use xfrm::XfrmHandle;

use super::charon::{failed, Swanctl};
use super::config::CONN;
use super::vici::{Packet, Vici};
use crate::error::{LabError, LabResult};
use crate::rekey::Rekey;

/// How long one rekey may take before the run fails: a few round trips between two
/// namespaces, generously more in a slow guest.
pub const REKEY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the kernel's SAs or charon's list are read while a rekey is under way.
const POLL: Duration = Duration::from_millis(2);

/// The rekeys one end saw done, for its evidence.
#[derive(Debug, Default)]
pub struct Rekeys {
    pub child_sa: AtomicU32,
    pub ike_sa: AtomicU32,
}

/// charon's rekeys of a local run, driven from end b's VICI socket.
pub struct CharonRekey {
    /// Drives the netlink handle's socket (its own: the rekey thread blocks on it).
    runtime: tokio::runtime::Runtime,
    handle: XfrmHandle,
    initiator: Vici,
    /// End a's outer address, then end b's.
    outer: [IpAddr; 2],
    sa: RekeyTarget,
    counted: Arc<Rekeys>,
}

impl CharonRekey {
    /// `namespace`: end b's (the initiator's), whose kernel shows a CHILD_SA rekey done.
    pub fn new(
        namespace: &std::path::Path,
        initiator: Swanctl,
        outer: [IpAddr; 2],
        sa: RekeyTarget,
        counted: Arc<Rekeys>,
    ) -> LabResult<CharonRekey> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(LabError::failed)?;
        let handle = {
            let _entered = runtime.enter();
            XfrmHandle::open_in(namespace)?
        };
        let events: &[&str] = match sa {
            RekeyTarget::Child => &[],
            RekeyTarget::Ike => &["ike-rekey"],
        };
        let initiator = Vici::connect(&initiator.socket(), events, REKEY_TIMEOUT).map_err(failed)?;
        Ok(CharonRekey {
            runtime,
            handle,
            initiator,
            outer,
            sa,
            counted,
        })
    }

    /// The SPIs of the ESP SAs between the ends in end b's kernel: a→b ones, then b→a ones.
    fn spis(&self) -> LabResult<[HashSet<u32>; 2]> {
        let dump = self.runtime.block_on(self.handle.list_sas())?;
        let [a, b] = self.outer;
        let mut out = [HashSet::new(), HashSet::new()];
        for sa in dump {
            match (sa.id.src, sa.id.dst) {
                (s, d) if s == a && d == b => out[0].insert(sa.id.spi.0),
                (s, d) if s == b && d == a => out[1].insert(sa.id.spi.0),
                _ => false,
            };
        }
        Ok(out)
    }

    /// Has charon start rekeying `what` (`child` or `ike`); with `event`, waits for it too
    /// (it may come before the command's response).
    fn rekey(&mut self, what: &str, event: Option<&str>) -> LabResult<()> {
        self.initiator.request("rekey", &[(what, CONN)]).map_err(failed)?;
        let deadline = Instant::now() + REKEY_TIMEOUT;
        let (mut answered, mut seen) = (false, event.is_none());
        while !(answered && seen) {
            match self.initiator.next(deadline) {
                Ok(Packet::Response(kv)) => {
                    let get = |k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
                    if get("success") != Some("yes") {
                        return Err(failed(format!(
                            "charon refused to rekey the {what} SA {CONN:?}: {}",
                            get("errmsg").unwrap_or("no reason given")
                        )));
                    }
                    answered = true;
                }
                Ok(Packet::Event(name, _)) => seen |= event == Some(name.as_str()),
                Err(e) => {
                    return Err(failed(format!(
                        "rekeying the {what} SA (answered: {answered}, {} seen: {seen}): {e}",
                        event.unwrap_or("event")
                    )))
                }
            }
        }
        Ok(())
    }

    fn rekey_child(&mut self) -> LabResult<()> {
        let before = self.spis()?;
        self.rekey("child", None)?;
        let deadline = Instant::now() + REKEY_TIMEOUT;
        loop {
            let now = self.spis()?;
            let new = |k: usize| now[k].iter().any(|spi| !before[k].contains(spi));
            if new(0) && new(1) {
                self.counted.child_sa.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "charon's CHILD_SA rekey was not in end b's kernel after {REKEY_TIMEOUT:?} \
                     (new SA a->b: {}, b->a: {})",
                    new(0),
                    new(1)
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn rekey_ike(&mut self) -> LabResult<()> {
        self.rekey("ike", Some("ike-rekey"))?;
        self.counted.ike_sa.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Rekey for CharonRekey {
    fn switch(&mut self) -> LabResult<()> {
        match self.sa {
            RekeyTarget::Child => self.rekey_child(),
            RekeyTarget::Ike => self.rekey_ike(),
        }
    }
    // Nothing to retire: charon deletes the old SAs itself.
}

/// The SPIs of the installed CHILD_SAs in `swanctl --list-sas` output: the `in`/`out` lines
/// under each indented `NAME: #ID, reqid N, INSTALLED, ...` line (strongSwan 6 puts `cpu N`
/// before the state of a per-CPU CHILD_SA's).
pub fn installed_child_spis(listing: &str) -> HashSet<u32> {
    let mut spis = HashSet::new();
    let mut installed = false;
    for line in listing.lines() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if indent == 0 {
            installed = false;
        } else if t.contains(", reqid ") {
            installed = t.split(", ").skip(2).take(2).any(|w| w == "INSTALLED");
        } else if installed && indent >= 4 {
            let mut words = t.split_whitespace();
            if matches!(words.next(), Some("in" | "out")) {
                let spi = words.next().unwrap_or_default().trim_end_matches(',');
                if let Ok(spi) = u32::from_str_radix(spi, 16) {
                    spis.insert(spi);
                }
            }
        }
    }
    spis
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Between two rekeys: the new CHILD_SA installed, the old one rekeyed.
    const LISTING: &str = "\
lab: #3, ESTABLISHED, IKEv2, 5d1e0c2f4a6b7d89_i* 0f1e2d3c4b5a6978_r
  local  'ipl-b' @ 198.18.0.2[500]
  remote 'ipl-a' @ 198.18.0.1[500]
  AES_CBC-256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048
  established 0s ago, rekeying in 13820s
  lab: #4, reqid 1, INSTALLED, TUNNEL, ESP:AES_GCM_16-256
    installed 0s ago, rekeying in 3200s, expires in 3900s
    in  c7a1b2c3,      0 bytes,     0 packets
    out c9d8e7f6,   1420 bytes,     1 packets,     0s ago
    local  198.19.0.2/32
    remote 198.19.0.1/32
  lab: #2, reqid 1, REKEYED, TUNNEL, ESP:AES_GCM_16-256
    in  c1111111, 9000000 bytes,  6000 packets
    out c2222222, 9000000 bytes,  6000 packets
lab: #1, DELETING, IKEv2, 1234567890abcdef_i* fedcba0987654321_r
";

    /// strongSwan 6's per-CPU CHILD_SAs: `, cpu N` (or `, cpu -` for the fallback) comes
    /// between the reqid and the state.
    #[test]
    fn per_cpu_child_sas_are_read_with_their_cpu_field() {
        let listing = "\
lab: #1, ESTABLISHED, IKEv2, 5d1e0c2f4a6b7d89_i 0f1e2d3c4b5a6978_r*
  lab: #1, reqid 1, cpu -, INSTALLED, TUNNEL, ESP:AES_GCM_16-256
    in  c1000001,      0 bytes,     0 packets
    out c2000001,   1420 bytes,     1 packets,     0s ago
  lab: #3, reqid 1, cpu 1, INSTALLED, TUNNEL, ESP:AES_GCM_16-256
    in  c1000003,      0 bytes,     0 packets
    out c2000003,   1420 bytes,     1 packets,     0s ago
  lab: #2, reqid 1, cpu 0, REKEYED, TUNNEL, ESP:AES_GCM_16-256
    in  c1000002,      0 bytes,     0 packets
";
        assert_eq!(
            installed_child_spis(listing),
            HashSet::from([0xc1000001, 0xc2000001, 0xc1000003, 0xc2000003])
        );
    }

    #[test]
    fn only_the_installed_child_sas_spis_are_current() {
        assert_eq!(
            installed_child_spis(LISTING),
            HashSet::from([0xc7a1b2c3, 0xc9d8e7f6])
        );
    }
}
