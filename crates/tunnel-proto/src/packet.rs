//! The data-channel packet format and per-packet processing.
//!
//! Every datagram starts with a 64-bit big-endian packet id, `queue[1] | epoch[1] |
//! counter[6]` (never 0, never reused under one key):
//!
//! * **queue**: a multi-queue tunnel shares one key among its queues, so each queue sends
//!   from its own slice of the id space, its number in the top byte
//!   ([`Endpoint::for_queue`]; a single-queue end sends 0 and accepts any). Ids stay unique
//!   under the key (GCM nonces never repeat), each queue's replay window sees only its own
//!   sequence, and a datagram carried to another queue's socket is refused
//!   ([`DropReason::WrongQueue`]) before it can move that window.
//! * **epoch**: which key sealed the packet, mod 256 ([`crate::epoch`]); 0 is the run's
//!   initial key, so a tunnel that never rekeys sends the ids it always sent. A packet of an
//!   epoch the receiver does not hold is refused ([`DropReason::UnknownEpoch`]); each epoch
//!   has its own replay window.
//! * **counter**: 1, 2, ... up to [`MAX_COUNTER`] (2^48 − 1) per epoch; a sender that has
//!   used them all refuses to send ([`EncapError::PacketIdExhausted`]) until it switches to
//!   a new epoch.
//!
//! After the id, per suite:
//!
//! | suite               | datagram                                                       |
//! |---------------------|----------------------------------------------------------------|
//! | `none`              | `id[8] payload`                                                |
//! | `aes-N-cbc`         | `id[8] iv[16] AES-CBC(payload ‖ PKCS#7 pad)`                   |
//! | `aes-N-cbc-hmac-sha256` | `id[8] iv[16] AES-CBC(payload ‖ pad) HMAC-SHA256(id ‖ iv ‖ ct)[32]` |
//! | `aes-N-gcm`         | `id[8] AES-GCM(payload) tag[16]`, nonce = salt[4] ‖ id[8], AAD = id |
//!
//! The IV is random per packet (drawn from the OS in batches, see [`IvPool`]). The MAC covers
//! the packet id, so a replayed id cannot be grafted onto another packet; the replay window is
//! checked before the (expensive) MAC and updated only after it.
//!
//! Buffers belong to the caller. [`Endpoint::encap`] expects the payload at
//! `buf[HEADROOM..HEADROOM + len]`, with [`TAILROOM`] spare bytes after it, and returns where
//! the datagram ended up; [`Endpoint::decap`] decrypts in place and returns where the payload is.

use std::ops::Range;

use crypto::CbcMessage;
use model::CipherSuite;

use crate::engine::EngineError;
use crate::epoch::{Epochs, KeyEpochs, RekeyError, MAX_COUNTER};
use crate::keys::{KeyDirection, StaticKey};
use crate::replay::ReplayError;

pub use crate::engine::Implementation;

const ID_LEN: usize = 8;
const BLOCK: usize = 16;
const IV_LEN: usize = 16;
const MAC_LEN: usize = 32;
const TAG_LEN: usize = 16;

/// Space the caller leaves in front of the payload: the largest header of any suite.
pub const HEADROOM: usize = ID_LEN + IV_LEN;
/// Space the caller leaves after the payload: the largest trailer (a full padding block and a MAC).
pub const TAILROOM: usize = BLOCK + MAC_LEN;

