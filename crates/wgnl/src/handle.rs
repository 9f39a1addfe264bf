//! A generic netlink connection to the kernel's WireGuard family (crate `genetlink`, which
//! resolves the family id). The socket belongs to the network namespace of the thread that
//! calls [`WgHandle::connect`], for good.

use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use netlink_packet_core::NetlinkPayload;

use crate::config::DeviceConfig;
use crate::reply::{self, PeerStats};
use crate::request::{self, Request};
use crate::WgError;

pub struct WgHandle {
    handle: genetlink::GenetlinkHandle,
}

/// The connection's task: spawn it on the runtime the handle is used from.
pub type Connection = Pin<Box<dyn Future<Output = ()> + Send>>;

impl WgHandle {
    /// Opens the socket in the calling thread's namespace. Must run inside a tokio runtime
    /// context (the socket registers with its reactor).
    pub fn connect() -> Result<(Connection, WgHandle), WgError> {
        let (conn, handle, _) = genetlink::new_connection().map_err(WgError::Socket)?;
        Ok((Box::pin(conn), WgHandle { handle }))
    }

    /// Whether the kernel serves the WireGuard family (module loaded or built in).
    pub async fn family_present(&mut self) -> bool {
        self.handle
            .resolve_family::<netlink_packet_wireguard::WireguardMessage>()
            .await
            .is_ok()
    }

    /// Configures the device (`wg set`).
    pub async fn set(&mut self, config: &DeviceConfig) -> Result<(), WgError> {
        let what = format!("configure WireGuard device {}", config.ifname);
        self.exchange(request::set_device(config), &what).await?;
        Ok(())
    }

    /// The device's peers with their counters (`wg show`).
    pub async fn peers(&mut self, ifname: &str) -> Result<Vec<PeerStats>, WgError> {
        let what = format!("read WireGuard device {ifname}");
        let replies = self.exchange(request::get_device(ifname), &what).await?;
        Ok(replies.iter().flat_map(reply::peers).collect())
    }

    /// Sends `req` and collects the replies until the ack or the dump's end.
    async fn exchange(
        &mut self,
        req: Request,
        what: &str,
    ) -> Result<Vec<netlink_packet_wireguard::WireguardMessage>, WgError> {
        let mut stream = self.handle.request(req).await.map_err(|e| match e {
            genetlink::GenetlinkError::NetlinkError(io) => WgError::NoFamily(io.to_string()),
            genetlink::GenetlinkError::AttributeNotFound(a) => WgError::NoFamily(a),
            other => WgError::Protocol {
                what: what.to_string(),
                detail: other.to_string(),
            },
        })?;
        let mut out = Vec::new();
        while let Some(msg) = stream.next().await {
            let msg = msg.map_err(|e| WgError::Protocol {
                what: what.to_string(),
                detail: e.to_string(),
            })?;
            match msg.payload {
                NetlinkPayload::InnerMessage(genl) => out.push(genl.payload),
                NetlinkPayload::Error(e) if e.code.is_some() => {
                    return Err(WgError::Kernel {
                        what: what.to_string(),
                        source: e.to_io(),
                    })
                }
                NetlinkPayload::Error(_) | NetlinkPayload::Done(_) => break,
                _ => {}
            }
        }
        Ok(out)
    }
}
