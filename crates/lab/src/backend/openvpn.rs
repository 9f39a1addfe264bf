//! Real OpenVPN 2.6 as a reference row: one `openvpn` process per namespace, point to point
//! over the same veth, the payload flowing between the inner addresses through its TUN
//! devices. `--disable-dco`, so OpenVPN's own single thread moves every packet.
//!
//! `openvpn-dco`: OpenVPN 2.7 (Debian sid's, unpacked by lab/openvpn-dco.sh with its own
//! libraries, or a 2.7 on the PATH) in TLS peer-to-peer mode with data channel offload: its
//! tunnel device is an `ovpn` link (Linux 6.16+), and the kernel encrypts and moves the
//! packets; the processes only hold the TLS control channel. OpenVPN falls back to its own
//! TUN device where it cannot offload, so each end proves the offload once it is up (the
//! device's link kind, over `ip -d link`, and OpenVPN's own log line), or the run fails.
//!
//! CBC suites and `none` use static-key mode (`--secret`, keyed from the run's random
//! [`StaticKey`], the same layout the lab's tunnel uses), with `--cipher AES-N-CBC` and
//! `--auth SHA256|none`. OpenVPN refuses AEAD ciphers in static-key mode ("Cipher
//! 'AES-256-GCM' mode not supported"), so AES-GCM runs in TLS peer-to-peer mode instead:
//! throwaway self-signed EC certificates made with `openssl req`, pinned with
//! `--peer-fingerprint`, `--data-ciphers AES-N-GCM`. The inner MTU is the lab tunnel's, so
//! both carry the same packets without fragmenting.
//!
//! Evidence (`backend_details.openvpn`, [`OpenvpnEvidence`]): `version`, `mode` (static-key or
//! tls-p2p), `cipher`, `auth`, `tun_mtu`, `dco`, and per end `cpu` (`user_s`, `system_s`,
//! `percent_of_core`) of its openvpn process from the moment it was up (its handshake
//! aside), from /proc, `renegotiations`, the TLS handshakes after the first its log shows,
//! and with DCO what showed the offload (`dco`: device, link kind, log line).
//!
//! Rekeying (`--rekey-every N`, TLS mode only): OpenVPN offers no way to start a
//! renegotiation from outside (its management interface has none; SIGUSR1 restarts the
//! whole connection), so it renegotiates on its own timer: end a, the TLS server, with
//! `--reneg-sec N N` (max and min the same: 2.6 otherwise draws each period between them),
//! end b with `--reneg-sec 0`, so only one end starts them and they never cross. The logs
//! carry timestamps (`--machine-readable-output`); each renegotiation is read off end a's
//! ([`OpenvpnRekey`]): it starts at "TLS: soft reset" and its switch ends when the new TLS
//! session is up ("Control Channel: ..."), when the data moves to the new key. OpenVPN's
//! timer counts from the key's handshake, so the periods come out a little longer than N.
//! The first renegotiation, as the tunnel comes up, is awaited before the transfer (see
//! [`OpenvpnEnd::wait_ready`]).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use model::evidence::{OpenvpnEvidence, OpenvpnProcess};
use model::rekey::Switch;
use model::{CipherSuite, Hmac, KeyBits, RunPlan};
use netns::Namespace;
use procstat::CpuTime;
use tunnel_proto::{KeyDirection, StaticKey};

use super::daemon;
use super::site::{Side, Site};
use crate::error::{LabError, LabResult};

const PORT: u16 = 1194;
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const READY_LINE: &str = "Initialization Sequence Completed";
/// The initiator's line as a renegotiation starts.
const SOFT_RESET: &str = "TLS: soft reset";
/// Each end's line as a TLS handshake completes, the first one's and each renegotiation's.
const HANDSHAKE_DONE: &str = "Control Channel: ";
/// How long a renegotiation that started within the transfer may take to show its end.
const RENEGOTIATION_TIMEOUT: Duration = Duration::from_secs(5);
const INSTALL: &str =
    "openvpn is not installed: install it with `apt-get install openvpn` (Debian/Ubuntu) or `dnf install openvpn`";