/// Why a received datagram was dropped (or, for the inner-address reasons, a packet from TUN
/// was not sent). Cheap to copy; the event loop counts them by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than the suite's header and trailer.
    ShortPacket,
    /// CBC ciphertext that is not a whole number of blocks.
    BadLength,
    /// HMAC or GCM tag did not verify: tampered, corrupt or wrong key.
    BadMac,
    /// PKCS#7 padding did not check out after decryption.
    BadPadding,
    /// Packet id seen before.
    Replay,
    /// Packet id older than the replay window.
    TooOld,
    /// Packet id 0, which no sender uses.
    BadPacketId,
    /// Packet id from another queue's slice of the id space (multi-queue tunnels).
    WrongQueue,
    /// Packet id naming a key epoch this end does not hold: retired, or not yet installed
    /// ([`Endpoint::retire_previous`], [`Endpoint::install_next`]).
    UnknownEpoch,
    /// Decrypted, but not a well-formed IPv4 or IPv6 packet: too short for its header, or
    /// its length fields disagree with its length ([`crate::InnerAddresses`]).
    BadInnerHeader,
    /// Decrypted, but not from the peer's inner address to this end's (another family
    /// included): the key holder tried to reach, or pose as, another address
    /// ([`crate::InnerAddresses`]).
    WrongInnerAddress,
}

impl DropReason {
    pub const ALL: [DropReason; 11] = [
        DropReason::ShortPacket,
        DropReason::BadLength,
        DropReason::BadMac,
        DropReason::BadPadding,
        DropReason::Replay,
        DropReason::TooOld,
        DropReason::BadPacketId,
        DropReason::WrongQueue,
        DropReason::UnknownEpoch,
        DropReason::BadInnerHeader,
        DropReason::WrongInnerAddress,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::ShortPacket => "short_packet",
            DropReason::BadLength => "bad_length",
            DropReason::BadMac => "bad_mac",
            DropReason::BadPadding => "bad_padding",
            DropReason::Replay => "replay",
            DropReason::TooOld => "too_old",
            DropReason::BadPacketId => "bad_packet_id",
            DropReason::WrongQueue => "wrong_queue",
            DropReason::UnknownEpoch => "unknown_epoch",
            DropReason::BadInnerHeader => "bad_inner_header",
            DropReason::WrongInnerAddress => "wrong_inner_address",
        }
    }
}

impl From<ReplayError> for DropReason {
    fn from(e: ReplayError) -> Self {
        match e {
            ReplayError::Duplicate => DropReason::Replay,
            ReplayError::TooOld => DropReason::TooOld,
            ReplayError::Zero => DropReason::BadPacketId,
        }
    }
}

/// Dropped datagrams, one counter per [`DropReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounters {
    pub short_packet: u64,
    pub bad_length: u64,
    pub bad_mac: u64,
    pub bad_padding: u64,
    pub replay: u64,
    pub too_old: u64,
    pub bad_packet_id: u64,
    pub wrong_queue: u64,
    pub unknown_epoch: u64,
    pub bad_inner_header: u64,
    pub wrong_inner_address: u64,
}

impl DropCounters {
    pub fn count(&mut self, reason: DropReason) {
        *self.slot(reason) += 1;
    }

    pub fn get(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::ShortPacket => self.short_packet,
            DropReason::BadLength => self.bad_length,
            DropReason::BadMac => self.bad_mac,
            DropReason::BadPadding => self.bad_padding,
            DropReason::Replay => self.replay,
            DropReason::TooOld => self.too_old,
            DropReason::BadPacketId => self.bad_packet_id,
            DropReason::WrongQueue => self.wrong_queue,
            DropReason::UnknownEpoch => self.unknown_epoch,
            DropReason::BadInnerHeader => self.bad_inner_header,
            DropReason::WrongInnerAddress => self.wrong_inner_address,
        }
    }

    fn slot(&mut self, reason: DropReason) -> &mut u64 {
        match reason {
            DropReason::ShortPacket => &mut self.short_packet,
            DropReason::BadLength => &mut self.bad_length,
            DropReason::BadMac => &mut self.bad_mac,
            DropReason::BadPadding => &mut self.bad_padding,
            DropReason::Replay => &mut self.replay,
            DropReason::TooOld => &mut self.too_old,
            DropReason::BadPacketId => &mut self.bad_packet_id,
            DropReason::WrongQueue => &mut self.wrong_queue,
            DropReason::UnknownEpoch => &mut self.unknown_epoch,
            DropReason::BadInnerHeader => &mut self.bad_inner_header,
            DropReason::WrongInnerAddress => &mut self.wrong_inner_address,
        }
    }

    pub fn total(&self) -> u64 {
        DropReason::ALL.iter().map(|r| self.get(*r)).sum()
    }

    /// Adds another set of counters to these (the queues of one end).
    pub fn add(&mut self, other: &DropCounters) {
        for r in DropReason::ALL {
            *self.slot(r) += other.get(r);
        }
    }
}

