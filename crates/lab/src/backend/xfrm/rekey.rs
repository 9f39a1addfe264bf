//! Replacing a local run's SA pair while data flows (`--rekey-every`), in either order:
//!
//! * make-before-break (RFC 7296 §2.8's order): the new inbound SA at both ends, then the new
//!   outbound SA, then the old outbound SA deleted (the switch: the policy's cached bundle
//!   names a dead SA, so the next packet looks up the new one); the old inbound SA stays
//!   for what is still in flight under it and goes after [`GRACE`];
//! * naive: the old pair deleted at both ends, then the new pair added: packets sent in
//!   between find no SA (the kernel drops them while it would ask an IKE daemon for one).
//!
//! A new generation has fresh keys (a GCM key is never reused) and fresh SPIs in the run's
//! slot, with the run's reqid, which the policies' templates name: the policies stay.
//! Every SA goes through the ends' [`SaBook`]s as it comes and goes, so an end dropped at
//! any point removes exactly the SAs that exist, and the evidence sums the counters of every
//! generation. Local runs only: these SAs live in the lab's namespaces.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use model::evidence::SaCounters;
use model::rekey::RekeyOrder;
use xfrm::{AuthTrunc, Protection, SaId, SaSpec, Spi, UdpEncap, XfrmHandle};

use super::installed::{add_counters, SaBook};
use crate::error::{LabError, LabResult};
use crate::rekey::{Rekey, GRACE};

/// What the rekey needs of one end.
pub struct EndSas {
    /// The lab namespace the end's SAs are in.
    pub namespace: PathBuf,
    pub book: Arc<Mutex<SaBook>>,
}

/// Both ends' SA pair, replaced generation by generation.
pub struct XfrmRekey {
    /// Drives the handles' sockets. Its own `block_on`, not a handle's: on a current-thread
    /// runtime only that one drives the I/O driver.
    runtime: tokio::runtime::Runtime,
    pairs: Pairs,
}

/// The SAs of both ends and what a rekey keeps between switches.
struct Pairs {
    /// End a's handle and book, then end b's.
    ends: [(XfrmHandle, Arc<Mutex<SaBook>>); 2],
    /// The pair in use: a→b, then b→a.
    specs: [SaSpec; 2],
    encap: Option<UdpEncap>,
    order: RekeyOrder,
    generation: u32,
    /// The old inbound SAs a make-before-break switch kept: end a's (b→a), end b's (a→b).
    pending: Option<[SaId; 2]>,
}

/// The place of the a→b SA and of the b→a one in a book: a single pair's.
const A_TO_B: usize = 0;
const B_TO_A: usize = 1;

impl XfrmRekey {
    /// `specs`: the pair as installed (a→b, b→a); `ends`: end a's, then end b's.
    pub fn new(
        ends: [EndSas; 2],
        specs: [SaSpec; 2],
        encap: Option<UdpEncap>,
        order: RekeyOrder,
    ) -> LabResult<XfrmRekey> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(LabError::failed)?;
        // The handles' sockets belong to this runtime, which the rekey thread drives.
        let handles = {
            let _entered = runtime.enter();
            [
                XfrmHandle::open_in(&ends[0].namespace)?,
                XfrmHandle::open_in(&ends[1].namespace)?,
            ]
        };
        let [ha, hb] = handles;
        let [ea, eb] = ends;
        Ok(XfrmRekey {
            runtime,
            pairs: Pairs {
                ends: [(ha, ea.book), (hb, eb.book)],
                specs,
                encap,
                order,
                generation: 0,
                pending: None,
            },
        })
    }
}

impl Pairs {
    /// The next generation: the same SAs with fresh keys and SPIs.
    fn next_pair(&mut self) -> LabResult<[SaSpec; 2]> {
        self.generation += 1;
        // SPIs 0x..10 up in the run's slot (the first pair has 1 and 2): never one in use.
        let n = 0x10 + 2 * (self.generation % 0x70);
        let fresh = |spec: &SaSpec, k: u32| -> LabResult<SaSpec> {
            Ok(SaSpec {
                spi: Spi(spec.spi.0 & !0xFF | (n + k)),
                protection: Protection::generate(spec.protection.suite(), AuthTrunc::Bits128)
                    .map_err(LabError::failed)?,
                ..spec.clone()
            })
        };
        Ok([fresh(&self.specs[A_TO_B], 0)?, fresh(&self.specs[B_TO_A], 1)?])
    }

