//! Raw command-line arguments (stage one). Typed values are parsed here with the model's
//! `FromStr` impls, so a bad value is refused by clap with exit code 2; checks that need
//! several values at once happen in `RunRequest::validate` (stage two).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use model::{Backend, ByteSize, CipherSuite, CryptoChoice, Hmac, IpsecMode, KeyBits, RunRequest};

#[derive(Debug, Parser)]
#[command(
    name = "ipsec-lab",
    version,
    long_version = crate::build_info::LONG_VERSION,
    about = "Measures how fast encrypted tunnels move data, per backend, in MB/s"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Set up a two-namespace lab, push a verified payload through one backend, report MB/s.
    Run(RunArgs),
    /// Remove what killed runs left behind (only objects the lab created).
    Clean(CleanArgs),
    /// Time ciphers per implementation (with and without hardware AES), like openssl speed.
    Speed(crate::commands::speed::SpeedArgs),
    /// XFRM SAs and policies installed per second as the kernel's tables grow (1k, 10k,
    /// 100k), in user-mode Linux.
    SetupRate(crate::commands::setup_rate::SetupRateArgs),
    /// Serve runs to `ipsec-lab run --peer` on another machine (one at a time), over a
    /// control channel authenticated with a pre-shared key.
    Serve(ServeArgs),
    /// Pre-shared keys for `serve` and `run --peer`.
    Psk(PskArgs),
    /// Every backend × every cipher configuration: the per-backend MB/s table, as JSON and Markdown.
    Matrix(crate::commands::matrix::MatrixArgs),
    /// Render a matrix result as markdown, csv, svg or html.
    Report(crate::commands::report::ReportArgs),
    /// What got faster or slower between two matrix results, beyond the noise.
    Compare(crate::commands::compare::CompareArgs),
    /// Every pair of N hosts in rounds, and their reports as one N×N matrix (`ansible/`).
    Fleet(crate::commands::fleet::FleetArgs),
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell.
    Completions(CompletionsArgs),
    /// Write the man pages (for packaging; `make install` and the .deb ship them).
    #[command(hide = true)]
    Man(ManArgs),
}

/// `run`: the plan's options, then the caller's own (where the output goes).
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub plan: RunPlanArgs,
    /// Write the JSON report to FILE, or to stdout with `-` (the table then goes to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Newline-delimited JSON on stdout: one object per interval (every second unless
    /// --interval; with --udp one per trial), then the report; the table goes to stderr.
    #[arg(long)]
    pub json_stream: bool,
    /// Print the SA keys (they are never printed otherwise).
    #[arg(long)]
    pub show_keys: bool,
    /// No progress bar even on a terminal.
    #[arg(long)]
    pub no_progress: bool,
    /// Run this validated plan (JSON, as a `--vm` host writes it for its guest) instead of
    /// one from the options: it is taken whole, so plan options are refused with it.
    #[arg(long, hide = true, value_name = "FILE", conflicts_with_all = run_plan_options())]
    pub plan_file: Option<PathBuf>,
}

