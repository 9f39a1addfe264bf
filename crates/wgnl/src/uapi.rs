//! The cross-platform userspace API (wireguard.com/xplatform): `key=value` lines over a
//! unix socket, keys in hex. wireguard-go serves it at /var/run/wireguard/IFNAME.sock.
//! Pure text here; the caller owns the socket.

use std::time::SystemTime;

use zeroize::Zeroizing;

use crate::config::{AllowedIp, DeviceConfig};
use crate::key::{hex, KeyPair, PublicKey};
use crate::reply::{handshake_time, PeerStats};

/// The `set=1` request for `config`, in the order `wg set` writes it, ending with the blank
/// line that ends a request. Holds the private key: wiped on drop.
pub fn set_request(config: &DeviceConfig) -> Zeroizing<String> {
    let peer = &config.peer;
    let mut s = Zeroizing::new(String::new());
    s.push_str("set=1\n");
    s.push_str(&format!("private_key={}\n", hex(config.key.private())));
    s.push_str(&format!("listen_port={}\n", config.listen_port));
    s.push_str(&format!("public_key={}\n", peer.public_key.hex()));
    s.push_str(&format!("endpoint={}\n", peer.endpoint));
    s.push_str("replace_allowed_ips=true\n");
    for a in &peer.allowed_ips {
        s.push_str(&format!("allowed_ip={}/{}\n", a.addr, a.prefix_len));
    }
    s.push('\n');
    s
}

pub const GET_REQUEST: &str = "get=1\n\n";

/// The `set=1` request that gives a device its key and port and no peer (`replace_peers`:
/// any it had are removed). Holds the private key: wiped on drop.
pub fn device_request(key: &KeyPair, listen_port: u16) -> Zeroizing<String> {
    Zeroizing::new(format!(
        "set=1\nprivate_key={}\nlisten_port={listen_port}\nreplace_peers=true\n\n",
        hex(key.private())
    ))
}

/// The `set=1` request that adds `peers` (no endpoint: each is learnt from its
/// handshake), each with its one allowed-ips entry, in the order `wg set IFNAME peer K
/// allowed-ips A peer ...` writes a peer's lines.
pub fn add_peers_request(peers: &[(PublicKey, AllowedIp)]) -> String {
    let mut s = String::with_capacity(8 + peers.len() * 120);
    s.push_str("set=1\n");
    for (key, allowed) in peers {
        s.push_str(&format!(
            "public_key={}\nreplace_allowed_ips=true\nallowed_ip={}/{}\n",
            key.hex(),
            allowed.addr,
            allowed.prefix_len
        ));
    }
    s.push('\n');
    s
}

/// A reply's `errno` (0: success). None while the reply is incomplete (no blank line yet).
pub fn errno(reply: &str) -> Option<Result<i32, String>> {
    if !reply.ends_with("\n\n") {
        return None;
    }
    let value = reply.lines().find_map(|l| l.strip_prefix("errno="));
    Some(match value {
        Some(v) => v.trim().parse().map_err(|_| format!("bad errno line {v:?}")),
        None => Err(format!("no errno in reply {reply:?}")),
    })
}

/// The peers in a `get=1` reply. Each `public_key=` line starts a peer.
pub fn peers(reply: &str) -> Result<Vec<PeerStats>, String> {
    let mut out: Vec<PeerStats> = Vec::new();
    let (mut sec, mut nsec) = (0i64, 0i64);
    let finish = |out: &mut Vec<PeerStats>, sec: i64, nsec: i64| {
        if let Some(p) = out.last_mut() {
            p.last_handshake = handshake_time(sec, nsec);
        }
    };
    for line in reply.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let bad = || format!("bad {k} value {v:?}");
        match k {
            "public_key" => {
                finish(&mut out, sec, nsec);
                (sec, nsec) = (0, 0);
                out.push(PeerStats {
                    public_key: PublicKey(parse_key(v).ok_or_else(bad)?),
                    endpoint: None,
                    last_handshake: None,
                    rx_bytes: 0,
                    tx_bytes: 0,
                });
            }
            _ if out.is_empty() => {}
            "endpoint" => out.last_mut().unwrap().endpoint = Some(v.parse().map_err(|_| bad())?),
            "rx_bytes" => out.last_mut().unwrap().rx_bytes = v.parse().map_err(|_| bad())?,
            "tx_bytes" => out.last_mut().unwrap().tx_bytes = v.parse().map_err(|_| bad())?,
            "last_handshake_time_sec" => sec = v.parse().map_err(|_| bad())?,
            "last_handshake_time_nsec" => nsec = v.parse().map_err(|_| bad())?,
            _ => {}
        }
    }
    finish(&mut out, sec, nsec);
    Ok(out)
}

fn parse_key(v: &str) -> Option<[u8; 32]> {
    if v.len() != 64 {
        return None;
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(v.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(k)
}

/// Time since the handshake, for a report.
pub fn since(t: SystemTime) -> f64 {
    SystemTime::now()
        .duration_since(t)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::captured::{self, pattern};

    #[test]
    fn set_request_is_what_wg_set_writes() {
        // tests/fixtures/wireguard/uapi_set.txt: what `wg set` wrote to wireguard-go's
        // socket for the same command as the netlink fixture (capture-uapi.sh).
        let path = format!(
            "{}/../../tests/fixtures/wireguard/uapi_set.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        let captured = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let config = captured::config();
        assert_eq!(set_request(&config).as_str(), captured);
    }

    #[test]
    fn peers_are_added_as_wg_set_adds_them() {
        let allowed = |last| AllowedIp {
            addr: std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 128, 0, last)),
            prefix_len: 32,
        };
        let got = add_peers_request(&[
            (PublicKey(pattern(0x20)), allowed(1)),
            (PublicKey(pattern(0x40)), allowed(2)),
        ]);
        let want = format!(
            "set=1\npublic_key={}\nreplace_allowed_ips=true\nallowed_ip=10.128.0.1/32\n\
             public_key={}\nreplace_allowed_ips=true\nallowed_ip=10.128.0.2/32\n\n",
            hex(&pattern(0x20)),
            hex(&pattern(0x40))
        );
        assert_eq!(got, want);
        let key = KeyPair::from_private(pattern(0));
        assert_eq!(
            device_request(&key, 51820).as_str(),
            format!(
                "set=1\nprivate_key={}\nlisten_port=51820\nreplace_peers=true\n\n",
                hex(&pattern(0))
            )
        );
    }

    #[test]
    fn get_reply_gives_counters_and_handshake() {
        let reply = format!(
            "private_key={}\nlisten_port=51820\npublic_key={}\nendpoint=198.18.0.2:51820\n\
             last_handshake_time_sec=1700000000\nlast_handshake_time_nsec=7\ntx_bytes=100\nrx_bytes=200\n\
             persistent_keepalive_interval=0\nallowed_ip=198.19.0.2/32\nprotocol_version=1\nerrno=0\n\n",
            hex(&pattern(0)),
            hex(&pattern(0x20))
        );
        assert_eq!(errno(&reply), Some(Ok(0)));
        let p = peers(&reply).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].public_key, PublicKey(pattern(0x20)));
        assert_eq!((p[0].rx_bytes, p[0].tx_bytes), (200, 100));
        assert_eq!(
            p[0].last_handshake,
            Some(SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 7))
        );
        assert_eq!(errno("errno=0\n"), None, "incomplete until the blank line");
        assert_eq!(errno("errno=22\n\n"), Some(Ok(22)));
        assert!(peers("public_key=zz\n\n").is_err());
    }
}
