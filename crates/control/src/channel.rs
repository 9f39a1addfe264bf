//! The channel over a byte stream (a `TcpStream` in the binary, an in-memory pipe in tests):
//! frames in and out, the handshake within a deadline, and receives that are cancel-safe so
//! a caller can `select!` on "the peer said something (or hung up)" while it works.
//!
//! No read or write waits on the peer for ever: a send that the peer does not take (it stops
//! reading, its window stays shut) fails after [`SEND_TIMEOUT`], a receive after the caller's
//! limit, and neither waits past the channel's deadline ([`Channel::set_deadline`], a server's
//! `--max-run-time`), whatever the peer does.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::frame::{self, MAX_FRAME, MAX_HANDSHAKE_FRAME};
use crate::message::{self, Message};
use crate::noise::{Initiator, Responder, Session};
use crate::{ControlError, Psk};

/// Bytes read per call; a frame is at most 64 KiB, so a few calls at most.
const READ_CHUNK: usize = 16 * 1024;

/// Longest a send waits for the peer to take its bytes: a control message is small, so a
/// peer that takes none for this long has stopped reading.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// What a server sends instead of its handshake answer to a connection it turns away
/// unread: this prefix, then why, in one frame. A Noise answer begins with a random
/// ephemeral key, never with these bytes.
pub const TURNED_AWAY: &[u8] = b"ipsec-lab: turned away: ";

/// The frame that tells a client it was turned away and why, cut to fit a handshake frame.
pub fn turned_away_frame(reason: &str) -> Vec<u8> {
    let mut body = TURNED_AWAY.to_vec();
    body.extend_from_slice(reason.as_bytes());
    body.truncate(MAX_HANDSHAKE_FRAME);
    frame::encode(&body).expect("a handshake frame is small")
}

pub struct Channel<S> {
    stream: S,
    session: Session,
    /// Bytes read but not yet a whole frame; kept across cancelled receives.
    pending: Vec<u8>,
    /// No send or receive waits past this.
    until: Option<Instant>,
}

/// Runs `fut` for at most `limit` (failing with `on_limit`), and not past `until` (failing
/// with [`ControlError::Deadline`]).
async fn bounded<T>(
    until: Option<Instant>,
    limit: Duration,
    on_limit: ControlError,
    during: &'static str,
    fut: impl std::future::Future<Output = Result<T, ControlError>>,
) -> Result<T, ControlError> {
    let left = until.map(|u| u.saturating_duration_since(Instant::now()));
    match left {
        Some(left) if left < limit => tokio::time::timeout(left, fut)
            .await
            .unwrap_or(Err(ControlError::Deadline { during })),
        _ => tokio::time::timeout(limit, fut).await.unwrap_or(Err(on_limit)),
    }
}

async fn deadline<T>(
    limit: Duration,
    during: &'static str,
    fut: impl std::future::Future<Output = Result<T, ControlError>>,
) -> Result<T, ControlError> {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or(Err(ControlError::Timeout {
            during,
            seconds: limit.as_secs(),
        }))
}

/// Reads until `pending` holds a whole frame of at most `max` bytes and returns its body.
/// Cancel-safe: bytes read so far stay in `pending`.
async fn read_frame<S: AsyncRead + Unpin>(
    stream: &mut S,
    pending: &mut Vec<u8>,
    max: usize,
    during: &'static str,
) -> Result<Vec<u8>, ControlError> {
    loop {
        if let Some(span) = frame::split(pending, max)? {
            let body = pending[frame::HEADER_LEN..span.end].to_vec();
            pending.drain(..span.end);
            return Ok(body);
        }
        pending.reserve(READ_CHUNK);
        // `read_buf` appends only what arrived, so a cancelled call leaves `pending` whole.
        let n = stream
            .read_buf(pending)
            .await
            .map_err(|source| ControlError::Io { during, source })?;
        if n == 0 {
            return Err(ControlError::Closed { during });
        }
    }
}

async fn write_frame<S: AsyncWrite + Unpin>(
    stream: &mut S,
    body: &[u8],
    during: &'static str,
) -> Result<(), ControlError> {
    let framed = frame::encode(body)?;
    stream
        .write_all(&framed)
        .await
        .map_err(|source| ControlError::Io { during, source })?;
    stream
        .flush()
        .await
        .map_err(|source| ControlError::Io { during, source })
}

