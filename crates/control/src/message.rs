//! The messages of protocol [`VERSION`], their JSON encoding inside the encrypted session,
//! and the bounded decoder (the fuzz target's subject).
//!
//! A conversation (client = `run --peer`, server = `serve`):
//!
//! ```text
//! client: Hello{request, keys} server: Ready{environment, end} | Busy | Refused{kind, reason}
//! client: Receive{attempt}     server: Listening, then Received{transfer} | Failed{reason}
//! client: Send{attempt}        server: Sent{transfer} | Failed{reason}     (--reverse)
//! client: ReceiveDatagrams{trial} server: Listening; client sends, then
//! client: DatagramsSent{sent}  server: DatagramsReceived{received} | Failed{reason}
//! client: SendDatagrams{trial} server: DatagramsSent{sent} | Failed{reason} (--udp --reverse)
//! client: Finish               server: Finished{details}
//! ```
//!
//! A UDP run (`udp` in the request) makes trials instead of transfers; with `latency` the
//! server echoes the client's probes from its `Ready` to its `Finished`.
//!
//! The hello carries a [`PeerRequest`], never a plan: the server checks it against its own
//! limits and derives its end itself (see [`crate::request`]). Anything else, or silence
//! past a step's timeout, ends the run; the server then removes what it installed. Every message travels in an [`Envelope`] carrying the version, and a
//! peer of another version is told apart from a malformed message.

use std::fmt;

use model::packets::{ReceivedDatagrams, SentDatagrams};
use model::{Environment, TransferSide};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zeroize::Zeroizing;

use crate::noise::MAX_PLAINTEXT;
use crate::request::{PeerRequest, ServerEnd, TrialRequest};
use crate::ControlError;

/// Protocol version; bumped on any incompatible change to [`Message`] or to the data
/// streams the run exchanges. Version 2: the hello carries a request instead of the
/// client's whole plan. Version 3: the data streams carry payload format 2 (stream header
/// version 2, see crate `traffic`), so a client and a server of different payloads refuse
/// each other at the hello, not at the first stream. Version 4: UDP trials and latency
/// probes (the request's `udp` and `latency`, the datagram messages). Version 5: payload
/// format 3 (stream header version 3). Version 6: the client's latency probes come from the
/// probe port (the one after the data ports) on its data address, and the server's
/// responder echoes only those.
pub const VERSION: u16 = 6;
/// Largest encoded message: what fits one Noise message with its tag.
pub const MAX_MESSAGE: usize = MAX_PLAINTEXT;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub v: u16,
    pub msg: Message,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Client: what it asks for, and the run's key material.
    Hello { request: PeerRequest, keys: RunKeys },
    /// Server: its end is up, as it decided it; its environment goes into the client's report.
    Ready {
        environment: Box<Environment>,
        end: ServerEnd,
    },
    /// Server: another run is in progress.
    Busy,
    /// Server: it will not do this run, and why.
    Refused { kind: RefusalKind, reason: String },
    /// Client: bind the receiver for transfer `attempt` (client sends).
    Receive { attempt: u32 },
    /// Server: the receiver is bound; the client may start sending.
    Listening,
    /// Server: what its receiver measured.
    Received { transfer: TransferSide },
    /// Client: send transfer `attempt` to the client's receiver (`--reverse`).
    Send { attempt: u32 },
    /// Server: what its sender measured.
    Sent { transfer: TransferSide },
    /// Client: receive UDP trial `trial` (the client sends; `DatagramsSent` ends it).
    ReceiveDatagrams { trial: TrialRequest },
    /// Client: send UDP trial `trial` to the client's receiver (`--reverse`).
    SendDatagrams { trial: TrialRequest },
    /// Either end: what its sender did in the trial; from the client, also "drain and count".
    DatagramsSent { sent: SentDatagrams },
    /// Server: what its receiver counted in the trial.
    DatagramsReceived { received: ReceivedDatagrams },
    /// Server: a step failed; its end is being removed.
    Failed { reason: String },
    /// Client: the transfers are done; report and tear down.
    Finish,
    /// Server: its end's evidence for the report; its end is down.
    Finished { details: model::evidence::EndEvidence },
}

