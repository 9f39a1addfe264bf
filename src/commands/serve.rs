//! `ipsec-lab serve`: flags → the server's own configuration → [`lab::remote::server::serve`]
//! until SIGINT or SIGTERM.

use std::net::{IpAddr, SocketAddr};

use control::{Cidr, Psk, ServerLimits};
use lab::remote::server::{serve, ServerConfig};
use lab::{LabError, LabResult};

use crate::cli::ServeArgs;

/// Most streams a local run takes (`-P`); a server's `--max-streams` may not exceed it.
const MAX_STREAMS: u16 = 128;

pub fn run(args: ServeArgs) -> LabResult<()> {
    let usage = |e: String| LabError::usage(anyhow::anyhow!(e));
    let psk = Psk::load(&args.psk_file).map_err(LabError::usage)?;
    let listen = parse_listen(args.listen.as_deref()).map_err(usage)?;
    let allow = args
        .allow
        .iter()
        .map(|a| a.parse::<Cidr>().map_err(|e| format!("--allow {e}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(usage)?;
    let limits = limits(&args, listen).map_err(usage)?;
    require_cap_net_admin()?;
    let config = ServerConfig {
        listen,
        allow,
        psk,
        limits,
    };
    crate::runtime::runtime()?.block_on(async { serve(config, lab::signal::stop_requested()?).await })
}

/// A server serves from the namespace it runs in, so plain and userspace runs need
/// CAP_NET_ADMIN only; the xfrm backend's kernel probe also unshares a throw-away
/// namespace (CAP_SYS_ADMIN, which ipsec-lab-serve.service grants for it).
fn require_cap_net_admin() -> LabResult<()> {
    lab::error::require_capabilities(
        &[lab::error::CAP_NET_ADMIN],
        "serve needs CAP_NET_ADMIN for its TUN devices, routes, SAs and policies: run it as root",
    )
}

/// `ADDR`, `ADDR:PORT`, `:PORT`, `[V6]:PORT`; the port defaults to 5299.
fn parse_listen(s: Option<&str>) -> Result<SocketAddr, String> {
    let default = SocketAddr::from(([0, 0, 0, 0], control::DEFAULT_PORT));
    let Some(s) = s.map(str::trim) else {
        return Ok(default);
    };
    let bad = || format!("--listen {s:?} is not ADDR, ADDR:PORT or :PORT");
    if let Some(port) = s.strip_prefix(':') {
        let port = port.parse().map_err(|_| bad())?;
        return Ok(SocketAddr::new(default.ip(), port));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let ip: IpAddr = s
        .trim_matches(|c| c == '[' || c == ']')
        .parse()
        .map_err(|_| bad())?;
    Ok(SocketAddr::new(ip, control::DEFAULT_PORT))
}

/// The server's limits from its flags, refusing ones it could not keep.
fn limits(args: &ServeArgs, listen: SocketAddr) -> Result<ServerLimits, String> {
    if args.max_bytes.0 == 0 || args.max_streams == 0 || args.max_repeat == 0 {
        return Err("--max-bytes, --max-streams and --max-repeat must be above zero".into());
    }
    if args.max_streams > MAX_STREAMS {
        return Err(format!(
            "--max-streams {} is above the lab's {MAX_STREAMS} streams",
            args.max_streams
        ));
    }
    if args.data_ports.contains(listen.port()) {
        return Err(format!(
            "--data-ports {} includes the control port {}: choose a range without it",
            args.data_ports,
            listen.port()
        ));
    }
    let max_pps = match args.max_rate {
        model::packets::Rate::PacketsPerSecond(pps) if pps <= traffic::udp::MAX_PPS => pps,
        model::packets::Rate::PacketsPerSecond(pps) => {
            return Err(format!(
                "--max-rate {pps} is above the {} datagrams per second a trial's receiver keeps count of",
                traffic::udp::MAX_PPS
            ))
        }
        model::packets::Rate::BitsPerSecond(_) => {
            return Err(format!(
                "--max-rate {} is a bit rate: give datagrams per second (e.g. 2Mpps), which do not depend on the packet size",
                args.max_rate
            ))
        }
    };
    Ok(ServerLimits {
        max_bytes: args.max_bytes.0,
        max_streams: args.max_streams,
        max_repeat: args.max_repeat,
        data_ports: args.data_ports,
        allow_unauthenticated: args.allow_unauthenticated_suites,
        max_tunnel_threads: args.max_tunnel_threads,
        max_run_time: std::time::Duration::from_secs(args.max_run_time),
        max_pps,
        max_trial_time: std::time::Duration::from_secs(args.max_trial_time),
        max_trials: args.max_trials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_default_their_port() {
        assert_eq!(parse_listen(None).unwrap().to_string(), "0.0.0.0:5299");
        assert_eq!(
            parse_listen(Some("198.18.0.2")).unwrap().to_string(),
            "198.18.0.2:5299"
        );
        assert_eq!(
            parse_listen(Some("198.18.0.2:7000")).unwrap().to_string(),
            "198.18.0.2:7000"
        );
        assert_eq!(parse_listen(Some(":7000")).unwrap().to_string(), "0.0.0.0:7000");
        assert_eq!(parse_listen(Some("[::1]:7")).unwrap().to_string(), "[::1]:7");
        assert!(parse_listen(Some("nohost:x")).is_err());
    }
}