/// Where lab/openvpn-dco.sh unpacks OpenVPN 2.7: DIR/VERSION/openvpn, DIR/.from-sid naming
/// the version.
const LAB_OPENVPN: &str = "/var/lib/ipsec-lab/openvpn";
/// OpenVPN's line once its DCO device exists.
const DCO_OPENED: &str = "DCO device ";
const NO_DCO_OPENVPN: &str = "--backend openvpn-dco needs OpenVPN 2.7 (it drives the kernel's ovpn): \
     `lab/setup.sh --second-kernel` unpacks Debian sid's into /var/lib/ipsec-lab/openvpn, beside the host's";

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The OpenVPN a run starts, with the first line of its `--version`: the PATH's, or for DCO
/// one of 2.7 or later (the lab's first).
fn program(plan: &RunPlan) -> Option<(PathBuf, String)> {
    let with_version = |p: PathBuf| {
        let line = daemon::version_line(&p.display().to_string()).unwrap_or_else(|| "unknown".into());
        (p, line)
    };
    if plan.backend() != model::Backend::OpenvpnDco {
        return find_program("openvpn").map(with_version);
    }
    let lab = std::fs::read_to_string(Path::new(LAB_OPENVPN).join(".from-sid"))
        .ok()
        .map(|v| Path::new(LAB_OPENVPN).join(v.trim()).join("openvpn"))
        .filter(|p| p.is_file());
    lab.or_else(|| find_program("openvpn"))
        .map(with_version)
        .filter(|(_, line)| drives_ovpn(line))
}

/// Whether the OpenVPN whose `--version` says `line` is 2.7 or later with DCO (2.6 drives
/// only the out-of-tree ovpn-dco module).
fn drives_ovpn(line: &str) -> bool {
    let version = line.split_whitespace().nth(1).unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (2, 7) && line.contains("[DCO]")
}

/// Whether the kernel `release` (None: this one) has the `ovpn` module, built in, loaded or
/// among its modules.
pub fn kernel_has_ovpn(release: Option<&str>) -> bool {
    if release.is_none() && Path::new("/sys/module/ovpn").exists() {
        return true;
    }
    let release = release.map_or_else(model::env::kernel_release, str::to_string);
    ["modules.dep", "modules.builtin"].iter().any(|f| {
        std::fs::read_to_string(Path::new("/lib/modules").join(&release).join(f)).is_ok_and(|t| {
            t.lines()
                .any(|l| l.split(':').next().is_some_and(|m| m.contains("/ovpn.ko")))
        })
    })
}

/// Refuses, before anything is created, when openvpn (or, for GCM, openssl) is missing, and
/// for DCO an OpenVPN of 2.7 or a kernel with `ovpn`.
pub async fn preflight(plan: &RunPlan) -> LabResult<()> {
    let dco = plan.backend() == model::Backend::OpenvpnDco;
    if program(plan).is_none() {
        let why = if dco { NO_DCO_OPENVPN } else { INSTALL };
        return Err(LabError::capability(anyhow::anyhow!(why)));
    }
    if dco && !kernel_has_ovpn(None) {
        return Err(LabError::capability(anyhow::anyhow!(
            "this kernel ({}) has no ovpn module (OpenVPN's data channel offload, Linux 6.16 and later): add \
             --vm auto (a VM booting a kernel that has it; `lab/setup.sh --second-kernel` fetches Debian sid's), \
             or use --backend openvpn",
            model::env::kernel_release()
        )));
    }
    if !matches!(plan.suite(), CipherSuite::AesCbc { .. } | CipherSuite::None)
        && find_program("openssl").is_none()
    {
        return Err(LabError::capability(anyhow::anyhow!(
            "openssl is needed to make the throwaway certificates for OpenVPN's AES-GCM (TLS) mode: \
             `apt-get install openssl`"
        )));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    StaticKey,
    TlsP2p,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::StaticKey => "static-key",
            Mode::TlsP2p => "tls-p2p",
        }
    }
}

