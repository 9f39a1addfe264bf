//! `setup-rate --backend strongswan`: IKE_SAs per second. Two charons in two namespaces of
//! this host (IKE needs no ESP in the kernel: the connection has no CHILD_SA, so nothing is
//! installed there); the initiator starts N IKE_SAs over VICI, at most the plan's window in
//! flight, and counts its `ike-updown` events; the responder's own count must then say N.
//! Each size is measured twice, with the window and one at a time, each time with two fresh
//! charons, so no earlier IKE_SA is in the tables.
//!
//! The IKE proposal is the strongswan backend's own ([`IKE_PROPOSAL`]): every IKE_SA costs a
//! MODP-2048 Diffie-Hellman exchange, the larger part of what is measured. Both charons
//! share this host's CPUs, so the rate is what one host does as initiator and responder
//! together: a lower bound of the responder's.

use std::path::Path;
use std::time::{Duration, Instant};

use model::setup_rate::{per_second, IkeRates, SetupRatePlan};
use netns::{Namespace, Topology};
use zeroize::Zeroizing;

use super::charon::{failed, log_tail, Charon, Programs};
use super::config::{self, Paths, Peer, RateRole, IKE_PROPOSAL, RATE_CONN};
use super::vici::{Packet, Vici, NO_ANSWER};
use super::{write_private, INSTALL, LOAD_TIMEOUT, PSK_BYTES};
use crate::error::{LabError, LabResult};

/// How long one IKE_SA may take at worst: charon's first retransmission comes after 4 s.
const PER_SA_TIMEOUT: Duration = Duration::from_secs(10);

/// What the run found out besides the rates.
pub struct IkeRun {
    pub rates: Vec<IkeRates>,
    /// charon's version line.
    pub version: String,
}

/// Refuses, before anything is created, where strongSwan is not installed.
pub fn preflight() -> LabResult<()> {
    programs().map(drop)
}

/// The PATH's charon and swanctl.
fn programs() -> LabResult<Programs> {
    Programs::path().ok_or_else(|| LabError::capability(anyhow::anyhow!(INSTALL)))
}

/// Measures every size of `plan` between end b (initiator) and end a (responder) of
/// `topology`. Stops between IKE_SAs when SIGINT or SIGTERM arrived.
pub fn measure(plan: &SetupRatePlan, topology: &Topology) -> LabResult<IkeRun> {
    let psk = xfrm::Secret::random(PSK_BYTES).map_err(LabError::failed)?;
    let psk = Zeroizing::new(psk.to_hex().trim_start_matches("0x").to_string());
    let ad = topology.addressing;
    let peer = |id: &str, outer| Peer {
        id: id.into(),
        outer,
        inner: outer,
    };
    let (a, b) = (peer("ipl-a", ad.outer_a), peer("ipl-b", ad.outer_b));
    let programs = programs()?;
    let mut rates = Vec::new();
    let mut version = String::new();
    for size in &plan.sizes {
        let n = size.0 as usize;
        let mut one = |window: usize| -> LabResult<(f64, Option<f64>)> {
            let dir = owner::PrivateDir::new("ipl-strongswan-")?;
            let (a_dir, b_dir) = (dir.join("a"), dir.join("b"));
            let responder = start(&topology.a, &a_dir, &programs, RateRole::Responder, &a, &b, &psk)?;
            let initiator = start(&topology.b, &b_dir, &programs, RateRole::Initiator, &b, &a, &psk)?;
            if version.is_empty() {
                version = responder.daemon_version();
            }
            let before = procstat::resident_bytes(responder.pid());
            eprintln!("ipsec-lab: {n} IKE_SAs, {window} in flight");
            let seconds = establish(&initiator, n, window).map_err(|e| match e.is_interrupted() {
                true => e,
                false => failed(format!(
                    "{e}\nthe responder's log (removed with the run):\n{}",
                    log_tail(&dir.join("a").join("charon.log"), 10)
                )),
            })?;
            let after = procstat::resident_bytes(responder.pid());
            let established = established_ike_sas(&responder)?;
            if established != n {
                return Err(failed(format!(
                    "the initiator saw {n} IKE_SAs up, the responder counts {established}"
                )));
            }
            let per_sa = match (before, after) {
                (Some(b), Some(a)) if a > b => Some((a - b) as f64 / n as f64),
                _ => None,
            };
            Ok((per_second(n, seconds), per_sa))
        };
        let (windowed_per_s, responder_bytes_per_sa) = one(plan.window as usize)?;
        let (one_by_one_per_s, _) = one(1)?;
        rates.push(IkeRates {
            size: *size,
            windowed_per_s,
            one_by_one_per_s,
            responder_bytes_per_sa,
        });
    }
    Ok(IkeRun { rates, version })
}

