//! Talking to a running tunnel thread from outside: the stop request and key commands
//! (install the next key epoch, switch sending to it, retire the previous one; the order is
//! `tunnel_proto::epoch`'s).
//!
//! The thread owns its [`Endpoint`] and shares nothing with the packet path, so a command is
//! carried to it rather than done to the endpoint from here: the caller queues it under a
//! mutex, raises a flag and writes the eventfd (which wakes a `poll` sleeping on idle ends).
//! The loop looks at the flag once per iteration, one atomic load, and serves the queue only
//! when it is up: nothing is locked in the hot path. Each command carries a channel on which
//! the thread answers; [`KeyControl`] waits for the answer at most [`ANSWER_TIMEOUT`].
//!
//! Leaves out: when to rekey and how both ends agree on the key (the caller's: the lab's
//! rekey thread holds both ends' [`KeyControl`]s).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tunnel_proto::{Endpoint, RekeyError, StaticKey};

/// How long [`KeyControl`] waits for a thread's answer. A thread serves commands between two
/// batches (well under a millisecond under load) or as soon as its `poll` wakes: an answer
/// this late means the thread is stuck, not busy.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// A key command for one tunnel thread.
enum Command {
    /// Boxed: 256 bytes of key in a queue of otherwise empty commands.
    InstallNext(Box<StaticKey>),
    SwitchSend,
    RetirePrevious,
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Command::InstallNext(_) => "install_next",
            Command::SwitchSend => "switch_send",
            Command::RetirePrevious => "retire_previous",
        }
    }
}

type Answer = Result<u8, RekeyError>;

/// Commands waiting for the thread; `closed` once it has left its loop (later ones are
/// refused at once instead of waiting out the timeout).
#[derive(Default)]
struct Queue {
    closed: bool,
    commands: Vec<(Command, mpsc::Sender<Answer>)>,
}

/// One thread's control block: the stop flag, the pending-command flag and queue, and an
/// eventfd that wakes its `poll`.
pub(crate) struct Control {
    stop: AtomicBool,
    pending: AtomicBool,
    queue: Mutex<Queue>,
    wake: OwnedFd,
}

