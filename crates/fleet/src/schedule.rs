//! Rounds of pairs over N hosts in which no host is in two pairs at once: a round-robin
//! tournament by the circle method. One host stays put, the others rotate one place a
//! round; the two rows of the circle, read against each other, are the round's pairs. With N
//! odd a placeholder makes the count even, and whoever meets it sits the round out.
//!
//! One direction: N−1 rounds (N even) or N (odd), every unordered pair once. Both
//! directions: the same rounds again with every pair reversed, every ordered pair once.

use serde::{Deserialize, Serialize};

/// Which of a pair's two directions are measured: the client of a pair sends to its server
/// (`run --peer` without `--reverse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Directions {
    /// Each unordered pair once; which host sends alternates over the rounds.
    One,
    /// Each ordered pair once: a → b and b → a, in different rounds.
    Both,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Pair {
    /// Runs `ipsec-lab run --peer SERVER` and sends.
    pub client: String,
    /// Runs `ipsec-lab serve` and receives.
    pub server: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    pub pairs: Vec<Pair>,
    /// Hosts in no pair this round (one when N is odd).
    pub idle: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub hosts: Vec<String>,
    pub directions: Directions,
    pub rounds: Vec<Round>,
}

impl Schedule {
    pub fn pairs(&self) -> impl Iterator<Item = &Pair> {
        self.rounds.iter().flat_map(|r| &r.pairs)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("a fleet needs at least two hosts to make a pair; got {0}")]
    TooFewHosts(usize),
    #[error("host {0:?} is listed twice: each host is one end, name it once")]
    Duplicate(String),
    #[error(
        "host name {0:?} is not usable: give 1 to 64 characters of letters, digits, '.', '_', ':' or '-', \
         not starting with '-' (they name report files and command-line arguments)"
    )]
    BadName(String),
}

/// Whether `name` can name a host in file names and argument lists.
pub fn valid_host_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