impl Message {
    /// Short name for logs (never the contents: they may hold keys).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::Ready { .. } => "ready",
            Message::Busy => "busy",
            Message::Refused { .. } => "refused",
            Message::Receive { .. } => "receive",
            Message::Listening => "listening",
            Message::Received { .. } => "received",
            Message::Send { .. } => "send",
            Message::Sent { .. } => "sent",
            Message::ReceiveDatagrams { .. } => "receive_datagrams",
            Message::SendDatagrams { .. } => "send_datagrams",
            Message::DatagramsSent { .. } => "datagrams_sent",
            Message::DatagramsReceived { .. } => "datagrams_received",
            Message::Failed { .. } => "failed",
            Message::Finish => "finish",
            Message::Finished { .. } => "finished",
        }
    }
}

/// Why a server refused, so the client exits with the matching code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// The plan is not one a server runs (exit 2 at the client).
    Usage,
    /// The server's host lacks a capability, e.g. ESP (exit 3).
    Capability,
    /// Setting up the server's end failed (exit 1).
    Failed,
}

/// Key material the client generated for this run. Only what the backend needs is present.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xfrm: Option<XfrmKeys>,
    /// The userspace tunnel's 256-byte static key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<KeyMaterial>,
}

/// The SAs' identifiers and keys (both directions share them, as in the local lab).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XfrmKeys {
    pub reqid: u32,
    /// SPI of the SA carrying end a → end b traffic, as `xfrm::RunIds` names it: the client
    /// is end a, the server end b. The wire keeps protocol version 2's names.
    #[serde(rename = "spi_client_to_server")]
    pub spi_a_to_b: u32,
    #[serde(rename = "spi_server_to_client")]
    pub spi_b_to_a: u32,
    /// AES key (for GCM followed by the 4-byte salt).
    pub enc: KeyMaterial,
    pub auth: Option<KeyMaterial>,
}

/// Secret bytes: hex on the wire (inside the encrypted session only), wiped on drop,
/// redacted in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyMaterial(Zeroizing<Vec<u8>>);

impl KeyMaterial {
    pub fn new(bytes: &[u8]) -> KeyMaterial {
        KeyMaterial(Zeroizing::new(bytes.to_vec()))
    }

    pub fn random(len: usize) -> Result<KeyMaterial, getrandom::Error> {
        let mut v = Zeroizing::new(vec![0u8; len]);
        getrandom::fill(&mut v)?;
        Ok(KeyMaterial(v))
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} secret bytes>", self.0.len())
    }
}

impl Serialize for KeyMaterial {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut hex = Zeroizing::new(String::with_capacity(self.0.len() * 2));
        for b in self.0.iter() {
            hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(b & 0xf)]));
        }
        s.serialize_str(&hex)
    }
}

impl<'de> Deserialize<'de> for KeyMaterial {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyMaterial, D::Error> {
        struct Hex;
        impl serde::de::Visitor<'_> for Hex {
            type Value = KeyMaterial;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an even number of hex digits (at most 1024)")
            }
            // Decoded straight from the (wiped) plaintext buffer: no intermediate String.
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KeyMaterial, E> {
                if v.len() % 2 != 0 || v.len() > 1024 {
                    return Err(E::invalid_length(v.len(), &self));
                }
                let mut out = Zeroizing::new(Vec::with_capacity(v.len() / 2));
                for pair in v.as_bytes().chunks(2) {
                    match (crate::psk::hex_value(pair[0]), crate::psk::hex_value(pair[1])) {
                        (Some(h), Some(l)) => out.push(h << 4 | l),
                        _ => return Err(E::custom("key material is not hexadecimal")),
                    }
                }
                Ok(KeyMaterial(out))
            }
        }
        d.deserialize_str(Hex)
    }
}