/// `programs`' charon in `ns` with its rate configuration in `dir`, its connection loaded.
fn start(
    ns: &Namespace,
    dir: &Path,
    programs: &Programs,
    role: RateRole,
    me: &Peer,
    peer: &Peer,
    psk: &str,
) -> LabResult<Charon> {
    std::fs::create_dir(dir).map_err(failed)?;
    let paths = Paths { dir };
    write_private(
        &paths.strongswan_conf(),
        &config::rate_strongswan_conf(&paths, role),
    )?;
    let swanctl = config::rate_swanctl_conf(me, peer, role == RateRole::Initiator, psk);
    write_private(&paths.swanctl_conf(), &Zeroizing::new(swanctl))?;
    let charon = Charon::start(ns, &paths, programs)?;
    charon.swanctl(&["--load-all", "--noprompt"], LOAD_TIMEOUT)?;
    Ok(charon)
}

/// Initiates `n` IKE_SAs, at most `window` of them not yet up, and returns the seconds from
/// the first initiation to the last `ike-updown` event saying up.
fn establish(initiator: &Charon, n: usize, window: usize) -> LabResult<f64> {
    let socket = initiator.control().socket();
    let mut vici = Vici::connect(&socket, &["ike-updown"], LOAD_TIMEOUT).map_err(failed)?;
    let (mut asked, mut answered, mut up) = (0, 0, 0);
    let started = Instant::now();
    while up < n {
        if crate::signal::any_requested() {
            return Err(LabError::interrupted());
        }
        while asked < n && asked - up < window {
            // timeout -1: the answer comes at once, the IKE_SA's state in the events.
            vici.request("initiate", &[("ike", RATE_CONN), ("timeout", "-1")])
                .map_err(failed)?;
            asked += 1;
        }
        // A short wait, so a signal is seen within a second whatever charon does.
        let wait = Instant::now() + Duration::from_millis(200);
        match vici.next(wait) {
            Ok(Packet::Response(values)) => {
                answered += 1;
                if let Some((_, e)) = values.iter().find(|(k, _)| k == "errmsg") {
                    return Err(failed(format!("initiating IKE_SA {answered} of {n}: {e}")));
                }
            }
            Ok(Packet::Event(_, values)) => {
                if values.iter().any(|(k, v)| k == "up" && v == "yes") {
                    up += 1;
                }
            }
            Err(e) if e == NO_ANSWER => {
                if started.elapsed() > PER_SA_TIMEOUT * (n / window.max(1) + 1) as u32 {
                    return Err(failed(format!(
                        "{up} of {n} IKE_SAs up after {:.1} s ({asked} initiated)",
                        started.elapsed().as_secs_f64()
                    )));
                }
            }
            Err(e) => return Err(failed(e)),
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// The IKE_SAs charon holds (`IKE_SAs: N total, M half-open` of `swanctl --stats`).
fn established_ike_sas(charon: &Charon) -> LabResult<usize> {
    let stats = charon.swanctl(&["--stats"], LOAD_TIMEOUT)?;
    parse_ike_sas(&stats).ok_or_else(|| failed(format!("no IKE_SA count in `swanctl --stats`:\n{stats}")))
}

/// Established IKE_SAs (total less half-open) from `swanctl --stats`.
fn parse_ike_sas(stats: &str) -> Option<usize> {
    let line = stats.lines().find_map(|l| l.trim().strip_prefix("IKE_SAs:"))?;
    let mut numbers = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty());
    let total: usize = numbers.next()?.parse().ok()?;
    let half_open: usize = numbers.next()?.parse().ok()?;
    total.checked_sub(half_open)
}

/// The note every strongswan rate report carries.
pub fn note(plan: &SetupRatePlan) -> String {
    format!(
        "IKEv2 with PSK, proposal {IKE_PROPOSAL}, no CHILD_SA: one charon initiating (up to {} in flight), \
         one responding, in two namespaces of this host sharing its CPUs",
        plan.window
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_ike_sas_are_the_total_less_the_half_open() {
        let stats = "uptime: 9 seconds, since Dec 07 00:55:07 2026\nworker threads: 16 total\n\
                     IKE_SAs: 321 total, 61 half-open\nmallinfo: sbrk 2297856\n";
        assert_eq!(parse_ike_sas(stats), Some(260));
        assert_eq!(parse_ike_sas("IKE_SAs: 0 total, 0 half-open"), Some(0));
        assert_eq!(parse_ike_sas("worker threads: 16 total"), None);
    }
}
