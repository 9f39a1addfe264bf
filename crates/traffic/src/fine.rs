//! A transfer's fine timeline for rekey runs (model::rekey): what was delivered in each
//! 10 ms bucket and the longest silence that ended in it; for UDP also each datagram's fate
//! by the bucket it was *sent* in, so loss around a rekey is counted against what was sent
//! then. Pure: the callers hand in times; the clock is theirs.
//!
//! Memory is a few words per bucket, bounded by [`MAX_BUCKETS`] (the longest rekey run and a
//! minute of drain), whatever the payload.

use std::time::Duration;

use model::rekey::{DatagramBuckets, Timeline, BUCKET_MS, MAX_REKEY_RUN_S};

/// The most buckets a timeline keeps: a later instant is filed in the last.
pub const MAX_BUCKETS: usize = ((MAX_REKEY_RUN_S + 60.0) * 1e3) as usize / BUCKET_MS as usize;

fn bucket(at: Duration) -> usize {
    ((at.as_millis() / u128::from(BUCKET_MS)) as usize).min(MAX_BUCKETS - 1)
}

fn bump(v: &mut Vec<u64>, k: usize, n: u64) {
    if v.len() <= k {
        v.resize(k + 1, 0);
    }
    v[k] += n;
}

/// Deliveries by arrival time.
#[derive(Debug, Clone, Default)]
pub struct Arrivals {
    delivered: Vec<u64>,
    longest_gap_us: Vec<u32>,
    last: Option<Duration>,
}

impl Arrivals {
    /// `n` bytes that came at `at` (since the transfer's epoch) and were verified.
    pub fn delivered(&mut self, at: Duration, n: u64) {
        bump(&mut self.delivered, bucket(at), n);
    }

    /// Something came at `at`: the end of a gap, if there was one. Called in time order (as
    /// under one lock), whether or not the bytes are verified yet.
    pub fn came(&mut self, at: Duration) {
        let k = bucket(at);
        if self.longest_gap_us.len() <= k {
            self.longest_gap_us.resize(k + 1, 0);
        }
        // The first byte's wait is the start-up's, not a gap in the flow.
        if let Some(last) = self.last {
            let gap = u32::try_from(at.saturating_sub(last).as_micros()).unwrap_or(u32::MAX);
            self.longest_gap_us[k] = self.longest_gap_us[k].max(gap);
        }
        self.last = Some(self.last.map_or(at, |l| l.max(at)));
    }

    /// Both at once: `n` verified bytes that came at `at`.
    pub fn arrived(&mut self, at: Duration, n: u64) {
        self.came(at);
        self.delivered(at, n);
    }

    pub fn timeline(&self) -> Timeline {
        Timeline {
            bucket_ms: BUCKET_MS,
            delivered: self.delivered.clone(),
            longest_gap_us: self.longest_gap_us.clone(),
            datagrams: None,
        }
    }
}

/// UDP datagrams by the bucket they were sent in.
#[derive(Debug, Clone, Default)]
pub struct BySendTime {
    pub received: Vec<u64>,
    pub reordered: Vec<u64>,
    pub duplicates: Vec<u64>,
}

/// What happened to one datagram, as the receiver's tally judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Received,
    Reordered,
    Duplicate,
}

impl BySendTime {
    /// A datagram sent at `sent` (since the epoch) was received, reordered (and received)
    /// or a duplicate.
    pub fn count(&mut self, sent: Duration, fate: Fate) {
        let k = bucket(sent);
        match fate {
            Fate::Received => bump(&mut self.received, k, 1),
            Fate::Reordered => {
                bump(&mut self.received, k, 1);
                bump(&mut self.reordered, k, 1);
            }
            Fate::Duplicate => bump(&mut self.duplicates, k, 1),
        }
    }

    /// With the sender's count per bucket: the datagrams of a [`Timeline`].
    pub fn with_sent(&self, sent: Vec<u64>) -> DatagramBuckets {
        DatagramBuckets {
            sent,
            received: self.received.clone(),
            reordered: self.reordered.clone(),
            duplicates: self.duplicates.clone(),
        }
    }
}

/// The sender's count of datagrams per bucket.
#[derive(Debug, Clone, Default)]
pub struct Sent(pub Vec<u64>);

impl Sent {
    pub fn sent(&mut self, at: Duration, n: u64) {
        bump(&mut self.0, bucket(at), n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn arrivals_fill_buckets_and_each_gap_lands_where_it_ended() {
        let mut a = Arrivals::default();
        a.arrived(ms(3), 100);
        a.arrived(ms(7), 100);
        a.arrived(ms(55), 50); // 48 ms of silence, ended in bucket 5
        a.arrived(ms(56), 50);
        let t = a.timeline();
        assert_eq!(t.delivered, [200, 0, 0, 0, 0, 100]);
        assert_eq!(t.longest_gap_us, [4_000, 0, 0, 0, 0, 48_000]);
    }

    #[test]
    fn a_runaway_instant_is_filed_in_the_last_bucket_not_a_huge_vector() {
        let mut a = Arrivals::default();
        a.arrived(Duration::from_secs(100_000), 1);
        assert_eq!(a.timeline().delivered.len(), MAX_BUCKETS);
    }

    #[test]
    fn datagram_fates_count_by_send_bucket() {
        let mut s = Sent::default();
        s.sent(ms(1), 3);
        s.sent(ms(12), 2);
        let mut b = BySendTime::default();
        b.count(ms(1), Fate::Received);
        b.count(ms(1), Fate::Duplicate);
        b.count(ms(12), Fate::Reordered);
        let d = b.with_sent(s.0);
        assert_eq!((d.sent, d.received), (vec![3, 2], vec![1, 1]));
        assert_eq!((d.reordered, d.duplicates), (vec![0, 1], vec![1]));
    }
}
