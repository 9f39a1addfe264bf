//! Key epochs: new keys agreed while traffic flows, the old ones accepted until the switch
//! is done.
//!
//! An epoch is one [`StaticKey`]'s pair of engines (send and receive) with its own packet
//! counter and its own replay window. Its number, mod 256, travels in the second byte of
//! every packet id (`queue[1] | epoch[1] | counter[6]`, see [`crate::packet`]), so the
//! header does not grow. The run's initial key is epoch 0: a tunnel that never rekeys sends
//! the ids it always sent. Each epoch counts its packets from 1 to [`MAX_COUNTER`] (2^48 − 1)
//! and refuses to send more ([`crate::EncapError::PacketIdExhausted`]) rather than wrap, so
//! an AEAD nonce (salt ‖ id) never repeats under one key.
//!
//! At most two epochs are live at once. An [`Endpoint`](crate::Endpoint) goes through:
//!
//! | step                | sends with | accepts   |
//! |---------------------|------------|-----------|
//! | (steady)            | N          | N         |
//! | `install_next(key)` | N          | N and N+1 |
//! | `switch_send()`     | N+1        | N and N+1 |
//! | `retire_previous()` | N+1        | N+1       |
//!
//! The lossless switch, which the caller (the event loop, with whatever control channel
//! agrees the key) drives on both ends:
//!
//! 1. **Both ends `install_next`** with the same new key (each with its own key direction,
//!    as for the first key). From here each end accepts N+1 but still sends N.
//! 2. **Confirmation is exchanged** by the caller: each end learns that the other has
//!    installed N+1. Switching before that would send packets the peer cannot yet read.
//! 3. **Each end `switch_send`**: new packets go out under N+1. Packets already in flight
//!    under N still arrive and are accepted, judged by N's replay window.
//! 4. **After a grace time** (longer than any packet may be in flight or queued: a few
//!    round trips, well under a second on the lab's links) **each end `retire_previous`**.
//!    Packets of N arriving later are dropped as [`DropReason::UnknownEpoch`].
//!
//! Each epoch has its own replay window: a packet of N+1 is never judged by N's window or
//! the other way round (their counters both start at 1), and a replay of an N packet during
//! the overlap is still dropped as [`DropReason::Replay`]. Epoch numbers wrap: after 255
//! comes 0, and 0 is then a new key, unrelated to the run's first. A key must not be
//! installed twice (its packet ids would start again from 1).
//!
//! Leaves out: agreeing the key and exchanging the confirmation (the caller's control
//! channel), and timers (the caller decides when the grace time is over).
//!
//! [`DropReason::UnknownEpoch`]: crate::DropReason::UnknownEpoch
//! [`DropReason::Replay`]: crate::DropReason::Replay

use model::CipherSuite;

use crate::engine::{Engine, EngineError, Implementation};
use crate::keys::{KeyDirection, StaticKey};
use crate::replay::ReplayWindow;

/// Packets one epoch of one queue may send: counters `1..=MAX_COUNTER` (the low 48 bits of
/// the packet id; 0 is never sent).
pub const MAX_COUNTER: u64 = (1 << 48) - 1;

/// Which epochs an endpoint has installed ([`Endpoint::epochs`](crate::Endpoint::epochs)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Epochs {
    /// The epoch this end sends with.
    pub send: u8,
    /// The newest epoch installed, always accepted on receive (equal to `send` once sending
    /// has switched to it).
    pub newest: u8,
    /// The previous epoch while it is still accepted (from `install_next` until
    /// `retire_previous`), else `None`.
    pub previous: Option<u8>,
}

impl Epochs {
    /// Whether packets of epoch `epoch` are accepted on receive.
    pub fn accepts(&self, epoch: u8) -> bool {
        epoch == self.newest || self.previous == Some(epoch)
    }

    /// Whether an epoch has been installed but is not sent with yet (`switch_send` is next).
    pub fn switch_pending(&self) -> bool {
        self.send != self.newest
    }
}

/// Why a rekeying step was refused. The endpoint is unchanged after any of these.
#[derive(Debug, thiserror::Error)]
pub enum RekeyError {
    #[error(
        "epochs {previous} and {newest} are both still accepted: retire_previous before installing another"
    )]
    TwoEpochsLive { previous: u8, newest: u8 },
    #[error("no epoch newer than {send}, the one sent with, is installed: install_next first")]
    NothingToSwitchTo { send: u8 },
    #[error("epoch {next} is installed but not sent with yet: switch_send before retiring epoch {send}")]
    NotSwitched { send: u8, next: u8 },
    #[error("only epoch {0} is accepted: nothing to retire")]
    NothingToRetire(u8),
    #[error("building the next epoch's engines: {0}")]
    Engine(#[from] EngineError),
}