/// Most queues one tunnel end may have: the top byte of the packet id names the queue, and
/// the kernel allows no more queues on one TUN device (`MAX_TAP_QUEUES`).
pub const MAX_QUEUES: usize = 256;
const QUEUE_SHIFT: u32 = 56;
const EPOCH_SHIFT: u32 = 48;

/// The packet id of `counter` (1..=[`MAX_COUNTER`]) in `epoch` on `queue`.
fn packet_id(queue: u8, epoch: u8, counter: u64) -> u64 {
    debug_assert!((1..=MAX_COUNTER).contains(&counter));
    u64::from(queue) << QUEUE_SHIFT | u64::from(epoch) << EPOCH_SHIFT | counter
}

/// A packet id's queue, epoch and counter.
fn split_id(id: u64) -> (u8, u8, u64) {
    (
        (id >> QUEUE_SHIFT) as u8,
        (id >> EPOCH_SHIFT) as u8,
        id & MAX_COUNTER,
    )
}

/// Why a payload could not be sent.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub enum EncapError {
    #[error("buffer of {have} bytes cannot hold a {payload}-byte payload with headroom {HEADROOM} and tailroom {TAILROOM}")]
    BufferTooSmall { have: usize, payload: usize },
    #[error("packet ids exhausted: this epoch's key has sent all {MAX_COUNTER} of its packet ids and must not send more (switch to a new epoch)")]
    PacketIdExhausted,
    #[error("reading random IVs from the operating system: {0}")]
    Random(getrandom::Error),
    #[error("encrypting: {0}")]
    Crypto(crypto::CryptoError),
}

/// Why an endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Random IVs drawn from the OS a few hundred at a time: one `getrandom` call per 256 packets.
struct IvPool {
    buf: Box<[u8; 4096]>,
    pos: usize,
}

impl IvPool {
    fn new() -> IvPool {
        IvPool {
            buf: Box::new([0; 4096]),
            pos: 4096,
        }
    }

    fn next(&mut self) -> Result<[u8; IV_LEN], getrandom::Error> {
        if self.pos + IV_LEN > self.buf.len() {
            getrandom::fill(&mut self.buf[..])?;
            self.pos = 0;
        }
        let iv = self.buf[self.pos..self.pos + IV_LEN]
            .try_into()
            .expect("16 bytes");
        self.pos += IV_LEN;
        Ok(iv)
    }
}

/// One end of a tunnel: its send keys, receive keys, packet counter and replay window, per
/// key epoch ([`crate::epoch`]).
pub struct Endpoint {
    suite: CipherSuite,
    implementation: Implementation,
    /// The queue whose slice of the id space this end sends from and accepts; `None`: a
    /// single-queue end, which sends queue 0 and accepts any.
    queue: Option<u8>,
    keys: KeyEpochs,
    ivs: IvPool,
}

impl Endpoint {
    /// An end keyed from the run's static key. The two ends of a tunnel use opposite
    /// directions.
    pub fn new(
        suite: CipherSuite,
        implementation: Implementation,
        key: &StaticKey,
        key_direction: KeyDirection,
    ) -> Result<Endpoint, SetupError> {
        Endpoint::with_queue(suite, implementation, key, key_direction, None)
    }

    /// Queue `queue` of a multi-queue end: sends, and accepts, only ids whose top byte is
    /// `queue` (see the module's documentation). Both ends' queue `q` talk to each other.
    pub fn for_queue(
        suite: CipherSuite,
        implementation: Implementation,
        key: &StaticKey,
        key_direction: KeyDirection,
        queue: u8,
    ) -> Result<Endpoint, SetupError> {
        Endpoint::with_queue(suite, implementation, key, key_direction, Some(queue))
    }