/// Everything a run's plan is made of: what `--plan-file` stands for.
#[derive(Debug, Args)]
pub struct RunPlanArgs {
    /// How the data is carried: plain (baseline), xfrm (kernel IPsec), userspace (the lab's
    /// tunnel, one thread per end unless --tunnel-threads), openvpn (real OpenVPN),
    /// strongswan (kernel IPsec negotiated by strongSwan's charon over IKEv2), or WireGuard:
    /// wireguard (the kernel's), wireguard-go or boringtun (chacha20-poly1305 only).
    #[arg(long, default_value = "xfrm", value_parser = crate::values::backend(), hide_possible_values = true)]
    pub backend: Backend,
    /// AES key size: 128, 192 or 256 [default: 256].
    #[arg(long, value_parser = crate::values::key_bits(), hide_possible_values = true)]
    pub key_bits: Option<KeyBits>,
    /// Integrity added to AES-CBC: none or sha256 [default: sha256].
    #[arg(long, value_parser = crate::values::hmac(), hide_possible_values = true)]
    pub hmac: Option<Hmac>,
    /// A whole cipher suite instead of --key-bits/--hmac: aes-256-gcm, aes-128-cbc,
    /// aes-256-cbc-hmac-sha256, none, ...
    #[arg(long, value_parser = crate::values::cipher(), hide_possible_values = true)]
    pub cipher: Option<CipherSuite>,
    /// Crypto implementation of the userspace backend: auto, soft (AES-NI off), rustcrypto,
    /// aws-lc, libcrypto (OpenSSL's, loaded at run time) [default: auto].
    #[arg(long, value_parser = crate::values::crypto(), hide_possible_values = true)]
    pub crypto: Option<CryptoChoice>,
    /// Payload size, e.g. 100MB (10^6 bytes), 1GiB (2^30); at least 1MB [default: send for
    /// 2 s, as --time 2 (after --omit); 100MB with --peer or --with-iperf3, which have no
    /// --time].
    #[arg(long)]
    pub bytes: Option<ByteSize>,
    /// Run the transfer N times and report min/median/max.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true,
          value_parser = crate::values::count(model::plan::MAX_REPEAT))]
    pub repeat: u32,
    /// Parallel TCP streams, as iperf3 -P.
    #[arg(long, short = 'P', default_value_t = 1, allow_negative_numbers = true,
          value_parser = crate::values::in_range::<u16>(1, model::plan::MAX_STREAMS.into()))]
    pub parallel: u16,
    #[command(flatten)]
    pub link: crate::args::LinkArgs,
    /// IPsec mode of the xfrm backend: tunnel or transport [default: tunnel; with --peer
    /// always transport].
    #[arg(long, value_parser = crate::values::mode(), hide_possible_values = true)]
    pub mode: Option<IpsecMode>,
    /// Seed of the pseudo-random payload, as printed (0x18ecd9107f28b6c7) or in decimal
    /// (default: from the clock; recorded in the report).
    #[arg(long, value_parser = model::parse_seed)]
    pub seed: Option<u64>,
    /// Run inside a VM booting a stock kernel (optionally the given kernel image), or `--vm uml`
    /// in user-mode Linux (kernel ESP at native speed without KVM; no WireGuard; `uml:RELEASE`:
    /// a second one lab/second-uml.sh installed); `--vm auto`
    /// only when this kernel lacks what the backend needs: KVM's stock kernel where KVM boots
    /// it, else UML where installed, else the stock kernel emulated (TCG).
    #[arg(long, value_name = "KERNEL", num_args = 0..=1, default_missing_value = "",
          value_hint = clap::ValueHint::FilePath)]
    pub vm: Option<String>,
    /// Also run iperf3 over the same data path after each transfer and report the ratio.
    #[arg(long)]
    pub with_iperf3: bool,
    /// Run against `ipsec-lab serve` on another machine, HOST[:PORT] (default port 5299),
    /// instead of between two local namespaces.
    #[arg(long, value_name = "HOST[:PORT]", value_hint = clap::ValueHint::Hostname)]
    pub peer: Option<String>,
    /// Pre-shared key file for --peer (from `ipsec-lab psk generate`, mode 0600).
    #[arg(long, value_name = "FILE", requires = "peer")]
    pub psk_file: Option<PathBuf>,
    /// b sends and a receives (with --peer: the peer sends, this host receives).
    #[arg(long)]
    pub reverse: bool,
    /// Threads per end of the userspace tunnel, one per queue of a multi-queue TUN device,
    /// each with its own UDP port and packet-id space (1 to 256).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub tunnel_threads: u16,
    /// Encapsulate ESP for NAT traversal: udp (ESP in UDP, RFC 3948; xfrm backend only).
    #[arg(long, value_name = "udp", value_parser = crate::values::encap(), hide_possible_values = true)]
    pub encap: Option<model::EncapKind>,
    /// UDP port of --encap udp, on both ends [default: 4500].
    #[arg(long, value_name = "PORT")]
    pub encap_port: Option<u16>,
    /// xfrm: N SA pairs (1 to 64), stream i on pair i mod N, each pair's policies selecting
    /// its streams' ports, as multi-SA deployments spread load; needs -P N or more.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub sas: u16,
    /// xfrm with AES-GCM: instantiate pcrypt(rfc4106(gcm(aes))) over NETLINK_CRYPTO so the
    /// SAs spread their packets over the CPUs (removed afterwards if the run created it).
    #[arg(long)]
    pub pcrypt: bool,
    /// xfrm: per-CPU SAs (RFC 9611, Linux 6.13+): beside the SA pair, a pair for every CPU
    /// of the kernel carrying the run; a packet leaves on the SA of the CPU that sends it, so
    /// one tunnel's encryption spreads over the CPUs as its flows do. Use with -P N.
    /// strongswan: charon (strongSwan 6: lab/strongswan6.sh) negotiates them, a CHILD_SA per
    /// CPU the kernel acquires one for, beside the fallback CHILD_SA.
    #[arg(long)]
    pub per_cpu_sa: bool,
    /// WAN conditions on the lab's link, in tc's words, e.g. "delay 20ms loss 0.1% rate
    /// 1gbit": the netem qdisc on both veth ends (each direction gets the spec).
    #[arg(long, value_name = "SPEC")]
    pub netem: Option<model::NetemSpec>,
    #[command(flatten)]
    pub modes: ModesArgs,
    #[command(flatten)]
    pub packets: PacketArgs,
    #[command(flatten)]
    pub measure: crate::args::MeasureArgs,
    #[command(flatten)]
    pub rekey: crate::args::RekeyArgs,
}

