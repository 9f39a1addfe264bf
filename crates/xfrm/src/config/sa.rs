//! One ESP security association: its addresses, SPI, reqid, mode, replay window and
//! protection, checked before it reaches the kernel, and its `ip xfrm state add` form.

use std::fmt;
use std::net::IpAddr;

use model::IpsecMode;

use super::error::SpecError;
use super::protection::{Protection, GCM_ICV_BITS};
use super::selector::{selector_args, TrafficSelector};
use crate::range::{ReqId, Spi};

/// Replay window the lab gives every SA (packets). 32 is what iproute2 users usually pass.
pub const LAB_REPLAY_WINDOW: u8 = 32;

/// The mode's number in netlink XFRM (`XFRM_MODE_*`); the mode itself is the lab's
/// vocabulary ([`IpsecMode`]), shared with the plan.
pub(crate) fn mode_raw(mode: IpsecMode) -> u8 {
    match mode {
        IpsecMode::Transport => netlink_packet_xfrm::XFRM_MODE_TRANSPORT,
        IpsecMode::Tunnel => netlink_packet_xfrm::XFRM_MODE_TUNNEL,
    }
}

/// The mode of a dumped SA or template; None for modes the lab never sets (BEET, ...).
pub(crate) fn mode_from_raw(raw: u8) -> Option<IpsecMode> {
    IpsecMode::ALL.into_iter().find(|m| mode_raw(*m) == raw)
}

/// One ESP security association.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaSpec {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub spi: Spi,
    pub reqid: ReqId,
    pub mode: IpsecMode,
    pub replay_window: u8,
    pub protection: Protection,
    /// Which inner packets the SA may carry; the lab sets it in transport mode between real
    /// hosts so the SA can only ever protect the lab's data port.
    pub selector: Option<TrafficSelector>,
    /// The CPU this SA serves (RFC 9611 per-CPU SAs, Linux 6.13 and later): an outbound
    /// packet takes the SA of the CPU it is sent on where there is one, else the SA without
    /// a CPU. None: any CPU.
    pub pcpu: Option<PerCpu>,
}

/// A per-CPU SA's CPU (`XFRMA_SA_PCPU`) and direction (`XFRMA_SA_DIR`): the kernel takes a
/// CPU only from an SA that says which way it carries packets ("SA_PCPU only supported with
/// SA_DIR"), and an outbound SA only without a replay window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerCpu {
    pub cpu: u32,
    pub direction: SaDirection,
}

/// Which way an SA carries packets, as the kernel's `XFRM_SA_DIR_*` (Linux 6.10) says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaDirection {
    In,
    Out,
}

impl SaDirection {
    /// `XFRM_SA_DIR_IN` 1, `XFRM_SA_DIR_OUT` 2 (include/uapi/linux/xfrm.h).
    pub fn raw(self) -> u8 {
        match self {
            SaDirection::In => 1,
            SaDirection::Out => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SaDirection::In => "in",
            SaDirection::Out => "out",
        }
    }
}

impl SaSpec {
    pub fn id(&self) -> SaId {
        SaId {
            src: self.src,
            dst: self.dst,
            spi: self.spi,
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.src.is_ipv4() != self.dst.is_ipv4() {
            return Err(SpecError::MixedFamilies);
        }
        if let Some(sel) = &self.selector {
            sel.validate()?;
        }
        if let Some(PerCpu {
            direction: SaDirection::Out,
            ..
        }) = self.pcpu
        {
            if self.replay_window != 0 {
                return Err(SpecError::OutboundReplayWindow(self.replay_window));
            }
        }
        Ok(())
    }

    /// The arguments of the equivalent `ip xfrm state add`, keys included. For
    /// `--show-keys` and for programming a peer by hand; never logged otherwise.
    pub fn iproute2_args_with_keys(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "src".into(),
            self.src.to_string(),
            "dst".into(),
            self.dst.to_string(),
            "proto".into(),
            "esp".into(),
            "spi".into(),
            self.spi.to_string(),
            "reqid".into(),
            self.reqid.to_string(),
            "mode".into(),
            self.mode.name().into(),
            "replay-window".into(),
            self.replay_window.to_string(),
        ];
        match &self.protection {
            Protection::AesCbc { key, auth } => {
                a.extend(["enc".into(), "cbc(aes)".into(), key.to_hex().to_string()]);
                if let Some(h) = auth {
                    a.extend([
                        "auth-trunc".into(),
                        "hmac(sha256)".into(),
                        h.key.to_hex().to_string(),
                        h.trunc.bits().to_string(),
                    ]);
                }
            }
            Protection::AesGcm { key } => {
                a.extend([
                    "aead".into(),
                    "rfc4106(gcm(aes))".into(),
                    key.to_hex().to_string(),
                    GCM_ICV_BITS.to_string(),
                ]);
            }
        }
        if let Some(sel) = &self.selector {
            a.push("sel".into());
            a.extend(selector_args(sel));
        }
        if let Some(p) = self.pcpu {
            a.extend([
                "dir".into(),
                p.direction.name().into(),
                "pcpu-num".into(),
                p.cpu.to_string(),
            ]);
        }
        a
    }
}

/// What identifies an installed SA (always ESP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SaId {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub spi: Spi,
}

impl fmt::Display for SaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spi={} {}->{}", self.spi, self.src, self.dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_their_netlink_numbers() {
        for m in IpsecMode::ALL {
            assert_eq!(mode_from_raw(mode_raw(m)), Some(m));
        }
        assert_eq!(mode_from_raw(netlink_packet_xfrm::XFRM_MODE_BEET), None);
    }
}