    fn with_queue(
        suite: CipherSuite,
        implementation: Implementation,
        key: &StaticKey,
        key_direction: KeyDirection,
        queue: Option<u8>,
    ) -> Result<Endpoint, SetupError> {
        Ok(Endpoint {
            suite,
            implementation,
            queue,
            keys: KeyEpochs::new(suite, implementation, key, key_direction)?,
            ivs: IvPool::new(),
        })
    }

    /// Builds the next epoch's engines from `key` (this end's key direction, as for the
    /// first key) and returns its number. From now on packets of that epoch are accepted,
    /// but this end still sends with the current one until [`switch_send`](Self::switch_send).
    /// Refused while two epochs are live (after [`retire_previous`](Self::retire_previous)
    /// only one is). See [`crate::epoch`] for the order both ends follow.
    pub fn install_next(&mut self, key: &StaticKey) -> Result<u8, RekeyError> {
        self.keys.install_next(key)
    }

    /// Sends with the newest installed epoch from now on (its counter starts at 1); returns
    /// its number. Refused when no newer epoch is installed.
    pub fn switch_send(&mut self) -> Result<u8, RekeyError> {
        self.keys.switch_send()
    }

    /// Stops accepting the previous epoch: its packets are dropped as
    /// [`DropReason::UnknownEpoch`] from now on, and its keys are dropped. Returns its
    /// number. Refused when only one epoch is live, or before [`switch_send`](Self::switch_send)
    /// (that would retire the epoch this end sends with).
    pub fn retire_previous(&mut self) -> Result<u8, RekeyError> {
        self.keys.retire_previous()
    }

    /// The epoch this end sends with and those it accepts.
    pub fn epochs(&self) -> Epochs {
        self.keys.epochs()
    }

    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    /// Which library does the work, and whether it uses hardware AES (for the report).
    pub fn implementation(&self) -> Implementation {
        self.implementation
    }

    /// Bytes a datagram carries beyond its payload, at most (for choosing the inner MTU).
    pub fn max_overhead(suite: CipherSuite) -> usize {
        match suite {
            CipherSuite::None => ID_LEN,
            CipherSuite::AesCbc { hmac, .. } => {
                ID_LEN + IV_LEN + BLOCK + if hmac == model::Hmac::Sha256 { MAC_LEN } else { 0 }
            }
            CipherSuite::AesGcm { .. } | CipherSuite::ChaCha20Poly1305 => ID_LEN + TAG_LEN,
        }
    }

    /// Encrypts `buf[HEADROOM..HEADROOM + payload_len]` in place; returns the range of `buf`
    /// holding the datagram to send.
    pub fn encap(&mut self, buf: &mut [u8], payload_len: usize) -> Result<Range<usize>, EncapError> {
        let iv = match self.suite {
            CipherSuite::AesCbc { .. } => self.ivs.next().map_err(EncapError::Random)?,
            _ => [0; IV_LEN],
        };
        self.encap_with_iv(buf, payload_len, &iv)
    }

    /// [`encap`](Self::encap) with a given IV (CBC suites; others ignore it). For
    /// known-answer tests: a real sender must use a fresh random IV per packet.
    pub fn encap_with_iv(
        &mut self,
        buf: &mut [u8],
        payload_len: usize,
        iv: &[u8; IV_LEN],
    ) -> Result<Range<usize>, EncapError> {
        let id = self.take_id(buf, payload_len)?;
        let payload_end = HEADROOM + payload_len;
        match self.suite {
            CipherSuite::None => {
                let start = HEADROOM - ID_LEN;
                buf[start..HEADROOM].copy_from_slice(&id.to_be_bytes());
                Ok(start..payload_end)
            }
            CipherSuite::AesCbc { .. } => {
                let ct_end = cbc_frame(buf, id, iv, payload_len);
                self.keys
                    .tx
                    .engine
                    .cbc_encrypt(iv, &mut buf[HEADROOM..ct_end])
                    .map_err(EncapError::Crypto)?;
                Ok(self.cbc_tag(buf, ct_end))
            }
            CipherSuite::AesGcm { .. } | CipherSuite::ChaCha20Poly1305 => {
                let start = HEADROOM - ID_LEN;
                let id_bytes = id.to_be_bytes();
                buf[start..HEADROOM].copy_from_slice(&id_bytes);
                let tag = self
                    .keys
                    .tx
                    .engine
                    .gcm_seal(&id_bytes, &mut buf[HEADROOM..payload_end])
                    .map_err(EncapError::Crypto)?;
                buf[payload_end..payload_end + TAG_LEN].copy_from_slice(&tag);
                Ok(start..payload_end + TAG_LEN)
            }
        }
    }

