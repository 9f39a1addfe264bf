//! Argument groups both `run` (cli.rs) and `matrix` flatten in. Not in cli.rs: cli.rs names
//! `matrix::MatrixArgs`, so matrix.rs naming cli.rs back would be an import circle.

use clap::Args;

/// `-4`/`-6`/`--family 4|6` (iperf3's spelling): the address family of links and tunnels.
#[derive(Debug, Args)]
pub struct FamilyArgs {
    /// Address family of the lab's links and tunnels: 4 (198.18.0.0/15) or 6 (2001:2::/48)
    /// [default: 4].
    #[arg(long, value_name = "4|6", conflicts_with_all = ["ipv4", "ipv6"],
          value_parser = crate::values::family(), hide_possible_values = true)]
    pub family: Option<model::Family>,
    /// IPv6 outer and inner addresses (--family 6).
    #[arg(short = '6', conflicts_with = "ipv4")]
    pub ipv6: bool,
    /// IPv4 outer and inner addresses (--family 4, the default).
    #[arg(short = '4')]
    pub ipv4: bool,
}

impl FamilyArgs {
    pub fn family(&self) -> model::Family {
        match (self.family, self.ipv6) {
            (Some(f), _) => f,
            (None, true) => model::Family::Ipv6,
            (None, false) => model::Family::Ipv4,
        }
    }
}
