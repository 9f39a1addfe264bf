//! `ipsec-lab clean` on SA records, in the guest (the host's kernel has no ESP): a record is
//! acted on only where the SA itself carries the lab's marks (issue 42). In a namespace of
//! its own the test makes, by `ip xfrm`, an SA with the lab's SPI but another's reqid and
//! one with the lab's SPI and reqid, writes a dead run's state file naming both and one it
//! never made (stale), and runs `clean`: only the lab's goes. Likewise a stale record of a
//! driver priority (the driver no longer at the lab's pin priority) in the guest's own
//! kernel: its priority is left as it is.

use crate::common;

use std::path::Path;
use std::process::Command;

const NS: &str = "ipl-cleansa";
const KEY: &str = "0x00112233445566778899aabbccddeeff";

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The test's own namespace, deleted on drop.
struct OwnNamespace;

impl Drop for OwnNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", NS]).status();
    }
}

#[test]
#[ignore = "runs inside the VM booted by the in_vm_ tests of main.rs"]
fn guest_clean_checks() {
    if std::env::var_os(common::IN_VM).is_none() {
        eprintln!(
            "skipped: guest_clean_checks only runs inside the VM started by the in_vm_ tests of main.rs"
        );
        return;
    }
    ip(&["netns", "add", NS]);
    let _own = OwnNamespace;
    let lab_reqid = format!("{:#x}", xfrm::range::REQID_FIRST | 0x11);
    // (SPI, reqid): the lab's SPI with another's reqid; the lab's SPI and reqid.
    let sas = [("0x1a5fff11", "1"), ("0x1a5fff12", lab_reqid.as_str())];
    for (spi, reqid) in sas {
        ip(&[
            "-n",
            NS,
            "xfrm",
            "state",
            "add",
            "src",
            "198.18.210.1",
            "dst",
            "198.18.210.2",
            "proto",
            "esp",
            "spi",
            spi,
            "reqid",
            reqid,
            "mode",
            "tunnel",
            "enc",
            "cbc(aes)",
            KEY,
        ]);
    }
    let namespace = owner::namespace_id(&Path::new("/run/netns").join(NS)).unwrap();
    let record = |spi: u32| {
        serde_json::json!({
            "kind": "xfrm_sa", "namespace": namespace,
            "src": "198.18.210.1", "dst": "198.18.210.2", "spi": spi,
        })
    };
    // A dead run's state file (nobody holds its lock), in the guest's own /run.
    let dir = Path::new(owner::STATE_DIR);
    {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    }
    let doc = serde_json::json!({
        "version": 1,
        "owner": { "pid": 999_999, "start_time": 1, "command": "guest_clean_checks" },
        // The third was never made: a stale record, the common case.
        "records": [record(0x1a5f_ff11), record(0x1a5f_ff12), record(0x1a5f_ff13)],
    });
    std::fs::write(dir.join("999999-1.json"), doc.to_string()).unwrap();
    // Stale: a cbc(aes) driver of this (the guest's) kernel recorded as pinned by the lab,
    // though it holds its own priority now; put back "to 0" it would lose to any other.
    let drivers = xfrm::driver::cbc_aes_priorities(&xfrm::driver::read_proc_crypto());
    let driver = drivers.first().expect("a cbc(aes) driver in the guest").clone();
    let stale = serde_json::json!({
        "version": 1,
        "owner": { "pid": 999_998, "start_time": 1, "command": "guest_clean_checks" },
        "records": [{
            "kind": "driver_priority", "driver": driver.driver, "original": 0,
            "set": xfrm::range::LAB_DRIVER_PRIORITY,
        }],
    });
    std::fs::write(dir.join("999998-1.json"), stale.to_string()).unwrap();

    let out = common::lab().arg("clean").output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let states = ip(&["-n", NS, "xfrm", "state", "list"]);
    assert!(out.status.success(), "{text}");
    assert!(
        states.contains("spi 0x1a5fff11"),
        "clean removed an SA with another's reqid: {text}\n{states}"
    );
    assert!(
        !states.contains("spi 0x1a5fff12"),
        "the lab's SA stayed: {text}\n{states}"
    );
    assert!(text.contains("has reqid 0x1, not one of the lab's"), "{text}");
    assert!(text.contains("removed SA"), "{text}");
    assert!(!text.contains("0x1a5fff13"), "a stale record is no news: {text}");
    for file in ["999999-1.json", "999998-1.json"] {
        assert!(!dir.join(file).exists(), "{file} stayed: {text}");
    }
    let now = xfrm::driver::cbc_aes_priorities(&xfrm::driver::read_proc_crypto());
    assert!(now.contains(&driver), "{driver} changed: {now:?}\n{text}");
    assert!(
        text.contains(&format!("holds priority {} now", driver.priority)),
        "{text}"
    );
    eprintln!("guest: clean checks passed\n{text}");
}