    /// [`encap`](Self::encap) for a batch: packet `i` is `bufs[i]` holding a payload of
    /// `payload_lens[i]` bytes, and `sealed[i]` gets what `encap` would return for it. The
    /// datagrams are those `encap` makes one at a time; a CBC suite's packets are encrypted
    /// side by side ([`crypto::AesCbc::encrypt_batch`]), as one CBC chain alone leaves the
    /// AES units mostly idle.
    pub fn encap_batch<B: AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        payload_lens: &[usize],
        sealed: &mut [Result<Range<usize>, EncapError>],
    ) {
        self.seal_batch(bufs, payload_lens, sealed, |pool| {
            pool.next().map_err(EncapError::Random)
        });
    }

    /// [`encap_batch`](Self::encap_batch) with given IVs, `ivs[i]` for packet `i` (CBC
    /// suites; others ignore them). For known-answer tests, as [`encap_with_iv`](Self::encap_with_iv).
    pub fn encap_batch_with_ivs<B: AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        payload_lens: &[usize],
        ivs: &[[u8; IV_LEN]],
        sealed: &mut [Result<Range<usize>, EncapError>],
    ) {
        let mut ivs = ivs.iter();
        self.seal_batch(bufs, payload_lens, sealed, |_| {
            Ok(*ivs.next().expect("an IV per packet"))
        });
    }

    fn seal_batch<B: AsMut<[u8]>>(
        &mut self,
        bufs: &mut [B],
        payload_lens: &[usize],
        sealed: &mut [Result<Range<usize>, EncapError>],
        mut next_iv: impl FnMut(&mut IvPool) -> Result<[u8; IV_LEN], EncapError>,
    ) {
        assert!(
            bufs.len() == payload_lens.len() && bufs.len() == sealed.len(),
            "a length and a result per packet"
        );
        let packets = bufs.iter_mut().zip(payload_lens).zip(sealed.iter_mut());
        if !matches!(self.suite, CipherSuite::AesCbc { .. }) {
            for ((buf, &len), out) in packets {
                *out = self.encap_with_iv(buf.as_mut(), len, &[0; IV_LEN]);
            }
            return;
        }
        // Frame every packet, encrypt them all at once, then MAC each.
        let mut messages = Vec::with_capacity(payload_lens.len());
        for ((buf, &len), out) in packets {
            let buf = buf.as_mut();
            *out = match next_iv(&mut self.ivs).and_then(|iv| Ok((iv, self.take_id(buf, len)?))) {
                Ok((iv, id)) => {
                    let ct_end = cbc_frame(buf, id, &iv, len);
                    messages.push(CbcMessage {
                        iv,
                        buf: &mut buf[HEADROOM..ct_end],
                    });
                    Ok(0..ct_end)
                }
                Err(e) => Err(e),
            };
        }
        let encrypted = self.keys.tx.engine.cbc_encrypt_batch(&mut messages);
        drop(messages);
        for (buf, out) in bufs.iter_mut().zip(sealed.iter_mut()) {
            if let Ok(framed) = out {
                *out = match encrypted {
                    Ok(()) => Ok(self.cbc_tag(buf.as_mut(), framed.end)),
                    Err(e) => Err(EncapError::Crypto(e)),
                };
            }
        }
    }

    /// Checks that `buf` holds a `payload_len`-byte payload with its headroom and tailroom,
    /// and takes the next packet id of the epoch this end sends with.
    fn take_id(&mut self, buf: &[u8], payload_len: usize) -> Result<u64, EncapError> {
        if buf.len() < HEADROOM + payload_len + TAILROOM {
            return Err(EncapError::BufferTooSmall {
                have: buf.len(),
                payload: payload_len,
            });
        }
        let tx = &mut self.keys.tx;
        if tx.next_counter > MAX_COUNTER {
            return Err(EncapError::PacketIdExhausted);
        }
        let id = packet_id(self.queue.unwrap_or(0), tx.number, tx.next_counter);
        tx.next_counter += 1;
        Ok(id)
    }

    /// A CBC datagram's MAC after its ciphertext (HMAC suites); returns the datagram's range.
    fn cbc_tag(&self, buf: &mut [u8], ct_end: usize) -> Range<usize> {
        match self.suite {
            CipherSuite::AesCbc {
                hmac: model::Hmac::Sha256,
                ..
            } => {
                let tag = self.keys.tx.engine.mac(&buf[..ct_end]);
                buf[ct_end..ct_end + MAC_LEN].copy_from_slice(&tag);
                0..ct_end + MAC_LEN
            }
            _ => 0..ct_end,
        }
    }

    /// Authenticates and decrypts the datagram `buf` in place; returns the range of `buf`
    /// holding the payload, or why the datagram must be dropped.
    pub fn decap(&mut self, buf: &mut [u8]) -> Result<Range<usize>, DropReason> {
        let min = match self.suite {
            CipherSuite::None => ID_LEN,
            CipherSuite::AesCbc { hmac, .. } => {
                HEADROOM + BLOCK + if hmac == model::Hmac::Sha256 { MAC_LEN } else { 0 }
            }
            CipherSuite::AesGcm { .. } | CipherSuite::ChaCha20Poly1305 => ID_LEN + TAG_LEN,
        };
        if buf.len() < min {
            return Err(DropReason::ShortPacket);
        }
        let id_bytes: [u8; ID_LEN] = buf[..ID_LEN].try_into().expect("8 bytes");
        let id = u64::from_be_bytes(id_bytes);
        if id == 0 {
            return Err(DropReason::BadPacketId);
        }
        let (queue, epoch, counter) = split_id(id);
        if self.queue.is_some_and(|q| q != queue) {
            return Err(DropReason::WrongQueue);
        }
        // Each epoch has its own engine and replay window: a packet is judged only by its own.
        let rx = self.keys.rx_mut(epoch).ok_or(DropReason::UnknownEpoch)?;
        if counter == 0 {
            return Err(DropReason::BadPacketId);
        }
        rx.window.check(id)?;
        let payload = match self.suite {
            CipherSuite::None => ID_LEN..buf.len(),
            CipherSuite::AesCbc { hmac, .. } => {
                let ct_end = if hmac == model::Hmac::Sha256 {
                    let (authed, tag) = buf.split_at(buf.len() - MAC_LEN);
                    if !rx.engine.verify_mac(authed, tag.try_into().expect("32 bytes")) {
                        return Err(DropReason::BadMac);
                    }
                    authed.len()
                } else {
                    buf.len()
                };
                if (ct_end - HEADROOM) % BLOCK != 0 {
                    return Err(DropReason::BadLength);
                }
                let iv: [u8; IV_LEN] = buf[ID_LEN..HEADROOM].try_into().expect("16 bytes");
                rx.engine
                    .cbc_decrypt(&iv, &mut buf[HEADROOM..ct_end])
                    .map_err(|_| DropReason::BadLength)?;
                let pad = usize::from(buf[ct_end - 1]);
                if pad == 0 || pad > BLOCK || buf[ct_end - pad..ct_end].iter().any(|&b| usize::from(b) != pad)
                {
                    return Err(DropReason::BadPadding);
                }
                HEADROOM..ct_end - pad
            }
            CipherSuite::AesGcm { .. } | CipherSuite::ChaCha20Poly1305 => {
                let body_end = buf.len() - TAG_LEN;
                let (body, tag) = buf[ID_LEN..].split_at_mut(body_end - ID_LEN);
                let tag: &[u8; TAG_LEN] = (&*tag).try_into().expect("16 bytes");
                if !rx.engine.gcm_open(&id_bytes, body, tag) {
                    return Err(DropReason::BadMac);
                }
                ID_LEN..body_end
            }
        };
        rx.window.record(id);
        Ok(payload)
    }
}