/// OpenVPN's names for a suite: (mode, cipher, auth).
fn openvpn_suite(suite: CipherSuite) -> (Mode, String, &'static str) {
    let bits = |k: KeyBits| k.bits();
    match suite {
        CipherSuite::None => (Mode::StaticKey, "none".into(), "none"),
        CipherSuite::AesCbc { key, hmac } => (
            Mode::StaticKey,
            format!("AES-{}-CBC", bits(key)),
            if hmac == Hmac::Sha256 { "SHA256" } else { "none" },
        ),
        CipherSuite::AesGcm { key } => (Mode::TlsP2p, format!("AES-{}-GCM", bits(key)), "none (AEAD)"),
        // Refused by the plan (not measured in this lab); OpenVPN's own name for it.
        CipherSuite::ChaCha20Poly1305 => (Mode::TlsP2p, "CHACHA20-POLY1305".into(), "none (AEAD)"),
    }
}

/// One openvpn process and where it logs.
struct Process {
    child: Child,
    log: PathBuf,
    end: &'static str,
    /// Its record in the state file, forgotten once it has exited.
    record: owner::Record,
}

impl Process {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    fn ready(&self) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|t| t.contains(READY_LINE))
    }

    /// User and system CPU so far, from /proc/PID/stat; none once the process is gone.
    fn cpu(&self) -> CpuTime {
        procstat::Stat::of_process(self.child.id()).map_or_else(CpuTime::default, |s| s.cpu())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // OpenVPN closes its TUN device on SIGTERM, which removes it.
        daemon::stop(&mut self.child, Duration::from_secs(3));
        owner::forget(&self.record);
    }
}

fn failed(what: impl std::fmt::Display) -> LabError {
    LabError::failed(anyhow::anyhow!("openvpn backend: {what}"))
}

fn write_private(path: &Path, text: &str) -> LabResult<()> {
    daemon::write_private(path, text).map_err(|e| failed(format!("write {}: {e}", path.display())))
}

