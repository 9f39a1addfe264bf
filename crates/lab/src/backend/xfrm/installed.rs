//! One end's SAs and policies in the kernel: installed from a [`SaSet`], each recorded in
//! the state file first where no lab namespace's record covers it, and removed on drop.
//! A rekey (super::rekey) replaces the SAs through the end's [`SaBook`], so what is dropped
//! and what the evidence counts are always the SAs that exist.

use std::sync::{Arc, Mutex};

use model::evidence::{SaCounters, SaEvidence};
use xfrm::{IpProto, PolicyDirection, PolicyId, SaId, TrafficSelector, XfrmError, XfrmHandle};

use super::set::SaSet;
use crate::backend::site::Side;
use crate::error::{LabError, LabResult};

/// One end's SAs as they are now: shared with a rekey, which replaces them.
#[derive(Debug, Default)]
pub struct SaBook {
    /// The SAs in use, pair by pair (a→b, then b→a).
    pub current: Vec<SaId>,
    /// What the SAs that held each place before carried (summed), from their counters
    /// read just before they were deleted.
    pub carried: Vec<SaCounters>,
    /// How many times each place's SA was replaced.
    pub replaced: Vec<u32>,
    /// SAs on their way in or out (a new one not yet in use, an old inbound one kept for
    /// what is in flight): removed with the rest.
    pub extra: Vec<SaId>,
}

/// Both counters summed: an SA place's traffic across its generations.
pub fn add_counters(a: SaCounters, b: SaCounters) -> SaCounters {
    SaCounters {
        packets: a.packets + b.packets,
        bytes: a.bytes + b.bytes,
        replay_drops: a.replay_drops + b.replay_drops,
        integrity_failures: a.integrity_failures + b.integrity_failures,
    }
}

/// What an SA of the book is, by place (two places, a→b and b→a, each).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// SA pair i (`--sas N`: 0 to N-1).
    Pair(usize),
    /// The per-CPU pair of this CPU (`--per-cpu-sa`).
    Cpu(u32),
}

/// One end's kernel objects. Dropping it removes them.
pub struct Installed {
    side: Side,
    handle: Arc<XfrmHandle>,
    book: Arc<Mutex<SaBook>>,
    /// What each place of the book holds.
    places: Vec<Place>,
    policies: Vec<PolicyId>,
    /// Whether each object is in this process's state file (objects in the current
    /// namespace are; those in a lab namespace go with the namespace's record).
    recorded: bool,
}

impl Installed {
    /// Installs this end's half of `set` through `handle`. `recorded`: each SA and policy
    /// is recorded in the state file before it is added, so `clean` removes it if this
    /// process is killed (a real host's namespace); objects in a lab namespace go with the
    /// namespace's record instead. On error what was installed is removed again.
    pub async fn install(
        handle: XfrmHandle,
        side: Side,
        set: &SaSet,
        recorded: bool,
    ) -> LabResult<Installed> {
        let mut end = Installed {
            side,
            handle: Arc::new(handle),
            book: Arc::default(),
            places: Vec::new(),
            policies: Vec::new(),
            recorded,
        };
        // Each object is recorded before it is added (a kill in between leaves a record
        // `clean` finds already gone, never an unrecorded object); one the kernel refused
        // is forgotten again and never deleted (it may be someone else's).
        for (i, sa) in set.sas(side).into_iter().enumerate() {
            let record = recorded.then(|| sa_record(&sa.id()));
            record_now(&record)?;
            let added = match &set.encap {
                Some(encap) => end.handle.add_sa_with_encap(&sa, encap).await,
                None => end.handle.add_sa(&sa).await,
            };
            if let Err(e) = added {
                forget_now(&record);
                return Err(LabError::from(e));
            }
            {
                let mut book = end.book.lock().expect("SA book");
                book.current.push(sa.id());
                book.carried.push(SaCounters::default());
                book.replaced.push(0);
            }
            end.places.push(match sa.pcpu {
                Some(p) => Place::Cpu(p.cpu),
                None => Place::Pair(i / 2),
            });
            if let Some(p) = sa.pcpu {
                end.check_cpu(&sa.id(), p.cpu).await?;
            }
        }
        for p in set.policies(side) {
            let record = policy_record(&p.id()).filter(|_| recorded);
            record_now(&record)?;
            if let Err(e) = end.handle.add_policy(&p).await {
                forget_now(&record);
                return Err(LabError::from(e));
            }
            end.policies.push(p.id());
        }
        Ok(end)
    }

