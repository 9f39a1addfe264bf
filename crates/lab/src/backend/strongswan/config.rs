//! What one charon instance is told, as text: its `strongswan.conf` (every path inside the
//! end's own directory, an explicit plugin list, nothing read from /etc) and its
//! `swanctl.conf` (the connection and the PSK). Pure: no IO, so tested byte for byte.

use std::net::IpAddr;
use std::path::Path;

use model::{CipherSuite, Hmac};

/// Connection and CHILD_SA name in swanctl.conf.
pub const CONN: &str = "lab";

/// The IKE SA's own proposal. IKE carries no payload, so it is fixed: only the ESP proposal
/// follows the run's suite. Served by the plugins of [`PLUGINS`] (no openssl needed).
pub const IKE_PROPOSAL: &str = "aes256-sha256-modp2048";

/// charon's plugins: RNG and nonces, IKE's crypto (aes, sha1 for libcharon itself, sha2,
/// hmac, kdf for prf+, gmp for MODP), the kernel interface, the IKE sockets and VICI.
/// All from Debian's `libstrongswan`, `strongswan-libcharon` and `strongswan-swanctl` (from
/// 6.0 on the crypto ones are in `libstrongswan-extra-plugins`). lab/strongswan6.sh links the
/// same list into its strongSwan 6's charon (a test holds the two equal).
pub const PLUGINS: &str = "random nonce aes sha1 sha2 hmac kdf gmp kernel-netlink socket-default vici";

/// strongSwan's name for `suite` as an ESP proposal, without extended sequence numbers
/// (the lab's xfrm SAs have none either). `None` for the unencrypted suite and for
/// ChaCha20-Poly1305, which the plan refuses for strongswan as for xfrm.
pub fn esp_proposal(suite: CipherSuite) -> Option<String> {
    match suite {
        CipherSuite::None | CipherSuite::ChaCha20Poly1305 => None,
        // `sha256` in an ESP proposal is HMAC-SHA-256-128 (RFC 4868), the lab's truncation.
        CipherSuite::AesCbc { key, hmac } => Some(match hmac {
            Hmac::None => format!("aes{}-noesn", key.bits()),
            Hmac::Sha256 => format!("aes{}-sha256-noesn", key.bits()),
        }),
        CipherSuite::AesGcm { key } => Some(format!("aes{}gcm16-noesn", key.bits())),
    }
}

/// Where one end's files are, all inside its own directory.
pub struct Paths<'a> {
    pub dir: &'a Path,
}

impl Paths<'_> {
    pub fn strongswan_conf(&self) -> std::path::PathBuf {
        self.dir.join("strongswan.conf")
    }
    pub fn swanctl_conf(&self) -> std::path::PathBuf {
        self.dir.join("swanctl.conf")
    }
    pub fn vici(&self) -> std::path::PathBuf {
        self.dir.join("charon.vici")
    }
    pub fn log(&self) -> std::path::PathBuf {
        self.dir.join("charon.log")
    }
    /// The URI swanctl is given (`--uri`).
    pub fn vici_uri(&self) -> String {
        format!("unix://{}", self.vici().display())
    }
}

/// `strongswan.conf` for charon-systemd (its settings namespace) and swanctl: plugins
/// listed rather than found in /etc/strongswan.d, the VICI socket and a log file in the
/// end's directory, the journal off, no routes of charon's own (the lab sets its route).
pub fn strongswan_conf(paths: &Paths<'_>) -> String {
    charon_conf(
        paths,
        "",
        "default = 1\n      ike = 2\n      knl = 2\n      cfg = 2",
    )
}

/// What a setup-rate charon is told on top of [`strongswan_conf`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateRole {
    /// Starts a new IKE_SA at each initiation (by default charon reuses the established one).
    Initiator,
    /// Takes every IKE_SA_INIT from the one initiator address: by default charon answers
    /// beyond 5 half-open SAs per address with nothing, and beyond 3 per address or 10 in
    /// all with a cookie (a round trip more, and a race that cost a 4 s retransmission),
    /// its defence against floods from one host; here that host stands for N peers.
    Responder,
}

/// `strongswan.conf` of a setup-rate charon: [`strongswan_conf`]'s with `role`'s settings
/// and only errors logged (a log line per exchange would be part of what is measured).
pub fn rate_strongswan_conf(paths: &Paths<'_>, role: RateRole) -> String {
    let settings = match role {
        RateRole::Initiator => "  reuse_ikesa = no\n",
        RateRole::Responder => {
            "  block_threshold = 1000000\n  cookie_threshold = 1000000\n  cookie_threshold_ip = 1000000\n"
        }
    };
    charon_conf(paths, settings, "default = 0")
}

