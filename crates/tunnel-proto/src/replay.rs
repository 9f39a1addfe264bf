//! Sliding replay window over 64-bit packet ids (RFC 6479 style: a ring of 64-bit words, so
//! sliding forward clears whole words instead of shifting a bitmap).
//!
//! Checking and recording are separate on purpose: a packet is checked before it is
//! authenticated (cheap rejection) but recorded only after, so a forged packet cannot
//! move the window.

/// Words in the ring. One word is kept spare so the newest word never aliases the oldest.
const WORDS: usize = 16;
const WORD_BITS: u64 = 64;

/// How far behind the newest id a packet may still be accepted.
pub const WINDOW: u64 = (WORDS as u64 - 1) * WORD_BITS;

/// Why the window refused a packet id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayError {
    /// Seen before (a duplicate or a replay).
    Duplicate,
    /// Older than the window: cannot tell whether it was seen, so it is refused.
    TooOld,
    /// Id 0 is never sent; receiving it means a forged or corrupt header.
    Zero,
}

#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// Highest id recorded so far (0: none yet).
    newest: u64,
    ring: [u64; WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow::new()
    }
}

impl ReplayWindow {
    pub fn new() -> ReplayWindow {
        ReplayWindow {
            newest: 0,
            ring: [0; WORDS],
        }
    }

    pub fn newest(&self) -> u64 {
        self.newest
    }

    fn slot(id: u64) -> (usize, u64) {
        (((id / WORD_BITS) as usize) % WORDS, 1u64 << (id % WORD_BITS))
    }

    /// Would `id` be accepted? Does not record it.
    pub fn check(&self, id: u64) -> Result<(), ReplayError> {
        if id == 0 {
            return Err(ReplayError::Zero);
        }
        if id > self.newest {
            return Ok(());
        }
        if self.newest - id >= WINDOW {
            return Err(ReplayError::TooOld);
        }
        let (word, bit) = Self::slot(id);
        if self.ring[word] & bit != 0 {
            Err(ReplayError::Duplicate)
        } else {
            Ok(())
        }
    }

    /// Records `id` as seen, sliding the window forward when it is the newest.
    /// Call only after [`check`](Self::check) accepted it and the packet authenticated.
    pub fn record(&mut self, id: u64) {
        if id > self.newest {
            let old_word = self.newest / WORD_BITS;
            let new_word = id / WORD_BITS;
            // Clear every word the window slides over (at most the whole ring).
            let steps = (new_word - old_word).min(WORDS as u64);
            for i in 1..=steps {
                self.ring[((old_word + i) as usize) % WORDS] = 0;
            }
            self.newest = id;
        }
        let (word, bit) = Self::slot(id);
        self.ring[word] |= bit;
    }

    /// Check and record in one step.
    pub fn accept(&mut self, id: u64) -> Result<(), ReplayError> {
        self.check(id)?;
        self.record(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_ids_are_accepted_once() {
        let mut w = ReplayWindow::new();
        for id in 1..=5000 {
            assert_eq!(w.accept(id), Ok(()));
            assert_eq!(w.check(id), Err(ReplayError::Duplicate));
        }
    }

    #[test]
    fn zero_is_refused() {
        assert_eq!(ReplayWindow::new().check(0), Err(ReplayError::Zero));
    }

    #[test]
    fn out_of_order_within_the_window_is_accepted() {
        let mut w = ReplayWindow::new();
        w.accept(1000).unwrap();
        for id in (1000 - WINDOW + 1..1000).rev() {
            assert_eq!(w.accept(id), Ok(()), "id {id}");
        }
        assert_eq!(w.check(1000 - WINDOW), Err(ReplayError::TooOld));
        assert_eq!(w.check(500), Err(ReplayError::Duplicate));
    }

    #[test]
    fn far_future_slides_the_window_and_forgets_the_past() {
        let mut w = ReplayWindow::new();
        for id in 1..=100 {
            w.accept(id).unwrap();
        }
        let far = 1_000_000_000_000;
        assert_eq!(w.accept(far), Ok(()));
        assert_eq!(w.newest(), far);
        assert_eq!(w.check(100), Err(ReplayError::TooOld));
        // The ring was cleared: ids just behind the far one are fresh, not stale bits.
        assert_eq!(w.accept(far - 1), Ok(()));
        assert_eq!(w.accept(far - WINDOW + 1), Ok(()));
        assert_eq!(w.check(far - 1), Err(ReplayError::Duplicate));
    }

    #[test]
    fn sliding_by_less_than_a_ring_clears_only_the_passed_words() {
        let mut w = ReplayWindow::new();
        w.accept(64).unwrap(); // word 1
        w.accept(200).unwrap(); // word 3: words 2 and 3 cleared, word 1 kept
        assert_eq!(w.check(64), Err(ReplayError::Duplicate));
        assert_eq!(w.check(65), Ok(()));
        // Slide exactly one ring further: id 64's word is reused and must read as fresh.
        let next = 64 + WORDS as u64 * WORD_BITS;
        w.accept(next).unwrap();
        assert_eq!(w.check(64), Err(ReplayError::TooOld));
        assert_eq!(w.check(next - 1), Ok(()));
    }

    #[test]
    fn a_checked_but_unrecorded_id_stays_acceptable() {
        let w = ReplayWindow::new();
        assert_eq!(w.check(7), Ok(()));
        assert_eq!(w.check(7), Ok(()));
    }
}
