//! The server's admission of connections that have not yet proved they hold the key:
//! bounded in all and per source network, so a flood costs the server little, and shared
//! so that a flood from many addresses cannot keep a key holder out.
//!
//! A connection waits in one of two stages: *silent* (connected, no valid first handshake
//! message yet) and *handshaken* (its first message carried the key's proof, but that
//! message can be a replay: only the hello that follows proves a live key holder). When
//! every place is taken, a newcomer takes the place of the oldest connection of the source
//! network with the most connections waiting, silent ones before handshaken ones; a
//! newcomer from a network with as many waiting as that one is turned away. A client with
//! the key moves through both stages within two round trips, so a crowd of other networks
//! cannot hold it out, and one network (an IPv4 address, an IPv6 /64, where a single host
//! has more addresses than any limit) cannot take more than its share.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use traffic::CancellationToken;

/// Connections that have not yet sent a hello that decrypts, in all and per source network.
pub const MAX_UNAUTHENTICATED: usize = 32;
pub const MAX_UNAUTHENTICATED_PER_SOURCE: usize = 4;

/// Where a connection comes from, as far as fairness goes: an IPv4 address, or the /64 of
/// an IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceNet(IpAddr);

impl SourceNet {
    pub fn of(ip: IpAddr) -> SourceNet {
        match ip.to_canonical() {
            IpAddr::V6(v6) => SourceNet(IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into())),
            v4 => SourceNet(v4),
        }
    }
}

#[derive(Debug)]
struct Waiting {
    /// Admission order: lower is older.
    id: u64,
    net: SourceNet,
    handshaken: bool,
    evict: CancellationToken,
}

/// The connections waiting to authenticate.
#[derive(Debug, Default)]
pub struct Admission {
    next_id: u64,
    /// At most [`MAX_UNAUTHENTICATED`]: linear scans are cheaper than any index.
    waiting: Vec<Waiting>,
}

/// One admitted unauthenticated connection; dropping it (once the hello decrypted, or the
/// connection ended) frees its place.
pub struct Admitted {
    admission: Arc<Mutex<Admission>>,
    id: u64,
    /// Cancelled when a newcomer took this connection's place: the session then ends.
    pub evicted: CancellationToken,
}

impl Admitted {
    /// The connection's first handshake message carried the key's proof (maybe replayed).
    pub fn handshaken(&self) {
        let mut a = self.admission.lock().expect("admission lock");
        if let Some(w) = a.waiting.iter_mut().find(|w| w.id == self.id) {
            w.handshaken = true;
        }
    }
}

impl Admission {
    /// A place for a connection from `source`, or why there is none (told to the client).
    pub fn admit(this: &Arc<Mutex<Admission>>, source: IpAddr) -> Result<Admitted, String> {
        let mut a = this.lock().expect("admission lock");
        let id = a.take(SourceNet::of(source))?;
        let evicted = a.waiting.last().expect("just admitted").evict.clone();
        Ok(Admitted {
            admission: this.clone(),
            id,
            evicted,
        })
    }

    fn waiting_from(&self, net: SourceNet) -> usize {
        self.waiting.iter().filter(|w| w.net == net).count()
    }

    fn take(&mut self, net: SourceNet) -> Result<u64, String> {
        let mine = self.waiting_from(net);
        if mine >= MAX_UNAUTHENTICATED_PER_SOURCE {
            return Err(format!(
                "{MAX_UNAUTHENTICATED_PER_SOURCE} connections from this network are waiting to \
                 authenticate already; try again in a few seconds"
            ));
        }
        if self.waiting.len() >= MAX_UNAUTHENTICATED {
            let victim = self
                .victim()
                .filter(|&i| self.waiting_from(self.waiting[i].net) > mine)
                .ok_or_else(|| {
                    format!(
                        "{MAX_UNAUTHENTICATED} connections are waiting to authenticate already; \
                         try again in a few seconds"
                    )
                })?;
            self.waiting.remove(victim).evict.cancel();
        }
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push(Waiting {
            id,
            net,
            handshaken: false,
            evict: CancellationToken::new(),
        });
        Ok(id)
    }

    /// Whom a newcomer replaces: silent connections before handshaken ones; among those, the
    /// network with the most waiting; in it, the oldest.
    fn victim(&self) -> Option<usize> {
        let silent_exist = self.waiting.iter().any(|w| !w.handshaken);
        let candidates = || {
            self.waiting
                .iter()
                .enumerate()
                .filter(move |(_, w)| !silent_exist || !w.handshaken)
        };
        let crowd = candidates().map(|(_, w)| self.waiting_from(w.net)).max()?;
        candidates()
            .filter(|(_, w)| self.waiting_from(w.net) == crowd)
            .min_by_key(|(_, w)| w.id)
            .map(|(i, _)| i)
    }