/// UDP datagrams instead of TCP streams (model::packets); `--find-ndr` and `--latency` are
/// [`crate::args::MeasureArgs`], shared with `matrix`.
#[derive(Debug, Args)]
pub struct PacketArgs {
    /// UDP datagrams instead of TCP streams, sent for --time (default 2 s): packets/s,
    /// loss, reordering, duplicates, corrupted datagrams and jitter, every payload verified.
    #[arg(long)]
    pub udp: bool,
    /// Size of each inner IP packet, IP and UDP headers included: bytes (e.g. 64, 512,
    /// 1400), or imix (64, 576 and 1500 bytes, 7:4:1) [default: 1400].
    #[arg(long, value_name = "BYTES|imix")]
    pub packet_size: Option<model::packets::PacketSize>,
    /// Offered rate, paced evenly: packets/s (e.g. 50000, 200kpps, 1Mpps) or bits/s of
    /// inner packets (e.g. 500Mbit, 1Gbit) [default: as fast as the sender goes].
    #[arg(long, value_name = "RATE")]
    pub rate: Option<model::packets::Rate>,
}

/// iperf3's run modes (model::modes): how long, how reported, which way.
#[derive(Debug, Args)]
pub struct ModesArgs {
    /// Send for SECONDS instead of --bytes, as iperf3 -t; the size is what got through, and
    /// every byte of it is still verified.
    #[arg(long, value_name = "SECONDS", value_parser = model::modes::parse_seconds, conflicts_with = "bytes")]
    pub time: Option<f64>,
    /// A line per interval of SECONDS while the transfer runs (MB/s), as iperf3 -i.
    #[arg(long, value_name = "SECONDS", value_parser = model::modes::parse_seconds)]
    pub interval: Option<f64>,
    /// Leave the first SECONDS of each transfer out of its figure (warm-up), as iperf3 -O;
    /// their intervals are marked omitted.
    #[arg(long, value_name = "SECONDS", value_parser = model::modes::parse_seconds)]
    pub omit: Option<f64>,
    /// Both directions at once, a->b and b->a, each verified, reported apart and summed.
    #[arg(long)]
    pub bidir: bool,
}

impl RunArgs {
    pub fn request(&self) -> RunRequest {
        let p = &self.plan;
        RunRequest {
            backend: p.backend,
            key_bits: p.key_bits,
            hmac: p.hmac,
            cipher: p.cipher,
            crypto: p.crypto,
            bytes: p.bytes.unwrap_or(DEFAULT_BYTES),
            repeat: p.repeat,
            parallel: p.parallel,
            mtu: p.link.mtu,
            mode: p.mode,
            seed: p.seed,
            port: p.link.port,
            vm: p.vm.as_ref().map(|k| Some(k.clone()).filter(|k| !k.is_empty())),
            with_iperf3: p.with_iperf3,
            peer: p.peer.clone(),
            reverse: p.reverse,
            tunnel_threads: p.tunnel_threads,
            encap: p.encap,
            encap_port: p.encap_port,
            sas: p.sas,
            pcrypt: p.pcrypt,
            per_cpu_sa: p.per_cpu_sa,
            family: p.link.family.family(),
            netem: p.netem.clone(),
            modes: self.modes(),
            no_ceiling: p.measure.no_ceiling,
            packets: model::PacketsRequest {
                udp: p.packets.udp,
                packet_size: p.packets.packet_size,
                rate: p.packets.rate,
                find_ndr: p.measure.find_ndr(),
                latency: p.measure.latency,
            },
            rekey: p.rekey.request(),
        }
    }