fn charon_conf(paths: &Paths<'_>, settings: &str, levels: &str) -> String {
    format!(
        "charon-systemd {{
  load_modular = no
  load = {PLUGINS}
  install_routes = no
  install_virtual_ip = no
{settings}  journal {{
    default = -1
  }}
  filelog {{
    lab {{
      path = {log}
      {levels}
    }}
  }}
  plugins {{
    vici {{
      socket = {vici}
    }}
  }}
}}
swanctl {{
  load = random
}}
",
        log = paths.log().display(),
        vici = paths.vici_uri(),
    )
}

/// One end of the IKEv2 connection.
pub struct Peer {
    /// IKE identity (`ipl-a`, `ipl-b`).
    pub id: String,
    /// Outer address: IKE and ESP travel between the two.
    pub outer: IpAddr,
    /// Inner address: the CHILD_SA's traffic selector (the payload's address).
    pub inner: IpAddr,
}

/// The CHILD_SA as the run asks for it.
pub struct Child<'a> {
    /// The only ESP proposal ([`esp_proposal`]).
    pub esp: &'a str,
    /// Per-CPU CHILD_SAs (`per_cpu_sas`, strongSwan 6): they are negotiated on the kernel's
    /// acquires, which only a trap policy turns into a CHILD_SA (`start_action = trap`); the
    /// initiator still starts the first one (the fallback) itself.
    pub per_cpu: bool,
}

/// `swanctl.conf`: one IKEv2 connection from `me` to `peer` with PSK authentication and
/// one tunnel-mode CHILD_SA between the inner addresses proposing only `child.esp`.
/// `psk_hex` is the key as hex digits (no `0x`).
pub fn swanctl_conf(me: &Peer, peer: &Peer, child: &Child<'_>, psk_hex: &str) -> String {
    let start = match child.per_cpu {
        true => "per_cpu_sas = yes\n        start_action = trap",
        false => "start_action = none",
    };
    format!(
        "connections {{
  {CONN} {{
    version = 2
    local_addrs = {me_outer}
    remote_addrs = {peer_outer}
    proposals = {IKE_PROPOSAL}
    mobike = no
    local {{
      auth = psk
      id = {me_id}
    }}
    remote {{
      auth = psk
      id = {peer_id}
    }}
    children {{
      {CONN} {{
        local_ts = {me_inner}/{host}
        remote_ts = {peer_inner}/{host}
        esp_proposals = {esp}
        mode = tunnel
        {start}
      }}
    }}
  }}
}}
secrets {{
  ike-{CONN} {{
    id-local = {me_id}
    id-remote = {peer_id}
    secret = 0x{psk_hex}
  }}
}}
",
        me_outer = me.outer,
        host = if me.inner.is_ipv4() { 32 } else { 128 },
        peer_outer = peer.outer,
        me_id = me.id,
        peer_id = peer.id,
        me_inner = me.inner,
        peer_inner = peer.inner,
        esp = child.esp,
    )
}

/// Connection name of a setup-rate run.
pub const RATE_CONN: &str = "rate";