    /// Adds `spec` at end `e`, in its book's extras until it takes its place.
    async fn add(&self, e: usize, spec: &SaSpec) -> LabResult<()> {
        let (handle, book) = &self.ends[e];
        book.lock().expect("SA book").extra.push(spec.id());
        let added = match &self.encap {
            Some(encap) => handle.add_sa_with_encap(spec, encap).await,
            None => handle.add_sa(spec).await,
        };
        if let Err(e) = added {
            book.lock().expect("SA book").extra.retain(|id| *id != spec.id());
            return Err(e.into());
        }
        Ok(())
    }

    /// Makes the extra `new` end `e`'s SA at `place`; the old one's counters are carried
    /// and it is deleted now, or kept as an extra for [`Rekey::retire`] (which carries its
    /// counters then) where `keep`.
    async fn replace(&self, e: usize, place: usize, new: SaId, keep: bool) -> LabResult<SaId> {
        let (handle, book) = &self.ends[e];
        let old = book.lock().expect("SA book").current[place];
        let counters = match keep {
            true => SaCounters::default(),
            false => handle.sa_counters(&old).await.unwrap_or_default(),
        };
        {
            let mut b = book.lock().expect("SA book");
            b.current[place] = new;
            b.extra.retain(|id| *id != new);
            b.carried[place] = add_counters(b.carried[place], counters);
            b.replaced[place] += 1;
            b.extra.push(old);
        }
        if !keep {
            self.delete(e, old).await?;
        }
        Ok(old)
    }

    /// Deletes end `e`'s extra SA `id`, its last counters carried where it held a place.
    async fn delete(&self, e: usize, id: SaId) -> LabResult<()> {
        let (handle, book) = &self.ends[e];
        handle.delete_sa(&id).await?;
        book.lock().expect("SA book").extra.retain(|x| *x != id);
        Ok(())
    }

    async fn make_before_break(&mut self) -> LabResult<()> {
        let [ab, ba] = self.next_pair()?;
        // New inbound at both ends first: whatever either end sends next can be received.
        self.add(0, &ba).await?;
        self.add(1, &ab).await?;
        self.add(0, &ab).await?;
        self.add(1, &ba).await?;
        // The switch: each end's old outbound SA goes; its old inbound one stays a while.
        self.replace(0, A_TO_B, ab.id(), false).await?;
        self.replace(1, B_TO_A, ba.id(), false).await?;
        let old_in_a = self.replace(0, B_TO_A, ba.id(), true).await?;
        let old_in_b = self.replace(1, A_TO_B, ab.id(), true).await?;
        self.pending = Some([old_in_a, old_in_b]);
        self.specs = [ab, ba];
        Ok(())
    }

    async fn naive(&mut self) -> LabResult<()> {
        let [ab, ba] = self.next_pair()?;
        // Old pair gone at both ends before the new one exists.
        let mut old = Vec::new();
        for e in 0..2 {
            for place in [A_TO_B, B_TO_A] {
                let id = self.ends[e].1.lock().expect("SA book").current[place];
                let counters = self.ends[e].0.sa_counters(&id).await.unwrap_or_default();
                self.ends[e].0.delete_sa(&id).await?;
                old.push((e, place, counters));
            }
        }
        for e in 0..2 {
            self.add(e, &ab).await?;
            self.add(e, &ba).await?;
        }
        for (e, place, counters) in old {
            let new = [ab.id(), ba.id()][place];
            let mut b = self.ends[e].1.lock().expect("SA book");
            b.current[place] = new;
            b.extra.retain(|id| *id != new);
            b.carried[place] = add_counters(b.carried[place], counters);
            b.replaced[place] += 1;
        }
        self.specs = [ab, ba];
        Ok(())
    }
}

impl Rekey for XfrmRekey {
    fn switch(&mut self) -> LabResult<()> {
        let pairs = &mut self.pairs;
        match pairs.order {
            RekeyOrder::MakeBeforeBreak => self.runtime.block_on(pairs.make_before_break()),
            RekeyOrder::Naive => self.runtime.block_on(pairs.naive()),
        }
    }

    fn retire(&mut self) -> LabResult<()> {
        let pairs = &mut self.pairs;
        let Some([in_a, in_b]) = pairs.pending.take() else {
            return Ok(());
        };
        self.runtime.block_on(async {
            // Their counters are final now: nothing arrives under them any more.
            for (e, id, place) in [(0, in_a, B_TO_A), (1, in_b, A_TO_B)] {
                let late = pairs.ends[e].0.sa_counters(&id).await.unwrap_or_default();
                pairs.delete(e, id).await?;
                let mut b = pairs.ends[e].1.lock().expect("SA book");
                b.carried[place] = add_counters(b.carried[place], late);
            }
            Ok(())
        })
    }

    fn grace(&self) -> Duration {
        match self.pairs.order {
            RekeyOrder::MakeBeforeBreak => GRACE,
            RekeyOrder::Naive => Duration::ZERO,
        }
    }
}