/// One epoch's send side: its engine and the next counter to use.
pub(crate) struct TxEpoch {
    pub(crate) number: u8,
    pub(crate) engine: Engine,
    /// Next counter to send (1 first; past [`MAX_COUNTER`]: exhausted).
    pub(crate) next_counter: u64,
}

/// One epoch's receive side: its engine and its own replay window.
pub(crate) struct RxEpoch {
    pub(crate) number: u8,
    pub(crate) engine: Engine,
    pub(crate) window: ReplayWindow,
}

/// The live epochs of one endpoint and the steps between them.
pub(crate) struct KeyEpochs {
    suite: CipherSuite,
    implementation: Implementation,
    direction: KeyDirection,
    /// What this end sends with.
    pub(crate) tx: TxEpoch,
    /// Installed, not yet sent with (between `install_next` and `switch_send`).
    tx_next: Option<TxEpoch>,
    /// The newest installed epoch's receive side.
    rx_newest: RxEpoch,
    /// The previous epoch's receive side, until `retire_previous`.
    rx_previous: Option<RxEpoch>,
}

impl KeyEpochs {
    /// Epoch 0, keyed from the run's key.
    pub(crate) fn new(
        suite: CipherSuite,
        implementation: Implementation,
        key: &StaticKey,
        direction: KeyDirection,
    ) -> Result<KeyEpochs, EngineError> {
        let (tx, rx) = build(suite, implementation, key, direction, 0)?;
        Ok(KeyEpochs {
            suite,
            implementation,
            direction,
            tx,
            tx_next: None,
            rx_newest: rx,
            rx_previous: None,
        })
    }

    /// The receive side of epoch `number`, if it is accepted.
    pub(crate) fn rx_mut(&mut self, number: u8) -> Option<&mut RxEpoch> {
        if self.rx_newest.number == number {
            return Some(&mut self.rx_newest);
        }
        self.rx_previous.as_mut().filter(|p| p.number == number)
    }

    pub(crate) fn install_next(&mut self, key: &StaticKey) -> Result<u8, RekeyError> {
        if let Some(previous) = &self.rx_previous {
            return Err(RekeyError::TwoEpochsLive {
                previous: previous.number,
                newest: self.rx_newest.number,
            });
        }
        let number = self.rx_newest.number.wrapping_add(1);
        let (tx, rx) = build(self.suite, self.implementation, key, self.direction, number)?;
        self.rx_previous = Some(std::mem::replace(&mut self.rx_newest, rx));
        self.tx_next = Some(tx);
        Ok(number)
    }

    pub(crate) fn switch_send(&mut self) -> Result<u8, RekeyError> {
        let next = self
            .tx_next
            .take()
            .ok_or(RekeyError::NothingToSwitchTo { send: self.tx.number })?;
        self.tx = next;
        Ok(self.tx.number)
    }

    pub(crate) fn retire_previous(&mut self) -> Result<u8, RekeyError> {
        if let Some(next) = &self.tx_next {
            return Err(RekeyError::NotSwitched {
                send: self.tx.number,
                next: next.number,
            });
        }
        let previous = self
            .rx_previous
            .take()
            .ok_or(RekeyError::NothingToRetire(self.rx_newest.number))?;
        Ok(previous.number)
    }

    pub(crate) fn epochs(&self) -> Epochs {
        Epochs {
            send: self.tx.number,
            newest: self.rx_newest.number,
            previous: self.rx_previous.as_ref().map(|p| p.number),
        }
    }
}

/// Epoch `number`'s send and receive sides from `key`.
fn build(
    suite: CipherSuite,
    implementation: Implementation,
    key: &StaticKey,
    direction: KeyDirection,
    number: u8,
) -> Result<(TxEpoch, RxEpoch), EngineError> {
    let tx = TxEpoch {
        number,
        engine: Engine::new(suite, implementation, key.send(direction))?,
        next_counter: 1,
    };
    let rx = RxEpoch {
        number,
        engine: Engine::new(suite, implementation, key.receive(direction))?,
        window: ReplayWindow::new(),
    };
    Ok((tx, rx))
}