impl<S: AsyncRead + AsyncWrite + Unpin> Channel<S> {
    /// Client side: handshake within `limit`.
    pub async fn initiate(mut stream: S, psk: &Psk, limit: Duration) -> Result<Channel<S>, ControlError> {
        deadline(limit, "handshake", async {
            let (init, first) = Initiator::start(psk)?;
            write_frame(&mut stream, &first, "handshake").await?;
            let mut pending = Vec::new();
            // An SSH or HTTP server answers with text whose first 4 bytes read as a giant length.
            let answer = read_frame(&mut stream, &mut pending, MAX_HANDSHAKE_FRAME, "handshake")
                .await
                .map_err(|e| match e {
                    ControlError::Oversized { .. } => ControlError::NotIpsecLab,
                    other => other,
                })?;
            if let Some(reason) = answer.strip_prefix(TURNED_AWAY) {
                return Err(ControlError::TurnedAway {
                    reason: crate::text::untrusted(&String::from_utf8_lossy(reason)),
                });
            }
            let session = init.finish(&answer)?;
            Ok(Channel {
                stream,
                session,
                pending,
                until: None,
            })
        })
        .await
    }

    /// Server side: handshake within `limit`. Exactly one frame is read before the key is
    /// checked; a peer without it gets no answer and nothing else it sent is looked at.
    pub async fn respond(mut stream: S, psk: &Psk, limit: Duration) -> Result<Channel<S>, ControlError> {
        deadline(limit, "handshake", async {
            let mut pending = Vec::new();
            let first = read_frame(&mut stream, &mut pending, MAX_HANDSHAKE_FRAME, "handshake").await?;
            let (session, answer) = Responder::respond(psk, &first)?;
            write_frame(&mut stream, &answer, "handshake").await?;
            Ok(Channel {
                stream,
                session,
                pending,
                until: None,
            })
        })
        .await
    }

    /// From now on no send or receive waits past `until` (None: only their own limits).
    /// A send cut short leaves a partial frame: the channel is then done with.
    pub fn set_deadline(&mut self, until: Option<Instant>) {
        self.until = until;
    }

    /// Sends `msg`, within [`SEND_TIMEOUT`] and the deadline.
    pub async fn send(&mut self, msg: &Message) -> Result<(), ControlError> {
        let plain = message::encode(msg)?;
        self.send_plaintext(&plain).await
    }

    /// Sends bytes encoded by the caller, not by [`message::encode`]: for messages
    /// crafted by hand, as a hostile client does in the server's tests.
    pub async fn send_plaintext(&mut self, plain: &[u8]) -> Result<(), ControlError> {
        const DURING: &str = "sending a control message";
        let body = self.session.seal(plain)?;
        let stalled = ControlError::Stalled {
            during: DURING,
            seconds: SEND_TIMEOUT.as_secs(),
        };
        bounded(
            self.until,
            SEND_TIMEOUT,
            stalled,
            DURING,
            write_frame(&mut self.stream, &body, DURING),
        )
        .await
    }

    /// The next message, or an error if none comes within `limit` (or by the deadline).
    pub async fn recv(&mut self, limit: Duration, during: &'static str) -> Result<Message, ControlError> {
        let silent = ControlError::Timeout {
            during,
            seconds: limit.as_secs(),
        };
        let until = self.until;
        bounded(until, limit, silent, during, self.recv_once(during)).await
    }

    /// The next message, however long it takes up to the deadline. Cancel-safe: dropping
    /// the future loses nothing, so it can sit in a `select!` beside other work.
    pub async fn recv_any(&mut self, during: &'static str) -> Result<Message, ControlError> {
        match self.until {
            Some(until) => tokio::time::timeout_at(until, self.recv_once(during))
                .await
                .unwrap_or(Err(ControlError::Deadline { during })),
            None => self.recv_once(during).await,
        }
    }

    async fn recv_once(&mut self, during: &'static str) -> Result<Message, ControlError> {
        let body = read_frame(&mut self.stream, &mut self.pending, MAX_FRAME, during).await?;
        message::decode(&self.session.open(&body)?)
    }

