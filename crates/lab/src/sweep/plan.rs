//! A validated sweep: which backends, suites and implementations, how much data, and each
//! cell's own run plan; everything checked before anything is created.

use model::{Backend, ByteSize, CipherSuite, CryptoChoice, RunRequest};
use serde::{Deserialize, Serialize};

use crate::error::{LabError, LabResult};
use crate::vm;

/// A validated sweep: what `ipsec-lab matrix` measures. A child sweep gets its own as JSON
/// (`matrix --plan-file`, [`SweepPlan::read`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPlan {
    /// Backends to sweep; the plain baseline is measured whatever this says (unless
    /// `baseline` is off, for the child sweeps a sweep starts itself).
    pub backends: Vec<Backend>,
    /// The columns: encrypting suites, without repeats.
    pub suites: Vec<CipherSuite>,
    /// Crypto implementations of the userspace backend, one row each.
    pub crypto: Vec<CryptoChoice>,
    /// Tunnel threads per end (`--threads`): the userspace rows once per count, the xfrm
    /// rows once per count as SA pairs (`run --sas`); the other backends' rows at counts
    /// above 1 say why they have none.
    pub threads: Vec<u16>,
    /// TCP streams per transfer in every cell (`-P`; several tunnel threads need at least as
    /// many streams to have work each).
    pub parallel: u16,
    pub bytes: ByteSize,
    /// Payload of the VM rows (TCG moves a few MB/s).
    pub vm_bytes: ByteSize,
    pub repeat: u32,
    pub mtu: u32,
    pub port: u16,
    /// `--vm [KERNEL[,KERNEL…]]`: the kernel rows in one VM boot per kernel (`Some("")`:
    /// the stock kernel in /boot).
    pub vm: Option<String>,
    pub baseline: bool,
    /// `--encap udp`: one more xfrm row with ESP in UDP.
    pub encap: Option<model::Encap>,
    /// `--pcrypt`: one more xfrm row, its AES-GCM SAs on a pcrypt instance.
    pub pcrypt: bool,
    /// `-6`: every row over IPv6; rows of backends without it say why they are not run.
    pub family: model::Family,
    /// `--netem "SPEC;SPEC"`: the link conditions, every row once per condition (None: the
    /// bare link); empty means the bare link only.
    pub netem: Vec<Option<model::NetemSpec>>,
    pub seed: u64,
    /// Time each tunnel cell's crypto ceiling after its transfers (`--no-ceiling`: off).
    pub ceiling: bool,
    /// When the sweep started, in seconds since the epoch (for the report).
    pub started_unix_s: u64,
}

impl SweepPlan {
    /// Checks the suites and every cell's plan before anything is created.
    pub fn validate(mut self) -> LabResult<SweepPlan> {
        if self.suites.contains(&CipherSuite::None) {
            return Err(LabError::usage(anyhow::anyhow!(
                "--ciphers lists encrypting suites; the unencrypted baseline is the plain row, always measured"
            )));
        }
        if self.suites.is_empty() {
            self.suites = CipherSuite::classic_six();
        }
        let mut unique: Vec<CipherSuite> = Vec::new();
        for s in &self.suites {
            if !unique.contains(s) {
                unique.push(*s);
            }
        }
        self.suites = unique;
        // WireGuard rows get their one cipher as a column of its own.
        let chacha = CipherSuite::ChaCha20Poly1305;
        if self.backends.iter().any(|b| b.is_wireguard()) && !self.suites.contains(&chacha) {
            self.suites.push(chacha);
        }
        if self.threads.is_empty() {
            self.threads = vec![1];
        }
        if self.netem.is_empty() {
            self.netem = vec![None];
        }
        self.threads.sort_unstable();
        self.threads.dedup();
        for b in &self.backends {
            for s in &self.suites {
                if b.suite_refusal(*s).is_some() || self.family.refusal(*b).is_some() {
                    continue;
                }
                for t in &self.threads {
                    // An xfrm count above the streams is a row that says why it cannot run.
                    if *b == Backend::Xfrm && *t > self.parallel {
                        continue;
                    }
                    self.request(*b, *s, CryptoChoice::Auto, *t, self.seed)
                        .validate()?;
                }
            }
        }
        if self.pcrypt && !self.has(Backend::Xfrm) {
            return Err(LabError::usage(anyhow::anyhow!(
                "--pcrypt adds an xfrm row: include xfrm in --backends"
            )));
        }
        if self.encap.is_some() && !self.has(Backend::Xfrm) {
            return Err(LabError::usage(anyhow::anyhow!(
                "--encap udp adds an xfrm row: include xfrm in --backends"
            )));
        }
        model::check_payload("--vm-bytes", self.vm_bytes)?;
        if self.vm.is_some() {
            for kernel in vm::kernel_list(self.vm.as_deref()) {
                vm::check_vm_paths(kernel.as_deref())?;
                if let Some(release) = vm::uml_kernel(kernel.as_deref()) {
                    crate::uml::UmlKernel::require(release.as_deref())?;
                }
            }
        }
        Ok(self)
    }

    /// The plan in `path` (`matrix --plan-file`, written by the parent sweep), checked again
    /// like one from flags; bad input (exit 2) where it is unreadable or no sweep plan.
    pub fn read(path: &std::path::Path) -> LabResult<SweepPlan> {
        crate::child::read_plan::<SweepPlan>(path)?.validate()
    }

    /// A cell's run as a request, checked by [`RunRequest::validate`] like any other.
    pub(super) fn request(
        &self,
        backend: Backend,
        suite: CipherSuite,
        crypto: CryptoChoice,
        tunnel_threads: u16,
        seed: u64,
    ) -> RunRequest {
        RunRequest {
            backend,
            cipher: backend.encrypts().then_some(suite),
            crypto: (backend == Backend::Userspace).then_some(crypto),
            tunnel_threads: if backend == Backend::Userspace {
                tunnel_threads
            } else {
                1
            },
            // The kernel's count: SA pairs, one per stream group.
            sas: if backend == Backend::Xfrm {
                tunnel_threads
            } else {
                1
            },
            bytes: self.bytes,
            repeat: self.repeat,
            parallel: self.parallel,
            mtu: self.mtu,
            port: self.port,
            seed: Some(seed),
            family: self.family,
            ..Default::default()
        }
    }

    pub(super) fn has(&self, backend: Backend) -> bool {
        self.backends.contains(&backend)
    }
}
