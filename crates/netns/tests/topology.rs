//! Root-only: builds a real topology and checks it carries traffic and leaves nothing.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};

use netns::{lab_namespaces, Namespace, Topology, TopologySpec};

#[tokio::test]
async fn veth_pair_carries_tcp_and_is_removed_on_drop() {
    if !testcap::root("veth_pair_carries_tcp_and_is_removed_on_drop") {
        return;
    }
    let spec = TopologySpec {
        run_id: netns::new_run_id(),
        mtu: 1400,
        addressing: Default::default(),
    };
    let topo = Topology::create(&spec).await.expect("topology");
    let names = [topo.a.name().to_string(), topo.b.name().to_string()];
    assert!(lab_namespaces().contains(&names[0]));

    let server = SocketAddr::from((topo.addressing.outer_b, 7000));
    let listener = topo.b.run(move || TcpListener::bind(server)).unwrap().unwrap();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        buf
    });
    topo.a
        .run(move || TcpStream::connect(server).unwrap().write_all(b"hello").unwrap())
        .unwrap();
    assert_eq!(&echo.join().unwrap(), b"hello");

    // A second namespace with the same name is refused, not adopted.
    assert!(matches!(
        Namespace::create(&names[0]),
        Err(netns::NetnsError::Exists { .. })
    ));

    drop(topo);
    for n in &names {
        assert!(!lab_namespaces().contains(n), "{n} left behind");
    }
    let _ = Ipv4Addr::LOCALHOST;
}

/// The IPv6 plan (2001:2::/48): the veth carries TCP at once, with no wait for duplicate
/// address detection (a tentative address would refuse the bind), and goes on drop.
#[tokio::test]
async fn ipv6_veth_pair_carries_tcp_at_once() {
    if !testcap::root("ipv6_veth_pair_carries_tcp_at_once") {
        return;
    }
    let spec = TopologySpec {
        run_id: netns::new_run_id(),
        mtu: 1500,
        addressing: model::Family::Ipv6.addressing(),
    };
    let topo = Topology::create(&spec).await.expect("topology");
    let names = [topo.a.name().to_string(), topo.b.name().to_string()];
    let server = SocketAddr::from((topo.addressing.outer_b, 7000));
    assert!(server.is_ipv6());
    let listener = topo.b.run(move || TcpListener::bind(server)).unwrap().unwrap();
    let echo = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        (buf, peer.ip())
    });
    topo.a
        .run(move || TcpStream::connect(server).unwrap().write_all(b"hello").unwrap())
        .unwrap();
    let (got, from) = echo.join().unwrap();
    assert_eq!(&got, b"hello");
    assert_eq!(from, topo.addressing.outer_a, "came from a's IPv6 address");
    drop(topo);
    for n in &names {
        assert!(!lab_namespaces().contains(n), "{n} left behind");
    }
}
