//! The little of charon's VICI protocol a rekey needs, spoken directly on its socket: a
//! `swanctl` process per command or poll would compete for a user-mode Linux guest's one
//! CPU with the transfer being measured, and lengthen what it measures.
//!
//! A packet is a 32-bit big-endian length and a payload: an operation type, for a command
//! or an event its name (8-bit length), then a message of elements (key-value: 8-bit key
//! length, 16-bit value length). See strongSwan's `src/libcharon/plugins/vici/README.md`.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

const CMD_REQUEST: u8 = 0;
const CMD_RESPONSE: u8 = 1;
const CMD_UNKNOWN: u8 = 2;
const EVENT_REGISTER: u8 = 3;
const EVENT_CONFIRM: u8 = 5;
const EVENT_UNKNOWN: u8 = 6;
const EVENT: u8 = 7;
const KEY_VALUE: u8 = 3;
/// [`Vici::next`]'s error when nothing came by its deadline.
pub const NO_ANSWER: &str = "VICI: no answer in time";
/// How long the rest of a packet may take once its length has arrived.
const PACKET_TIMEOUT: Duration = Duration::from_secs(5);

/// A session with one charon, registered for the events it waits for.
pub struct Vici {
    stream: UnixStream,
}

/// What came back: a command's response (its key-values) or an event's name and its
/// top-level key-values (`up = yes` of an `ike-updown`).
#[derive(Debug, PartialEq, Eq)]
pub enum Packet {
    Response(Vec<(String, String)>),
    Event(String, Vec<(String, String)>),
}

impl Vici {
    /// Connects and registers for `events` (e.g. `ike-rekey`).
    pub fn connect(socket: &Path, events: &[&str], timeout: Duration) -> Result<Vici, String> {
        let stream =
            UnixStream::connect(socket).map_err(|e| format!("VICI socket {}: {e}", socket.display()))?;
        let mut vici = Vici { stream };
        for event in events {
            vici.send(&named(EVENT_REGISTER, event, &[]))?;
            let deadline = Instant::now() + timeout;
            match vici.receive(deadline)? {
                (EVENT_CONFIRM, _) => {}
                (EVENT_UNKNOWN, _) => return Err(format!("charon has no VICI event {event:?}")),
                (t, _) => {
                    return Err(format!(
                        "VICI: packet type {t} in answer to registering {event:?}"
                    ))
                }
            }
        }
        Ok(vici)
    }

    /// Sends command `name` with `args` (key-values); its response comes through [`Vici::next`].
    pub fn request(&mut self, name: &str, args: &[(&str, &str)]) -> Result<(), String> {
        self.send(&named(CMD_REQUEST, name, &message(args)))
    }

    /// The next response or event, by `deadline`.
    pub fn next(&mut self, deadline: Instant) -> Result<Packet, String> {
        loop {
            let (kind, body) = self.receive(deadline)?;
            match kind {
                CMD_RESPONSE => return Ok(Packet::Response(key_values(&body))),
                CMD_UNKNOWN => return Err("charon does not know the VICI command".into()),
                EVENT => {
                    let n = *body.first().ok_or("VICI: an empty event")? as usize;
                    let name = body.get(1..1 + n).ok_or("VICI: a short event")?;
                    let values = key_values(&body[1 + n..]);
                    return Ok(Packet::Event(String::from_utf8_lossy(name).into(), values));
                }
                _ => continue,
            }
        }
    }

    fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        let mut packet = (payload.len() as u32).to_be_bytes().to_vec();
        packet.extend_from_slice(payload);
        self.stream
            .write_all(&packet)
            .map_err(|e| format!("VICI write: {e}"))
    }

    fn receive(&mut self, deadline: Instant) -> Result<(u8, Vec<u8>), String> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(NO_ANSWER.into());
        }
        self.stream
            .set_read_timeout(Some(left))
            .map_err(|e| format!("VICI: {e}"))?;
        let mut len = [0u8; 4];
        match self.stream.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(NO_ANSWER.into())
            }
            Err(e) => return Err(format!("VICI read: {e}")),
        }
        // The rest of a packet charon has begun writing.
        self.stream
            .set_read_timeout(Some(PACKET_TIMEOUT))
            .map_err(|e| format!("VICI: {e}"))?;
        let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
        self.stream
            .read_exact(&mut payload)
            .map_err(|e| format!("VICI read: {e}"))?;
        let kind = *payload.first().ok_or("VICI: an empty packet")?;
        Ok((kind, payload[1..].to_vec()))
    }
}

/// An operation with a name (a command, an event registration) and a message.
fn named(kind: u8, name: &str, msg: &[u8]) -> Vec<u8> {
    let mut out = vec![kind, name.len() as u8];
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(msg);
    out
}

/// A message of key-values only.
fn message(args: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in args {
        out.push(KEY_VALUE);
        out.push(k.len() as u8);
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&(v.len() as u16).to_be_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

/// The top-level key-values of a message (sections and lists skipped).
fn key_values(mut msg: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut depth = 0;
    let take = |msg: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        let (head, rest) = (msg.get(..n)?, msg.get(n..)?);
        let head = head.to_vec();
        *msg = rest;
        Some(head)
    };
    while let Some(&kind) = msg.first() {
        msg = &msg[1..];
        let ok = (|| -> Option<()> {
            match kind {
                1 | 4 => {
                    let n = *take(&mut msg, 1)?.first()? as usize;
                    take(&mut msg, n)?;
                    depth += 1;
                }
                2 | 6 => depth -= 1,
                3 => {
                    let n = *take(&mut msg, 1)?.first()? as usize;
                    let key = take(&mut msg, n)?;
                    let l = take(&mut msg, 2)?;
                    let value = take(&mut msg, u16::from_be_bytes([l[0], l[1]]) as usize)?;
                    if depth == 0 {
                        out.push((
                            String::from_utf8_lossy(&key).into(),
                            String::from_utf8_lossy(&value).into(),
                        ));
                    }
                }
                5 => {
                    let l = take(&mut msg, 2)?;
                    take(&mut msg, u16::from_be_bytes([l[0], l[1]]) as usize)?;
                }
                _ => return None,
            }
            Some(())
        })();
        if ok.is_none() {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rekey_request_is_encoded_as_vici_does() {
        let got = named(CMD_REQUEST, "rekey", &message(&[("ike", "lab")]));
        assert_eq!(got, b"\x00\x05rekey\x03\x03ike\x00\x03lab");
    }

    #[test]
    fn a_responses_top_level_key_values_are_read_past_sections() {
        let mut msg = message(&[("success", "yes")]);
        msg.extend_from_slice(b"\x01\x03sub\x03\x01k\x00\x01v\x02");
        msg.extend_from_slice(&message(&[("matches", "1")]));
        assert_eq!(
            key_values(&msg),
            [
                ("success".to_string(), "yes".to_string()),
                ("matches".to_string(), "1".to_string())
            ]
        );
    }
}
