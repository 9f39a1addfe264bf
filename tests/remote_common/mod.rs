//! The harness of the two-host tests: a namespace pair playing two hosts, `serve` in
//! namespace b, `run --peer` from namespace a, and checks of what either side installed.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use netns::{Topology, TopologySpec};

use crate::common;

pub const SERVER: &str = "198.18.0.2";

pub struct Lab {
    pub topo: Option<Topology>,
    pub rt: tokio::runtime::Runtime,
    pub psk: PathBuf,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl Lab {
    pub fn new(test: &str) -> Option<Lab> {
        Lab::with_addressing(test, model::Addressing::default())
    }

    /// A lab whose two "hosts" are addressed from `addressing` (e.g. the IPv6 plan).
    pub fn with_addressing(test: &str, addressing: model::Addressing) -> Option<Lab> {
        if !common::root_or_skip(test) {
            return None;
        }
        let lock = common::lab_lock();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let spec = TopologySpec {
            run_id: netns::new_run_id(),
            mtu: 1500,
            addressing,
        };
        let topo = rt.block_on(Topology::create(&spec)).expect("topology");
        let psk = key_file(&format!("{test}-{}", spec.run_id), 0o600);
        Some(Lab {
            topo: Some(topo),
            rt,
            psk,
            _lock: lock,
        })
    }

    pub fn topo(&self) -> &Topology {
        self.topo.as_ref().unwrap()
    }

    pub fn serve(&self) -> Server {
        self.serve_with(&[])
    }

    /// `ipsec-lab serve` in namespace b with extra arguments.
    pub fn serve_with(&self, extra: &[&str]) -> Server {
        self.serve_wrapped(&[], extra)
    }

    /// `ipsec-lab serve` in namespace b, started through `wrapper` (e.g. `prlimit --nofile=64
    /// --`, which execs it: the child's pid is the server's).
    pub fn serve_wrapped(&self, wrapper: &[&str], extra: &[&str]) -> Server {
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = self.topo().b.command(program);
                c.args(args).arg(env!("CARGO_BIN_EXE_ipsec-lab"));
                c
            }
            None => self.topo().b.command(env!("CARGO_BIN_EXE_ipsec-lab")),
        };
        command
            .args(["serve", "--listen", SERVER, "--psk-file"])
            .arg(&self.psk)
            .args(extra);
        self.serve_command(command)
    }

    /// Starts `command` (made with `self.topo().b.command`, ending in `serve --listen
    /// SERVER ...`) as the server and waits until it listens.
    pub fn serve_command(&self, command: Command) -> Server {
        self.serve_command_within(command, Duration::from_secs(20))
    }

    /// [`Lab::serve_command`], waiting up to `limit` (a sandboxed start under TCG takes ~30 s).
    pub fn serve_command_within(&self, mut command: Command, limit: Duration) -> Server {
        let log = Arc::new(Mutex::new(String::new()));
        let mut child = command
            .env("IPSEC_LAB_LOG", "warn")
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts");
        let stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let server = Server {
            child,
            log,
            reader: Some(reader),
        };
        server.wait_for("listening on", limit);
        server
    }

    /// `ipsec-lab run --peer` from namespace a.
    pub fn client(&self, psk: &PathBuf, args: &[&str]) -> Command {
        let mut c = self.topo().a.command(env!("CARGO_BIN_EXE_ipsec-lab"));
        c.args(["run", "--peer", SERVER, "--no-progress", "--psk-file"])
            .arg(psk)
            .args(args);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.client(&self.psk, args).output().unwrap()
    }

    /// Gives namespace a (the client's host) one more address, `addr` in the lab's /24.
    pub fn add_client_address(&self, addr: &str) {
        let veth = self.topo().veth_a.clone();
        self.add_address('a', &format!("{addr}/24"), &veth);
    }

    /// `ip -n NS address add ADDR dev DEV` in namespace `side` ('a' or 'b'); an IPv6
    /// address skips duplicate address detection (`nodad`), as the lab's own do: until
    /// the kernel's DAD work runs, even on `lo`, the address is tentative and a bind to
    /// it fails with "Cannot assign requested address" (one CI run's failure).
    pub fn add_address(&self, side: char, addr: &str, dev: &str) {
        let ns = if side == 'a' {
            &self.topo().a
        } else {
            &self.topo().b
        };
        let nodad: &[&str] = if addr.contains(':') { &["nodad"] } else { &[] };
        let ok = Command::new("ip")
            .args(["-n", ns.name(), "address", "add", addr, "dev", dev])
            .args(nodad)
            .status()
            .unwrap()
            .success();
        assert!(ok, "adding {addr} to {dev} in namespace {side}");
    }

    /// `ip -n NS ARGS` output.
    pub fn ip(&self, side: char, args: &[&str]) -> String {
        let ns = if side == 'a' {
            &self.topo().a
        } else {
            &self.topo().b
        };
        let out = Command::new("ip")
            .arg("-n")
            .arg(ns.name())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// True when neither namespace holds an SA, a policy or a tunnel device of the lab.
    pub fn nothing_installed(&self) -> Result<(), String> {
        for side in ['a', 'b'] {
            let state = self.ip(side, &["xfrm", "state"]);
            let policy = self.ip(side, &["xfrm", "policy"]);
            let links = self.ip(side, &["-o", "link"]);
            if !state.trim().is_empty() || !policy.trim().is_empty() || links.contains("ipl-tun") {
                return Err(format!(
                    "namespace {side}: state {state:?} policy {policy:?} links {links:?}"
                ));
            }
        }
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.psk);
        if let Some(t) = self.topo.take() {
            let _ = self.rt.block_on(async move { t.destroy() });
        }
    }
}