    /// Kernels before 6.13 take `XFRMA_SA_PCPU` without a word and ignore it (an attribute
    /// past the last they know): the SA as the kernel has it must say its CPU, or the run
    /// would measure one SA while claiming per-CPU ones.
    async fn check_cpu(&self, id: &xfrm::SaId, cpu: u32) -> LabResult<()> {
        let info = self.handle.get_sa(id).await.map_err(LabError::from)?;
        if info.pcpu == Some(cpu) {
            return Ok(());
        }
        Err(LabError::capability(anyhow::anyhow!(
            "this kernel ({}) took the SA for CPU {cpu} but not its CPU: per-CPU SAs need Linux 6.13 or later",
            model::env::kernel_release()
        )))
    }

    /// The kernel's counters of this end's SAs, installed pair by pair (a→b, then b→a),
    /// then the per-CPU pairs; with several pairs each says which, and `ports` names the
    /// data ports of each pair; a per-CPU pair's SAs say their CPU.
    pub async fn counters(&self, ports: &[Vec<u16>]) -> LabResult<Vec<SaEvidence>> {
        let me = self.side.name();
        let (current, carried, replaced) = {
            let book = self.book.lock().expect("SA book");
            (book.current.clone(), book.carried.clone(), book.replaced.clone())
        };
        let several = self.places.contains(&Place::Pair(1));
        let per_cpu = self.places.iter().any(|p| matches!(p, Place::Cpu(_)));
        let mut sas = Vec::new();
        for (i, id) in current.iter().enumerate() {
            let direction = ["a->b", "b->a"][i % 2];
            let place = self.places.get(i).copied().unwrap_or(Place::Pair(i / 2));
            let now = self.handle.sa_counters(id).await.map_err(LabError::from)?;
            let counters = add_counters(now, carried[i]);
            let role = if direction.starts_with(me) {
                "sent"
            } else {
                "received"
            };
            let which = match place {
                Place::Cpu(cpu) => format!(", CPU {cpu}'s SA"),
                Place::Pair(_) if per_cpu => ", the SA of CPUs without their own".into(),
                Place::Pair(pair) => match ports.get(pair).filter(|_| several) {
                    Some(p) => {
                        let p: Vec<String> = p.iter().map(u16::to_string).collect();
                        format!(", SA pair {pair} (port {})", p.join(", "))
                    }
                    None => String::new(),
                },
            };
            let which = match replaced[i] {
                0 => which,
                n => format!("{which}, rekeyed {n}: counters of every SA that held the place"),
            };
            sas.push(SaEvidence {
                spi: id.spi.to_string(),
                direction: format!("{direction} ({role} by {me}){which}"),
                pair: match place {
                    Place::Pair(pair) if several => Some(pair as u16),
                    _ => None,
                },
                cpu: match place {
                    Place::Cpu(cpu) => Some(cpu),
                    Place::Pair(_) => None,
                },
                counters,
            });
        }
        Ok(sas)
    }

    /// The book a rekey replaces this end's SAs through, and the handle it reads counters with.
    pub fn book(&self) -> Arc<Mutex<SaBook>> {
        self.book.clone()
    }