/// Writes a CBC datagram's id and IV before the payload at `buf[HEADROOM..]` and its PKCS#7
/// padding after; returns where the ciphertext will end.
fn cbc_frame(buf: &mut [u8], id: u64, iv: &[u8; IV_LEN], payload_len: usize) -> usize {
    buf[..ID_LEN].copy_from_slice(&id.to_be_bytes());
    buf[ID_LEN..HEADROOM].copy_from_slice(iv);
    let payload_end = HEADROOM + payload_len;
    let pad = BLOCK - payload_len % BLOCK;
    buf[payload_end..payload_end + pad].fill(pad as u8);
    payload_end + pad
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::CryptoChoice;

    fn pair(suite: CipherSuite) -> (Endpoint, Endpoint) {
        let key = StaticKey::generate().unwrap();
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        (
            Endpoint::for_queue(suite, imp, &key, KeyDirection::Normal, 7).unwrap(),
            Endpoint::for_queue(suite, imp, &key, KeyDirection::Inverse, 7).unwrap(),
        )
    }

    fn seal(ep: &mut Endpoint) -> Result<Vec<u8>, EncapError> {
        let mut buf = vec![0u8; HEADROOM + 4 + TAILROOM];
        let r = ep.encap(&mut buf, 4)?;
        Ok(buf[r].to_vec())
    }

    #[test]
    fn ids_are_queue_epoch_counter() {
        assert_eq!(packet_id(7, 0, 1), 0x0700_0000_0000_0001);
        assert_eq!(packet_id(0, 0, 1), 1);
        assert_eq!(packet_id(0xab, 0xcd, MAX_COUNTER), 0xabcd_ffff_ffff_ffff);
        assert_eq!(split_id(0xabcd_0000_0000_0102), (0xab, 0xcd, 0x102));
    }

    /// The last counter of an epoch is sent, with the epoch byte intact (no carry into it);
    /// the next send is refused, not wrapped; a new epoch starts again from 1.
    #[test]
    fn an_epoch_refuses_to_send_past_its_counter_space() {
        for suite in [
            CipherSuite::None,
            CipherSuite::AesGcm {
                key: model::KeyBits::Aes256,
            },
        ] {
            let (mut a, mut b) = pair(suite);
            a.keys.tx.next_counter = MAX_COUNTER;
            let last = seal(&mut a).unwrap();
            assert_eq!(last[..8], 0x0700_ffff_ffff_ffffu64.to_be_bytes(), "{suite}");
            let mut opened = last.clone();
            assert!(b.decap(&mut opened).is_ok(), "{suite}");
            assert!(
                matches!(seal(&mut a), Err(EncapError::PacketIdExhausted)),
                "{suite}"
            );
            assert!(
                matches!(seal(&mut a), Err(EncapError::PacketIdExhausted)),
                "{suite}"
            );
            let next = StaticKey::generate().unwrap();
            a.install_next(&next).unwrap();
            b.install_next(&next).unwrap();
            a.switch_send().unwrap();
            let first = seal(&mut a).unwrap();
            assert_eq!(first[..8], 0x0701_0000_0000_0001u64.to_be_bytes(), "{suite}");
            let mut opened = first.clone();
            assert!(b.decap(&mut opened).is_ok(), "{suite}");
        }
    }
}
