//! The fleet plan: the schedule with what runs in each pair, as the JSON an orchestrator
//! walks. The orchestrator runs, round by round, every pair of the round at once: on each
//! pair's client `ipsec-lab run --peer SERVER --json REPORT` with the run's `args`, then
//! fetches `REPORT` (or, where the run failed, writes the reason to the run's `failure`
//! file) into one directory with the plan beside it; `fleet
//! report` reads that directory. The lab decides what runs when; the engine only starts it.

use model::plan::limits::DEFAULT_SERVER_MAX_REPEAT;
use model::{Backend, ByteSize, CipherSuite};
use serde::{Deserialize, Serialize};

use crate::schedule::{round_robin, Directions, Schedule, ScheduleError};

/// Bumped when a field changes meaning; `fleet report` refuses plans of another version.
pub const FLEET_PLAN_SCHEMA_VERSION: u32 = 1;

/// What the plan's file is called in the directory of fetched reports.
pub const PLAN_FILE: &str = "fleet-plan.json";

/// One measurement made in every pair: a backend with one cipher suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Measure {
    pub backend: Backend,
    /// `none` for the plain baseline.
    pub suite: CipherSuite,
}

impl Measure {
    pub fn label(&self) -> String {
        match self.backend.encrypts() {
            true => format!("{} {}", self.backend.name(), self.suite),
            false => self.backend.name().to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedRun {
    pub backend: Backend,
    pub suite: CipherSuite,
    /// File name of the report in the fetched directory: unique within the plan.
    pub report: String,
    /// File name the orchestrator writes the reason to where the run made no report.
    pub failure: String,
    /// `ipsec-lab run` arguments beyond `--peer`, `--psk-file`, `--json` and `--no-progress`.
    pub args: Vec<String>,
}

impl PlannedRun {
    pub fn measure(&self) -> Measure {
        Measure {
            backend: self.backend,
            suite: self.suite,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedPair {
    pub client: String,
    pub server: String,
    /// Run one after the other, in this order.
    pub runs: Vec<PlannedRun>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedRound {
    /// From 1.
    pub round: usize,
    pub pairs: Vec<PlannedPair>,
    pub idle: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetPlan {
    pub schema_version: u32,
    pub hosts: Vec<String>,
    pub directions: Directions,
    /// Bytes per transfer.
    pub bytes: ByteSize,
    /// Transfers per run (`--repeat`): three or more let a pair be judged against the rest.
    pub repeat: u32,
    pub measures: Vec<Measure>,
    pub rounds: Vec<PlannedRound>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("backend {0} does not run between two hosts; a fleet runs {1}")]
    NotTwoHosts(&'static str, String),
    #[error("backend {backend} with {suite}: {why}")]
    Suite {
        backend: &'static str,
        suite: CipherSuite,
        why: &'static str,
    },
    #[error("no backend to measure: give at least one")]
    NoMeasure,
    #[error("--repeat {0}: give 1 or more")]
    NoRepeat(u32),
    /// The fleet's servers run with `serve`'s default limits (the play's
    /// `ipsec_lab_fleet_serve_args` aside): a plan they would refuse is refused here.
    #[error(
        "--repeat {0}: an `ipsec-lab serve` refuses more than {max} transfers a run unless started with a higher --max-repeat; give at most {max}",
        max = DEFAULT_SERVER_MAX_REPEAT
    )]
    Repeat(u32),
}

impl FleetPlan {
    /// Every host pair of `hosts` in rounds, each pair measuring `backends` (plain once, an
    /// encrypting backend once per suite of `suites`).
    pub fn new(
        hosts: &[String],
        directions: Directions,
        backends: &[Backend],
        suites: &[CipherSuite],
        bytes: ByteSize,
        repeat: u32,
    ) -> Result<FleetPlan, PlanError> {
        let schedule = round_robin(hosts, directions)?;
        if repeat == 0 {
            return Err(PlanError::NoRepeat(repeat));
        }
        if repeat > DEFAULT_SERVER_MAX_REPEAT {
            return Err(PlanError::Repeat(repeat));
        }
        let measures = measures(backends, suites)?;
        Ok(FleetPlan::from_schedule(schedule, measures, bytes, repeat))
    }

    fn from_schedule(schedule: Schedule, measures: Vec<Measure>, bytes: ByteSize, repeat: u32) -> FleetPlan {
        let rounds = schedule
            .rounds
            .iter()
            .enumerate()
            .map(|(i, round)| PlannedRound {
                round: i + 1,
                idle: round.idle.clone(),
                pairs: round
                    .pairs
                    .iter()
                    .map(|p| PlannedPair {
                        client: p.client.clone(),
                        server: p.server.clone(),
                        runs: measures
                            .iter()
                            .map(|m| planned_run(i + 1, &p.client, &p.server, *m, bytes, repeat))
                            .collect(),
                    })
                    .collect(),
            })
            .collect();
        FleetPlan {
            schema_version: FLEET_PLAN_SCHEMA_VERSION,
            hosts: schedule.hosts,
            directions: schedule.directions,
            bytes,
            repeat,
            measures,
            rounds,
        }
    }

    /// Every planned run with its pair.
    pub fn runs(&self) -> impl Iterator<Item = (&PlannedPair, &PlannedRun)> {
        self.rounds
            .iter()
            .flat_map(|r| &r.pairs)
            .flat_map(|p| p.runs.iter().map(move |run| (p, run)))
    }

    /// The rounds as lines for a person: `round 1: h1 → h4, h2 → h3 (h5 idle)`.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "{}, {}, {} ({}), each measuring {} with {} × {} transfers\n",
            model::plural(self.hosts.len(), "host"),
            model::plural(self.rounds.len(), "round"),
            model::plural(self.rounds.iter().map(|r| r.pairs.len()).sum::<usize>(), "pair"),
            match self.directions {
                Directions::One => "one direction",
                Directions::Both => "both directions",
            },
            self.measures
                .iter()
                .map(Measure::label)
                .collect::<Vec<_>>()
                .join(", "),
            self.repeat,
            self.bytes,
        );
        for r in &self.rounds {
            let pairs: Vec<String> = r
                .pairs
                .iter()
                .map(|p| format!("{} → {}", p.client, p.server))
                .collect();
            out.push_str(&format!("round {}: {}", r.round, pairs.join(", ")));
            if !r.idle.is_empty() {
                out.push_str(&format!(" ({} idle)", r.idle.join(", ")));
            }
            out.push('\n');
        }
        out
    }
}

/// Plain first (every other cell is read as a share of it), then each encrypting backend
/// with each suite, in the order given; a suite a backend cannot carry is refused.
fn measures(backends: &[Backend], suites: &[CipherSuite]) -> Result<Vec<Measure>, PlanError> {
    let mut out: Vec<Measure> = Vec::new();
    let mut add = |m: Measure| {
        if !out.contains(&m) {
            out.push(m)
        }
    };
    if backends.contains(&Backend::Plain) {
        add(Measure {
            backend: Backend::Plain,
            suite: CipherSuite::None,
        });
    }
    for &backend in backends.iter().filter(|b| **b != Backend::Plain) {
        if !backend.describe().two_hosts {
            return Err(PlanError::NotTwoHosts(backend.name(), Backend::two_host_names()));
        }
        for &suite in suites {
            if let Some(why) = backend.suite_refusal(suite) {
                return Err(PlanError::Suite {
                    backend: backend.name(),
                    suite,
                    why,
                });
            }
            add(Measure { backend, suite });
        }
    }
    match out.is_empty() {
        true => Err(PlanError::NoMeasure),
        false => Ok(out),
    }
}

fn planned_run(
    round: usize,
    client: &str,
    server: &str,
    m: Measure,
    bytes: ByteSize,
    repeat: u32,
) -> PlannedRun {
    let mut args = vec![
        "--backend".to_string(),
        m.backend.name().to_string(),
        "--bytes".into(),
        bytes.0.to_string(),
        "--repeat".into(),
        repeat.to_string(),
    ];
    let mut stem = format!("r{round:02}-{client}-{server}-{}", m.backend.name());
    if m.backend.encrypts() {
        args.extend(["--cipher".to_string(), m.suite.name()]);
        stem.push_str(&format!("-{}", m.suite.name()));
    }
    PlannedRun {
        backend: m.backend,
        suite: m.suite,
        report: format!("{stem}.json"),
        failure: format!("{stem}.failed"),
        args,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("h{i}")).collect()
    }

    fn gcm() -> CipherSuite {
        "aes-256-gcm".parse().unwrap()
    }

    #[test]
    fn every_pair_runs_every_measure_under_a_file_name_of_its_own() {
        let plan = FleetPlan::new(
            &hosts(4),
            Directions::Both,
            &[Backend::Userspace, Backend::Plain],
            &[gcm(), "aes-128-cbc-hmac-sha256".parse().unwrap()],
            ByteSize(4_000_000),
            3,
        )
        .unwrap();
        // Plain first: the baseline the others are read against.
        let labels: Vec<String> = plan.measures.iter().map(Measure::label).collect();
        assert_eq!(
            labels,
            [
                "plain",
                "userspace aes-256-gcm",
                "userspace aes-128-cbc-hmac-sha256"
            ]
        );
        assert_eq!(plan.runs().count(), 12 * 3);
        let names: BTreeSet<&str> = plan.runs().map(|(_, r)| r.report.as_str()).collect();
        assert_eq!(names.len(), 36, "report names collide");
        let (pair, run) = plan.runs().nth(1).unwrap();
        assert_eq!(
            run.args,
            [
                "--backend",
                "userspace",
                "--bytes",
                "4000000",
                "--repeat",
                "3",
                "--cipher",
                "aes-256-gcm"
            ]
        );
        assert_eq!(
            run.report,
            format!("r01-{}-{}-userspace-aes-256-gcm.json", pair.client, pair.server)
        );
        assert_eq!(
            run.failure,
            format!("r01-{}-{}-userspace-aes-256-gcm.failed", pair.client, pair.server)
        );
        // Plain takes no cipher.
        let (_, plain) = plan.runs().next().unwrap();
        assert!(!plain.args.contains(&"--cipher".to_string()), "{:?}", plain.args);
        // The JSON a playbook reads back is the plan.
        let json = serde_json::to_string(&plan).unwrap();
        assert!(
            json.contains("\"backend\":\"userspace\",\"suite\":\"aes-256-gcm\""),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<FleetPlan>(&json).unwrap(), plan);
    }

    #[test]
    fn backends_that_do_not_run_between_hosts_and_suites_they_cannot_carry_are_refused() {
        let plan = |b: &[Backend], s: &[CipherSuite]| {
            FleetPlan::new(&hosts(3), Directions::One, b, s, ByteSize(1_000_000), 1)
        };
        assert!(matches!(
            plan(&[Backend::Openvpn], &[gcm()]),
            Err(PlanError::NotTwoHosts("openvpn", _))
        ));
        assert!(matches!(
            plan(&[Backend::Xfrm], &["chacha20-poly1305".parse().unwrap()]),
            Err(PlanError::Suite { backend: "xfrm", .. })
        ));
        assert_eq!(plan(&[], &[gcm()]), Err(PlanError::NoMeasure));
        assert_eq!(
            FleetPlan::new(&hosts(3), Directions::One, &[Backend::Plain], &[], ByteSize(1), 0),
            Err(PlanError::NoRepeat(0))
        );
        // Issue 43: `fleet plan --repeat 20` was accepted, then every server refused it.
        let repeat = |n| FleetPlan::new(&hosts(3), Directions::One, &[Backend::Plain], &[], ByteSize(1), n);
        assert!(repeat(DEFAULT_SERVER_MAX_REPEAT).is_ok());
        let e = repeat(20).unwrap_err();
        assert_eq!(e, PlanError::Repeat(20));
        assert!(e.to_string().contains("at most 10"), "{e}");
        assert!(matches!(
            plan(&[Backend::Plain], &[]),
            Ok(p) if p.rounds.len() == 3 && p.rounds.iter().all(|r| r.idle.len() == 1)
        ));
    }

    #[test]
    fn describe_lists_the_rounds() {
        let plan = FleetPlan::new(
            &hosts(3),
            Directions::One,
            &[Backend::Plain],
            &[],
            ByteSize(2_000_000),
            1,
        )
        .unwrap();
        let text = plan.describe();
        assert!(
            text.starts_with("3 hosts, 3 rounds, 3 pairs (one direction), each measuring plain"),
            "{text}"
        );
        assert!(text.contains("idle)"), "{text}");
    }
}