    /// The modes asked for, with the default length of a run: neither `--bytes` nor `--time`
    /// sends for [`DEFAULT_SECONDS`] (after the `--omit` warm-up), where a timed run is
    /// possible. No payload size suits every backend: 100 MB lasts 0.05 s over plain veth
    /// (too short to time) and 7–50 s in a TCG VM.
    fn modes(&self) -> model::ModesRequest {
        let (p, m) = (&self.plan, &self.plan.modes);
        let udp = p.packets.udp || p.measure.find_ndr.is_some();
        let mut modes = model::ModesRequest {
            time_s: m.time,
            // A stream of intervals has intervals: every second, as iperf3's; a UDP run
            // streams its trials, not intervals.
            interval_s: m.interval.or((self.json_stream && !udp).then_some(1.0)),
            omit_s: m.omit,
            bidir: m.bidir,
        };
        // A UDP trial is timed between hosts too.
        let timed_possible = (p.peer.is_none() || udp) && !p.with_iperf3;
        if p.bytes.is_none() && modes.time_s.is_none() && timed_possible {
            // A rekey run long enough for three rekeys and half a period after the last.
            let seconds = p
                .rekey
                .rekey_every
                .map_or(DEFAULT_SECONDS, |every| DEFAULT_SECONDS.max(3.5 * every));
            modes.time_s = Some(modes.omit_s.unwrap_or(0.0) + seconds);
        }
        modes
    }
}

/// How long a run sends when neither `--bytes` nor `--time` says: 4 × the shortest transfer
/// taken as a stable figure (`model::MIN_STABLE_SECONDS`), and no longer than a slow
/// backend needs to show its rate.
pub const DEFAULT_SECONDS: f64 = 2.0;
/// The payload where a run cannot be timed (`--peer`, `--with-iperf3`).
pub const DEFAULT_BYTES: ByteSize = ByteSize(100_000_000);

/// The options `run --plan-file` takes from its plan (the output options stay its own):
/// every argument of [`RunPlanArgs`].
fn run_plan_options() -> Vec<clap::Id> {
    crate::args::ids::<RunPlanArgs>()
}

#[derive(Debug, Args)]
pub struct CleanArgs {}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Pre-shared key file (from `ipsec-lab psk generate`, mode 0600).
    #[arg(long, value_name = "FILE")]
    pub psk_file: PathBuf,
    /// Address and port to listen on: ADDR, ADDR:PORT or :PORT [default: 0.0.0.0:5299].
    #[arg(long, value_name = "ADDR[:PORT]")]
    pub listen: Option<String>,
    /// Accept control connections only from these networks (repeatable), e.g. 192.0.2.0/24;
    /// default: from anywhere (the key still has to match).
    #[arg(long, value_name = "CIDR")]
    pub allow: Vec<String>,
    /// Largest payload per transfer a client may ask for, e.g. 10GB, 1GiB.
    #[arg(long, value_name = "BYTES", default_value = control::request::DEFAULT_MAX_BYTES)]
    pub max_bytes: ByteSize,
    /// Most parallel streams a client may ask for (at most 128).
    #[arg(long, value_name = "N", default_value_t = control::request::DEFAULT_MAX_STREAMS)]
    pub max_streams: u16,
    /// Most transfers per run a client may ask for.
    #[arg(long, value_name = "N", default_value_t = control::request::DEFAULT_MAX_REPEAT)]
    pub max_repeat: u32,
    /// TCP ports data may use on this host, LOW-HIGH (LOW at least 1024); a run's
    /// PORT..PORT+P-1 must lie inside.
    #[arg(long, value_name = "LOW-HIGH", default_value = "5201-5298")]
    pub data_ports: control::PortRange,
    /// Also run suites that do not authenticate the data (none, AES-CBC without HMAC): anyone
    /// who can reach the tunnel's port from the client's address could then inject packets.
    #[arg(long)]
    pub allow_unauthenticated_suites: bool,
    /// Most userspace tunnel threads (TUN queues, UDP sockets, threads) a client may ask
    /// for with `run --peer --tunnel-threads N` (1 to 256).
    #[arg(long, value_name = "N", default_value_t = control::request::DEFAULT_MAX_TUNNEL_THREADS,
          value_parser = clap::value_parser!(u16).range(1..=i64::from(model::plan::MAX_TUNNEL_THREADS)))]
    pub max_tunnel_threads: u16,
    /// Longest a run may hold this server, in seconds, from the client's hello to the run's
    /// end; a run still going then is stopped and its end removed (1 to 86400).
    #[arg(long, value_name = "SECONDS", default_value_t = control::request::DEFAULT_MAX_RUN_TIME,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub max_run_time: u64,
    /// Fastest UDP trial a client may ask for, in datagrams per second (`run --peer --udp
    /// --rate`, `--find-ndr`), e.g. 100k or 2Mpps; this server's own sender keeps it when a
    /// trial asks for "as fast as it goes".
    #[arg(long, value_name = "PPS", default_value = control::request::DEFAULT_MAX_RATE)]
    pub max_rate: model::packets::Rate,
    /// Longest UDP trial a client may ask for, in seconds (1 to 3600).
    #[arg(long, value_name = "SECONDS", default_value_t = control::request::DEFAULT_MAX_TRIAL_TIME,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub max_trial_time: u64,
    /// Most UDP trials in one run (a `--find-ndr` search takes up to about 90).
    #[arg(long, value_name = "N", default_value_t = control::request::DEFAULT_MAX_TRIALS,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_trials: u32,
}