/// `swanctl.conf` of a setup-rate run: an IKEv2 connection with no CHILD_SA (an IKE_SA
/// only: no ESP SA is installed) from `me` to `peer`, PSK authentication; the responder
/// (`initiator` false) keeps every IKE_SA of the same peer identity (`unique = never`).
pub fn rate_swanctl_conf(me: &Peer, peer: &Peer, initiator: bool, psk_hex: &str) -> String {
    format!(
        "connections {{
  {RATE_CONN} {{
    version = 2
    local_addrs = {me_outer}
    remote_addrs = {peer_outer}
    proposals = {IKE_PROPOSAL}
    mobike = no
    unique = {unique}
    local {{
      auth = psk
      id = {me_id}
    }}
    remote {{
      auth = psk
      id = {peer_id}
    }}
  }}
}}
secrets {{
  ike-{RATE_CONN} {{
    id-local = {me_id}
    id-remote = {peer_id}
    secret = 0x{psk_hex}
  }}
}}
",
        me_outer = me.outer,
        peer_outer = peer.outer,
        unique = if initiator { "no" } else { "never" },
        me_id = me.id,
        peer_id = peer.id,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::KeyBits;
    use std::net::Ipv4Addr;

    #[test]
    fn esp_proposals_name_the_suite_as_strongswan_does() {
        let cbc = |key, hmac| CipherSuite::AesCbc { key, hmac };
        assert_eq!(
            esp_proposal(cbc(KeyBits::Aes128, Hmac::None)).unwrap(),
            "aes128-noesn"
        );
        assert_eq!(
            esp_proposal(cbc(KeyBits::Aes192, Hmac::Sha256)).unwrap(),
            "aes192-sha256-noesn"
        );
        assert_eq!(
            esp_proposal(CipherSuite::AesGcm { key: KeyBits::Aes256 }).unwrap(),
            "aes256gcm16-noesn"
        );
        assert_eq!(esp_proposal(CipherSuite::None), None);
    }

    #[test]
    fn every_path_charon_uses_is_in_the_ends_directory() {
        let paths = Paths {
            dir: Path::new("/tmp/ipl-strongswan-X/a"),
        };
        let conf = strongswan_conf(&paths);
        assert!(
            conf.contains("path = /tmp/ipl-strongswan-X/a/charon.log\n"),
            "{conf}"
        );
        assert!(
            conf.contains("socket = unix:///tmp/ipl-strongswan-X/a/charon.vici\n"),
            "{conf}"
        );
        assert!(conf.contains("load_modular = no\n"), "{conf}");
        // Every absolute path in the file is the end's own.
        for word in conf.split_whitespace().filter(|w| w.contains('/')) {
            assert!(word.contains("/tmp/ipl-strongswan-X/a/"), "{word}");
        }
    }

    #[test]
    fn a_rate_run_sets_up_ike_sas_only_and_lifts_the_one_address_limits_on_the_responder() {
        let paths = Paths {
            dir: Path::new("/tmp/ipl-strongswan-X/a"),
        };
        let responder = rate_strongswan_conf(&paths, RateRole::Responder);
        assert!(
            responder.contains("\n  block_threshold = 1000000\n  cookie_threshold = 1000000\n  cookie_threshold_ip = 1000000\n  journal {"),
            "{responder}"
        );
        assert!(responder.contains("      default = 0\n    }"), "{responder}");
        let initiator = rate_strongswan_conf(&paths, RateRole::Initiator);
        assert!(initiator.contains("\n  reuse_ikesa = no\n"), "{initiator}");
        // The run's own configuration is unchanged by the rate's.
        assert!(strongswan_conf(&paths).contains("install_virtual_ip = no\n  journal {"));
        let peer = |id: &str, a: &str| Peer {
            id: id.into(),
            outer: a.parse().unwrap(),
            inner: a.parse().unwrap(),
        };
        let conf = rate_swanctl_conf(
            &peer("ipl-a", "198.18.0.1"),
            &peer("ipl-b", "198.18.0.2"),
            false,
            "00ff",
        );
        assert!(!conf.contains("children"), "{conf}");
        assert!(
            conf.contains("unique = never\n") && conf.contains("secret = 0x00ff\n"),
            "{conf}"
        );
    }

    #[test]
    fn the_connection_joins_the_outer_addresses_and_selects_the_inner_ones() {
        let a = Peer {
            id: "ipl-a".into(),
            outer: "198.18.0.1".parse().unwrap(),
            inner: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)),
        };
        let b = Peer {
            id: "ipl-b".into(),
            outer: "198.18.0.2".parse().unwrap(),
            inner: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2)),
        };
        let child = Child {
            esp: "aes128-sha256-noesn",
            per_cpu: false,
        };
        let conf = swanctl_conf(&a, &b, &child, "00ff");
        for line in [
            "local_addrs = 198.18.0.1\n",
            "remote_addrs = 198.18.0.2\n",
            "local_ts = 198.19.0.1/32\n",
            "remote_ts = 198.19.0.2/32\n",
            "esp_proposals = aes128-sha256-noesn\n",
            "proposals = aes256-sha256-modp2048\n",
            "id = ipl-a\n",
            "id-remote = ipl-b\n",
            "secret = 0x00ff\n",
            "start_action = none\n",
        ] {
            assert!(conf.contains(line), "{line:?} in\n{conf}");
        }
        assert!(!conf.contains("per_cpu_sas"), "{conf}");
        // Per-CPU CHILD_SAs: negotiated on the kernel's acquires, so on a trap policy.
        let per_cpu = swanctl_conf(
            &a,
            &b,
            &Child {
                per_cpu: true,
                ..child
            },
            "00ff",
        );
        assert!(
            per_cpu.contains(
                "        mode = tunnel\n        per_cpu_sas = yes\n        start_action = trap\n      }"
            ),
            "{per_cpu}"
        );
    }

    /// lab/strongswan6.sh makes each plugin the run loads a library its strongSwan 6's
    /// charon needs (charon finds a plugin's constructor among the loaded symbols, as its
    /// plugin directory is the host's): the two lists are one.
    #[test]
    fn the_unpacked_strongswan_6_links_the_plugins_the_run_loads() {
        let script = include_str!("../../../../../lab/strongswan6.sh");
        let line = script
            .lines()
            .find_map(|l| l.strip_prefix("PLUGINS="))
            .expect("PLUGINS= in lab/strongswan6.sh");
        assert_eq!(line.trim_matches('"'), PLUGINS);
        let swanctl = script
            .lines()
            .find_map(|l| l.strip_prefix("SWANCTL_PLUGINS="))
            .expect("SWANCTL_PLUGINS= in lab/strongswan6.sh");
        assert!(
            strongswan_conf(&Paths { dir: Path::new("/d") })
                .contains(&format!("swanctl {{\n  load = {}\n}}", swanctl.trim_matches('"'))),
            "swanctl's plugins"
        );
    }
}