    pub fn get_ref(&self) -> &S {
        &self.stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::RefusalKind;
    use tokio::io::{duplex, DuplexStream};

    const LIMIT: Duration = Duration::from_secs(5);

    type Connected = (
        Result<Channel<DuplexStream>, ControlError>,
        Result<Channel<DuplexStream>, ControlError>,
    );

    async fn connected(k1: &Psk, k2: &Psk) -> Connected {
        connected_through(k1, k2, 1 << 20).await
    }

    /// Over a pipe that holds `buffer` bytes each way.
    async fn connected_through(k1: &Psk, k2: &Psk, buffer: usize) -> Connected {
        let (a, b) = duplex(buffer);
        let (k1, k2) = (k1.clone(), k2.clone());
        let server = tokio::spawn(async move { Channel::respond(b, &k2, LIMIT).await });
        let client = Channel::initiate(a, &k1, LIMIT).await;
        (client, server.await.unwrap())
    }

    #[tokio::test]
    async fn messages_flow_both_ways() {
        let k = Psk::generate().unwrap();
        let (c, s) = connected(&k, &k).await;
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        c.send(&Message::Receive { attempt: 1 }).await.unwrap();
        c.send(&Message::Finish).await.unwrap();
        assert_eq!(s.recv(LIMIT, "t").await.unwrap(), Message::Receive { attempt: 1 });
        assert_eq!(s.recv(LIMIT, "t").await.unwrap(), Message::Finish);
        let refusal = Message::Refused {
            kind: RefusalKind::Usage,
            reason: "r".into(),
        };
        s.send(&refusal).await.unwrap();
        assert_eq!(c.recv(LIMIT, "t").await.unwrap(), refusal);
    }

    #[tokio::test]
    async fn a_client_turned_away_is_told_why() {
        let k = Psk::generate().unwrap();
        let (a, mut b) = duplex(1 << 20);
        b.write_all(&turned_away_frame("too many waiting\n\u{1b}[31m"))
            .await
            .unwrap();
        let e = Channel::initiate(a, &k, LIMIT).await.err().unwrap();
        match e {
            ControlError::TurnedAway { reason } => assert_eq!(reason, r"too many waiting\n\u{1b}[31m"),
            other => panic!("{other}"),
        }
        let long = turned_away_frame(&"x".repeat(500));
        assert_eq!(long.len(), frame::HEADER_LEN + MAX_HANDSHAKE_FRAME);
    }

    #[tokio::test]
    async fn wrong_key_fails_both_sides_and_the_server_reads_one_frame_only() {
        let (a, b) = (Psk::generate().unwrap(), Psk::generate().unwrap());
        let (mut client_io, server_io) = duplex(1 << 20);
        // The client sends its first message and, right behind it, a second frame that
        // would be oversized: the server must fail on the key, not on the second frame.
        let (_init, first) = Initiator::start(&a).unwrap();
        let mut bytes = frame::encode(&first).unwrap();
        bytes.extend_from_slice(&1_000_000u32.to_be_bytes());
        client_io.write_all(&bytes).await.unwrap();
        let e = Channel::respond(server_io, &b, LIMIT).await.err().unwrap();
        assert!(matches!(e, ControlError::Authentication), "{e}");

        let (c, s) = connected(&a, &b).await;
        assert!(matches!(s.err().unwrap(), ControlError::Authentication));
        // The server hung up without answering: the client learns only that.
        assert!(matches!(c.err().unwrap(), ControlError::Closed { .. }));
    }

    #[tokio::test]
    async fn garbage_is_refused() {
        let k = Psk::generate().unwrap();
        for junk in [
            vec![0u8; 4],
            vec![0, 0, 0, 48],
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        ] {
            let (mut c, s) = duplex(1 << 16);
            c.write_all(&junk).await.unwrap();
            let mut junk48 = vec![0, 0, 0, 48];
            junk48.extend_from_slice(&[0x41; 48]);
            c.write_all(&junk48).await.unwrap();
            drop(c);
            assert!(Channel::respond(s, &k, LIMIT).await.is_err());
        }
    }

    /// Regression: `--peer` at an SSH server said "a frame of 1397966893 bytes announced".
    #[tokio::test]
    async fn a_client_at_another_kind_of_server_says_so() {
        let k = Psk::generate().unwrap();
        for banner in [&b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"[..], b"\0\0\0\x05hello"] {
            let (c, mut s) = duplex(1 << 16);
            s.write_all(banner).await.unwrap();
            let e = Channel::initiate(c, &k, LIMIT).await.err().unwrap();
            assert!(matches!(e, ControlError::NotIpsecLab), "{e}");
            assert!(e.to_string().contains("not an ipsec-lab server"));
        }
    }

    #[tokio::test]
    async fn an_announced_giant_is_refused_without_waiting_for_its_body() {
        let k = Psk::generate().unwrap();
        let (mut c, s) = duplex(1 << 16);
        c.write_all(&70_000u32.to_be_bytes()).await.unwrap();
        // `c` stays open: the refusal must come from the header, not from end of stream.
        let e = Channel::respond(s, &k, LIMIT).await.err().unwrap();
        assert!(matches!(e, ControlError::Oversized { len: 70_000, .. }), "{e}");
        drop(c);
    }

    #[tokio::test]
    async fn oversized_frames_after_the_handshake_are_refused() {
        let k = Psk::generate().unwrap();
        let (c, s) = connected(&k, &k).await;
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        c.stream
            .write_all(&(MAX_FRAME as u32 + 1).to_be_bytes())
            .await
            .unwrap();
        let e = s.recv(LIMIT, "t").await.unwrap_err();
        assert!(matches!(e, ControlError::Oversized { .. }), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_times_out() {
        let k = Psk::generate().unwrap();
        let (c, s) = duplex(1 << 16);
        let e = Channel::respond(s, &k, LIMIT).await.err().unwrap();
        assert!(matches!(e, ControlError::Timeout { seconds: 5, .. }), "{e}");
        // Half a handshake message, then silence.
        let (mut c2, s2) = duplex(1 << 16);
        c2.write_all(&[0, 0, 0, 48, 1, 2, 3]).await.unwrap();
        let e = Channel::respond(s2, &k, LIMIT).await.err().unwrap();
        assert!(matches!(e, ControlError::Timeout { .. }), "{e}");
        drop((c, c2));
    }

    #[tokio::test(start_paused = true)]
    async fn receives_survive_cancellation() {
        let k = Psk::generate().unwrap();
        let (c, s) = connected(&k, &k).await;
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        // Half a frame arrives, then the receive is cancelled by a timeout.
        let body = c
            .session
            .seal(&message::encode(&Message::Finish).unwrap())
            .unwrap();
        let framed = frame::encode(&body).unwrap();
        c.stream.write_all(&framed[..5]).await.unwrap();
        assert!(s.recv(Duration::from_millis(100), "t").await.is_err());
        c.stream.write_all(&framed[5..]).await.unwrap();
        assert_eq!(s.recv(LIMIT, "t").await.unwrap(), Message::Finish);
    }

    /// Issue 42: a client that stopped reading held the server's send (and so its only run
    /// slot) for as long as it kept its window shut. A send now fails after SEND_TIMEOUT,
    /// and no send or receive outlives the channel's deadline.
    #[tokio::test(start_paused = true)]
    async fn a_peer_that_stops_reading_cannot_hold_a_send_or_a_receive() {
        let k = Psk::generate().unwrap();
        let (c, s) = connected_through(&k, &k, 256).await;
        let (_client_never_reads, mut s) = (c.unwrap(), s.unwrap());
        let big = Message::Failed {
            reason: "x".repeat(1000),
        };
        let start = Instant::now();
        let e = s.send(&big).await.unwrap_err();
        assert!(matches!(e, ControlError::Stalled { seconds: 30, .. }), "{e}");
        assert_eq!(start.elapsed().as_secs(), SEND_TIMEOUT.as_secs());

        let (c, s) = connected_through(&k, &k, 256).await;
        let (_client_never_reads, mut s) = (c.unwrap(), s.unwrap());
        let start = Instant::now();
        s.set_deadline(Some(start + Duration::from_secs(5)));
        let e = s.send(&big).await.unwrap_err();
        assert!(matches!(e, ControlError::Deadline { .. }), "{e}");
        assert_eq!(start.elapsed().as_secs(), 5);
        // Past the deadline, a receive fails at once, bounded or not.
        let e = s.recv_any("t").await.unwrap_err();
        assert!(matches!(e, ControlError::Deadline { .. }), "{e}");
        let e = s.recv(LIMIT, "t").await.unwrap_err();
        assert!(matches!(e, ControlError::Deadline { .. }), "{e}");
        assert_eq!(start.elapsed().as_secs(), 5);
    }
}
