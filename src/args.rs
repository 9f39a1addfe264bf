//! Argument groups both `run` (cli.rs) and `matrix` flatten in, and the ids of a group's
//! arguments (what `--plan-file` refuses beside it). Not in cli.rs: cli.rs names
//! `matrix::MatrixArgs`, so matrix.rs naming cli.rs back would be an import circle.

use clap::Args;

/// The ids of every argument of `A`, its flattened groups' too: what a `--plan-file` that
/// stands for `A` conflicts with (a plan taken whole refuses its options beside it).
pub fn ids<A: Args>() -> Vec<clap::Id> {
    A::augment_args(clap::Command::new("ids"))
        .get_arguments()
        .map(|a| a.get_id().clone())
        .collect()
}

/// The link and the data's first port: a run's, and every cell's of a sweep.
#[derive(Debug, Args)]
pub struct LinkArgs {
    /// MTU of the veth link.
    #[arg(long, default_value_t = 1500, allow_negative_numbers = true,
          value_parser = crate::values::in_range::<u32>(model::plan::MIN_MTU.into(), model::plan::MAX_MTU.into()))]
    pub mtu: u32,
    /// TCP port of the receiver (streams use PORT..PORT+P-1).
    #[arg(long, default_value_t = 5201)]
    pub port: u16,
    #[command(flatten)]
    pub family: FamilyArgs,
}

/// What a run (each cell of a sweep) measures beside its rate.
#[derive(Debug, Args)]
pub struct MeasureArgs {
    /// Search for the highest UDP rate whose loss stays within each tolerance, in percent:
    /// 0 is the no-drop rate (NDR), above 0 a partial-drop rate (PDR) [default: 0,0.5].
    /// `run`: implies --udp; `matrix`: the --packet-sizes rows search.
    #[arg(long, value_name = "LOSS%[,LOSS%]", num_args = 0..=1, default_missing_value = "0,0.5")]
    pub find_ndr: Option<model::packets::Tolerances>,
    /// Round trips through the data path, idle and under the load, as percentiles (p50,
    /// p90, p99, p99.9, max) from an HDR histogram (`matrix`: every cell's, and a CDF per
    /// backend in the report).
    #[arg(long)]
    pub latency: bool,
    /// Leave out the crypto ceiling (the suite's speed at the tunnel's packet size with the
    /// implementation it used, timed right after the transfers) and, for `run`, the plain
    /// line rate measured after the tunnel came down.
    #[arg(long)]
    pub no_ceiling: bool,
}

impl MeasureArgs {
    /// `--find-ndr`'s loss tolerances, as given.
    pub fn find_ndr(&self) -> Option<Vec<f64>> {
        self.find_ndr.clone().map(|t| t.0)
    }
}

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

/// Rekeying under load: the backend's keys replaced on a schedule while the data flows.
#[derive(Debug, Args)]
pub struct RekeyArgs {
    /// Replace the tunnel's keys every SECONDS while the data flows (0.1 to 3600), and report
    /// what each rekey cost: the longest gap with no byte delivered, the dip in 10 ms buckets
    /// and, with --udp, the datagrams lost, reordered and duplicated around it [default run
    /// length: 3.5 periods]. WireGuard rekeys only on its own schedule: 120, with a --time
    /// above it. `matrix`: the TCP cells of every backend that can rekey, in a rekey table of
    /// their own.
    #[arg(long, value_name = "SECONDS", value_parser = model::modes::parse_seconds)]
    pub rekey_every: Option<f64>,
    /// xfrm: make-before-break (new inbound SAs first, RFC 7296's order) or naive (the old SAs
    /// deleted before the new ones are added) [default: make-before-break]. The other
    /// backends rekey in their own order and refuse this option.
    #[arg(long, value_name = "ORDER", value_parser = crate::values::rekey_order(), hide_possible_values = true)]
    pub rekey_order: Option<model::rekey::RekeyOrder>,
    /// strongswan: the SA charon rekeys, child (the CHILD_SA that carries the data) or ike
    /// (the IKE_SA; the CHILD_SA moves to the new one) [default: child].
    #[arg(long, value_name = "SA", value_parser = crate::values::rekey_sa(), hide_possible_values = true)]
    pub rekey_sa: Option<model::rekey::RekeyTarget>,
}

impl RekeyArgs {
    /// `matrix`'s schedule: each rekey cell's plan checks it again against its backend.
    pub fn schedule(&self) -> Result<Option<model::rekey::RekeySchedule>, model::PlanError> {
        match self.rekey_every {
            None if self.rekey_order.is_some() || self.rekey_sa.is_some() => Err(model::PlanError::Rekey(
                "--rekey-order and --rekey-sa say how --rekey-every rekeys: add --rekey-every SECONDS".into(),
            )),
            None => Ok(None),
            Some(every_s) => Ok(Some(model::rekey::RekeySchedule {
                every_s,
                order: self.rekey_order.unwrap_or_default(),
                sa: self.rekey_sa.unwrap_or_default(),
            })),
        }
    }

    pub fn request(&self) -> model::plan::RekeyRequest {
        model::plan::RekeyRequest {
            every_s: self.rekey_every,
            order: self.rekey_order,
            sa: self.rekey_sa,
        }
    }
}
