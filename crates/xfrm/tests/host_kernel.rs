//! The handle and the probe against the running kernel, each test in its own throw-away
//! namespace (it vanishes with the handle, so nothing is left behind even on failure).
//! Needs root; skips with a reason otherwise. On a kernel without ESP (like the lab's
//! build machines) the SA tests check the "no ESP" path; with ESP they check the SA path.

use std::net::IpAddr;

use model::{CipherSuite, Hmac, IpsecMode, KeyBits};
use xfrm::{
    AuthTrunc, PolicyDirection, PolicySpec, Protection, ReqId, RunIds, SaSpec, Template, TrafficSelector,
    XfrmError, XfrmHandle, LAB_REPLAY_WINDOW,
};

macro_rules! require_root {
    () => {
        if !testcap::root(module_path!()) {
            return;
        }
    };
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn policy(reqid: ReqId, src: &str, dst: &str, direction: PolicyDirection) -> PolicySpec {
    PolicySpec::new(
        TrafficSelector::hosts(ip(src), ip(dst)),
        direction,
        Template {
            src: ip("198.18.0.1"),
            dst: ip("198.18.0.2"),
            reqid,
            mode: IpsecMode::Tunnel,
        },
    )
}

#[tokio::test]
async fn policies_are_added_listed_and_removed_and_clean_spares_foreign_ones() {
    require_root!();
    let h = XfrmHandle::open_throwaway().unwrap();
    let ids = RunIds::for_slot(7);
    let out = policy(ids.reqid, "198.19.0.1", "198.19.0.2", PolicyDirection::Out);
    let inp = policy(ids.reqid, "198.19.0.2", "198.19.0.1", PolicyDirection::In);
    // Someone else's policy (reqid outside the lab's range), as `ip xfrm policy add` makes it.
    let foreign = policy(ReqId(1), "198.19.9.1", "198.19.9.2", PolicyDirection::Out);
    h.add_policy(&out).await.unwrap();
    h.add_policy(&inp).await.unwrap();
    h.add_policy(&foreign).await.unwrap();

    let err = h.add_policy(&out).await.unwrap_err();
    assert!(matches!(err, XfrmError::PolicyExists { .. }), "{err}");

    let listed = h.list_policies().await.unwrap();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(listed.iter().filter(|p| p.is_lab()).count(), 2, "{listed:?}");
    let lab_out = listed.iter().find(|p| p.selector == Some(out.selector)).unwrap();
    assert_eq!(lab_out.direction, Some(PolicyDirection::Out));
    assert_eq!(lab_out.priority, out.priority);

    h.delete_policy(&inp.id()).await.unwrap();
    let err = h.delete_policy(&inp.id()).await.unwrap_err();
    assert!(matches!(err, XfrmError::NotFound { .. }), "{err}");

    let cleaned = h.clean_lab().await.unwrap();
    assert_eq!((cleaned.sas, cleaned.policies), (0, 1));
    let left = h.list_policies().await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].template_reqids, vec![ReqId(1)]);
}

fn sa(ids: RunIds) -> SaSpec {
    SaSpec {
        src: ip("198.18.0.1"),
        dst: ip("198.18.0.2"),
        spi: ids.spi_a_to_b,
        reqid: ids.reqid,
        mode: IpsecMode::Tunnel,
        replay_window: LAB_REPLAY_WINDOW,
        protection: Protection::generate(
            CipherSuite::cbc(KeyBits::Aes256, Hmac::Sha256),
            AuthTrunc::Bits128,
        )
        .unwrap(),
        selector: None,
        pcpu: None,
    }
}

#[tokio::test]
async fn probe_agrees_with_what_an_sa_add_does() {
    require_root!();
    let caps = xfrm::probe().await.unwrap();
    eprintln!("probe: {caps:?}");
    let h = XfrmHandle::open_throwaway().unwrap();
    let spec = sa(RunIds::for_slot(9));
    match h.add_sa(&spec).await {
        Err(e) => {
            assert!(!caps.esp, "probe said ESP works but the SA add failed: {e}");
            assert!(e.is_no_esp(), "{e}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("install SA spi={} 198.18.0.1->198.18.0.2: ", spec.spi))
                    && msg.ends_with("kernel has no ESP support (CONFIG_INET_ESP)"),
                "{msg}"
            );
            assert!(!caps.supports(spec.protection.suite()));
            assert!(h.list_sas().await.unwrap().is_empty());
        }
        Ok(()) => {
            assert!(caps.esp, "the SA add worked but the probe said no ESP");
            assert!(caps.supports(spec.protection.suite()), "{caps:?}");
            let err = h.add_sa(&spec).await.unwrap_err();
            assert!(matches!(err, XfrmError::SaExists { .. }), "{err}");
            let got = h.get_sa(&spec.id()).await.unwrap();
            assert_eq!(got.reqid, spec.reqid);
            assert_eq!(got.counters.packets, 0);
            assert_eq!(h.clean_lab().await.unwrap().sas, 1);
            assert!(h.list_sas().await.unwrap().is_empty());
        }
    }
}

/// `setup-rate`'s batches against the running kernel, in a namespace of the test's own
/// thread: a window of policies in one write each, every request acked; a repeat of some
/// refused one by one with its place in the batch; the flush empties the table. SAs
/// either all install (a kernel with ESP) or are each refused for lack of ESP.
#[test]
fn batches_install_each_request_report_each_refusal_and_flush_empties() {
    require_root!();
    std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let never = || false;
        let mut batch = xfrm::Batch::open(std::num::NonZeroUsize::new(64).unwrap()).unwrap();
        let ids = RunIds::for_slot(11);
        let policies: Vec<PolicySpec> = (0..1000u32)
            .map(|i| {
                let dst = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 0)) + i);
                policy(ids.reqid, "198.18.9.1", &dst.to_string(), PolicyDirection::Out)
            })
            .collect();
        let prepared = batch.policies(&policies);
        let done = batch.send(&prepared, &never).unwrap();
        assert_eq!((done.acked, done.refused.len(), done.stopped), (1000, 0, false));
        let again = [
            &policies[5..8],
            &[policy(ids.reqid, "198.18.9.2", "198.19.0.1", PolicyDirection::In)],
        ]
        .concat();
        let again = batch.policies(&again);
        let done = batch.send(&again, &never).unwrap();
        assert_eq!(done.acked, 1);
        let refused: Vec<usize> = done.refused.iter().map(|r| r.index).collect();
        assert_eq!(refused, [0, 1, 2]);
        assert!(done
            .refused
            .iter()
            .all(|r| matches!(r.error, XfrmError::PolicyExists { .. })));
        let sas = [sa(ids), sa(RunIds::for_slot(12))];
        let sas = batch.sas(&sas);
        let done = batch.send(&sas, &never).unwrap();
        match done.acked {
            2 => {}
            0 => assert!(
                done.refused.iter().all(|r| r.error.is_no_esp()),
                "{:?}",
                done.refused
            ),
            _ => panic!("{done:?}"),
        }
        let stopped = batch.send(&prepared, &|| true).unwrap();
        assert!(stopped.stopped && stopped.acked == 0);
        batch.flush_sas().unwrap();
        batch.flush_policies().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let h = rt.block_on(async { XfrmHandle::open() }).unwrap();
        let (sas, policies) =
            rt.block_on(async { (h.list_sas().await.unwrap(), h.list_policies().await.unwrap()) });
        assert!(sas.is_empty() && policies.is_empty(), "{sas:?} {policies:?}");
    })
    .join()
    .unwrap();
}
