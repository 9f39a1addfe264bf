//! `ipsec-lab matrix`: flags → a validated [`SweepPlan`] → [`lab::sweep::run`] → the table,
//! the JSON and, with `--out`, every format.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use lab::sweep::SweepPlan;
use lab::{LabError, LabResult};
use model::matrix::MatrixReport;
use model::packets::PacketSize;
use model::{Backend, ByteSize, CipherSuite, CryptoChoice};

use crate::{output, progress};

/// `matrix`: the sweep's options, then the caller's own (where the output goes).
#[derive(Debug, Args)]
pub struct MatrixArgs {
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Where to write the JSON result, `-` for stdout (the table then goes to stderr)
    /// [default: DIR/matrix.json with --out, else ipsec-lab-matrix-<unix time>.json].
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write everything into DIR (created if missing): matrix.{json,md,csv,svg,html}.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bar even on a terminal.
    #[arg(long)]
    pub no_progress: bool,
    /// Print a line on stdout per finished cell (for the child sweeps: the parent's progress
    /// bar counts them).
    #[arg(long, hide = true)]
    pub report_cells: bool,
    /// Append those lines to FILE instead (for a VM's guest: its stdout does not reach the
    /// host, a file in the directory it shares with the host does).
    #[arg(long, hide = true, value_name = "FILE")]
    pub report_cells_file: Option<PathBuf>,
    /// Sweep this plan (JSON, as a parent sweep writes it for its child sweeps) instead of
    /// one from the options: it is taken whole, so sweep options are refused with it.
    #[arg(long, hide = true, value_name = "FILE", conflicts_with_all = sweep_plan_options())]
    pub plan_file: Option<PathBuf>,
}