/// The rounds for `hosts` (in the order given: the first one stays put in the circle).
pub fn round_robin(hosts: &[String], directions: Directions) -> Result<Schedule, ScheduleError> {
    for (i, host) in hosts.iter().enumerate() {
        if !valid_host_name(host) {
            return Err(ScheduleError::BadName(host.clone()));
        }
        if hosts[..i].contains(host) {
            return Err(ScheduleError::Duplicate(host.clone()));
        }
    }
    if hosts.len() < 2 {
        return Err(ScheduleError::TooFewHosts(hosts.len()));
    }
    // Slots of the circle; None is the placeholder that gives a bye when N is odd.
    let mut slots: Vec<Option<&String>> = hosts.iter().map(Some).collect();
    if slots.len() % 2 == 1 {
        slots.push(None);
    }
    let n = slots.len();
    let mut first_leg = Vec::with_capacity(n - 1);
    for round in 0..n - 1 {
        // Slot 0 stays; slot i > 0 holds the host that started at 1 + (i - 1 + round) mod (n - 1).
        let at = |i: usize| match i {
            0 => slots[0],
            i => slots[1 + (i - 1 + round) % (n - 1)],
        };
        let mut pairs = Vec::with_capacity(n / 2);
        let mut idle = Vec::new();
        for i in 0..n / 2 {
            match (at(i), at(n - 1 - i)) {
                (Some(a), Some(b)) => {
                    // The fixed host would send in every round: it alternates instead.
                    let (client, server) = if i == 0 && round % 2 == 1 { (b, a) } else { (a, b) };
                    pairs.push(Pair {
                        client: client.clone(),
                        server: server.clone(),
                    });
                }
                (Some(a), None) | (None, Some(a)) => idle.push(a.clone()),
                (None, None) => unreachable!("one placeholder at most"),
            }
        }
        first_leg.push(Round { pairs, idle });
    }
    let mut rounds = first_leg.clone();
    if directions == Directions::Both {
        rounds.extend(first_leg.into_iter().map(|r| {
            Round {
                pairs: r
                    .pairs
                    .into_iter()
                    .map(|p| Pair {
                        client: p.server,
                        server: p.client,
                    })
                    .collect(),
                idle: r.idle,
            }
        }));
    }
    Ok(Schedule {
        hosts: hosts.to_vec(),
        directions,
        rounds,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("h{i}")).collect()
    }

    /// Every property a schedule must have, for `n` hosts.
    fn check(n: usize, directions: Directions) -> Schedule {
        let s = round_robin(&hosts(n), directions).unwrap();
        let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
        for (r, round) in s.rounds.iter().enumerate() {
            let mut busy = BTreeSet::new();
            for p in &round.pairs {
                assert_ne!(p.client, p.server, "n={n}: a host paired with itself");
                for h in [&p.client, &p.server] {
                    assert!(busy.insert(h.clone()), "n={n} round {r}: {h} in two pairs");
                }
                *seen.entry((p.client.clone(), p.server.clone())).or_default() += 1;
            }
            for h in &round.idle {
                assert!(busy.insert(h.clone()), "n={n} round {r}: {h} idle and busy");
            }
            // Every host is accounted for in every round: in one pair, or idle.
            assert_eq!(busy.len(), n, "n={n} round {r}");
            assert_eq!(round.idle.len(), n % 2, "n={n} round {r}: byes");
        }
        for a in hosts(n) {
            for b in hosts(n) {
                if a >= b {
                    continue;
                }
                let ab = seen.get(&(a.clone(), b.clone())).copied().unwrap_or(0);
                let ba = seen.get(&(b.clone(), a.clone())).copied().unwrap_or(0);
                match directions {
                    Directions::One => assert_eq!(ab + ba, 1, "n={n}: {a}-{b} measured {ab}+{ba} times"),
                    Directions::Both => assert_eq!((ab, ba), (1, 1), "n={n}: {a}-{b}"),
                }
            }
        }
        let legs = if directions == Directions::Both { 2 } else { 1 };
        let per_leg = if n % 2 == 0 { n - 1 } else { n };
        assert_eq!(s.rounds.len(), legs * per_leg, "n={n}: round count");
        s
    }

    #[test]
    fn every_pair_once_per_direction_and_no_host_twice_in_a_round() {
        for n in 2..=13 {
            check(n, Directions::One);
            check(n, Directions::Both);
        }
    }

    #[test]
    fn two_hosts_make_one_round_per_direction() {
        let s = check(2, Directions::Both);
        let pairs: Vec<(&str, &str)> = s
            .pairs()
            .map(|p| (p.client.as_str(), p.server.as_str()))
            .collect();
        assert_eq!(pairs, [("h1", "h2"), ("h2", "h1")]);
        assert!(s.rounds.iter().all(|r| r.idle.is_empty()));
    }

    #[test]
    fn an_odd_count_gives_each_host_one_bye_per_leg() {
        let s = check(5, Directions::One);
        let mut byes: Vec<&String> = s.rounds.iter().flat_map(|r| &r.idle).collect();
        byes.sort();
        assert_eq!(byes, hosts(5).iter().collect::<Vec<_>>());
        let s = check(3, Directions::Both);
        assert_eq!(s.rounds.len(), 6);
        assert!(s.rounds.iter().all(|r| r.pairs.len() == 1));
    }

    #[test]
    fn sending_is_spread_over_the_hosts() {
        // One direction, even N: no host sends in every one of its pairs.
        let s = check(6, Directions::One);
        for h in hosts(6) {
            let sends = s.pairs().filter(|p| p.client == h).count();
            assert!((1..5).contains(&sends), "{h} sends {sends} of 5");
        }
    }

    #[test]
    fn too_few_duplicate_and_unusable_hosts_are_refused() {
        assert_eq!(
            round_robin(&[], Directions::One),
            Err(ScheduleError::TooFewHosts(0))
        );
        assert_eq!(
            round_robin(&hosts(1), Directions::Both),
            Err(ScheduleError::TooFewHosts(1))
        );
        let dup = vec!["a".to_string(), "b".into(), "a".into()];
        assert_eq!(
            round_robin(&dup, Directions::One),
            Err(ScheduleError::Duplicate("a".into()))
        );
        for bad in ["", "-rm", "a b", "a/b", "x;y", &"h".repeat(65)] {
            let list = vec!["ok".to_string(), bad.to_string()];
            assert_eq!(
                round_robin(&list, Directions::One),
                Err(ScheduleError::BadName(bad.into())),
                "{bad:?}"
            );
        }
        assert!(round_robin(
            &["198.18.99.11".into(), "node-2.lab".into(), "[::1]x".into()],
            Directions::One
        )
        .is_err());
        assert!(round_robin(
            &["198.18.99.11".into(), "node-2.lab".into(), "2001:db8::1".into()],
            Directions::One
        )
        .is_ok());
    }
}
