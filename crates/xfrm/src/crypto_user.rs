//! Kernel crypto driver priorities over NETLINK_CRYPTO (`crypto_user`), so a sweep can make
//! one AES driver serve the SAs (the modern form of loading `aes.ko` vs `aes-i586.ko`):
//! the crypto API picks the highest-priority driver of an algorithm when an SA is made.
//!
//! * [`update_alg_message`] / [`new_alg_message`]: CRYPTO_MSG_UPDATEALG / CRYPTO_MSG_NEWALG
//!   requests laid out as `struct crypto_user_alg` (linux/cryptouser.h) plus the
//!   `CRYPTOCFGA_PRIORITY_VAL` attribute, tested byte for byte.
//! * [`new_aead_message`] / [`delete_aead_message`]: CRYPTO_MSG_NEWALG / CRYPTO_MSG_DELALG
//!   for an AEAD template instance such as `pcrypt(rfc4106-gcm-aesni)` (type and mask set:
//!   the template needs to know it builds an AEAD), tested byte for byte.
//! * [`CryptoUser`]: a blocking socket that sends them and reads the acknowledgement.
//! * [`PriorityGuard`]: changes priorities through any [`PriorityControl`] and puts every
//!   one back when dropped, also when the work in between failed or panicked.
//!
//! No netlink-packet-* crate models NETLINK_CRYPTO, hence the hand-built messages.
//! Leaves out reading priorities (that is /proc/crypto: `model::env::parse_proc_crypto`) and
//! which driver to raise for a sweep ([`crate::driver`]).

use std::io;

use netlink_sys::{protocols::NETLINK_CRYPTO, Socket};

/// `CRYPTO_MAX_NAME`: each name field of `struct crypto_user_alg`.
pub const CRYPTO_MAX_NAME: usize = 64;
/// `sizeof(struct crypto_user_alg)`: three names and four `__u32`.
pub const CRYPTO_USER_ALG_LEN: usize = 3 * CRYPTO_MAX_NAME + 4 * 4;
const NLMSG_HDR_LEN: usize = 16;
const NLA_HDR_LEN: usize = 4;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLMSG_ERROR: u16 = 0x2;
/// `CRYPTOCFGA_PRIORITY_VAL` (enum crypto_attr_type_t), a `__u32`.
const CRYPTOCFGA_PRIORITY_VAL: u16 = 1;
/// `CRYPTO_ALG_TYPE_AEAD` and `CRYPTO_ALG_TYPE_MASK` (linux/crypto.h): `cru_type` and
/// `cru_mask` of a request for an AEAD. A template such as pcrypt builds an instance only
/// when `type & mask` names the kind it is asked for.
pub const CRYPTO_ALG_TYPE_AEAD: u32 = 0x3;
pub const CRYPTO_ALG_TYPE_MASK: u32 = 0xf;

/// `CRYPTO_MSG_*` message types of linux/cryptouser.h.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum CryptoMsg {
    NewAlg = 0x10,
    DelAlg = 0x11,
    UpdateAlg = 0x12,
    GetAlg = 0x13,
}