/// Everything a sweep's plan is made of: what `--plan-file` stands for.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Backends to sweep, comma-separated. The plain baseline is always measured: it is
    /// what "% of plain" is relative to. WireGuard rows (wireguard, wireguard-go, boringtun)
    /// are added by naming them; they bring a chacha20-poly1305 column.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "plain,xfrm,userspace,openvpn,strongswan",
        value_parser = crate::values::backend(),
        hide_possible_values = true
    )]
    pub backends: Vec<Backend>,
    /// Cipher suites (the columns), comma-separated, e.g. aes-256-gcm,aes-256-cbc-hmac-sha256
    /// [default: the six classic ones, AES-128/192/256-CBC without and with HMAC-SHA256].
    #[arg(long, value_delimiter = ',', value_parser = crate::values::cipher(), hide_possible_values = true)]
    pub ciphers: Vec<CipherSuite>,
    /// Crypto implementations of the userspace backend, one row each.
    #[arg(long, value_delimiter = ',', default_value = "auto,soft", value_parser = crate::values::crypto(), hide_possible_values = true)]
    pub crypto: Vec<CryptoChoice>,
    /// Tunnel threads per end, comma-separated, e.g. 1,2,4: the userspace rows once per
    /// count (`run --tunnel-threads`), the xfrm rows once per count as SA pairs (`run
    /// --sas`, "xfrm x2 SAs"); other backends' rows at counts above 1 say why they have none.
    // Refused here whatever the backends: a count of 0 means nothing for any row.
    #[arg(long, value_delimiter = ',', default_value = "1", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u16).range(1..=i64::from(model::plan::MAX_TUNNEL_THREADS)))]
    pub threads: Vec<u16>,
    /// TCP streams per transfer, as `run -P`; several, comma-separated (e.g. 1,2,4), run
    /// every TCP row once per count, labelled `-P N`: the scaling curve of one SA, N SA
    /// pairs (--threads) and per-CPU SAs (--per-cpu-sa) as the flows grow [default: the
    /// largest --threads count, so every tunnel thread has a stream to carry].
    #[arg(long, short = 'P', value_delimiter = ',', allow_negative_numbers = true,
          value_parser = crate::values::in_range::<u16>(1, model::plan::MAX_STREAMS.into()))]
    pub parallel: Vec<u16>,
    /// Seconds each transfer of a cell sends, e.g. 1, 2.5 [default: 1, unless --bytes or
    /// --vm-bytes]: every cell long enough to time and for `compare` to judge, whatever its
    /// speed; what got through is verified and is the transfer's size.
    #[arg(long, value_name = "SECONDS", value_parser = model::modes::parse_seconds,
          conflicts_with_all = ["bytes", "vm_bytes"])]
    pub time: Option<f64>,
    /// Payload of each transfer instead of a time, e.g. 100MB, 4MB; at least 1MB (a fast row
    /// moves 100MB in 0.1 s: too short for `compare` to judge).
    #[arg(long)]
    pub bytes: Option<ByteSize>,
    /// Payload of each transfer in the VM rows [default: --bytes]: TCG moves a few MB/s,
    /// user-mode Linux tens of MB/s. Sizes the sweep's transfers: the host rows' then move
    /// --bytes (100MB unless given).
    #[arg(long, value_name = "SIZE", requires = "vm")]
    pub vm_bytes: Option<ByteSize>,
    /// Transfers per cell (median, min–max).
    #[arg(long, default_value_t = 3, allow_negative_numbers = true,
          value_parser = crate::values::count(model::plan::MAX_REPEAT))]
    pub repeat: u32,
    #[command(flatten)]
    pub link: crate::args::LinkArgs,
    /// Run the kernel (xfrm) rows in a VM booting a stock kernel (optionally this image, or
    /// a release with an image in /boot; `auto`: the stock kernel where KVM boots it, else
    /// `uml,auto`), or in user-mode Linux (`uml`: native speed, one
    /// CPU, the generic C drivers, no WireGuard; rows labelled `(uml)`): one boot for all of
    /// them. Several kernels, comma-separated, boot one after the other (`uml,auto`: UML's
    /// driver rows and the stock kernel's AES-NI and WireGuard rows in one table;
    /// `uml,uml:6.12.113`: two user-mode Linux kernels, the second from lab/second-uml.sh);
    /// where several kernels of one kind boot, their rows are labelled with their uname -r,
    /// and `compare --kernels A,B` puts them side by side.
    #[arg(long, value_name = "KERNEL", num_args = 0..=1, default_missing_value = "",
          value_hint = clap::ValueHint::FilePath)]
    pub vm: Option<String>,
    /// Add an xfrm row with ESP encapsulated: udp (ESP in UDP, RFC 3948).
    #[arg(long, value_name = "udp", value_parser = crate::values::encap(), hide_possible_values = true)]
    pub encap: Option<model::EncapKind>,
    /// UDP port of the --encap row [default: 4500].
    #[arg(long, value_name = "PORT", requires = "encap")]
    pub encap_port: Option<u16>,
    /// Add an xfrm row whose AES-GCM SAs run on a pcrypt(rfc4106(gcm(aes))) instance
    /// (`run --pcrypt`), "xfrm [pcrypt]"; its other columns say why they have none.
    #[arg(long)]
    pub pcrypt: bool,
    /// Add an xfrm row with per-CPU SAs (`run --per-cpu-sa`, Linux 6.13+), "xfrm [per-CPU
    /// SAs]": beside the plain row and the -P streams' SA-pair rows (--threads); refused
    /// with the reason on older kernels. With strongswan in the sweep also "strongswan
    /// [per-CPU SAs]" (charon negotiates them; strongSwan 6).
    #[arg(long)]
    pub per_cpu_sa: bool,
    /// Link conditions as a row dimension: netem specs in tc's words, separated by `;`,
    /// `none` for the bare link, e.g. "none;delay 20ms;delay 50ms loss 1%". Every row runs
    /// once per condition (its label ends in `@ SPEC`); hosts without netem run them with
    /// --vm.
    #[arg(long, value_name = "SPEC[;SPEC...]")]
    pub netem: Option<String>,
    /// Workloads as a row dimension, comma-separated: `tcp` (the bulk TCP transfer, the
    /// default) or a UDP inner packet size, IP and UDP headers included (e.g. 64, 512,
    /// 1400, or imix), as `run --udp --packet-size`. Every row runs once per workload; a
    /// size's rows are labelled `UDP 64 B` and their cells report packets/s and loss.
    #[arg(long, value_delimiter = ',', value_name = "tcp|BYTES|imix")]
    pub packet_sizes: Vec<Workload>,
    /// Seconds each UDP trial sends (`run --udp --time`); only with --packet-sizes.
    #[arg(long, value_name = "SECONDS", default_value_t = lab::sweep::DEFAULT_TRIAL_SECONDS,
          allow_negative_numbers = true)]
    pub trial_time: f64,
    #[command(flatten)]
    pub measure: crate::args::MeasureArgs,
    #[command(flatten)]
    pub rekey: crate::args::RekeyArgs,
    /// Also measure each swept backend's setup rate at N (`setup-rate --sizes N`): xfrm SAs
    /// and policies in user-mode Linux, strongswan IKE_SAs, wireguard-go peers and
    /// handshakes per second; a table of its own in every report.
    #[arg(long, value_name = "N")]
    pub setup_rate: Option<model::setup_rate::TableSize>,
    /// Leave out the plain baseline (for the child sweeps this command starts itself).
    #[arg(long, hide = true)]
    pub no_baseline: bool,
}

