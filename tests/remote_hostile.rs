//! Issue 22, the second safety round: what a key holder, or anyone who can reach the control
//! port, could still make `serve` do. Each test speaks the real protocol from namespace a
//! to a real `serve` in namespace b and fails on the code before the fix. Needs root.

mod common;
mod remote_common;

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use control::{Channel, Message, RefusalKind};
use remote_common::{connect_from, control_addr, good_request, hello, hostile, report, Lab, SERVER};

/// A key holder's open control channel from namespace a, its hello answered with Ready.
/// A server still releasing the previous run's slot answers busy: asked again then.
fn key_holder(lab: &Lab, request: serde_json::Value) -> Channel<tokio::net::TcpStream> {
    let psk = control::Psk::load(&lab.psk).unwrap();
    let start = Instant::now();
    loop {
        let stream = lab
            .topo()
            .a
            .run(|| TcpStream::connect_timeout(&control_addr(), Duration::from_secs(5)).unwrap())
            .unwrap();
        stream.set_nonblocking(true).unwrap();
        let answer = lab.rt.block_on(async {
            let stream = tokio::net::TcpStream::from_std(stream).unwrap();
            let mut chan = Channel::initiate(stream, &psk, Duration::from_secs(5))
                .await
                .unwrap();
            chan.send_plaintext(&hello(request.clone())).await.unwrap();
            let answer = chan.recv(Duration::from_secs(30), "ready").await.unwrap();
            (chan, answer)
        });
        match answer {
            (chan, Message::Ready { .. }) => return chan,
            (_, Message::Busy) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(100))
            }
            (_, other) => panic!("expected ready, got {other:?}"),
        }
    }
}

