//! Reference tools measured over the lab's own data path, so the lab's numbers can be read
//! against ones everybody knows.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use netns::Topology;

use crate::error::{LabError, LabResult};

/// Refuses early when iperf3 is wanted but missing.
pub fn require_iperf3() -> LabResult<()> {
    match std::process::Command::new("iperf3")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
    {
        Ok(_) => Ok(()),
        Err(_) => Err(LabError::capability(anyhow::anyhow!(
            "--with-iperf3 needs iperf3: install it with `apt-get install iperf3` (or `make setup`)"
        ))),
    }
}

/// What iperf3 measured on the receiving side.
#[derive(Debug, Clone, Copy)]
pub struct Iperf3Run {
    /// 10^6 bytes per second.
    pub mb_per_s: f64,
    pub seconds: f64,
}

/// One iperf3 transfer of `bytes` over `path` (server in namespace b, client in a), as the
/// receiver measured it; a result without a finite, positive rate is refused, never passed
/// on as inf or NaN.
pub async fn iperf3(
    topology: &Topology,
    target: SocketAddr,
    bytes: u64,
    streams: u16,
) -> LabResult<Iperf3Run> {
    let failed = |what: String| LabError::failed(anyhow::anyhow!("iperf3: {what}"));
    let host = target.ip().to_string();
    let port = target.port().to_string();
    let server = topology
        .b
        .command("iperf3")
        .args(["--server", "--one-off", "--bind", &host, "--port", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed(format!("start server: {e}")))?;
    let mut server = KillOnDrop(server);
    // The server needs a moment to listen; retry the client rather than guess a sleep.
    let mut last_error = String::new();
    for _ in 0..50 {
        let out = topology
            .a
            .command("iperf3")
            .args(["--client", &host, "--port", &port, "--bytes", &bytes.to_string()])
            .args(["--parallel", &streams.to_string(), "--json"])
            .output()
            .map_err(|e| failed(format!("start client: {e}")))?;
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let received = &json["end"]["sum_received"];
        if let Some(bps) = received["bits_per_second"].as_f64() {
            let _ = server.0.wait();
            let seconds = received["seconds"].as_f64().unwrap_or(0.0);
            if !(bps.is_finite() && bps > 0.0 && seconds > 0.0) {
                return Err(failed(format!(
                    "no timeable transfer ({bps} bit/s over {seconds} s); give a larger --bytes"
                )));
            }
            return Ok(Iperf3Run {
                mb_per_s: bps / 8.0 / 1e6,
                seconds,
            });
        }
        last_error = json["error"].as_str().unwrap_or("no result").to_string();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(failed(last_error))
}

/// A child killed when dropped, so an error or Ctrl-C never leaves an iperf3 server behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