/// The payload of a run's transfers where a sweep is timed: `run`'s default, never sent
/// whole (a timed transfer's size is what got through).
const DEFAULT_BYTES: ByteSize = ByteSize(100_000_000);

/// The options `matrix --plan-file` takes from its plan (the output options stay its own):
/// every argument of [`SweepArgs`].
fn sweep_plan_options() -> Vec<clap::Id> {
    crate::args::ids::<SweepArgs>()
}

/// One value of `--packet-sizes`: the bulk TCP transfer, or UDP datagrams of a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload(pub Option<PacketSize>);

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Workload, String> {
        if s.trim().eq_ignore_ascii_case("tcp") {
            return Ok(Workload(None));
        }
        s.parse::<PacketSize>()
            .map(|size| Workload(Some(size)))
            .map_err(|e| format!("{e}, or tcp for the bulk TCP transfer"))
    }
}

impl SweepArgs {
    /// Stage two: the sweep these flags ask for, checked whole before anything is created.
    fn plan(&self, started_unix_s: u64) -> LabResult<SweepPlan> {
        SweepPlan {
            backends: self.backends.clone(),
            suites: self.ciphers.clone(),
            crypto: self.crypto.clone(),
            threads: self.threads.clone(),
            parallel: self.parallel.clone(),
            bytes: self.bytes.unwrap_or(DEFAULT_BYTES),
            vm_bytes: self.vm_bytes.or(self.bytes).unwrap_or(DEFAULT_BYTES),
            time_s: match self.bytes.or(self.vm_bytes) {
                Some(_) => None,
                None => Some(self.time.unwrap_or(lab::sweep::DEFAULT_CELL_SECONDS)),
            },
            repeat: self.repeat,
            mtu: self.link.mtu,
            port: self.link.port,
            vm: self.vm.clone(),
            baseline: !self.no_baseline,
            encap: self
                .encap
                .map(|kind| model::Encap::from_args(kind, self.encap_port))
                .transpose()
                .map_err(model::PlanError::from)?,
            pcrypt: self.pcrypt,
            per_cpu_sa: self.per_cpu_sa,
            family: self.link.family.family(),
            netem: match &self.netem {
                Some(text) => model::netem::parse_conditions(text).map_err(LabError::usage)?,
                None => vec![],
            },
            packet_sizes: self.packet_sizes.iter().map(|w| w.0).collect(),
            trial_seconds: self.trial_time,
            find_ndr: self.measure.find_ndr(),
            latency: self.measure.latency,
            rekey: self.rekey.schedule()?,
            seed: seed_from_clock(),
            setup_rate: self.setup_rate,
            ceiling: !self.measure.no_ceiling,
            started_unix_s,
        }
        .validate()
    }
}