#[derive(Debug, thiserror::Error)]
pub enum CryptoUserError {
    #[error("crypto driver name {0:?} is empty or longer than {max} bytes", max = CRYPTO_MAX_NAME - 1)]
    BadName(String),
    #[error("this kernel has no NETLINK_CRYPTO (crypto_user): `modprobe crypto_user` (CONFIG_CRYPTO_USER) to choose drivers: {0}")]
    Unavailable(#[source] io::Error),
    #[error("{op} {driver}: no such crypto driver (see /proc/crypto)")]
    NoSuchDriver { op: &'static str, driver: String },
    #[error("{op} {driver}: not permitted (needs CAP_NET_ADMIN)")]
    NotPermitted { op: &'static str, driver: String },
    #[error("{op} {driver}: kernel error {errno}")]
    Kernel {
        op: &'static str,
        driver: String,
        errno: i32,
    },
    #[error("{op} {driver}: {source}")]
    Io {
        op: &'static str,
        driver: String,
        #[source]
        source: io::Error,
    },
}

fn name_field(name: &str) -> Result<[u8; CRYPTO_MAX_NAME], CryptoUserError> {
    // The kernel refuses names without a terminating NUL inside the field.
    if name.is_empty() || name.len() >= CRYPTO_MAX_NAME || name.contains('\0') {
        return Err(CryptoUserError::BadName(name.to_string()));
    }
    let mut field = [0u8; CRYPTO_MAX_NAME];
    field[..name.len()].copy_from_slice(name.as_bytes());
    Ok(field)
}

/// What a request names in `crypto_user_alg`: an algorithm name (`cru_name`, any driver
/// of it) or one driver (`cru_driver_name`, exact), and the type/mask the kernel matches.
#[derive(Debug, Clone, Copy)]
enum Target<'a> {
    Driver(&'a str),
    Name(&'a str),
}

/// One request: `nlmsghdr`, `crypto_user_alg` naming the target (module left empty, refcnt
/// and flags zero), and optionally the priority.
fn request(
    kind: CryptoMsg,
    target: Target<'_>,
    (alg_type, mask): (u32, u32),
    priority: Option<u32>,
    seq: u32,
) -> Result<Vec<u8>, CryptoUserError> {
    let attr_len = if priority.is_some() { NLA_HDR_LEN + 4 } else { 0 };
    let len = NLMSG_HDR_LEN + CRYPTO_USER_ALG_LEN + attr_len;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&(kind as u16).to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    let (name, driver) = match target {
        Target::Driver(d) => ([0u8; CRYPTO_MAX_NAME], name_field(d)?),
        Target::Name(n) => (name_field(n)?, [0u8; CRYPTO_MAX_NAME]),
    };
    m.extend_from_slice(&name); // cru_name
    m.extend_from_slice(&driver); // cru_driver_name
    m.extend_from_slice(&[0u8; CRYPTO_MAX_NAME]); // cru_module_name
    m.extend_from_slice(&alg_type.to_ne_bytes()); // cru_type
    m.extend_from_slice(&mask.to_ne_bytes()); // cru_mask
    m.extend_from_slice(&[0u8; 8]); // cru_refcnt, cru_flags
    if let Some(p) = priority {
        m.extend_from_slice(&((NLA_HDR_LEN + 4) as u16).to_ne_bytes());
        m.extend_from_slice(&CRYPTOCFGA_PRIORITY_VAL.to_ne_bytes());
        m.extend_from_slice(&p.to_ne_bytes());
    }
    debug_assert_eq!(m.len(), len);
    Ok(m)
}

/// CRYPTO_MSG_UPDATEALG for `driver`: sets its priority when given. Either way the kernel
/// first removes the instances built on the driver (e.g. `authenc(...,cbc-aes-aesni)`), so
/// the next SA builds its algorithm anew from the current priorities.
pub fn update_alg_message(driver: &str, priority: Option<u32>, seq: u32) -> Result<Vec<u8>, CryptoUserError> {
    request(
        CryptoMsg::UpdateAlg,
        Target::Driver(driver),
        (0, 0),
        priority,
        seq,
    )
}

/// CRYPTO_MSG_NEWALG for `driver`: instantiates a template instance such as
/// `cbc(aes-generic)` that no lookup has made yet, so that it can be chosen.
pub fn new_alg_message(driver: &str, seq: u32) -> Result<Vec<u8>, CryptoUserError> {
    request(CryptoMsg::NewAlg, Target::Driver(driver), (0, 0), None, seq)
}

const AEAD: (u32, u32) = (CRYPTO_ALG_TYPE_AEAD, CRYPTO_ALG_TYPE_MASK);

/// CRYPTO_MSG_NEWALG for the AEAD `driver`, e.g. `pcrypt(rfc4106-gcm-aesni)`: the kernel
/// builds the template instance (the pcrypt template refuses without the AEAD type). As
/// `crconf add driver "pcrypt(rfc4106-gcm-aesni)" type 3` sends it.
pub fn new_aead_message(driver: &str, seq: u32) -> Result<Vec<u8>, CryptoUserError> {
    request(CryptoMsg::NewAlg, Target::Driver(driver), AEAD, None, seq)
}

/// CRYPTO_MSG_NEWALG for the AEAD algorithm `name` (any driver), e.g. `rfc4106(gcm(aes))`:
/// makes the kernel build its best instance now if no lookup has yet, so its driver shows
/// in /proc/crypto.
pub fn new_aead_by_name_message(name: &str, seq: u32) -> Result<Vec<u8>, CryptoUserError> {
    request(CryptoMsg::NewAlg, Target::Name(name), AEAD, None, seq)
}

/// CRYPTO_MSG_DELALG for the AEAD template instance `driver`: the kernel unregisters it
/// (EBUSY while a transform, such as an SA's, still uses it).
pub fn delete_aead_message(driver: &str, seq: u32) -> Result<Vec<u8>, CryptoUserError> {
    request(CryptoMsg::DelAlg, Target::Driver(driver), AEAD, None, seq)
}

/// Whether a NEWALG made the instance or found it there already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instantiated {
    Created,
    Existed,
}

/// Whatever can set a driver's priority: the kernel ([`CryptoUser`]) or a test double.
pub trait PriorityControl {
    fn set_priority(&mut self, driver: &str, priority: u32) -> Result<(), CryptoUserError>;
}

/// A NETLINK_CRYPTO socket. Crypto algorithms are global to the kernel, not per namespace.
pub struct CryptoUser {
    socket: Socket,
    seq: u32,
}

impl CryptoUser {
    pub fn open() -> Result<CryptoUser, CryptoUserError> {
        let mut socket = Socket::new(NETLINK_CRYPTO).map_err(CryptoUserError::Unavailable)?;
        socket.bind_auto().map_err(CryptoUserError::Unavailable)?;
        Ok(CryptoUser { socket, seq: 1 })
    }

    fn execute(&mut self, op: &'static str, driver: &str, msg: Vec<u8>) -> Result<(), CryptoUserError> {
        let io = |source| CryptoUserError::Io {
            op,
            driver: driver.to_string(),
            source,
        };
        self.socket.send(&msg, 0).map_err(io)?;
        let (reply, _) = self.socket.recv_from_full().map_err(io)?;
        match ack_errno(&reply) {
            Some(0) => Ok(()),
            Some(e) if e == -libc::ENOENT => Err(CryptoUserError::NoSuchDriver {
                op,
                driver: driver.into(),
            }),
            Some(e) if e == -libc::EPERM => Err(CryptoUserError::NotPermitted {
                op,
                driver: driver.into(),
            }),
            Some(e) => Err(CryptoUserError::Kernel {
                op,
                driver: driver.into(),
                errno: -e,
            }),
            None => Err(io(io::Error::new(
                io::ErrorKind::InvalidData,
                "no netlink acknowledgement",
            ))),
        }
    }

    /// Sets `driver`'s priority (CRYPTO_MSG_UPDATEALG with CRYPTOCFGA_PRIORITY_VAL).
    pub fn update(&mut self, driver: &str, priority: Option<u32>) -> Result<(), CryptoUserError> {
        self.seq += 1;
        let msg = update_alg_message(driver, priority, self.seq)?;
        self.execute("set priority of", driver, msg)
    }

    /// Instantiates the AEAD `driver` (CRYPTO_MSG_NEWALG), saying whether it was there.
    pub fn instantiate_aead(&mut self, driver: &str) -> Result<Instantiated, CryptoUserError> {
        self.seq += 1;
        let msg = new_aead_message(driver, self.seq)?;
        created_or_existed(self.execute("instantiate", driver, msg))
    }

    /// Makes the kernel build the AEAD algorithm `name` if it has not yet.
    pub fn instantiate_aead_by_name(&mut self, name: &str) -> Result<Instantiated, CryptoUserError> {
        self.seq += 1;
        let msg = new_aead_by_name_message(name, self.seq)?;
        created_or_existed(self.execute("instantiate", name, msg))
    }

    /// Removes the AEAD template instance `driver` (CRYPTO_MSG_DELALG).
    pub fn delete_aead(&mut self, driver: &str) -> Result<(), CryptoUserError> {
        self.seq += 1;
        let msg = delete_aead_message(driver, self.seq)?;
        self.execute("remove", driver, msg)
    }

    /// Instantiates `driver` (CRYPTO_MSG_NEWALG); an existing one is not an error.
    pub fn instantiate(&mut self, driver: &str) -> Result<(), CryptoUserError> {
        self.seq += 1;
        let msg = new_alg_message(driver, self.seq)?;
        match self.execute("instantiate", driver, msg) {
            Err(CryptoUserError::Kernel { errno, .. }) if errno == libc::EEXIST => Ok(()),
            other => other,
        }
    }
}

impl PriorityControl for CryptoUser {
    fn set_priority(&mut self, driver: &str, priority: u32) -> Result<(), CryptoUserError> {
        self.update(driver, Some(priority))
    }
}

fn created_or_existed(r: Result<(), CryptoUserError>) -> Result<Instantiated, CryptoUserError> {
    match r {
        Ok(()) => Ok(Instantiated::Created),
        Err(CryptoUserError::Kernel { errno, .. }) if errno == libc::EEXIST => Ok(Instantiated::Existed),
        Err(e) => Err(e),
    }
}

/// The errno of an NLMSG_ERROR acknowledgement (0 = success), if `reply` is one.
fn ack_errno(reply: &[u8]) -> Option<i32> {
    if reply.len() < NLMSG_HDR_LEN + 4 {
        return None;
    }
    let kind = u16::from_ne_bytes([reply[4], reply[5]]);
    (kind == NLMSG_ERROR).then(|| i32::from_ne_bytes(reply[16..20].try_into().expect("4 bytes")))
}

/// A driver's priority before the guard changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedPriority {
    pub driver: String,
    pub priority: u32,
}

/// Changes driver priorities and restores all of them when dropped, in reverse order:
/// after a row that succeeded, failed or panicked alike.
pub struct PriorityGuard<C: PriorityControl> {
    control: C,
    saved: Vec<SavedPriority>,
    /// Restore failures, kept for [`PriorityGuard::restore`] (Drop can only log them).
    failures: Vec<String>,
}

impl<C: PriorityControl> PriorityGuard<C> {
    pub fn new(control: C) -> PriorityGuard<C> {
        PriorityGuard {
            control,
            saved: Vec::new(),
            failures: Vec::new(),
        }
    }

    /// Sets `driver` to `priority`, remembering `original` (read from /proc/crypto) to put back.
    pub fn set(&mut self, driver: &str, original: u32, priority: u32) -> Result<(), CryptoUserError> {
        // Saved before the change: if the kernel applied it but the reply got lost, the
        // restore still runs.
        if !self.saved.iter().any(|s| s.driver == driver) {
            self.saved.push(SavedPriority {
                driver: driver.to_string(),
                priority: original,
            });
        }
        self.control.set_priority(driver, priority)
    }

    pub fn control(&mut self) -> &mut C {
        &mut self.control
    }

    fn restore_all(&mut self) {
        while let Some(s) = self.saved.pop() {
            if let Err(e) = self.control.set_priority(&s.driver, s.priority) {
                tracing::warn!("restoring crypto priority of {} to {}: {e}", s.driver, s.priority);
                self.failures.push(format!("{} to {}: {e}", s.driver, s.priority));
            }
        }
    }

    /// Restores now and says whether every priority went back.
    pub fn restore(mut self) -> Result<(), Vec<String>> {
        self.restore_all();
        let failures = std::mem::take(&mut self.failures);
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures)
        }
    }
}

