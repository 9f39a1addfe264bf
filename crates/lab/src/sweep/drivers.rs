//! The sweep's evidence that its driver rows left the kernel's `cbc(aes)` priorities as they
//! found them. Choosing, pinning and restoring drivers is `xfrm::driver`'s.

use xfrm::driver::{cbc_aes_priorities, read_proc_crypto, DriverPriority};

/// Every `cbc(aes)` skcipher driver and its priority now.
pub(super) fn priorities() -> Vec<DriverPriority> {
    cbc_aes_priorities(&read_proc_crypto())
}

/// Whether the priorities came back (or not), in a line for the report's notes.
pub(super) fn priorities_note(before: &[DriverPriority], after: &[DriverPriority]) -> String {
    let list = |v: &[DriverPriority]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    if after == before {
        format!(
            "cbc(aes) driver priorities restored after the driver rows: {}",
            list(after)
        )
    } else {
        format!(
            "cbc(aes) driver priorities NOT restored: before {}, after {}",
            list(before),
            list(after)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_priorities_note_says_whether_they_came_back() {
        let p = |driver: &str, priority| DriverPriority {
            driver: driver.into(),
            priority,
        };
        let before = vec![p("aesni", 400), p("generic", 100)];
        assert_eq!(
            priorities_note(&before, &before),
            "cbc(aes) driver priorities restored after the driver rows: aesni=400, generic=100"
        );
        let after = vec![p("aesni", 400), p("generic", 500)];
        assert!(priorities_note(&before, &after).contains("NOT restored"));
    }
}