pub fn run(args: MatrixArgs) -> LabResult<()> {
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let plan = match &args.plan_file {
        Some(path) => SweepPlan::read(path)?,
        None => args.sweep.plan(started_unix_s)?,
    };
    lab::require_net_admin()?;
    // Where the results go, checked before a sweep that can take an hour.
    let json_path = match (&args.json, &args.out) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(PathBuf::from(format!("ipsec-lab-matrix-{started_unix_s}.json"))),
    };
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| {
            LabError::usage(anyhow::anyhow!(
                "--out {}: cannot create the directory: {e}",
                dir.display()
            ))
        })?;
        output::check_writable(&dir.join("matrix.json"), "--out")?;
    }
    if let Some(path) = &json_path {
        output::check_writable(path, "--json")?;
    }
    let watcher = progress::for_sweep(
        args.no_progress,
        args.report_cells,
        args.report_cells_file.as_deref(),
    )?;
    let (report, outcome) = crate::runtime::runtime()?.block_on(lab::sweep::run(&plan, watcher.as_ref()));
    // The JSON is written whatever happened: cells measured before an error or Ctrl-C count.
    if plan.baseline {
        output::print_human(&report::markdown::render(&report), json_path.as_deref());
    }
    if let Some(path) = &json_path {
        output::write_text(path, &to_json(&report)?)?;
        if !output::is_std_stream(path) && plan.baseline {
            eprintln!("ipsec-lab: matrix written to {}", path.display());
        }
    }
    if let Some(dir) = &args.out {
        write_all_formats(&report, dir)?;
        eprintln!(
            "ipsec-lab: matrix.{{json,md,csv,svg,html}} written to {}",
            dir.display()
        );
    }
    outcome?;
    if report.interrupted {
        return Err(LabError::interrupted());
    }
    Ok(())
}

fn to_json(report: &MatrixReport) -> LabResult<String> {
    serde_json::to_string_pretty(report)
        .map(|s| s + "\n")
        .map_err(LabError::failed)
}

/// matrix.json, .md, .csv, .svg and .html in `dir`.
pub fn write_all_formats(report: &MatrixReport, dir: &Path) -> LabResult<()> {
    output::write_text(&dir.join("matrix.json"), &to_json(report)?)?;
    for format in report::Format::ALL {
        let text = report::render(report, format).map_err(LabError::failed)?;
        output::write_text(&dir.join(format!("matrix.{}", format.extension())), &text)?;
    }
    Ok(())
}