impl Control {
    pub fn new() -> io::Result<Control> {
        // SAFETY: eventfd(2) returns a new fd or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Control {
            stop: AtomicBool::new(false),
            pending: AtomicBool::new(false),
            queue: Mutex::new(Queue::default()),
            // SAFETY: fresh fd.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// The fd the loop polls with its TUN device and socket.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a u64 on the stack to an eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Whether commands wait: the loop's one check per iteration (the queue's mutex orders
    /// the rest, so a relaxed load suffices; a command seen one iteration late is no harm).
    #[inline]
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// Queues `command`, or answers at once that the thread has stopped.
    fn post(&self, command: Command) -> Result<mpsc::Receiver<Answer>, ()> {
        let (tx, rx) = mpsc::channel();
        {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.closed {
                return Err(());
            }
            q.commands.push((command, tx));
            // Raised under the lock, as `serve` lowers it: flag and queue never disagree.
            self.pending.store(true, Ordering::Relaxed);
        }
        self.wake();
        Ok(rx)
    }

    /// Runs every queued command on `endpoint` and answers it; `on_switch` is told of each
    /// successful switch (the thread counts them). Called by the loop when [`pending`]
    /// (Self::pending) is up.
    pub fn serve(&self, endpoint: &mut Endpoint, mut on_switch: impl FnMut()) {
        let commands = {
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            self.pending.store(false, Ordering::Relaxed);
            std::mem::take(&mut q.commands)
        };
        for (command, answer) in commands {
            let result = match command {
                Command::InstallNext(key) => endpoint.install_next(&key),
                Command::SwitchSend => endpoint.switch_send().inspect(|_| on_switch()),
                Command::RetirePrevious => endpoint.retire_previous(),
            };
            // The asker may have given up waiting: nothing to tell then.
            let _ = answer.send(result);
        }
    }

    /// Consumes the wake-ups written so far; the loop calls it when `poll` found the eventfd
    /// readable, or the next `poll` would return at once ever after. What woke it (a stop, a
    /// command) is in the flags, which were set before the write.
    pub fn drain_wake(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a u64 on the stack from a non-blocking eventfd.
        unsafe { libc::read(self.wake.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }

    /// The thread has left its loop: what waits and what comes later is refused (the
    /// answer channels dropped here tell a waiting asker at once).
    pub fn close(&self) {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.closed = true;
        q.commands.clear();
    }
}

/// Closes the control when the loop returns, however it returns (an I/O error, a panic).
pub(crate) struct CloseOnExit<'a>(pub &'a Control);

impl Drop for CloseOnExit<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Why a key command did not happen on a tunnel thread.
#[derive(Debug, thiserror::Error)]
pub enum KeyControlError {
    /// The endpoint refused the step (wrong order); it is unchanged. Boxed: a
    /// `RekeyError` is large and this path is rare.
    #[error("tunnel {tun}: {command} refused: {source}")]
    Refused {
        tun: String,
        command: &'static str,
        #[source]
        source: Box<RekeyError>,
    },
    #[error("tunnel {tun}: no answer to {command} within {waited:?}: the thread is stuck")]
    NoAnswer {
        tun: String,
        command: &'static str,
        waited: Duration,
    },
    #[error("tunnel {tun}: {command}: the thread has stopped")]
    Stopped { tun: String, command: &'static str },
    #[error("{command}: the queues answered different epochs {epochs:?}: they are out of step")]
    OutOfStep { command: &'static str, epochs: Vec<u8> },
}

/// The key commands of one tunnel end: one thread, or every queue of a multi-queue end in
/// queue order. Cloneable and `Send`: the caller's rekey thread keeps it while the tunnel
/// runs. Each call goes to every thread at once, then waits for all their answers (at most
/// [`ANSWER_TIMEOUT`] in all) and returns the epoch they agree on. On an error some queues
/// may have taken the step and others not: the tunnel should be stopped then.
#[derive(Clone)]
pub struct KeyControl {
    threads: Vec<(String, Arc<Control>)>,
}

impl KeyControl {
    pub(crate) fn new(threads: Vec<(String, Arc<Control>)>) -> KeyControl {
        KeyControl { threads }
    }

    pub(crate) fn join(controls: impl IntoIterator<Item = KeyControl>) -> KeyControl {
        KeyControl {
            threads: controls.into_iter().flat_map(|c| c.threads).collect(),
        }
    }

    /// How many threads the commands go to.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Installs `key` as the next epoch on every thread: accepted from now on, not yet sent
    /// with ([`Endpoint::install_next`]). Returns the new epoch's number.
    pub fn install_next(&self, key: &StaticKey) -> Result<u8, KeyControlError> {
        self.ask(|| Command::InstallNext(Box::new(key.clone())))
    }

    /// Every thread sends with the newest epoch from now on ([`Endpoint::switch_send`]).
    pub fn switch_send(&self) -> Result<u8, KeyControlError> {
        self.ask(|| Command::SwitchSend)
    }

    /// Every thread stops accepting the previous epoch ([`Endpoint::retire_previous`]);
    /// returns the retired epoch's number.
    pub fn retire_previous(&self) -> Result<u8, KeyControlError> {
        self.ask(|| Command::RetirePrevious)
    }

    fn ask(&self, command: impl Fn() -> Command) -> Result<u8, KeyControlError> {
        let name = command().name();
        // Posted to all first: the queues of one end take the step together.
        let mut waiting = Vec::with_capacity(self.threads.len());
        for (tun, control) in &self.threads {
            let rx = control.post(command()).map_err(|()| KeyControlError::Stopped {
                tun: tun.clone(),
                command: name,
            })?;
            waiting.push((tun, rx));
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        let mut epochs = Vec::with_capacity(waiting.len());
        for (tun, rx) in waiting {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(epoch)) => epochs.push(epoch),
                Ok(Err(source)) => {
                    return Err(KeyControlError::Refused {
                        tun: tun.clone(),
                        command: name,
                        source: Box::new(source),
                    })
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(KeyControlError::NoAnswer {
                        tun: tun.clone(),
                        command: name,
                        waited: ANSWER_TIMEOUT,
                    })
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(KeyControlError::Stopped {
                        tun: tun.clone(),
                        command: name,
                    })
                }
            }
        }
        match epochs.split_first() {
            Some((first, rest)) if rest.iter().all(|e| e == first) => Ok(*first),
            _ => Err(KeyControlError::OutOfStep {
                command: name,
                epochs,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{CipherSuite, CryptoChoice, KeyBits};
    use tunnel_proto::{Implementation, KeyDirection};

    fn endpoint() -> Endpoint {
        let imp = Implementation::new(CryptoChoice::Auto).unwrap();
        let key = StaticKey::generate().unwrap();
        Endpoint::new(
            CipherSuite::AesGcm { key: KeyBits::Aes256 },
            imp,
            &key,
            KeyDirection::Normal,
        )
        .unwrap()
    }

    /// A stand-in for the tunnel thread: the loop's own check-and-serve, with a poll on the
    /// eventfd where the real loop sleeps, until stopped.
    fn serving(control: Arc<Control>) -> std::thread::JoinHandle<(u8, u32)> {
        std::thread::spawn(move || {
            let _close = CloseOnExit(&control);
            let mut endpoint = endpoint();
            let mut switches = 0;
            while !control.stop_requested() {
                if control.pending() {
                    control.serve(&mut endpoint, || switches += 1);
                }
                let mut fd = libc::pollfd {
                    fd: control.wake_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut fd, 1, -1) };
                control.drain_wake();
            }
            (endpoint.epochs().send, switches)
        })
    }

    /// Commands reach a sleeping loop, are answered in order, and a refused step says why;
    /// after the stop every command is refused at once.
    #[test]
    fn commands_are_answered_by_the_loop_and_refused_after_it_stops() {
        let control = Arc::new(Control::new().unwrap());
        let thread = serving(control.clone());
        let keys = KeyControl::new(vec![("t0".into(), control.clone())]);
        let other = keys.clone();
        for epoch in 1..=3u8 {
            let key = StaticKey::generate().unwrap();
            assert_eq!(keys.install_next(&key).unwrap(), epoch);
            assert_eq!(other.switch_send().unwrap(), epoch);
            assert_eq!(keys.retire_previous().unwrap(), epoch - 1);
        }
        let e = keys.switch_send().unwrap_err();
        assert!(matches!(e, KeyControlError::Refused { .. }), "{e}");
        assert!(e.to_string().contains("switch_send refused"), "{e}");
        control.request_stop();
        assert_eq!(thread.join().unwrap(), (3, 3));
        let started = Instant::now();
        let e = keys.retire_previous().unwrap_err();
        assert!(matches!(e, KeyControlError::Stopped { .. }), "{e}");
        assert!(started.elapsed() < ANSWER_TIMEOUT);
    }

    /// A thread that never serves: the asker gets a clear error after the timeout, not a hang.
    #[test]
    fn a_thread_that_does_not_answer_is_an_error_after_the_timeout() {
        let control = Arc::new(Control::new().unwrap());
        let keys = KeyControl::new(vec![("stuck".into(), control)]);
        let started = Instant::now();
        let e = keys.switch_send().unwrap_err();
        assert!(matches!(e, KeyControlError::NoAnswer { .. }), "{e}");
        assert!(
            e.to_string().contains("tunnel stuck: no answer to switch_send"),
            "{e}"
        );
        assert!(started.elapsed() >= ANSWER_TIMEOUT);
    }

    /// Two threads behind one handle (a multi-queue end) take each step together.
    #[test]
    fn a_joined_handle_steps_every_thread() {
        let controls: Vec<_> = (0..2).map(|_| Arc::new(Control::new().unwrap())).collect();
        let threads: Vec<_> = controls.iter().map(|c| serving(c.clone())).collect();
        let keys = KeyControl::join(
            controls
                .iter()
                .enumerate()
                .map(|(i, c)| KeyControl::new(vec![(format!("q{i}"), c.clone())])),
        );
        assert_eq!(keys.threads(), 2);
        keys.install_next(&StaticKey::generate().unwrap()).unwrap();
        assert_eq!(keys.switch_send().unwrap(), 1);
        for c in &controls {
            c.request_stop();
        }
        for t in threads {
            assert_eq!(t.join().unwrap(), (1, 1));
        }
    }
}