    /// Deletes the objects; those that are gone are forgotten from the state file, those
    /// that could not be deleted stay recorded for `clean`.
    async fn remove(handle: Arc<XfrmHandle>, sas: Vec<SaId>, policies: Vec<PolicyId>, recorded: bool) {
        for p in &policies {
            match handle.delete_policy(p).await {
                Ok(()) | Err(XfrmError::NotFound { .. }) => {
                    forget_now(&policy_record(p).filter(|_| recorded))
                }
                Err(e) => tracing::warn!("cleanup: {e}"),
            }
        }
        for sa in &sas {
            match handle.delete_sa(sa).await {
                Ok(()) | Err(XfrmError::NotFound { .. }) => forget_now(&recorded.then(|| sa_record(sa))),
                Err(e) => tracing::warn!("cleanup: {e}"),
            }
        }
    }
}

fn record_now(record: &Option<owner::Record>) -> LabResult<()> {
    match record {
        Some(r) => Ok(owner::record(r.clone())?),
        None => Ok(()),
    }
}

fn forget_now(record: &Option<owner::Record>) {
    if let Some(r) = record {
        owner::forget(r);
    }
}

/// The state-file record of an SA in this process's network namespace.
pub fn sa_record(id: &SaId) -> owner::Record {
    owner::Record::XfrmSa {
        namespace: owner::current_network_namespace(),
        src: id.src,
        dst: id.dst,
        spi: id.spi.0,
    }
}

/// The state-file record of a policy in the current namespace (policies named by kernel
/// index are never installed by the lab, so they have none).
pub fn policy_record(id: &PolicyId) -> Option<owner::Record> {
    let PolicyId::Selector { selector, direction } = id else {
        return None;
    };
    Some(owner::Record::XfrmPolicy(owner::PolicyRecord {
        namespace: owner::current_network_namespace(),
        src: selector.src.addr,
        src_len: selector.src.len,
        dst: selector.dst.addr,
        dst_len: selector.dst.len,
        proto: selector.proto.map(|p| match p {
            IpProto::Tcp => libc::IPPROTO_TCP as u8,
            IpProto::Udp => libc::IPPROTO_UDP as u8,
        }),
        src_port: selector.src_port,
        dst_port: selector.dst_port,
        direction: direction.name().into(),
    }))
}

/// The policy a record names, for `clean`.
pub fn policy_id(r: &owner::PolicyRecord) -> Option<PolicyId> {
    let proto = match r.proto.map(i32::from) {
        None => None,
        Some(libc::IPPROTO_TCP) => Some(IpProto::Tcp),
        Some(libc::IPPROTO_UDP) => Some(IpProto::Udp),
        Some(_) => return None,
    };
    let direction = [PolicyDirection::In, PolicyDirection::Out, PolicyDirection::Fwd]
        .into_iter()
        .find(|d| d.name() == r.direction)?;
    let selector = TrafficSelector {
        src: xfrm::Prefix {
            addr: r.src,
            len: r.src_len,
        },
        dst: xfrm::Prefix {
            addr: r.dst,
            len: r.dst_len,
        },
        proto,
        src_port: r.src_port,
        dst_port: r.dst_port,
    };
    Some(PolicyId::Selector { selector, direction })
}

impl Drop for Installed {
    fn drop(&mut self) {
        let sas = {
            let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
            let mut sas = std::mem::take(&mut book.current);
            sas.append(&mut book.extra);
            sas
        };
        let policies = std::mem::take(&mut self.policies);
        if sas.is_empty() && policies.is_empty() {
            return;
        }
        let (handle, recorded) = (self.handle.clone(), self.recorded);
        // Drop cannot await: block this worker on the removal where the runtime allows it.
        // Where it does not, a fresh thread with its own runtime does it (a server must
        // never leave SAs behind, namespace removal or not).
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| {
                    rt.block_on(Installed::remove(handle, sas, policies, recorded))
                });
            }
            _ => {
                let _ = std::thread::spawn(move || {
                    if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        rt.block_on(Installed::remove(handle, sas, policies, recorded));
                    }
                })
                .join();
            }
        }
    }
}