fn seed_from_clock() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MatrixArgs,
    }

    fn parse_all(a: &[&str]) -> Result<MatrixArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("matrix").chain(a.iter().copied())).map(|c| c.args)
    }

    fn parse(a: &[&str]) -> Result<SweepArgs, clap::Error> {
        parse_all(a).map(|m| m.sweep)
    }

    #[test]
    fn defaults_are_every_backend_but_wireguard_and_the_classic_six() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.backends, Backend::ALL[..5]);
        assert!(a.backends.iter().all(|b| !b.is_wireguard()));
        assert_eq!(a.plan(0).unwrap().suites, CipherSuite::classic_six());
        assert_eq!(a.crypto, [CryptoChoice::Auto, CryptoChoice::Soft]);
        assert_eq!(a.repeat, 3);
    }

    /// Issue 43 item 4: the default cells moved 100 MB, over in under 0.5 s on every fast
    /// row, so `compare` called every cell inconclusive and a 30 % drop passed
    /// --fail-on-regression. Default cells are timed long enough for it to judge.
    #[test]
    fn default_cells_are_timed_long_enough_for_compare_to_flag_a_drop() {
        use model::matrix::{Cell, Measurement, Row, RowKey, RowVariant, SideCpu, HOST};
        let plan = parse(&[]).unwrap().plan(0).unwrap();
        let seconds = plan.time_s.expect("the default sweep is timed");
        assert!(seconds >= model::MIN_STABLE_SECONDS, "{seconds}");
        // A cell of that length, the default repeats, and the same 30 % slower.
        let cell = |scale: f64| {
            let samples: Vec<f64> = [300.0, 320.0, 310.0].iter().map(|v| v * scale).collect();
            let cpu = model::Summary::of(&[50.0]).unwrap();
            Cell::measured(
                CipherSuite::classic_six()[0],
                Measurement {
                    mb_per_s: model::Summary::of(&samples).unwrap(),
                    samples,
                    timed_s: plan.time_s,
                    bytes: vec![],
                    cpu: SideCpu {
                        sender_percent: cpu,
                        receiver_percent: cpu,
                    },
                    tunnel_cpu: None,
                    percent_of_plain: None,
                    served_by: None,
                    cpu_steal_percent: None,
                    ceiling: None,
                    percent_of_ceiling: None,
                    notes: vec![],
                },
            )
        };
        let matrix = |scale| {
            let mut r = MatrixReport::new(plan.suites.clone(), plan.bytes, plan.repeat, 0);
            r.rows.push(Row {
                key: RowKey::new(Backend::Userspace, RowVariant::Crypto(CryptoChoice::Auto), HOST),
                cells: vec![cell(scale)],
                notes: vec![],
            });
            r
        };
        let comparison = report::compare(&matrix(1.0), &matrix(0.7), Default::default()).unwrap();
        assert_eq!(comparison.regressions().count(), 1, "{}", comparison.render());
        // --bytes (or --vm-bytes) sizes the transfers instead; --time sets their length.
        assert_eq!(parse(&["--bytes", "20MB"]).unwrap().plan(0).unwrap().time_s, None);
        let timed = parse(&["--time", "2.5"]).unwrap().plan(0).unwrap();
        assert_eq!(timed.time_s, Some(2.5));
        assert_eq!(
            parse(&["--time", "2", "--bytes", "1GB"])
                .err()
                .unwrap()
                .exit_code(),
            2
        );
    }

    #[test]
    fn lists_parse_and_bad_values_are_usage_errors() {
        let a = parse(&[
            "--backends",
            "xfrm,userspace",
            "--ciphers",
            "aes-256-gcm,aes-256-cbc-hmac-sha256",
        ])
        .unwrap();
        assert_eq!(a.backends, [Backend::Xfrm, Backend::Userspace]);
        assert_eq!(a.plan(0).unwrap().suites.len(), 2);
        assert_eq!(parse(&["--backends", "ipsec"]).err().unwrap().exit_code(), 2);
        assert_eq!(parse(&["--ciphers", "aes-512-gcm"]).err().unwrap().exit_code(), 2);
        let none = parse(&["--ciphers", "none"]).unwrap();
        assert_eq!(none.plan(0).unwrap_err().kind, lab::ExitKind::Usage);
        // -P: one count, or several (the scaling curve), each from 1 to MAX_STREAMS; none
        // given, the largest --threads count.
        let curve = parse(&["-P", "4,1,2"]).unwrap();
        assert_eq!(curve.plan(0).unwrap().parallel, [1, 2, 4]);
        let threads = parse(&["--threads", "1,3"]).unwrap();
        assert_eq!(threads.plan(0).unwrap().parallel, [3]);
        for bad in ["0", "1,0", "1,x", "129"] {
            assert_eq!(parse(&["-P", bad]).err().unwrap().exit_code(), 2, "-P {bad}");
        }
    }

    #[test]
    fn packet_sizes_latency_and_ndr_reach_the_plan_and_bad_ones_are_usage_errors() {
        let a = parse(&[
            "--backends",
            "plain,userspace",
            "--packet-sizes",
            "tcp,64,IMIX,64",
            "--trial-time",
            "0.5",
            "--find-ndr",
            "--latency",
        ])
        .unwrap();
        let plan = a.plan(0).unwrap();
        let imix = Some(PacketSize::Imix);
        assert_eq!(plan.packet_sizes, [None, Some(PacketSize::Fixed(64)), imix]);
        assert_eq!((plan.trial_seconds, plan.latency), (0.5, true));
        assert_eq!(plan.find_ndr, Some(vec![0.0, 0.5]));
        // Without the option: the TCP rows alone, as before.
        let tcp = parse(&[]).unwrap().plan(0).unwrap();
        assert_eq!(
            (tcp.packet_sizes.as_slice(), tcp.find_ndr.clone()),
            (&[None][..], None)
        );
        // Bad values of the option itself: clap's usage error.
        for bad in ["64,jumbo", "0", "udp"] {
            let e = parse(&["--packet-sizes", bad]).err().unwrap();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(
                e.to_string().contains("tcp for the bulk TCP transfer"),
                "{bad}: {e}"
            );
        }
        // Values that parse but do not fit the sweep: refused before anything runs.
        for (given, says) in [
            (&["--packet-sizes", "20"][..], "below the 44 bytes"),
            (&["--packet-sizes", "1600"][..], "larger than the link's MTU"),
            (&["--find-ndr"][..], "give --packet-sizes"),
            (
                &["--packet-sizes", "tcp", "--find-ndr", "0"][..],
                "give --packet-sizes",
            ),
            (&["--trial-time", "5"][..], "give --packet-sizes"),
            (&["--packet-sizes", "64", "--trial-time", "0"][..], "from 0.1 to"),
            (
                &["--packet-sizes", "64", "--trial-time", "NaN"][..],
                "from 0.1 to",
            ),
        ] {
            let args: Vec<&str> = ["--backends", "plain,userspace"]
                .into_iter()
                .chain(given.iter().copied())
                .collect();
            let e = parse(&args).unwrap().plan(0).unwrap_err();
            assert_eq!(e.kind, lab::ExitKind::Usage, "{given:?}");
            assert!(format!("{e:#}").contains(says), "{given:?}: {e:#}");
        }
        let e = parse(&["--find-ndr", "60"]).err().unwrap();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn every_sweep_option_is_in_the_plan_file_or_the_childs_output() {
        let cli = <Cli as clap::CommandFactory>::command();
        let output = [
            "json",
            "out",
            "no_progress",
            "report_cells",
            "report_cells_file",
            "plan_file",
            "help",
        ];
        for arg in cli.get_arguments() {
            let id = arg.get_id().as_str();
            assert!(
                sweep_plan_options().iter().any(|o| o == id) || output.contains(&id),
                "matrix --{id}: add it to SweepArgs (a child takes it from the plan) or to the output options"
            );
        }
    }

    #[test]
    fn a_plan_file_is_taken_whole_and_sweep_options_are_refused_with_it() {
        // What a parent sweep gives its soft child; defaults are no options given.
        let child = parse_all(&[
            "--plan-file",
            "p.json",
            "--no-progress",
            "--report-cells",
            "--json",
            "m.json",
        ])
        .unwrap();
        assert_eq!(child.plan_file.as_deref(), Some(Path::new("p.json")));
        parse_all(&["--plan-file", "p.json", "--report-cells-file", "cells"]).unwrap();
        for given in [
            &["--backends", "plain"][..],
            &["--bytes", "2MB"][..],
            &["--vm"][..],
            &["--no-baseline"][..],
            &["--crypto", "soft"][..],
            &["-6"][..],
        ] {
            let args: Vec<&str> = ["--plan-file", "p.json"]
                .into_iter()
                .chain(given.iter().copied())
                .collect();
            let e = parse(&args).err().unwrap();
            assert_eq!(e.exit_code(), 2, "{given:?}");
            assert!(e.to_string().contains("--plan-file"), "{given:?}: {e}");
        }
    }
}