impl<C: PriorityControl> Drop for PriorityGuard<C> {
    fn drop(&mut self) {
        self.restore_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    /// The request of `crconf update driver "cbc(aes-generic)" priority 500` as the kernel
    /// reads it: nlmsghdr (len 232, type 0x12, flags REQUEST|ACK, seq 7, pid 0),
    /// crypto_user_alg { cru_name "", cru_driver_name "cbc(aes-generic)", cru_module_name
    /// "", type 0, mask 0, refcnt 0, flags 0 }, then nlattr { len 8, type 1 } and 500.
    #[test]
    fn update_request_matches_struct_crypto_user_alg_byte_for_byte() {
        let msg = update_alg_message("cbc(aes-generic)", Some(500), 7).unwrap();
        let mut expected = Vec::new();
        expected.extend_from_slice(&232u32.to_ne_bytes());
        expected.extend_from_slice(&0x12u16.to_ne_bytes());
        expected.extend_from_slice(&0x0005u16.to_ne_bytes());
        expected.extend_from_slice(&7u32.to_ne_bytes());
        expected.extend_from_slice(&0u32.to_ne_bytes());
        expected.extend_from_slice(&[0u8; 64]);
        let mut driver = [0u8; 64];
        driver[..16].copy_from_slice(b"cbc(aes-generic)");
        expected.extend_from_slice(&driver);
        expected.extend_from_slice(&[0u8; 64]);
        expected.extend_from_slice(&[0u8; 16]);
        expected.extend_from_slice(&8u16.to_ne_bytes());
        expected.extend_from_slice(&1u16.to_ne_bytes());
        expected.extend_from_slice(&500u32.to_ne_bytes());
        assert_eq!(CRYPTO_USER_ALG_LEN, 208);
        assert_eq!(msg.len(), 232);
        assert_eq!(msg, expected);
        // Offsets of the C layout: driver name at 16 + 64, flags word ends the struct.
        assert_eq!(&msg[80..96], b"cbc(aes-generic)");
        assert_eq!(msg[96], 0);
    }

    #[test]
    fn new_alg_request_has_no_attribute_and_names_are_checked() {
        let msg = new_alg_message("cbc(aes-generic)", 1).unwrap();
        assert_eq!(msg.len(), 16 + 208);
        assert_eq!(u16::from_ne_bytes([msg[4], msg[5]]), CryptoMsg::NewAlg as u16);
        assert!(update_alg_message("", None, 1).is_err());
        assert!(update_alg_message(&"x".repeat(64), None, 1).is_err());
        assert!(update_alg_message(&"x".repeat(63), None, 1).is_ok());
    }

    /// The header and `crypto_user_alg` as the kernel reads them (linux/cryptouser.h), for
    /// an AEAD request: type 3 (CRYPTO_ALG_TYPE_AEAD) at offset 208, mask 0xf at 212.
    fn aead_expected(kind: u16, name: &[u8], driver: &[u8], seq: u32) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(&224u32.to_ne_bytes());
        e.extend_from_slice(&kind.to_ne_bytes());
        e.extend_from_slice(&0x0005u16.to_ne_bytes());
        e.extend_from_slice(&seq.to_ne_bytes());
        e.extend_from_slice(&0u32.to_ne_bytes());
        for field in [name, driver, b""] {
            let mut f = [0u8; 64];
            f[..field.len()].copy_from_slice(field);
            e.extend_from_slice(&f);
        }
        e.extend_from_slice(&3u32.to_ne_bytes());
        e.extend_from_slice(&0xfu32.to_ne_bytes());
        e.extend_from_slice(&[0u8; 8]);
        e
    }