    fn release(&mut self, id: u64) {
        // An evicted connection's place is gone already.
        self.waiting.retain(|w| w.id != id);
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.lock().expect("admission lock").release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(i: u8) -> IpAddr {
        IpAddr::from([198, 18, 0, i])
    }

    fn admission() -> Arc<Mutex<Admission>> {
        Arc::new(Mutex::new(Admission::default()))
    }

    fn waiting(a: &Arc<Mutex<Admission>>) -> usize {
        a.lock().unwrap().waiting.len()
    }

    #[test]
    fn unauthenticated_connections_are_bounded_per_source_network_and_freed_on_drop() {
        let a = admission();
        let mut held: Vec<Admitted> = (0..MAX_UNAUTHENTICATED_PER_SOURCE)
            .map(|_| Admission::admit(&a, ip(1)).unwrap())
            .collect();
        let e = Admission::admit(&a, ip(1)).err().unwrap();
        assert!(e.contains("from this network"), "{e}");
        held.pop();
        held.push(Admission::admit(&a, ip(1)).unwrap());
        drop(held);
        assert_eq!(waiting(&a), 0);
    }

    /// Issue 22: eight addresses holding four silent connections each filled the 32 places,
    /// and every real client was turned away (and told the keys differ).
    #[test]
    fn a_flood_from_many_addresses_does_not_keep_a_newcomer_out() {
        let a = admission();
        let flood: Vec<Admitted> = (0..MAX_UNAUTHENTICATED)
            .map(|i| Admission::admit(&a, ip(10 + (i / MAX_UNAUTHENTICATED_PER_SOURCE) as u8)).unwrap())
            .collect();
        assert_eq!(waiting(&a), MAX_UNAUTHENTICATED);
        // The flooders' own newcomers find no room: their networks are the crowd.
        let e = Admission::admit(&a, ip(10)).err().unwrap();
        assert!(e.contains("from this network"), "{e}");
        // A client from elsewhere takes the place of the oldest flood connection.
        let client = Admission::admit(&a, ip(1)).unwrap();
        assert!(flood[0].evicted.is_cancelled());
        assert!(flood[1..].iter().all(|f| !f.evicted.is_cancelled()));
        assert_eq!(waiting(&a), MAX_UNAUTHENTICATED);
        // Within a round trip the client's first handshake message arrives. The flood goes
        // on from 50 networks: every newcomer replaces a silent flooder, never the client.
        client.handshaken();
        let mut more = Vec::new();
        for i in 0..3 * MAX_UNAUTHENTICATED {
            if let Ok(f) = Admission::admit(&a, ip(100 + (i % 50) as u8)) {
                more.push(f);
            }
        }
        assert!(!client.evicted.is_cancelled());
        // Dropping an evicted connection frees nothing twice.
        drop(flood);
        drop(more);
        assert_eq!(waiting(&a), 1);
    }

    #[test]
    fn silent_connections_make_room_before_handshaken_ones() {
        let a = admission();
        let held: Vec<Admitted> = (0..MAX_UNAUTHENTICATED)
            .map(|i| Admission::admit(&a, ip(10 + (i / MAX_UNAUTHENTICATED_PER_SOURCE) as u8)).unwrap())
            .collect();
        for h in &held[..MAX_UNAUTHENTICATED - 1] {
            h.handshaken();
        }
        let _client = Admission::admit(&a, ip(1)).unwrap();
        let evicted: Vec<usize> = (0..held.len())
            .filter(|&i| held[i].evicted.is_cancelled())
            .collect();
        assert_eq!(evicted, vec![MAX_UNAUTHENTICATED - 1], "the only silent one goes");
    }

    #[test]
    fn an_ipv6_64_is_one_source_network() {
        let a = admission();
        let v6 = |host: u16| IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, host]);
        let _held: Vec<Admitted> = (0..MAX_UNAUTHENTICATED_PER_SOURCE as u16)
            .map(|i| Admission::admit(&a, v6(i + 1)).unwrap())
            .collect();
        let e = Admission::admit(&a, v6(999)).err().unwrap();
        assert!(e.contains("from this network"), "{e}");
        let other = IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]);
        assert!(Admission::admit(&a, other).is_ok());
        // An IPv4 client on a dual-stack listener counts as its IPv4 address.
        let mapped: IpAddr = "::ffff:198.18.0.1".parse().unwrap();
        assert_eq!(SourceNet::of(mapped), SourceNet::of(ip(1)));
    }
}
