//! The server's admission of connections that have not yet proved they hold the key:
//! bounded in all and per source address, so a flood costs the server little.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Connections that have not yet sent a hello that decrypts, in all and per source address.
pub const MAX_UNAUTHENTICATED: usize = 32;
pub const MAX_UNAUTHENTICATED_PER_SOURCE: usize = 4;

/// Counts connections that have not proved they hold the key, in all and per source.
#[derive(Debug, Default)]
pub struct Admission {
    total: usize,
    per_source: HashMap<IpAddr, usize>,
}

/// One admitted unauthenticated connection; dropping it (once the hello decrypted, or the
/// connection ended) frees its place.
pub struct Admitted {
    admission: Arc<Mutex<Admission>>,
    source: IpAddr,
}

impl Admission {
    pub fn admit(this: &Arc<Mutex<Admission>>, source: IpAddr) -> Result<Admitted, String> {
        let mut a = this.lock().expect("admission lock");
        a.try_take(source)?;
        Ok(Admitted {
            admission: this.clone(),
            source,
        })
    }

    fn try_take(&mut self, source: IpAddr) -> Result<(), String> {
        if self.total >= MAX_UNAUTHENTICATED {
            return Err(format!(
                "{MAX_UNAUTHENTICATED} connections are waiting to authenticate already"
            ));
        }
        let n = self.per_source.entry(source).or_default();
        if *n >= MAX_UNAUTHENTICATED_PER_SOURCE {
            return Err(format!(
                "{MAX_UNAUTHENTICATED_PER_SOURCE} connections from this address are waiting to authenticate already"
            ));
        }
        *n += 1;
        self.total += 1;
        Ok(())
    }

    fn release(&mut self, source: IpAddr) {
        self.total -= 1;
        if let Some(n) = self.per_source.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission
            .lock()
            .expect("admission lock")
            .release(self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_connections_are_bounded_in_all_and_per_source() {
        let admission = Arc::new(Mutex::new(Admission::default()));
        let ip = |i: u8| IpAddr::from([198, 18, 0, i]);
        let mut held: Vec<Admitted> = (0..MAX_UNAUTHENTICATED_PER_SOURCE)
            .map(|_| Admission::admit(&admission, ip(1)).unwrap())
            .collect();
        let e = Admission::admit(&admission, ip(1)).err().unwrap();
        assert!(e.contains("from this address"), "{e}");
        held.pop();
        held.push(Admission::admit(&admission, ip(1)).unwrap());
        for i in 0..(MAX_UNAUTHENTICATED - MAX_UNAUTHENTICATED_PER_SOURCE) {
            held.push(
                Admission::admit(&admission, ip(2 + (i / MAX_UNAUTHENTICATED_PER_SOURCE) as u8)).unwrap(),
            );
        }
        let e = Admission::admit(&admission, ip(200)).err().unwrap();
        assert!(e.contains("waiting to authenticate"), "{e}");
        drop(held);
        let a = admission.lock().unwrap();
        assert_eq!((a.total, a.per_source.len()), (0, 0));
    }
}