/// A throwaway self-signed EC certificate for `name` in `dir`; returns (cert, key, sha256
/// fingerprint as OpenVPN wants it).
fn make_certificate(dir: &Path, name: &str) -> LabResult<(PathBuf, PathBuf, String)> {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ])
        .args(["-days", "1", "-subj", &format!("/CN={name}"), "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .map_err(|e| failed(format!("run openssl req: {e}")))?;
    if !out.status.success() {
        return Err(failed(format!(
            "openssl req: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(&cert)
        .output()
        .map_err(|e| failed(format!("run openssl x509: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let fingerprint = text
        .trim()
        .split_once('=')
        .map(|(_, f)| f.to_string())
        .ok_or_else(|| failed(format!("no fingerprint in {text:?}")))?;
    Ok((cert, key, fingerprint))
}

/// What both ends share, made once per run: the static key or both ends' certificates
/// (pinned by fingerprint) in a private directory, and each end's mode arguments.
pub struct Material {
    program: PathBuf,
    dco: bool,
    mode: Mode,
    cipher: String,
    auth: &'static str,
    tun_mtu: u32,
    version: String,
    /// Per end (a, b): the arguments that key it.
    args: [Vec<String>; 2],
    /// Keys, certificates and logs: private, recorded, removed when the run ends (after its
    /// processes: a local run drops its ends before its secrets).
    dir: owner::PrivateDir,
}

impl Material {
    pub fn create(plan: &RunPlan) -> LabResult<Material> {
        let (mode, cipher, auth) = openvpn_suite(plan.suite());
        let (program, version) =
            program(plan).ok_or_else(|| LabError::capability(anyhow::anyhow!(INSTALL)))?;
        let dir = owner::PrivateDir::new("ipl-openvpn-")?;
        let mut args: [Vec<String>; 2] = [Vec::new(), Vec::new()];
        match mode {
            Mode::StaticKey => {
                let key = StaticKey::generate().map_err(LabError::failed)?;
                let file = dir.join("static.key");
                write_private(&file, &key.to_openvpn_file())?;
                for (args, dir) in args.iter_mut().zip([KeyDirection::Normal, KeyDirection::Inverse]) {
                    args.extend([
                        "--secret".into(),
                        file.display().to_string(),
                        dir.openvpn_number().to_string(),
                        "--cipher".into(),
                        cipher.clone(),
                        "--auth".into(),
                        auth.into(),
                    ]);
                }
            }
            Mode::TlsP2p => {
                let (cert_a, key_a, fp_a) = make_certificate(dir.path(), "ipl-a")?;
                let (cert_b, key_b, fp_b) = make_certificate(dir.path(), "ipl-b")?;
                let ends = [
                    (&cert_a, &key_a, &fp_b, "--tls-server"),
                    (&cert_b, &key_b, &fp_a, "--tls-client"),
                ];
                for (args, (cert, key, peer_fp, role)) in args.iter_mut().zip(ends) {
                    args.extend([
                        role.to_string(),
                        "--cert".into(),
                        cert.display().to_string(),
                        "--key".into(),
                        key.display().to_string(),
                        "--peer-fingerprint".into(),
                        peer_fp.clone(),
                        "--data-ciphers".into(),
                        cipher.clone(),
                    ]);
                    if role == "--tls-server" {
                        args.extend(["--dh".into(), "none".into()]);
                    }
                }
            }
        }
        Ok(Material {
            version,
            dco: plan.backend() == model::Backend::OpenvpnDco,
            program,
            mode,
            cipher,
            auth,
            tun_mtu: tunnel::inner_mtu_over(plan.link().mtu, plan.suite(), plan.link().addressing.family()),
            args,
            dir,
        })
    }

    /// The run's evidence from both ends' processes.
    pub fn evidence(&self, ends: [OpenvpnProcess; 2]) -> OpenvpnEvidence {
        OpenvpnEvidence {
            version: self.version.clone(),
            mode: self.mode.name().into(),
            cipher: self.cipher.clone(),
            auth: self.auth.into(),
            tun_mtu: self.tun_mtu,
            dco: self.dco,
            ends: ends.into_iter().map(|e| (e.side.clone(), e)).collect(),
        }
    }
}

/// One end: an openvpn process in the end's namespace. Dropping it stops the process.
pub struct OpenvpnEnd {
    process: Process,
    /// With DCO: the end's namespace and device, checked once the end is up, and what
    /// showed the offload.
    dco: Option<(PathBuf, String)>,
    dco_proof: Option<model::evidence::DcoProof>,
    started: Instant,
    /// The process's CPU when it was up: what the handshake cost is not the tunnel's.
    cpu_at_start: CpuTime,
    /// A rekey run's end a: how long [`OpenvpnEnd::wait_ready`] waits for the first
    /// renegotiation, done before the transfer starts.
    first_renegotiation: Option<Duration>,
}

impl OpenvpnEnd {
    /// Starts the end's process; [`OpenvpnEnd::wait_ready`] then waits for its handshake.
    pub fn start(plan: &RunPlan, material: &Material, site: &Site<'_>) -> LabResult<OpenvpnEnd> {
        let ad = plan.link().addressing;
        let (end, args) = (site.side.name(), &material.args[site.side as usize]);
        let (inner, inner_peer) = match site.side {
            Side::A => (ad.inner_a, ad.inner_b),
            Side::B => (ad.inner_b, ad.inner_a),
        };
        let (outer, outer_peer) = (site.hosts.of(site.side), site.hosts.of(site.side.other()));
        let log = material.dir.join(&format!("openvpn-{end}.log"));
        let dev = format!("ipl-ovpn-{end}");
        let child = openvpn_command(material, site.namespace, &dev, &log)
            .args(addresses(inner, inner_peer, ad.prefix_len, outer, outer_peer))
            .args(args)
            .args(renegotiation(plan, site.side))
            .spawn()
            .map_err(|e| failed(format!("start openvpn in {}: {e}", site.namespace.name())))?;
        let record = owner::Record::process(child.id(), "openvpn");
        let recorded = owner::record(record.clone());
        // Built either way, so a failure to record still stops it (on drop).
        let me = OpenvpnEnd {
            dco: material.dco.then(|| (site.namespace.path(), dev.clone())),
            dco_proof: None,
            process: Process {
                child,
                log,
                end,
                record,
            },
            started: Instant::now(),
            cpu_at_start: CpuTime::default(),
            first_renegotiation: match (plan.workload().rekey, site.side) {
                (Some(schedule), Side::A) => {
                    Some(Duration::from_secs_f64(schedule.every_s) + RENEGOTIATION_TIMEOUT + READY_TIMEOUT)
                }
                _ => None,
            },
        };
        recorded?;
        Ok(me)
    }

    /// Waits until OpenVPN says it is up (both ends must be started for that); a rekey run's
    /// end a also until its first renegotiation is done. That one starts as the tunnel comes
    /// up, often before the other end is ready for it ("key IDs out of sync"), and is then
    /// retried a second or so later: not what a rekey under load costs, and it would shift
    /// every later one; after it OpenVPN keeps its period.
    pub fn wait_ready(&mut self) -> LabResult<()> {
        self.wait_for(READY_TIMEOUT, "ready", |p| p.ready())?;
        if let Some((namespace, dev)) = &self.dco {
            self.dco_proof = Some(dco_proof(namespace, dev, &self.process)?);
        }
        if let Some(limit) = self.first_renegotiation {
            self.wait_for(limit, "done with its first renegotiation", |p| {
                Log::parse(&std::fs::read_to_string(&p.log).unwrap_or_default()).renegotiations() >= 1
            })?;
        }
        self.started = Instant::now();
        self.cpu_at_start = self.process.cpu();
        Ok(())
    }

    fn wait_for(&mut self, limit: Duration, what: &str, done: impl Fn(&Process) -> bool) -> LabResult<()> {
        let deadline = Instant::now() + limit;
        let p = &mut self.process;
        loop {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Err(failed(format!(
                    "openvpn ({}) exited ({status}) while starting:\n{}",
                    p.end,
                    p.log_tail()
                )));
            }
            if done(p) {
                return Ok(());
            }
            // This wait blocks the task that would see Ctrl-C: it looks for itself.
            if crate::signal::requested() {
                return Err(LabError::interrupted());
            }
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "openvpn not {what} after {limit:?}:\n[{}]\n{}",
                    p.end,
                    p.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process's CPU since it was up, and the renegotiations its log shows.
    pub fn finish(&self) -> OpenvpnProcess {
        let cpu = self.process.cpu();
        let log = std::fs::read_to_string(&self.process.log).unwrap_or_default();
        OpenvpnProcess {
            side: self.process.end.into(),
            pid: self.process.child.id(),
            cpu: model::CpuUsage::new(
                cpu.user_s - self.cpu_at_start.user_s,
                cpu.system_s - self.cpu_at_start.system_s,
                self.started.elapsed().as_secs_f64(),
            ),
            renegotiations: Log::parse(&log).renegotiations(),
            dco: self.dco_proof.clone(),
        }
    }

    /// The rekey of a local run (`--rekey-every`): end a starts every renegotiation, its log
    /// says when.
    pub fn rekey(a: &OpenvpnEnd) -> OpenvpnRekey {
        OpenvpnRekey {
            log: a.process.log.clone(),
        }
    }
}

/// What shows the kernel carries an end's data channel: its device is an `ovpn` link (the
/// kernel's word, `ip -d link` in the end's namespace) and OpenVPN logged opening it.
/// OpenVPN 2.7 falls back to a TUN device where it cannot offload: that fails the run.
fn dco_proof(namespace: &Path, dev: &str, p: &Process) -> LabResult<model::evidence::DcoProof> {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", namespace.display()))
        .args(["ip", "-j", "-d", "link", "show", "dev", dev])
        .output()
        .map_err(|e| failed(format!("nsenter ip link show {dev}: {e}")))?;
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let kind = links[0]["linkinfo"]["info_kind"]
        .as_str()
        .unwrap_or("none")
        .to_string();
    let log = std::fs::read_to_string(&p.log).unwrap_or_default();
    let line = log
        .lines()
        .find(|l| l.contains(DCO_OPENED) && l.contains(dev) && l.ends_with("opened"));
    match (kind.as_str(), line) {
        ("ovpn", Some(line)) => Ok(model::evidence::DcoProof {
            device: dev.into(),
            kind,
            // After the timestamp and flags of --machine-readable-output.
            log_line: line[line.find(DCO_OPENED).unwrap_or(0)..].to_string(),
        }),
        _ => Err(failed(format!(
            "end {} did not offload its data channel: {dev} is a {kind} link{}; OpenVPN carries it in userspace \
             (use --backend openvpn for that):\n{}",
            p.end,
            if line.is_none() { " and its log has no DCO device" } else { "" },
            p.log_tail()
        ))),
    }
}

/// `--reneg-sec` for a rekey run: end a renegotiates every period exactly, end b never of
/// its own accord; none otherwise (OpenVPN's default hour).
fn renegotiation(plan: &RunPlan, side: Side) -> Vec<String> {
    let Some(schedule) = plan.workload().rekey else {
        return Vec::new();
    };
    // The plan allows whole seconds only.
    let every = format!("{}", schedule.every_s.round() as u64);
    match side {
        Side::A => vec!["--reneg-sec".into(), every.clone(), every],
        Side::B => vec!["--reneg-sec".into(), "0".into()],
    }
}

/// What an OpenVPN log (`--machine-readable-output`: each line starts `SECONDS.MICROS FLAGS`)
/// says of its TLS handshakes: when each renegotiation started (the initiator's soft reset)
/// and when each handshake completed, in Unix seconds.
#[derive(Debug, Default, PartialEq)]
struct Log {
    soft_resets: Vec<f64>,
    handshakes: Vec<f64>,
}

impl Log {
    fn parse(text: &str) -> Log {
        let mut log = Log::default();
        for line in text.lines() {
            let mut parts = line.splitn(3, ' ');
            let (Some(time), Some(_flags), Some(message)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let Ok(time) = time.parse::<f64>() else {
                continue;
            };
            if message.starts_with(SOFT_RESET) {
                log.soft_resets.push(time);
            } else if message.starts_with(HANDSHAKE_DONE) {
                log.handshakes.push(time);
            }
        }
        log
    }

    /// Handshakes after the first: the renegotiations that completed.
    fn renegotiations(&self) -> u32 {
        self.handshakes.len().saturating_sub(1) as u32
    }

    /// Each soft reset with the first handshake that completed after it (None: not yet); a
    /// soft reset followed by another before any handshake was given up and is left out.
    fn switches(&self) -> Vec<(f64, Option<f64>)> {
        let mut out = Vec::new();
        for (k, &start) in self.soft_resets.iter().enumerate() {
            let next_reset = self.soft_resets.get(k + 1).copied().unwrap_or(f64::INFINITY);
            let done = self.handshakes.iter().copied().find(|&h| h >= start);
            match done {
                Some(done) if done <= next_reset => out.push((start, Some(done))),
                Some(_) => {}
                None if next_reset.is_infinite() => out.push((start, None)),
                None => {}
            }
        }
        out
    }
}

/// OpenVPN's renegotiations, read off end a's log when the transfer is over: the scheduled
/// switch does nothing (OpenVPN offers no way to start one).
pub struct OpenvpnRekey {
    log: PathBuf,
}

impl crate::rekey::Rekey for OpenvpnRekey {
    fn switch(&mut self) -> LabResult<()> {
        Ok(())
    }

    fn observed(&mut self, epoch: SystemTime, seconds: f64) -> LabResult<Option<Vec<Switch>>> {
        let epoch_s = epoch
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_err(|e| failed(format!("the clock is before 1970: {e}")))?
            .as_secs_f64();
        let now_s = || {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        let deadline = Instant::now() + RENEGOTIATION_TIMEOUT;
        loop {
            let text = std::fs::read_to_string(&self.log)
                .map_err(|e| failed(format!("read {}: {e}", self.log.display())))?;
            let switches = Log::parse(&text).switches();
            // One that started within the transfer and is still under way: its end is due in
            // the log shortly.
            let pending = switches
                .iter()
                .find(|(start, done)| done.is_none() && (epoch_s..epoch_s + seconds).contains(start));
            match pending {
                Some((start, _)) if Instant::now() >= deadline => {
                    return Err(failed(format!(
                        "a renegotiation started {:.2} s into the transfer did not complete within {:.0} s of its end (at {:.2} s)",
                        start - epoch_s,
                        RENEGOTIATION_TIMEOUT.as_secs_f64(),
                        now_s() - epoch_s
                    )));
                }
                Some(_) => std::thread::sleep(Duration::from_millis(50)),
                None => {
                    return Ok(Some(
                        switches
                            .into_iter()
                            .filter_map(|(start, done)| {
                                Some(Switch {
                                    at_s: start - epoch_s,
                                    took_ms: Some((done? - start).max(0.0) * 1e3),
                                })
                            })
                            .collect(),
                    ))
                }
            }
        }
    }
}

/// The tunnel's addresses: `--ifconfig` (IPv4) or `--ifconfig-ipv6 ADDR/BITS PEER` with
/// `--proto udp6` (an IPv6-only point-to-point tunnel, OpenVPN 2.5 and later), and the outer
/// `--local`/`--remote`.
fn addresses(
    inner: IpAddr,
    inner_peer: IpAddr,
    prefix_len: u8,
    outer: IpAddr,
    outer_peer: IpAddr,
) -> Vec<String> {
    let mut args = match inner {
        IpAddr::V4(_) => vec!["--ifconfig".into(), inner.to_string(), inner_peer.to_string()],
        IpAddr::V6(_) => vec![
            "--ifconfig-ipv6".into(),
            format!("{inner}/{prefix_len}"),
            inner_peer.to_string(),
        ],
    };
    if outer.is_ipv6() {
        args.extend(["--proto".into(), "udp6".into()]);
    }
    args.extend([
        "--local".into(),
        outer.to_string(),
        "--remote".into(),
        outer_peer.to_string(),
    ]);
    args
}

fn openvpn_command(material: &Material, ns: &Namespace, dev: &str, log: &Path) -> Command {
    let mut cmd = ns.command(&material.program);
    cmd.args(["--dev", dev, "--dev-type", "tun"]);
    if !material.dco {
        cmd.arg("--disable-dco");
    }
    cmd.args([
        "--port",
        &PORT.to_string(),
        "--tun-mtu",
        &material.tun_mtu.to_string(),
        "--mssfix",
        "0",
    ])
    // Timestamps to the microsecond on every line: a renegotiation's time is read off them.
    .args([
        "--verb",
        "3",
        "--machine-readable-output",
        "--mute-replay-warnings",
    ])
    .arg("--log")
    .arg(log)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2.7 with DCO drives the kernel's ovpn; 2.6 (whose [DCO] is ovpn-dco's) and a 2.7
    /// built without DCO do not.
    #[test]
    fn only_openvpn_2_7_with_dco_drives_ovpn() {
        let tail = "x86_64-pc-linux-gnu [SSL (OpenSSL)] [LZO] [LZ4] [EPOLL] [PKCS11] [MH/PKTINFO] [AEAD]";
        assert!(drives_ovpn(&format!("OpenVPN 2.7.8 {tail} [DCO]")));
        assert!(drives_ovpn(&format!("OpenVPN 3.0.1 {tail} [DCO]")));
        assert!(!drives_ovpn(&format!("OpenVPN 2.6.14 {tail} [DCO]")));
        assert!(!drives_ovpn(&format!("OpenVPN 2.7.8 {tail}")));
        assert!(!drives_ovpn("unknown"));
    }

    /// End a's log of a run with `--reneg-sec 1 1` (OpenVPN 2.6.14, trimmed).
    const INITIATOR: &str = "\
1796523946.474113 14000003 TLS: Initial packet from [AF_INET]10.99.0.2:1194, sid=29fc1718 548ab9df
1796523946.475863 14000002 Control Channel: TLSv1.3, cipher TLSv1.3 TLS_AES_256_GCM_SHA384, peer certificate: 256 bits ECprime256v1
1796523946.475870 1 [b] Peer Connection Initiated with [AF_INET]10.99.0.2:1194
1796523947.529251 1 Initialization Sequence Completed
1796523947.529277 14000002 Data Channel: cipher 'AES-256-GCM', peer-id: 0
1796523947.529282 14000003 TLS: soft reset sec=1/1 bytes=0/-1 pkts=0/0
1796523947.531000 14000002 VERIFY OK: depth=0, CN=b
1796523947.531401 14000002 Control Channel: TLSv1.3, cipher TLSv1.3 TLS_AES_256_GCM_SHA384
1796523948.691576 14000003 TLS: soft reset sec=1/1 bytes=0/-1 pkts=0/0
1796523948.698272 14000002 Control Channel: TLSv1.3, cipher TLSv1.3 TLS_AES_256_GCM_SHA384
1796523949.957455 14000003 TLS: soft reset sec=1/1 bytes=140/-1 pkts=2/0
not a machine-readable line
";

    #[test]
    fn each_soft_reset_is_paired_with_the_handshake_that_completed_it() {
        let log = Log::parse(INITIATOR);
        assert_eq!(log.soft_resets.len(), 3);
        assert_eq!(log.renegotiations(), 2);
        let switches = log.switches();
        assert_eq!(switches.len(), 3);
        let (start, done) = switches[0];
        assert_eq!(start, 1796523947.529282);
        assert!((done.unwrap() - start - 0.002119).abs() < 1e-6, "{switches:?}");
        assert!((switches[1].1.unwrap() - switches[1].0 - 0.006696).abs() < 1e-6);
        // The last is still under way.
        assert_eq!(switches[2], (1796523949.957455, None));
    }

    /// A soft reset given up (another came before any handshake) is no switch.
    #[test]
    fn a_renegotiation_given_up_is_left_out() {
        let log = Log::parse(
            "10.0 3 TLS: soft reset sec=1/1\n11.0 3 TLS: soft reset sec=1/1\n11.5 2 Control Channel: TLSv1.3\n",
        );
        assert_eq!(log.switches(), [(11.0, Some(11.5))]);
        assert_eq!(log.renegotiations(), 0);
    }

    #[test]
    fn the_observed_switches_are_timed_from_the_epoch_and_wait_for_nothing_before_it() {
        let dir = tempfile_dir();
        let log = dir.join("openvpn-a.log");
        std::fs::write(
            &log,
            INITIATOR.replace("1796523949.957455 14000003 TLS: soft reset", "x"),
        )
        .unwrap();
        let mut rekey = OpenvpnRekey { log };
        let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(1796523947.0);
        let got = crate::rekey::Rekey::observed(&mut rekey, epoch, 3.5)
            .unwrap()
            .unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!((got[0].at_s - 0.529282).abs() < 1e-5, "{got:?}");
        assert!((got[1].took_ms.unwrap() - 6.696).abs() < 1e-2, "{got:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ipl-openvpn-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