/// A real client's run from namespace a, asked again while the server is still releasing
/// the previous run's slot.
fn real_run(lab: &Lab, args: &[&str]) -> std::process::Output {
    let start = Instant::now();
    loop {
        let out = lab.run(args);
        if out.status.success()
            || !common::text(&out).contains("busy")
            || start.elapsed() > Duration::from_secs(10)
        {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn plain_request(reverse: bool) -> serde_json::Value {
    let mut r = good_request();
    r["backend"] = "plain".into();
    r["suite"] = "none".into();
    r["reverse"] = reverse.into();
    r
}

/// Issue 22: with `--max-repeat 2 --max-bytes 20MB` one client asked for twelve sends and
/// got 240 MB: the server never counted transfers against the request. Now a run makes
/// the transfers its request named, in order, and no more.
#[test]
fn a_key_holder_gets_the_transfers_its_request_named_and_no_more() {
    let Some(lab) = Lab::new("hostile-repeat") else {
        return;
    };
    let server = lab.serve_with(&["--max-repeat", "2"]);
    let mut chan = key_holder(&lab, plain_request(true));
    // Transfer 1 of 1: the server sends 1 MB to this host, which verifies it.
    let receiver = lab
        .topo()
        .a
        .run(|| traffic::Receiver::bind("198.18.0.1:5201".parse().unwrap(), 1).unwrap())
        .unwrap()
        .only_from(SERVER.parse().unwrap());
    let config = traffic::TransferConfig {
        seed: 1,
        total_bytes: 1_000_000,
        streams: 1,
        idle_timeout: Duration::from_secs(10),
        duration: None,
    };
    let receiving = std::thread::spawn(move || {
        receiver.run(
            config,
            traffic::Progress::default(),
            traffic::CancellationToken::new(),
        )
    });
    let sent = lab.rt.block_on(async {
        chan.send(&Message::Send { attempt: 1 }).await.unwrap();
        chan.recv(Duration::from_secs(30), "sent").await.unwrap()
    });
    assert!(matches!(sent, Message::Sent { .. }), "{sent:?}");
    assert_eq!(receiving.join().unwrap().unwrap().bytes, 1_000_000);
    // A second one is past the request, though within --max-repeat: refused, run ended.
    let answer = lab.rt.block_on(async {
        chan.send(&Message::Send { attempt: 2 }).await.unwrap();
        chan.recv(Duration::from_secs(30), "answer").await.unwrap()
    });
    match answer {
        Message::Failed { reason } => {
            assert!(reason.contains("asked for transfer 2 of a run of 1"), "{reason}")
        }
        other => panic!("expected failed, got {other:?}"),
    }
    server.wait_for("run failed", Duration::from_secs(10));
    // Out of order from the start is refused the same way.
    let mut chan = key_holder(&lab, plain_request(true));
    let answer = lab.rt.block_on(async {
        chan.send(&Message::Send { attempt: 7 }).await.unwrap();
        chan.recv(Duration::from_secs(30), "answer").await.unwrap()
    });
    assert!(
        matches!(&answer, Message::Failed { reason } if reason.contains("transfer 7")),
        "{answer:?}"
    );
}

/// Issue 22: a run had no overall time limit; a key holder could hold the only run slot.
/// Now `--max-run-time` ends it, whatever step it is in, and the server takes the next.
#[test]
fn a_run_ends_at_the_servers_deadline() {
    let Some(lab) = Lab::new("hostile-deadline") else {
        return;
    };
    let server = lab.serve_with(&["--max-run-time", "2"]);
    assert!(server.log().contains("2 s a run"), "{}", server.log());
    let start = Instant::now();
    let mut chan = key_holder(&lab, plain_request(false));
    // The key holder says nothing more; the step timeout alone would wait 30 s.
    let answer = lab
        .rt
        .block_on(chan.recv(Duration::from_secs(20), "the server's answer"))
        .unwrap();
    let waited = start.elapsed();
    match answer {
        Message::Failed { reason } => assert!(reason.contains("time limit of 2 s"), "{reason}"),
        other => panic!("expected failed, got {other:?}"),
    }
    assert!(waited < Duration::from_secs(15), "{waited:?}");
    server.wait_for("its end is removed", Duration::from_secs(10));
    drop(chan);
    let out = real_run(&lab, &["--backend", "plain", "--bytes", "1MB", "--json", "-"]);
    assert_eq!(report(&out)["transfers"][0]["verified"], true);
}

/// Issue 22: eight addresses holding four silent connections each filled the 32 places
/// for unauthenticated connections, and real clients failed ("the keys differ", then
/// "connection reset"). Now a newcomer from another network takes the place of the most
/// crowded network's oldest connection, and one turned away is told why.
#[test]
fn a_flood_from_many_addresses_does_not_keep_a_key_holder_out() {
    let Some(lab) = Lab::new("hostile-flood") else {
        return;
    };
    let sources: Vec<String> = (0..8).map(|i| format!("198.18.0.{}", 20 + i)).collect();
    for s in &sources {
        lab.add_client_address(s);
    }
    let server = lab.serve();
    // The flood: silent connections from eight addresses, opened again as fast as the
    // server closes or replaces them, until the real run is over.
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (stop, sources) = (stop.clone(), sources.clone());
        lab.topo()
            .a
            .spawn("flood", move || {
                let mut held: std::collections::VecDeque<TcpStream> = Default::default();
                let mut opened = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for s in &sources {
                        if let Some(c) = connect_from(s) {
                            held.push_back(c);
                            opened += 1;
                        }
                        if held.len() > 64 {
                            held.pop_front();
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                opened
            })
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(500));
    for attempt in 1..=3 {
        let out = real_run(&lab, &["--backend", "plain", "--bytes", "2MB", "--json", "-"]);
        assert_eq!(report(&out)["transfers"][0]["verified"], true, "run {attempt}");
    }
    stop.store(true, Ordering::Relaxed);
    let opened = flood.join().unwrap();
    assert!(opened > 100, "the flood opened only {opened} connections");
    assert_eq!(
        server.log().matches("authenticated").count(),
        3,
        "{}",
        server.log()
    );

    // A client whose own network holds its share already is turned away, and told why.
    // The flood's connections are closed: the server's sessions end on that at once.
    std::thread::sleep(Duration::from_secs(1));
    let own: Vec<TcpStream> = lab
        .topo()
        .a
        .run(|| (0..4).filter_map(|_| connect_from("198.18.0.1")).collect())
        .unwrap();
    assert_eq!(own.len(), 4);
    std::thread::sleep(Duration::from_millis(200));
    let out = lab.run(&["--backend", "plain", "--bytes", "1MB"]);
    let text = common::text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("turned this connection away"), "{text}");
    assert!(
        text.contains("from this network are waiting to authenticate"),
        "{text}"
    );
    assert!(!text.contains("keys differ"), "{text}");
    drop(own);
}

/// Issue 22: a request field named with a newline, a forged log line, a terminal escape and
/// a NUL appeared in the server's log as its own line with a raw ESC; unknown fields at the
/// top level and inside `encap` were accepted silently.
#[test]
fn the_wire_cannot_write_lines_or_escapes_into_the_log_and_unknown_fields_are_refused() {
    let Some(lab) = Lab::new("hostile-log") else {
        return;
    };
    let server = lab.serve();
    let forged = "x\nipsec-lab serve: 203.0.113.9:4444: run finished\u{1b}[31m\0";
    let mut request = good_request();
    request[forged] = 1.into();
    let refused = |answer: Result<Message, control::ControlError>, what: &str| match answer {
        Ok(Message::Refused { kind, reason }) => {
            assert_eq!(kind, RefusalKind::Usage, "{what}: {reason}");
            reason
        }
        other => panic!("{what}: expected a refusal, got {other:?}"),
    };
    let reason = refused(hostile(&lab, &hello(request)), "a forged field name");
    assert!(!reason.chars().any(char::is_control), "{reason:?}");

    let mut top: serde_json::Value = serde_json::from_slice(&hello(good_request())).unwrap();
    top["extra"] = true.into();
    let reason = refused(hostile(&lab, top.to_string().as_bytes()), "a top-level field");
    assert!(reason.contains("extra"), "{reason}");

    let mut encap = good_request();
    encap["backend"] = "xfrm".into();
    encap["encap"] = serde_json::json!({"kind": "esp-in-udp", "port": 4500, "spare": 1});
    let reason = refused(hostile(&lab, &hello(encap)), "a field inside encap");
    assert!(reason.contains("spare"), "{reason}");

    server.wait_for("refused", Duration::from_secs(5));
    let log = server.log();
    assert!(!log.contains('\u{1b}') && !log.contains('\0'), "{log:?}");
    assert!(
        !log.lines().any(|l| l.starts_with("ipsec-lab serve: 203.0.113.9")),
        "a forged line:\n{log}"
    );
    assert!(
        log.contains(r"\u{1b}[31m"),
        "the field is in the log, escaped:\n{log}"
    );
}

/// Issue 25: `serve` panicked (exit 101) when its stderr closed (`serve 2>&1 | tee log`, then
/// Ctrl-C): a daemon's log going away is not a crash; it still cleans up and exits 0.
#[test]
fn serve_outlives_its_log() {
    let Some(lab) = Lab::new("hostile-stderr") else {
        return;
    };
    let mut child = lab
        .topo()
        .b
        .command(env!("CARGO_BIN_EXE_ipsec-lab"))
        .args(["serve", "--listen", SERVER, "--psk-file"])
        .arg(&lab.psk)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&seen).contains("listening on") {
        let n = stderr.read(&mut buf).unwrap();
        assert!(n > 0, "serve ended: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    drop(stderr);
    // A connection that fails its handshake makes the server log (to the closed pipe).
    let stream: SocketAddr = control_addr();
    let _ = lab
        .topo()
        .a
        .run(move || TcpStream::connect_timeout(&stream, Duration::from_secs(5)).map(drop))
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    let leftovers = Command::new("ip")
        .args(["-n", lab.topo().b.name(), "-o", "link"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&leftovers.stdout).contains("ipl-tun"));
}

/// A key holder's control connection from namespace a whose socket takes at most about
/// `rcvbuf` bytes: set before connecting, so the window it offers stays that small.
fn small_window_channel(lab: &Lab, rcvbuf: usize) -> Channel<tokio::net::TcpStream> {
    use nix::sys::socket::{
        connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    let psk = control::Psk::load(&lab.psk).unwrap();
    let stream = lab
        .topo()
        .a
        .run(move || {
            let fd = socket(
                AddressFamily::Inet,
                SockType::Stream,
                SockFlag::SOCK_CLOEXEC,
                None,
            )
            .unwrap();
            setsockopt(&fd, sockopt::RcvBuf, &rcvbuf).unwrap();
            let to = match control_addr() {
                SocketAddr::V4(v4) => v4,
                SocketAddr::V6(_) => unreachable!(),
            };
            connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to)).unwrap();
            TcpStream::from(fd)
        })
        .unwrap();
    stream.set_nonblocking(true).unwrap();
    lab.rt.block_on(async {
        let stream = tokio::net::TcpStream::from_std(stream).unwrap();
        Channel::initiate(stream, &psk, Duration::from_secs(5))
            .await
            .unwrap()
    })
}

/// The Send-Q of the server's end of the control connection from `port` (namespace a's
/// local port), as `ss` shows it in namespace b.
fn server_send_queue(lab: &Lab, port: u16) -> Option<u64> {
    let out = Command::new("ip")
        .args(["netns", "exec", lab.topo().b.name(), "ss", "-Htn"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.len() >= 5 && cols[4].ends_with(&format!(":{port}")))
            .then(|| cols[2].parse().ok())
            .flatten()
    })
}

/// Issue 42: a key holder with a 1 KiB receive buffer sent a UDP hello and queued trial
/// request pairs without reading a reply. The server's control sends filled its socket
/// buffer and blocked (Send-Q 54 KB); the deadline only cancelled a token nothing watched
/// while a send was pending, so with `--max-run-time 40` a real client was still told
/// "busy" at 100 s. Now no send or receive on the channel waits past the run's deadline:
/// the run unwinds then, and a real client is served soon after, while the attacker still
/// holds its connection open (its kernel answering the server's zero-window probes).
#[test]
fn a_client_that_stops_reading_holds_the_server_no_longer_than_its_run_time() {
    let Some(lab) = Lab::new("hostile-no-read") else {
        return;
    };
    const RUN_TIME: u64 = 40;
    let server = lab.serve_with(&["--max-run-time", &RUN_TIME.to_string(), "--max-trials", "20000"]);
    let mut chan = small_window_channel(&lab, 1024);
    let local_port = chan.get_ref().local_addr().unwrap().port();
    let mut request = plain_request(false);
    request["udp"] = serde_json::to_value(model::packets::PacketSize::Fixed(1400)).unwrap();
    let started = Instant::now();
    // The hello, then trial after trial (this host "sends" nothing; the server counts for
    // a moment and sends its account back), never a byte read.
    let attacker = lab.rt.spawn(async move {
        chan.send_plaintext(&hello(request)).await.unwrap();
        for number in 1..=20_000 {
            let trial = control::TrialRequest {
                number,
                pps: Some(1.0),
                seconds: 0.001,
            };
            let sent = model::packets::SentDatagrams::default();
            if chan.send(&Message::ReceiveDatagrams { trial }).await.is_err()
                || chan.send(&Message::DatagramsSent { sent }).await.is_err()
            {
                break;
            }
        }
        std::future::pending::<()>().await;
    });
    // Just before the deadline the server's sends are stuck: its Send-Q holds what this
    // client never read.
    std::thread::sleep(Duration::from_secs(RUN_TIME - 3));
    let queued = server_send_queue(&lab, local_port);
    eprintln!(
        "the server's Send-Q toward the non-reading client at {:?}: {queued:?} bytes",
        started.elapsed()
    );
    assert!(queued.is_some_and(|q| q > 10_000), "{queued:?}\n{}", server.log());
    // A real client, asked again while the server says busy.
    let out = loop {
        let out = lab.run(&["--backend", "plain", "--bytes", "1MB", "--json", "-"]);
        if out.status.success()
            || !common::text(&out).contains("busy")
            || started.elapsed() > Duration::from_secs(RUN_TIME + 30)
        {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let served_after = started.elapsed();
    eprintln!("a real client was served {served_after:?} after the non-reading one began (--max-run-time {RUN_TIME})");
    assert!(out.status.success(), "{}\n{}", common::text(&out), server.log());
    assert_eq!(report(&out)["transfers"][0]["verified"], true);
    // The run time, the last word's 2 s and slack for a busy machine.
    assert!(
        served_after < Duration::from_secs(RUN_TIME + 15),
        "{served_after:?}"
    );
    // Whichever came first: the run's deadline, or 30 s of a send taking nothing.
    let log = server.log();
    assert!(
        log.contains(&format!("time limit of {RUN_TIME} s")) || log.contains("(it stopped reading)"),
        "{log}"
    );
    attacker.abort();
}

/// Issue 42: hellos asking for `repeat: 999` for 5 s gave 8,331 connections and 33,325 log
/// lines, none suppressed (the limiter covered only connections without the key), each
/// refusal logged "run finished; its end is removed" for a run that never started. Now
/// every per-connection line is rate-limited, and a refusal says so in one line.
#[test]
fn a_key_holders_flood_of_refused_hellos_does_not_flood_the_log() {
    let Some(lab) = Lab::new("hostile-log-flood") else {
        return;
    };
    let server = lab.serve();
    let before = server.log().lines().count();
    let mut request = plain_request(false);
    request["repeat"] = 999.into();
    let hello = hello(request);
    let start = Instant::now();
    let mut refused = 0;
    while start.elapsed() < Duration::from_secs(3) {
        match hostile(&lab, &hello) {
            Ok(Message::Refused { kind, reason }) => {
                assert_eq!(kind, RefusalKind::Usage);
                assert!(reason.contains("999"), "{reason}");
                refused += 1;
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // After a quiet second, the next line of its kind says how many were left out.
    std::thread::sleep(Duration::from_millis(1100));
    assert!(matches!(hostile(&lab, &hello), Ok(Message::Refused { .. })));
    server.wait_for("similar lines suppressed", Duration::from_secs(5));
    let log = server.log();
    let lines = log.lines().count() - before;
    eprintln!("{refused} refused hellos in 3 s: {lines} log lines");
    assert!(refused > 50, "only {refused} hellos: too few to flood");
    // Five lines a second of a kind at most, plus the one after the quiet spell.
    assert!(lines <= 25, "{lines} lines for {refused} refusals:\n{log}");
    assert!(!log.contains("run finished"), "{log}");
    assert!(
        log.contains("refused: 999 repeats is outside this server's limit"),
        "{log}"
    );
}
