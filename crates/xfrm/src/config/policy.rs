//! One XFRM policy: the packets it covers, its direction, its priority and the one ESP
//! template it asks for; how an installed policy is named for deletion; its
//! `ip xfrm policy add` form.

use std::fmt;
use std::net::IpAddr;

use model::IpsecMode;

use super::error::SpecError;
use super::selector::{selector_args, TrafficSelector};
use crate::range::{ReqId, LAB_POLICY_PRIORITY};

/// Which packets a policy applies to: leaving the host, arriving for it, or forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyDirection {
    In,
    Out,
    Fwd,
}

impl PolicyDirection {
    pub(crate) fn raw(self) -> u8 {
        match self {
            PolicyDirection::In => netlink_packet_xfrm::XFRM_POLICY_IN,
            PolicyDirection::Out => netlink_packet_xfrm::XFRM_POLICY_OUT,
            PolicyDirection::Fwd => netlink_packet_xfrm::XFRM_POLICY_FWD,
        }
    }

    pub(crate) fn from_raw(raw: u8) -> Option<PolicyDirection> {
        [PolicyDirection::In, PolicyDirection::Out, PolicyDirection::Fwd]
            .into_iter()
            .find(|d| d.raw() == raw)
    }

    pub fn name(self) -> &'static str {
        match self {
            PolicyDirection::In => "in",
            PolicyDirection::Out => "out",
            PolicyDirection::Fwd => "fwd",
        }
    }
}

/// The SA a policy asks for: `tmpl src dst proto esp reqid mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Template {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub reqid: ReqId,
    pub mode: IpsecMode,
}

/// One XFRM policy with a single ESP template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicySpec {
    pub selector: TrafficSelector,
    pub direction: PolicyDirection,
    pub priority: u32,
    pub template: Template,
}

impl PolicySpec {
    /// A lab policy (priority [`LAB_POLICY_PRIORITY`]).
    pub fn new(selector: TrafficSelector, direction: PolicyDirection, template: Template) -> PolicySpec {
        PolicySpec {
            selector,
            direction,
            priority: LAB_POLICY_PRIORITY,
            template,
        }
    }

    pub fn id(&self) -> PolicyId {
        PolicyId::Selector {
            selector: self.selector,
            direction: self.direction,
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        self.selector.validate()?;
        if self.template.src.is_ipv4() != self.template.dst.is_ipv4() {
            return Err(SpecError::MixedFamilies);
        }
        Ok(())
    }

    /// The arguments of the equivalent `ip xfrm policy add`.
    pub fn iproute2_args(&self) -> Vec<String> {
        let mut a = selector_args(&self.selector);
        a.extend([
            "dir".into(),
            self.direction.name().into(),
            "priority".into(),
            self.priority.to_string(),
            "tmpl".into(),
            "src".into(),
            self.template.src.to_string(),
            "dst".into(),
            self.template.dst.to_string(),
            "proto".into(),
            "esp".into(),
            "reqid".into(),
            self.template.reqid.to_string(),
            "mode".into(),
            self.template.mode.name().into(),
        ]);
        a
    }
}

/// How to name an installed policy for deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyId {
    /// By selector and direction, as `ip xfrm policy delete` does.
    Selector {
        selector: TrafficSelector,
        direction: PolicyDirection,
    },
    /// By the index the kernel gave it (from a dump).
    Index { index: u32, direction: PolicyDirection },
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyId::Selector { selector, direction } => write!(f, "{selector} dir {}", direction.name()),
            PolicyId::Index { index, direction } => write!(f, "index {index} dir {}", direction.name()),
        }
    }
}