#[derive(Debug, Args)]
pub struct PskArgs {
    #[command(subcommand)]
    pub command: PskCommand,
}

#[derive(Debug, Subcommand)]
pub enum PskCommand {
    /// Print a new random key (32 bytes as 64 hex digits): `ipsec-lab psk generate > FILE`.
    /// Written to a file, the file is made mode 0600.
    Generate,
}

// Here, not in completions.rs: that names `Cli`, so `Command` naming it back would be a circle.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell; e.g. `ipsec-lab completions bash >
    /// /usr/share/bash-completion/completions/ipsec-lab`.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write ipsec-lab.1 and one page per subcommand (ipsec-lab-run.1, ...) into.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ipsec-lab").chain(args.iter().copied()))
    }

    #[test]
    fn main_use_parses() {
        let cli = parse(&["run", "--key-bits", "256", "--hmac", "sha256"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        assert_eq!(args.request().key_bits, Some(KeyBits::Aes256));
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_fix() {
        for (args, hint) in [
            (&["run", "--key-bits", "100"][..], "128, 192 or 256"),
            (&["run", "--bytes", "abc"][..], "100MB"),
            (&["run", "--hmac", "md5"][..], "none or sha256"),
            (&["run", "--cipher", "aes-512-gcm"][..], "aes-{128,256}-gcm"),
            (&["run", "--crypto", "nonsense"][..], "auto, soft"),
            (&["run", "--backend", "ipsec"][..], "plain, xfrm"),
            (&["run", "--netem", "delay 20"][..], "with a unit"),
            (&["run", "--netem", "loss 0.1"][..], "0.1%"),
        ] {
            let err = parse(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
            assert!(err.to_string().contains(hint), "{args:?}: {err}");
        }
    }

    #[test]
    fn seed_as_printed_0x_hex_is_accepted() {
        let Command::Run(a) = parse(&["run", "--seed", "0x18ecd9107f28b6c7"]).unwrap().command else {
            panic!()
        };
        assert_eq!(a.plan.seed, Some(0x18ec_d910_7f28_b6c7));
        let Command::Run(a) = parse(&["run", "--seed", "42"]).unwrap().command else {
            panic!()
        };
        assert_eq!(a.plan.seed, Some(42));
        let e = parse(&["run", "--seed", "0xnope"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("as printed"), "{e}");
    }

    #[test]
    fn modes_parse_and_time_excludes_bytes() {
        let Command::Run(a) = parse(&["run", "--time", "3", "--interval", "0.5s", "--omit", "1"])
            .unwrap()
            .command
        else {
            panic!()
        };
        let m = a.request().modes;
        assert_eq!(
            (m.time_s, m.interval_s, m.omit_s),
            (Some(3.0), Some(0.5), Some(1.0))
        );
        let Command::Run(a) = parse(&["run", "--json-stream"]).unwrap().command else {
            panic!()
        };
        assert_eq!(a.request().modes.interval_s, Some(1.0));
        for bad in [
            &["run", "--time", "3", "--bytes", "10MB"][..],
            &["run", "--time", "soon"][..],
            &["run", "--interval", "x"][..],
        ] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }

    #[test]
    fn the_default_run_sends_for_2_s_not_100mb_too_short_to_time() {
        let request = |args: &[&str]| {
            let Command::Run(a) = parse(args).unwrap().command else {
                panic!()
            };
            a.request()
        };
        let plain = request(&["run", "--backend", "plain"]);
        assert_eq!(plain.modes.time_s, Some(DEFAULT_SECONDS));
        // What the user gave wins; --omit comes before the default's seconds.
        assert_eq!(request(&["run", "--bytes", "10MB"]).modes.time_s, None);
        assert_eq!(request(&["run", "--bytes", "10MB"]).bytes, ByteSize(10_000_000));
        assert_eq!(request(&["run", "--time", "5"]).modes.time_s, Some(5.0));
        assert_eq!(request(&["run", "--omit", "1"]).modes.time_s, Some(3.0));
        // Where a run cannot be timed, the payload it always had.
        for args in [
            &["run", "--peer", "192.0.2.1"][..],
            &["run", "--backend", "plain", "--with-iperf3"][..],
        ] {
            let r = request(args);
            assert_eq!((r.modes.time_s, r.bytes), (None, DEFAULT_BYTES), "{args:?}");
        }
        // The default validates, and so does the plan a `--vm` host hands its guest.
        plain.validate().expect("the default run is valid");
        let Command::Run(host) = parse(&["run", "--no-progress", "--vm"]).unwrap().command else {
            panic!()
        };
        let guest = lab::vm::guest_plan(&host.request().validate().unwrap());
        let guest: model::RunPlan = serde_json::from_str(&serde_json::to_string(&guest).unwrap()).unwrap();
        assert_eq!(guest.workload().modes.time_s, Some(DEFAULT_SECONDS));
        assert!(guest.vm().is_none());
    }

    #[test]
    fn vm_flag_takes_an_optional_kernel() {
        let Command::Run(a) = parse(&["run", "--vm"]).unwrap().command else {
            panic!()
        };
        assert_eq!(a.request().vm, Some(None));
        let Command::Run(a) = parse(&["run", "--vm", "/boot/vmlinuz-x"]).unwrap().command else {
            panic!()
        };
        assert_eq!(a.request().vm, Some(Some("/boot/vmlinuz-x".into())));
    }

    #[test]
    fn the_guests_command_line_parses_with_no_progress_once() {
        let mut guest = lab::child::guest_run_args(std::path::Path::new("/tmp/ipsec-lab-vm-x/plan.json"));
        // What vm::guest_child adds.
        guest.extend(["--json".into(), "/tmp/ipsec-lab-vm-x/report.json".into()]);
        let Command::Run(g) = parse(&guest.iter().map(String::as_str).collect::<Vec<_>>())
            .expect("the guest's arguments parse")
            .command
        else {
            panic!()
        };
        assert_eq!(
            g.plan_file.as_deref(),
            Some(std::path::Path::new("/tmp/ipsec-lab-vm-x/plan.json"))
        );
        assert!(g.no_progress);
    }

    #[test]
    fn every_run_option_is_in_the_plan_file_or_the_callers_output() {
        let cli = <Cli as clap::CommandFactory>::command();
        let run = cli.find_subcommand("run").unwrap();
        let output = [
            "json",
            "show_keys",
            "no_progress",
            "json_stream",
            "plan_file",
            "help",
        ];
        for arg in run.get_arguments() {
            let id = arg.get_id().as_str();
            assert!(
                run_plan_options().iter().any(|o| o == id) || output.contains(&id),
                "run --{id}: add it to RunPlanArgs (a guest takes it from the plan) or to the output options"
            );
        }
    }

    #[test]
    fn a_plan_file_is_taken_whole_and_plan_options_are_refused_with_it() {
        // Output options are the caller's; defaults are no options given.
        for ok in [
            &["run", "--plan-file", "p.json"][..],
            &[
                "run",
                "--plan-file",
                "p.json",
                "--json",
                "-",
                "--no-progress",
                "--json-stream",
            ][..],
        ] {
            parse(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for given in [
            &["--backend", "plain"][..],
            &["--bytes", "2MB"][..],
            &["--vm"][..],
            &["-6"][..],
            &["--time", "3"][..],
            &["--interval", "1"][..],
            &["--seed", "7"][..],
            &["--netem", "delay 20ms"][..],
        ] {
            let args: Vec<&str> = ["run", "--plan-file", "p.json"]
                .into_iter()
                .chain(given.iter().copied())
                .collect();
            let e = parse(&args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{given:?}");
            assert!(e.to_string().contains("--plan-file"), "{given:?}: {e}");
        }
    }
}