/// Encodes a message of this version. The buffer is sized once, so the serializer never
/// reallocates and leaves no unwiped copy of key bytes behind.
pub fn encode(msg: &Message) -> Result<Zeroizing<Vec<u8>>, ControlError> {
    #[derive(Serialize)]
    struct Out<'a> {
        v: u16,
        msg: &'a Message,
    }
    let mut buf = Zeroizing::new(Vec::with_capacity(MAX_MESSAGE + 1));
    serde_json::to_writer(&mut *buf, &Out { v: VERSION, msg }).map_err(|e| ControlError::Malformed {
        reason: format!("encoding {}: {e}", msg.kind()),
    })?;
    if buf.len() > MAX_MESSAGE {
        return Err(ControlError::Oversized {
            len: buf.len(),
            max: MAX_MESSAGE,
        });
    }
    Ok(buf)
}

/// Decodes a plaintext message: refuses oversized input, other versions (by name) and
/// anything that is not exactly a message of this version.
pub fn decode(plain: &[u8]) -> Result<Message, ControlError> {
    if plain.len() > MAX_MESSAGE {
        return Err(ControlError::Oversized {
            len: plain.len(),
            max: MAX_MESSAGE,
        });
    }
    #[derive(Deserialize)]
    struct VersionOnly {
        v: u16,
    }
    let malformed = |e: serde_json::Error| ControlError::Malformed {
        // serde_json's message quotes unknown field and variant names: the peer's text.
        reason: crate::text::untrusted(&e.to_string()),
    };
    let VersionOnly { v } = serde_json::from_slice(plain).map_err(malformed)?;
    if v != VERSION {
        return Err(ControlError::Version {
            got: v,
            supported: VERSION,
        });
    }
    let env: Envelope = serde_json::from_slice(plain).map_err(malformed)?;
    Ok(env.msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{Backend, CipherSuite, CryptoChoice};

    pub(crate) fn request() -> PeerRequest {
        PeerRequest {
            backend: Backend::Userspace,
            suite: CipherSuite::AesGcm {
                key: model::KeyBits::Aes256,
            },
            crypto: CryptoChoice::Auto,
            bytes: 1_000_000,
            streams: 2,
            repeat: 1,
            reverse: true,
            data_port: 5201,
            seed: u64::MAX,
            link_mtu: 1500,
            tunnel_threads: 2,
            family: model::Family::Ipv6,
            encap: Some(model::Encap::EspInUdp { port: 4500 }),
            udp: None,
            latency: false,
        }
    }

    fn hello() -> Message {
        Message::Hello {
            request: request(),
            keys: RunKeys {
                xfrm: Some(XfrmKeys {
                    reqid: 0x1a5001,
                    spi_a_to_b: 0x1a500101,
                    spi_b_to_a: 0x1a500102,
                    enc: KeyMaterial::new(&[0xaa; 32]),
                    auth: Some(KeyMaterial::new(&[0x55; 32])),
                }),
                tunnel: Some(KeyMaterial::new(&[7; 256])),
            },
        }
    }

    #[test]
    fn every_message_round_trips() {
        let t = TransferSide {
            bytes: 5,
            seconds: 0.5,
            cpu: model::CpuUsage::new(0.1, 0.2, 0.5),
            threads: 2,
        };
        for m in [
            hello(),
            Message::Ready {
                environment: Box::new(Environment::detect()),
                end: ServerEnd {
                    tunnel: crate::request::choose_tunnel_net(&[]),
                    link_mtu: 1400,
                    max_pps: Some(2e6),
                },
            },
            Message::Busy,
            Message::Refused {
                kind: RefusalKind::Capability,
                reason: "no ESP".into(),
            },
            Message::Receive { attempt: 1 },
            Message::Listening,
            Message::Received { transfer: t },
            Message::Send { attempt: 2 },
            Message::Sent { transfer: t },
            Message::Failed { reason: "x".into() },
            Message::Finish,
            Message::Finished {
                details: model::evidence::EndEvidence::None,
            },
        ] {
            let bytes = encode(&m).unwrap();
            assert_eq!(decode(&bytes).unwrap(), m, "{}", m.kind());
        }
    }

    #[test]
    fn keys_are_hex_on_the_wire_and_redacted_in_debug() {
        let bytes = encode(&hello()).unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.contains(&"aa".repeat(32)));
        assert!(!format!("{:?}", hello()).contains("aaaa"));
    }

    /// The SPI fields were renamed to the lab's a/b vocabulary in Rust only: a version 2
    /// peer must still read and write the names it knows.
    #[test]
    fn spis_keep_their_version_2_wire_names() {
        let bytes = encode(&hello()).unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(text.contains(r#""spi_client_to_server":441450753"#), "{text}");
        assert!(text.contains(r#""spi_server_to_client":441450754"#), "{text}");
        assert!(!text.contains("spi_a_to_b"), "{text}");
    }

    #[test]
    fn other_versions_are_named() {
        let e = decode(br#"{"v":1,"msg":{"type":"busy"}}"#).unwrap_err();
        assert!(
            matches!(
                e,
                ControlError::Version {
                    got: 1,
                    supported: VERSION
                }
            ),
            "{e}"
        );
    }

    /// A peer of the release before payload format 3 speaks version 4: refused at its hello
    /// with both versions named, before any stream of the other payload is sent.
    #[test]
    fn a_peer_of_the_payload_format_2_release_is_refused() {
        let mut old = serde_json::to_value(Envelope {
            v: VERSION,
            msg: hello(),
        })
        .unwrap();
        old["v"] = 4.into();
        let e = decode(&serde_json::to_vec(&old).unwrap()).unwrap_err();
        assert!(
            matches!(
                e,
                ControlError::Version {
                    got: 4,
                    supported: VERSION
                }
            ),
            "{e}"
        );
        let message = e.to_string();
        assert!(
            message.contains("version 4") && message.contains("speaks version 6"),
            "{message}"
        );
        assert!(message.contains("same release on both hosts"), "{message}");
    }

    #[test]
    fn malformed_and_oversized_input_is_refused() {
        for bad in [
            &b""[..],
            b"null",
            b"{}",
            br#"{"v":6}"#,
            br#"{"v":6,"msg":{"type":"launch_missiles"}}"#,
            br#"{"v":6,"msg":{"type":"receive","attempt":1,"extra":1}}"#,
            br#"{"v":6,"msg":{"type":"receive","attempt":-1}}"#,
            br#"{"v":6,"msg":{"type":"hello","plan":{},"keys":{}}}"#,
            b"\xff\xfe",
        ] {
            assert!(decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let big = vec![b' '; MAX_MESSAGE + 1];
        assert!(matches!(decode(&big), Err(ControlError::Oversized { .. })));
        let huge = Message::Failed {
            reason: "x".repeat(MAX_MESSAGE),
        };
        assert!(matches!(encode(&huge), Err(ControlError::Oversized { .. })));
    }

    #[test]
    fn odd_or_non_hex_key_material_is_refused() {
        for bad in ["abc", "zz", &"00".repeat(513)] {
            let text = format!(
                r#"{{"v":6,"msg":{{"type":"hello","request":{},"keys":{{"tunnel":"{bad}"}}}}}}"#,
                serde_json::to_string(&request()).unwrap()
            );
            assert!(decode(text.as_bytes()).is_err(), "{bad}");
        }
    }

    /// A rogue key holder's hello with the fields of version 1 (addresses, prefix, MTU,
    /// the whole plan) names what is wrong instead of being applied.
    #[test]
    fn a_hello_with_addresses_or_a_plan_is_malformed() {
        let mut good = serde_json::to_value(request()).unwrap();
        good["bytes"] = 5.into();
        for (field, value) in [
            (
                "addressing",
                serde_json::json!({"inner_b": "200.0.0.1", "prefix_len": 1}),
            ),
            ("prefix_len", 0.into()),
            ("inner_a", "127.0.0.1".into()),
            ("plan", serde_json::json!({})),
        ] {
            let mut r = good.clone();
            r[field] = value;
            let text = serde_json::json!({"v": VERSION, "msg": {"type": "hello", "request": r, "keys": {}}});
            let e = decode(text.to_string().as_bytes()).unwrap_err();
            assert!(e.to_string().contains(field), "{field}: {e}");
        }
        for (field, value) in [("data_port", 70_000), ("streams", -1), ("link_mtu", -5)] {
            let mut r = good.clone();
            r[field] = value.into();
            let text = serde_json::json!({"v": VERSION, "msg": {"type": "hello", "request": r, "keys": {}}});
            assert!(decode(text.to_string().as_bytes()).is_err(), "{field}");
        }
    }
}