    /// `crconf add driver "pcrypt(rfc4106-gcm-aesni)" type 3` and `crconf del driver ...`.
    #[test]
    fn pcrypt_new_and_delete_requests_match_the_struct_byte_for_byte() {
        let new = new_aead_message("pcrypt(rfc4106-gcm-aesni)", 9).unwrap();
        assert_eq!(new, aead_expected(0x10, b"", b"pcrypt(rfc4106-gcm-aesni)", 9));
        assert_eq!(&new[208..216], &[3, 0, 0, 0, 0xf, 0, 0, 0]);
        let del = delete_aead_message("pcrypt(rfc4106-gcm-aesni)", 10).unwrap();
        assert_eq!(del, aead_expected(0x11, b"", b"pcrypt(rfc4106-gcm-aesni)", 10));
        let by_name = new_aead_by_name_message("rfc4106(gcm(aes))", 11).unwrap();
        assert_eq!(by_name, aead_expected(0x10, b"rfc4106(gcm(aes))", b"", 11));
        assert!(new_aead_message(&"p".repeat(64), 1).is_err());
    }

    #[test]
    fn an_existing_instance_is_told_apart_from_a_new_one() {
        let existed = created_or_existed(Err(CryptoUserError::Kernel {
            op: "instantiate",
            driver: "pcrypt(x)".into(),
            errno: libc::EEXIST,
        }));
        assert_eq!(existed.unwrap(), Instantiated::Existed);
        assert_eq!(created_or_existed(Ok(())).unwrap(), Instantiated::Created);
        let busy = created_or_existed(Err(CryptoUserError::Kernel {
            op: "instantiate",
            driver: "pcrypt(x)".into(),
            errno: libc::EBUSY,
        }));
        assert!(busy.is_err());
    }

