//! A small safe wrapper over AF_ALG, the socket interface to the kernel's crypto API:
//! `socket(AF_ALG)` → `bind` to a type (`skcipher`, `hash`, `aead`) and an algorithm name →
//! `setsockopt(ALG_SET_KEY)` → `accept` an operation socket → `sendmsg` the data with the
//! operation and IV as control messages → `read` the result.
//!
//! Built on `nix`, which already wraps every call here safely; the one `unsafe` block takes
//! ownership of the descriptor `accept4` returns. (The `kcapi` crate binds the C library
//! libkcapi, vendored and built with bindgen; for six system calls that is more to trust,
//! not less.)
//!
//! One [`Transform`] holds a keyed algorithm; each [`Session`] accepted from it runs one
//! operation at a time and may be reused for the next.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;
use nix::libc;
use nix::sys::socket::{
    accept4, bind, sendmsg, setsockopt, socket, sockopt, AddressFamily, AlgAddr, ControlMessage, MsgFlags,
    SockFlag, SockType,
};

/// The AF_ALG interface an algorithm is reached through (`salg_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlgType {
    Skcipher,
    Hash,
    Aead,
}

impl AlgType {
    pub fn name(self) -> &'static str {
        match self {
            AlgType::Skcipher => "skcipher",
            AlgType::Hash => "hash",
            AlgType::Aead => "aead",
        }
    }
}

/// Which way a cipher runs (`ALG_SET_OP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherOp {
    Encrypt,
    Decrypt,
}

impl CipherOp {
    fn raw(self) -> libc::c_int {
        match self {
            CipherOp::Encrypt => libc::ALG_OP_ENCRYPT,
            CipherOp::Decrypt => libc::ALG_OP_DECRYPT,
        }
    }
}

/// One system call that failed, with what it was doing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AfAlgError {
    #[error("socket(AF_ALG): {}{}", .0.desc(), if *.0 == Errno::EAFNOSUPPORT { " (this kernel has no AF_ALG: CONFIG_CRYPTO_USER_API unset or the af_alg module is not loaded)" } else { "" })]
    Socket(Errno),
    #[error("bind AF_ALG {kind} {algorithm:?}: {}{}", errno.desc(), if *errno == Errno::ENOENT { " (the kernel has no such algorithm, or its algif_ module is not loaded)" } else { "" })]
    Bind {
        kind: &'static str,
        algorithm: String,
        errno: Errno,
    },
    #[error("ALG_SET_KEY {algorithm} ({len}-byte key): {}", errno.desc())]
    SetKey {
        algorithm: String,
        len: usize,
        errno: Errno,
    },
    #[error("ALG_SET_AEAD_AUTHSIZE {algorithm} ({len} bytes): {}", errno.desc())]
    SetAuthSize {
        algorithm: String,
        len: usize,
        errno: Errno,
    },
    #[error("accept on AF_ALG {algorithm}: {}", errno.desc())]
    Accept { algorithm: String, errno: Errno },
    #[error("sendmsg to AF_ALG ({len} bytes): {}", errno.desc())]
    Send { len: usize, errno: Errno },
    #[error("sendmsg to AF_ALG took {sent} of {len} bytes")]
    ShortSend { sent: usize, len: usize },
    #[error("read from AF_ALG: {}{}", errno.desc(), if *errno == Errno::EBADMSG { " (authentication failed)" } else { "" })]
    Read { errno: Errno },
    #[error("read from AF_ALG returned {got} bytes, expected {expected}")]
    ShortRead { got: usize, expected: usize },
}

impl AfAlgError {
    /// True when the AEAD's tag did not verify (`EBADMSG`), as opposed to a failed call.
    pub fn is_authentication_failure(&self) -> bool {
        matches!(
            self,
            AfAlgError::Read {
                errno: Errno::EBADMSG
            }
        )
    }
}

/// A bound, keyed algorithm: the socket `accept` makes operation sockets from.
#[derive(Debug)]
pub struct Transform {
    fd: OwnedFd,
    kind: AlgType,
    algorithm: String,
}