pub struct Server {
    child: Child,
    log: Arc<Mutex<String>>,
    /// Copies the server's stderr into `log`; ends at EOF, after the server has exited.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User plus system CPU time the server has used so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    }

    pub fn wait_for(&self, text: &str, limit: Duration) {
        let start = Instant::now();
        while !self.log().contains(text) {
            assert!(
                start.elapsed() < limit,
                "server never said {text:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, as a service manager stops it; returns its exit status.
    /// SIGTERM, then the exit status once the server is gone and its last lines (its
    /// "stopping") are in the log: the copying thread may still hold them when it exits.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = self.child.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        status
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

pub fn key_file(name: &str, mode: u32) -> PathBuf {
    let path = std::env::temp_dir().join(format!("ipl-psk-{name}"));
    let out = common::run_lab(&["psk", "generate"]);
    assert!(out.status.success());
    std::fs::write(&path, &out.stdout).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

pub fn report(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "run failed: {}", common::text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", common::text(out)))
}

/// A TCP connection on another port between the two hosts, checked by echoing through it.
pub struct SideConnection {
    pub stream: TcpStream,
}

impl SideConnection {
    pub fn open(lab: &Lab) -> SideConnection {
        let listener = lab
            .topo()
            .b
            .run(|| TcpListener::bind(format!("{SERVER}:2222")).unwrap())
            .unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        let stream = lab
            .topo()
            .a
            .run(|| TcpStream::connect(format!("{SERVER}:2222")).unwrap())
            .unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        SideConnection { stream }
    }

    pub fn works(&mut self) -> bool {
        let mut buf = [0u8; 5];
        self.stream.write_all(b"hello").is_ok()
            && self.stream.read_exact(&mut buf).is_ok()
            && &buf == b"hello"
    }
}

/// The control port of the server in namespace b.
pub fn control_addr() -> std::net::SocketAddr {
    format!("{SERVER}:{}", model::DEFAULT_PEER_PORT).parse().unwrap()
}

/// A request as a client of this protocol version would send it, as JSON to tamper with.
pub fn good_request() -> serde_json::Value {
    serde_json::json!({
        "backend": "userspace",
        "suite": "aes-256-gcm",
        "crypto": "auto",
        "bytes": 1_000_000,
        "streams": 1,
        "repeat": 1,
        "reverse": false,
        "data_port": 5201,
        "seed": 1,
        "link_mtu": 1500,
    })
}

/// A hello carrying `request`, with a userspace key and lab-range xfrm keys.
pub fn hello(request: serde_json::Value) -> Vec<u8> {
    serde_json::json!({
        "v": control::VERSION,
        "msg": {
            "type": "hello",
            "request": request,
            "keys": {
                "tunnel": "ab".repeat(256),
                "xfrm": {
                    "reqid": 0x1a5_0042,
                    "spi_client_to_server": 0x1a50_4201u32,
                    "spi_server_to_client": 0x1a50_4202u32,
                    "enc": "cd".repeat(32),
                    "auth": "ef".repeat(32),
                },
            },
        },
    })
    .to_string()
    .into_bytes()
}

/// A pre-shared key holder gone rogue: the control crate's own initiator, from namespace a,
/// sending `plaintext` (hand-made JSON) as its first message; returns the server's answer.
pub fn hostile(lab: &Lab, plaintext: &[u8]) -> Result<control::Message, control::ControlError> {
    let psk = control::Psk::load(&lab.psk).unwrap();
    let stream = lab
        .topo()
        .a
        .run(|| TcpStream::connect_timeout(&control_addr(), Duration::from_secs(5)).unwrap())
        .unwrap();
    stream.set_nonblocking(true).unwrap();
    lab.rt.block_on(async {
        let stream = tokio::net::TcpStream::from_std(stream).unwrap();
        let mut chan = control::Channel::initiate(stream, &psk, Duration::from_secs(5)).await?;
        chan.send_plaintext(plaintext).await?;
        chan.recv(Duration::from_secs(30), "waiting for the server's answer")
            .await
    })
}

/// What a server host shows from outside: links, routes of every table, SAs, policies, and
/// TCP/UDP sockets (listening or connected) other than the control port's.
pub fn server_state(lab: &Lab) -> String {
    let ns = lab.topo().b.name().to_string();
    let sockets = Command::new("ip")
        .args(["netns", "exec", &ns, "ss", "-Htanu"])
        .output()
        .unwrap();
    let control_port = format!(":{}", model::DEFAULT_PEER_PORT);
    let sockets: Vec<String> = String::from_utf8_lossy(&sockets.stdout)
        .lines()
        .filter(|l| {
            // Local address is the fifth column; the control connection's is ours.
            l.split_whitespace()
                .nth(4)
                .is_some_and(|local| !local.ends_with(&control_port))
        })
        .map(str::to_string)
        .collect();
    // The kernel adds the veth's IPv6 link-local address and route whenever addrconf gets
    // to it, maybe between two snapshots; the lab never makes fe80:: entries.
    let routes: String = lab
        .ip('b', &["route", "show", "table", "all"])
        .lines()
        .filter(|l| !l.contains("fe80:"))
        .map(|l| format!("{l}\n"))
        .collect();
    format!(
        "links:\n{}routes:\n{}states:\n{}policies:\n{}sockets:\n{}",
        lab.ip('b', &["-o", "link"]),
        routes,
        lab.ip('b', &["xfrm", "state"]),
        lab.ip('b', &["xfrm", "policy"]),
        sockets.join("\n")
    )
}

/// A TCP connection to the control port from `source` (an address of namespace a).
pub fn connect_from(source: &str) -> Option<TcpStream> {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .ok()?;
    let from: std::net::SocketAddrV4 = format!("{source}:0").parse().unwrap();
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(from)).ok()?;
    let to = match control_addr() {
        SocketAddr::V4(v4) => v4,
        SocketAddr::V6(_) => unreachable!(),
    };
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to)).ok()?;
    Some(TcpStream::from(fd))
}