    #[test]
    fn acknowledgements_are_decoded() {
        let mut ack = vec![0u8; 36];
        ack[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        ack[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(ack_errno(&ack), Some(-libc::ENOENT));
        ack[16..20].copy_from_slice(&0i32.to_ne_bytes());
        assert_eq!(ack_errno(&ack), Some(0));
        assert_eq!(ack_errno(&ack[..10]), None);
    }

    /// A kernel stand-in: driver → priority, shared so the test can look after the drop.
    #[derive(Clone, Default)]
    struct FakeKernel(Arc<Mutex<BTreeMap<String, u32>>>);

    impl PriorityControl for FakeKernel {
        fn set_priority(&mut self, driver: &str, priority: u32) -> Result<(), CryptoUserError> {
            let mut m = self.0.lock().unwrap();
            match m.get_mut(driver) {
                Some(p) => {
                    *p = priority;
                    Ok(())
                }
                None => Err(CryptoUserError::NoSuchDriver {
                    op: "set priority of",
                    driver: driver.into(),
                }),
            }
        }
    }

    fn kernel() -> FakeKernel {
        let k = FakeKernel::default();
        k.0.lock().unwrap().extend([
            ("cbc-aes-aesni".to_string(), 400),
            ("cbc(aes-generic)".to_string(), 100),
        ]);
        k
    }

    /// A driver row: raise one driver above the other, then the transfer fails.
    fn failing_row(k: &FakeKernel) -> Result<(), String> {
        let mut guard = PriorityGuard::new(k.clone());
        guard
            .set("cbc(aes-generic)", 100, 500)
            .map_err(|e| e.to_string())?;
        guard.set("cbc-aes-aesni", 400, 50).map_err(|e| e.to_string())?;
        assert_eq!(k.0.lock().unwrap()["cbc(aes-generic)"], 500);
        Err("transfer failed: receiver timed out".into())
    }

    #[test]
    fn priorities_are_restored_when_the_row_fails() {
        let k = kernel();
        let before = k.0.lock().unwrap().clone();
        assert!(failing_row(&k).is_err());
        assert_eq!(*k.0.lock().unwrap(), before);
    }

    #[test]
    fn priorities_are_restored_when_the_row_panics() {
        let k = kernel();
        let before = k.0.lock().unwrap().clone();
        let k2 = k.clone();
        let panicked = std::panic::catch_unwind(move || {
            let mut guard = PriorityGuard::new(k2);
            guard.set("cbc-aes-aesni", 400, 1).unwrap();
            panic!("row panicked");
        });
        assert!(panicked.is_err());
        assert_eq!(*k.0.lock().unwrap(), before);
    }

    #[test]
    fn restore_reports_what_could_not_be_put_back() {
        let k = kernel();
        let mut guard = PriorityGuard::new(k.clone());
        guard.set("cbc-aes-aesni", 400, 900).unwrap();
        assert!(guard.set("vanished-driver", 10, 20).is_err());
        let failures = guard.restore().unwrap_err();
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("vanished-driver"), "{failures:?}");
        assert_eq!(k.0.lock().unwrap()["cbc-aes-aesni"], 400);
    }
}