impl Transform {
    /// `socket(AF_ALG, SOCK_SEQPACKET)` bound to `kind`/`algorithm`: the kernel instantiates
    /// the algorithm here, choosing its highest-priority driver.
    pub fn new(kind: AlgType, algorithm: &str) -> Result<Transform, AfAlgError> {
        let fd = socket(
            AddressFamily::Alg,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(AfAlgError::Socket)?;
        bind(fd.as_raw_fd(), &AlgAddr::new(kind.name(), algorithm)).map_err(|errno| AfAlgError::Bind {
            kind: kind.name(),
            algorithm: algorithm.to_string(),
            errno,
        })?;
        Ok(Transform {
            fd,
            kind,
            algorithm: algorithm.to_string(),
        })
    }

    pub fn kind(&self) -> AlgType {
        self.kind
    }

    pub fn algorithm(&self) -> &str {
        &self.algorithm
    }

    /// `ALG_SET_KEY`: the cipher key, the HMAC key, or an `authenc` key blob
    /// ([`authenc_key`]).
    pub fn set_key(&self, key: &[u8]) -> Result<(), AfAlgError> {
        setsockopt(&self.fd, sockopt::AlgSetKey::default(), &key).map_err(|errno| AfAlgError::SetKey {
            algorithm: self.algorithm.clone(),
            len: key.len(),
            errno,
        })
    }

    /// `ALG_SET_AEAD_AUTHSIZE`: the tag length an AEAD appends and checks.
    pub fn set_aead_authsize(&self, len: usize) -> Result<(), AfAlgError> {
        setsockopt(&self.fd, sockopt::AlgSetAeadAuthSize, &len).map_err(|errno| AfAlgError::SetAuthSize {
            algorithm: self.algorithm.clone(),
            len,
            errno,
        })
    }

    /// `accept`: an operation socket using this transform's key.
    pub fn session(&self) -> Result<Session, AfAlgError> {
        let raw =
            accept4(self.fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC).map_err(|errno| AfAlgError::Accept {
                algorithm: self.algorithm.clone(),
                errno,
            })?;
        // SAFETY: accept4 succeeded, so `raw` is a new descriptor that nothing else owns;
        // the OwnedFd closes it exactly once.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Session { fd })
    }
}

/// An operation socket: one request at a time (send, then read the whole result).
#[derive(Debug)]
pub struct Session {
    fd: OwnedFd,
}

impl Session {
    fn send(&self, parts: &[&[u8]], cmsgs: &[ControlMessage<'_>]) -> Result<(), AfAlgError> {
        let iov: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        let len: usize = parts.iter().map(|p| p.len()).sum();
        // No MSG_MORE: the request is complete, the kernel computes on the next read.
        let sent = sendmsg::<()>(self.fd.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)
            .map_err(|errno| AfAlgError::Send { len, errno })?;
        if sent != len {
            return Err(AfAlgError::ShortSend { sent, len });
        }
        Ok(())
    }

    fn read_exact(&self, out: &mut [u8]) -> Result<(), AfAlgError> {
        let got = nix::unistd::read(&self.fd, out).map_err(|errno| AfAlgError::Read { errno })?;
        if got != out.len() {
            return Err(AfAlgError::ShortRead {
                got,
                expected: out.len(),
            });
        }
        Ok(())
    }

    /// A skcipher request: `out` (as long as `input`) receives `input` en- or decrypted
    /// with `iv`.
    pub fn skcipher(&self, op: CipherOp, iv: &[u8], input: &[u8], out: &mut [u8]) -> Result<(), AfAlgError> {
        let op = op.raw();
        self.send(
            &[input],
            &[ControlMessage::AlgSetOp(&op), ControlMessage::AlgSetIv(iv)],
        )?;
        self.read_exact(&mut out[..input.len()])
    }

    /// A hash request over the concatenation of `parts`; `out` receives the first
    /// `out.len()` bytes of the digest (the whole digest when it is exactly that long).
    pub fn hash(&self, parts: &[&[u8]], out: &mut [u8]) -> Result<(), AfAlgError> {
        self.send(parts, &[])?;
        self.read_exact(out)
    }

    /// An AEAD request. The input is `aad` followed by `text` (for decryption, the
    /// ciphertext and then the tag); `out` receives the AAD again, then the result (for
    /// encryption, ciphertext and tag), and must be exactly that long.
    pub fn aead(
        &self,
        op: CipherOp,
        iv: &[u8],
        aad: &[u8],
        text: &[&[u8]],
        out: &mut [u8],
    ) -> Result<(), AfAlgError> {
        let raw_op = op.raw();
        let assoclen = aad.len() as u32;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(1 + text.len());
        parts.push(aad);
        parts.extend_from_slice(text);
        self.send(
            &parts,
            &[
                ControlMessage::AlgSetOp(&raw_op),
                ControlMessage::AlgSetIv(iv),
                ControlMessage::AlgSetAeadAssoclen(&assoclen),
            ],
        )?;
        self.read_exact(out)
    }
}

/// The key blob `authenc(...)` expects: an rtattr of type `CRYPTO_AUTHENC_KEYA_PARAM`
/// holding the cipher key's length (big-endian), then the authentication key, then the
/// cipher key (include/crypto/authenc.h; the same blob XFRM builds for ESP).
pub fn authenc_key(auth_key: &[u8], enc_key: &[u8]) -> Vec<u8> {
    const CRYPTO_AUTHENC_KEYA_PARAM: u16 = 1;
    const RTA_LEN: u16 = 8; // struct rtattr (4) + struct crypto_authenc_key_param (4)
    let mut blob = Vec::with_capacity(8 + auth_key.len() + enc_key.len());
    blob.extend_from_slice(&RTA_LEN.to_ne_bytes());
    blob.extend_from_slice(&CRYPTO_AUTHENC_KEYA_PARAM.to_ne_bytes());
    blob.extend_from_slice(&(enc_key.len() as u32).to_be_bytes());
    blob.extend_from_slice(auth_key);
    blob.extend_from_slice(enc_key);
    blob
}

/// Whether this kernel offers AF_ALG at all: Err says why not.
pub fn available() -> Result<(), AfAlgError> {
    socket(
        AddressFamily::Alg,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map(drop)
    .map_err(AfAlgError::Socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenc_key_blob_matches_the_kernel_layout() {
        let blob = authenc_key(&[0xaa; 32], &[0xbb; 16]);
        assert_eq!(blob.len(), 8 + 32 + 16);
        assert_eq!(u16::from_ne_bytes([blob[0], blob[1]]), 8);
        assert_eq!(u16::from_ne_bytes([blob[2], blob[3]]), 1);
        assert_eq!(&blob[4..8], &[0, 0, 0, 16]);
        assert!(blob[8..40].iter().all(|&b| b == 0xaa));
        assert!(blob[40..].iter().all(|&b| b == 0xbb));
    }

    #[test]
    fn missing_af_alg_is_explained() {
        let e = AfAlgError::Socket(Errno::EAFNOSUPPORT);
        assert!(e.to_string().contains("this kernel has no AF_ALG"), "{e}");
        let e = AfAlgError::Bind {
            kind: "aead",
            algorithm: "gcm(aes)".into(),
            errno: Errno::ENOENT,
        };
        assert!(e.to_string().contains("no such algorithm"), "{e}");
        assert!(AfAlgError::Read {
            errno: Errno::EBADMSG
        }
        .is_authentication_failure());
    }
}
