//! The fetched outcomes of a [`FleetPlan`] → one N×N matrix per measure (backend and suite):
//! MB/s and % of the pair's plain line rate per cell, which pairs stand out from the rest,
//! every host's environment.
//!
//! A pair stands out when its repeats differ from those of every other pair of the same
//! table beyond the noise and the threshold, as `compare` judges a cell
//! ([`report::compare::judge`], with the other pairs' repeats as "before" and the pair's as
//! "after"). Like `compare`, transfers too short to time make the verdict inconclusive, never
//! flagged. A run that failed, or of which nothing came back, is a cell with its reason,
//! never a number.
//!
//! Reports measured by different ipsec-lab builds, with another payload or repeat count than
//! the plan's, or on a host whose kernel, CPU or virtualization changed between its reports,
//! are refused unless [`CompareOptions::allow_different_conditions`]; then they are shown
//! with the differences listed, and no pair is flagged.

use std::collections::{BTreeMap, BTreeSet};

use model::matrix::{Measurement, SideCpu};
use model::{Backend, CipherSuite, Environment, RunReport, Summary, MIN_STABLE_SECONDS};
use report::compare::judge;
use report::{CompareOptions, Verdict};
use serde::{Deserialize, Serialize};

use crate::plan::{FleetPlan, Measure, PlannedPair, PlannedRun};

/// What came back of one planned run.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Measured(Box<RunReport>),
    /// The run failed, or its client was unreachable: the orchestrator's reason.
    Failed(String),
}

pub use report::CompareOptions as StandoutOptions;

/// How a pair compares with the other pairs of its table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "why", rename_all = "snake_case")]
pub enum Standout {
    /// Slower than the rest beyond the noise and the threshold.
    Slower,
    /// Faster than the rest beyond the noise and the threshold.
    Faster,
    /// Within the rest's spread, or apart by less than the threshold.
    NotApart,
    /// The numbers cannot say, and why (too few repeats, transfers too short to time,
    /// different conditions, no other pair).
    Inconclusive(String),
}

impl Standout {
    pub fn is_flagged(&self) -> bool {
        matches!(self, Standout::Slower | Standout::Faster)
    }

    pub fn label(&self) -> String {
        match self {
            Standout::Slower => "slower than the rest".into(),
            Standout::Faster => "faster than the rest".into(),
            Standout::NotApart => "not apart from the rest".into(),
            Standout::Inconclusive(why) => format!("inconclusive: {why}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CellState {
    Measured {
        /// MB/s over the run's repeats.
        mb_per_s: Summary,
        samples: Vec<f64>,
        /// Median over the same pair's plain median, in percent (absent for plain, or where
        /// plain did not run in this pair).
        percent_of_plain: Option<f64>,
        /// Median over the median of every other pair's repeats in this table.
        ratio_to_rest: Option<f64>,
        standout: Standout,
    },
    Failed {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Sends (`run --peer`).
    pub client: String,
    /// Receives (`serve`).
    pub server: String,
    pub state: CellState,
}

impl Cell {
    pub fn median(&self) -> Option<f64> {
        match &self.state {
            CellState::Measured { mb_per_s, .. } => Some(mb_per_s.median),
            CellState::Failed { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    pub backend: Backend,
    pub suite: CipherSuite,
    /// One per planned pair, in plan order.
    pub cells: Vec<Cell>,
}

impl Table {
    pub fn label(&self) -> String {
        Measure {
            backend: self.backend,
            suite: self.suite,
        }
        .label()
    }

    pub fn cell(&self, client: &str, server: &str) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.client == client && c.server == server)
    }
}

/// One host as its reports describe it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostEnvironment {
    pub host: String,
    /// None where no report of this host came back.
    pub environment: Option<Environment>,
}

/// A condition that differs between the reports of one matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionChange {
    /// "ipsec-lab version", "payload", "repeats", "run", "host".
    pub what: String,
    pub detail: String,
}

impl std::fmt::Display for ConditionChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.detail)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the fleet's reports were measured under different conditions ({}): their differences would not be the \
     hosts'; measure them the same way, or pass --allow-different-conditions to see them, with no pair flagged",
    .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
)]
pub struct DifferentConditions(pub Vec<ConditionChange>);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    pub hosts: Vec<String>,
    /// Bytes per transfer and transfers per run, as planned.
    pub bytes: u64,
    pub repeat: u32,
    pub threshold: f64,
    pub confidence: f64,
    pub tables: Vec<Table>,
    pub environments: Vec<HostEnvironment>,
    /// Differences of conditions shown because they were allowed; empty otherwise.
    pub different_conditions: Vec<ConditionChange>,
}

impl FleetReport {
    pub fn failed_cells(&self) -> impl Iterator<Item = (&Table, &Cell)> {
        self.tables.iter().flat_map(|t| {
            t.cells
                .iter()
                .filter(|c| matches!(c.state, CellState::Failed { .. }))
                .map(move |c| (t, c))
        })
    }

    pub fn standouts(&self) -> impl Iterator<Item = (&Table, &Cell)> {
        self.tables.iter().flat_map(|t| {
            t.cells
                .iter()
                .filter(|c| matches!(&c.state, CellState::Measured { standout, .. } if standout.is_flagged()))
                .map(move |c| (t, c))
        })
    }
}

/// Why a planned run that left neither a report nor a failure has no number.
pub const NOTHING_CAME_BACK: &str =
    "no report and no failure came back: the run never happened (its client unreachable, or the play \
     stopped before it)";

/// The matrix of `plan` from `outcomes`, keyed by each run's report file name; a planned run
/// with no outcome is a failed cell ([`NOTHING_CAME_BACK`]).
pub fn build(
    plan: &FleetPlan,
    outcomes: &BTreeMap<String, Outcome>,
    options: CompareOptions,
) -> Result<FleetReport, DifferentConditions> {
    let changes = condition_changes(plan, outcomes);
    if !changes.is_empty() && !options.allow_different_conditions {
        return Err(DifferentConditions(changes));
    }
    let mut tables: Vec<Table> = plan
        .measures
        .iter()
        .map(|m| Table {
            backend: m.backend,
            suite: m.suite,
            cells: plan
                .runs()
                .filter(|(_, run)| run.measure() == *m)
                .map(|(pair, run)| first_cell(pair, run, outcomes))
                .collect(),
        })
        .collect();
    let plain: Option<Table> = tables.iter().find(|t| t.backend == Backend::Plain).cloned();
    for table in &mut tables {
        judge_table(table, plan, outcomes, options, !changes.is_empty());
        if table.backend == Backend::Plain {
            continue;
        }
        for cell in &mut table.cells {
            let line_rate = plain
                .as_ref()
                .and_then(|p| p.cell(&cell.client, &cell.server))
                .and_then(Cell::median)
                .filter(|m| *m > 0.0);
            if let (
                CellState::Measured {
                    mb_per_s,
                    percent_of_plain,
                    ..
                },
                Some(line_rate),
            ) = (&mut cell.state, line_rate)
            {
                *percent_of_plain = Some(mb_per_s.median / line_rate * 100.0);
            }
        }
    }
    Ok(FleetReport {
        hosts: plan.hosts.clone(),
        bytes: plan.bytes.0,
        repeat: plan.repeat,
        threshold: options.threshold,
        confidence: options.confidence,
        tables,
        environments: environments(plan, outcomes),
        different_conditions: changes,
    })
}

/// The cell before it is judged against the others.
fn first_cell(pair: &PlannedPair, run: &PlannedRun, outcomes: &BTreeMap<String, Outcome>) -> Cell {
    let state = match outcomes.get(&run.report) {
        Some(Outcome::Measured(r)) => CellState::Measured {
            mb_per_s: r.mb_per_s,
            samples: samples(r),
            percent_of_plain: None,
            ratio_to_rest: None,
            standout: Standout::Inconclusive("not judged".into()),
        },
        Some(Outcome::Failed(reason)) => CellState::Failed {
            reason: reason.trim().to_string(),
        },
        None => CellState::Failed {
            reason: NOTHING_CAME_BACK.into(),
        },
    };
    Cell {
        client: pair.client.clone(),
        server: pair.server.clone(),
        state,
    }
}

fn samples(r: &RunReport) -> Vec<f64> {
    r.transfers.iter().map(|t| t.rates.mb_per_s).collect()
}

/// Each measured pair against the other measured pairs of its table.
fn judge_table(
    table: &mut Table,
    plan: &FleetPlan,
    outcomes: &BTreeMap<String, Outcome>,
    options: CompareOptions,
    conditions_differ: bool,
) {
    let measure = Measure {
        backend: table.backend,
        suite: table.suite,
    };
    // The reports of this table, by pair, for their transfers' durations and CPU.
    let reports: BTreeMap<(String, String), &RunReport> = plan
        .runs()
        .filter(|(_, run)| run.measure() == measure)
        .filter_map(|(pair, run)| match outcomes.get(&run.report) {
            Some(Outcome::Measured(r)) => Some(((pair.client.clone(), pair.server.clone()), r.as_ref())),
            _ => None,
        })
        .collect();
    for i in 0..table.cells.len() {
        let key = (table.cells[i].client.clone(), table.cells[i].server.clone());
        let Some(this) = reports.get(&key) else {
            continue;
        };
        let rest: Vec<&RunReport> = reports
            .iter()
            .filter(|(k, _)| **k != key)
            .map(|(_, r)| *r)
            .collect();
        let (standout, ratio) = standout(this, &rest, options, conditions_differ);
        if let CellState::Measured {
            standout: s,
            ratio_to_rest,
            ..
        } = &mut table.cells[i].state
        {
            *s = standout;
            *ratio_to_rest = ratio;
        }
    }
}

fn standout(
    this: &RunReport,
    rest: &[&RunReport],
    options: CompareOptions,
    conditions_differ: bool,
) -> (Standout, Option<f64>) {
    if rest.is_empty() {
        return (
            Standout::Inconclusive("no other pair measured to compare with".into()),
            None,
        );
    }
    let rest_measurement = measurement(rest);
    let this_measurement = measurement(&[this]);
    let ratio =
        Some(this_measurement.mb_per_s.median / rest_measurement.mb_per_s.median).filter(|r| r.is_finite());
    if conditions_differ {
        return (
            Standout::Inconclusive("measured under different conditions".into()),
            ratio,
        );
    }
    let shortest = std::iter::once(this)
        .chain(rest.iter().copied())
        .flat_map(|r| &r.transfers)
        .map(|t| t.transfer.seconds)
        .fold(f64::INFINITY, f64::min);
    if shortest < MIN_STABLE_SECONDS {
        return (
            Standout::Inconclusive(format!(
                "transfers too short to time ({shortest:.3} s, under {MIN_STABLE_SECONDS} s): give a larger --bytes"
            )),
            ratio,
        );
    }
    let (verdict, _) = judge(&rest_measurement, &this_measurement, options);
    let standout = match verdict {
        Verdict::Regression => Standout::Slower,
        Verdict::Improvement => Standout::Faster,
        Verdict::WithinSpread | Verdict::BelowThreshold => Standout::NotApart,
        Verdict::Inconclusive(why) | Verdict::NotComparable(why) => Standout::Inconclusive(why),
    };
    (standout, ratio)
}

/// The repeats of `reports` pooled as one measurement, the shape `judge` reads.
fn measurement(reports: &[&RunReport]) -> Measurement {
    let samples: Vec<f64> = reports.iter().flat_map(|r| samples(r)).collect();
    let cpu = |f: fn(&model::report::Transfer) -> f64| {
        let v: Vec<f64> = reports
            .iter()
            .flat_map(|r| &r.transfers)
            .map(|t| f(&t.transfer))
            .collect();
        Summary::of(&v).unwrap_or(Summary {
            n: 0,
            min: 0.0,
            median: 0.0,
            max: 0.0,
        })
    };
    Measurement {
        mb_per_s: Summary::of(&samples).unwrap_or(Summary {
            n: 0,
            min: f64::NAN,
            median: f64::NAN,
            max: f64::NAN,
        }),
        samples,
        timed_s: None,
        bytes: vec![],
        cpu: SideCpu {
            sender_percent: cpu(|t| t.sender_cpu.percent_of_core),
            receiver_percent: cpu(|t| t.receiver_cpu.percent_of_core),
        },
        tunnel_cpu: None,
        percent_of_plain: None,
        served_by: None,
        cpu_steal_percent: None,
        ceiling: None,
        percent_of_ceiling: None,
        notes: Vec::new(),
    }
}

/// The environment each host's reports give it: as client (`environment`) or server
/// (`peer_environment`).
fn host_environments<'a>(
    plan: &'a FleetPlan,
    outcomes: &'a BTreeMap<String, Outcome>,
) -> Vec<(&'a str, &'a str, &'a Environment)> {
    let mut out = Vec::new();
    for (pair, run) in plan.runs() {
        let Some(Outcome::Measured(r)) = outcomes.get(&run.report) else {
            continue;
        };
        out.push((pair.client.as_str(), run.report.as_str(), &r.environment));
        if let Some(peer) = &r.peer_environment {
            out.push((pair.server.as_str(), run.report.as_str(), peer));
        }
    }
    out
}

fn environments(plan: &FleetPlan, outcomes: &BTreeMap<String, Outcome>) -> Vec<HostEnvironment> {
    let seen = host_environments(plan, outcomes);
    plan.hosts
        .iter()
        .map(|host| {
            // The last report's: a kernel driver appears in /proc/crypto once first used.
            let mut environment: Option<Environment> = seen
                .iter()
                .rev()
                .find(|(h, _, _)| h == host)
                .map(|(_, _, e)| (*e).clone());
            if let Some(env) = &mut environment {
                for (_, _, e) in seen.iter().filter(|(h, _, _)| h == host) {
                    for (alg, driver) in &e.kernel_drivers {
                        env.kernel_drivers
                            .entry(alg.clone())
                            .or_insert_with(|| driver.clone());
                    }
                }
            }
            HostEnvironment {
                host: host.clone(),
                environment,
            }
        })
        .collect()
}

fn version(e: &Environment) -> String {
    match e.build.commit.as_str() {
        "" => e.tool_version.clone(),
        commit => format!("{} ({commit}, {})", e.tool_version, e.build.profile),
    }
}

/// Everything that makes the reports of one plan unfit to be read side by side.
fn condition_changes(plan: &FleetPlan, outcomes: &BTreeMap<String, Outcome>) -> Vec<ConditionChange> {
    let mut changes = Vec::new();
    let mut change = |what: &str, detail: String| {
        changes.push(ConditionChange {
            what: what.into(),
            detail,
        })
    };
    let seen = host_environments(plan, outcomes);
    let mut versions: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for (host, _, env) in &seen {
        versions.entry(version(env)).or_default().insert(host);
    }
    if versions.len() > 1 {
        let listed: Vec<String> = versions
            .iter()
            .map(|(v, hosts)| format!("{v} on {}", hosts.iter().copied().collect::<Vec<_>>().join(", ")))
            .collect();
        change("ipsec-lab version", listed.join("; "));
    }
    for host in &plan.hosts {
        let mut states: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for (_, report, env) in seen.iter().filter(|(h, _, _)| h == host) {
            let state = format!(
                "kernel {}, CPU {}, {}",
                env.kernel_release, env.cpu_model, env.virtualization
            );
            states.entry(state).or_default().push(report);
        }
        if states.len() > 1 {
            let listed: Vec<String> = states
                .iter()
                .map(|(s, reports)| format!("{s} in {}", reports.join(", ")))
                .collect();
            change(
                "host",
                format!("{host} changed between its reports: {}", listed.join("; ")),
            );
        }
    }
    for (pair, run) in plan.runs() {
        let Some(Outcome::Measured(r)) = outcomes.get(&run.report) else {
            continue;
        };
        let name = &run.report;
        if r.plan.backend() != run.backend || r.plan.suite() != run.suite {
            change(
                "run",
                format!(
                    "{name} measured {} {}, the plan's run is {} {}",
                    r.plan.backend().name(),
                    r.plan.suite(),
                    run.backend.name(),
                    run.suite
                ),
            );
        }
        if r.plan.peer().is_none() {
            change(
                "run",
                format!("{name} is not a run between two hosts (no --peer)"),
            );
        }
        if r.plan.workload().reverse {
            change(
                "run",
                format!(
                    "{name} ran --reverse: {} received instead of sending",
                    pair.client
                ),
            );
        }
        let bytes = r.plan.workload().bytes;
        if bytes != plan.bytes {
            change(
                "payload",
                format!("{name} moved {bytes} per transfer, the plan {}", plan.bytes),
            );
        }
        if r.transfers.len() != plan.repeat as usize {
            change(
                "repeats",
                format!(
                    "{name} made {} transfer(s), the plan {}",
                    r.transfers.len(),
                    plan.repeat
                ),
            );
        }
    }
    changes
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::schedule::Directions;
    use model::ByteSize;

    /// A two-host run report as `run --peer` writes one, from a real run's JSON with the
    /// figures replaced: `client` sent to `server` at `rates` MB/s, each transfer `seconds` long.
    pub(crate) fn run_report(
        backend: &str,
        suite: &str,
        rates: &[f64],
        seconds: f64,
        hosts: (&str, &str),
        commit: &str,
    ) -> RunReport {
        let env = |host: &str| {
            serde_json::json!({
                "hostname": host, "kernel_release": "6.1.0-test", "cpu_model": "Test CPU", "cpus": 2,
                "crypto_flags": ["aes"], "kernel_drivers": {"cbc(aes)": "cbc-aes-aesni"},
                "virtualization": "host", "tool_version": "0.1.0",
                "build": {"commit": commit, "profile": "debug", "crypto_libraries": "aws-lc-rs 1.19"}
            })
        };
        let transfers: Vec<serde_json::Value> = rates
            .iter()
            .map(|r| {
                let bytes = (r * 1e6 * seconds).round() as u64;
                let cpu = serde_json::json!({"user_s": 0.1, "system_s": 0.2, "percent_of_core": 50.0});
                serde_json::json!({
                    "bytes": bytes, "seconds": seconds, "streams": 1, "verified": true,
                    "sender_cpu": cpu, "receiver_cpu": cpu,
                    "rates": {"mb_per_s": bytes as f64 / seconds / 1e6, "mib_per_s": 0.0, "mbit_per_s": 0.0}
                })
            })
            .collect();
        let summary = Summary::of(rates).unwrap();
        let doc = serde_json::json!({
            "schema_version": 1,
            "plan": plan_json(backend, suite),
            "environment": env(hosts.0),
            "peer_environment": env(hosts.1),
            "transfers": transfers,
            "mb_per_s": summary,
        });
        serde_json::from_value(doc).unwrap_or_else(|e| panic!("fixture: {e}"))
    }

    /// The `plan` of a `run --peer` report with the test workload (4 MB × 3).
    fn plan_json(backend: &str, suite: &str) -> serde_json::Value {
        let text = include_str!("../fixtures/run-plan.json")
            .replace("BACKEND", backend)
            .replace("SUITE", suite);
        serde_json::from_str(&text).unwrap()
    }

    pub(crate) fn four_host_plan() -> FleetPlan {
        let hosts: Vec<String> = (1..=4).map(|i| format!("h{i}")).collect();
        FleetPlan::new(
            &hosts,
            Directions::Both,
            &[Backend::Plain, Backend::Userspace],
            &["aes-256-cbc-hmac-sha256".parse().unwrap()],
            ByteSize(4_000_000),
            3,
        )
        .unwrap()
    }

    /// Every run of `plan` measured: plain at 1000 MB/s, userspace at 200 but 100 in the
    /// pair `slow`, each transfer `seconds` long.
    pub(crate) fn outcomes(plan: &FleetPlan, slow: (&str, &str), seconds: f64) -> BTreeMap<String, Outcome> {
        plan.runs()
            .map(|(pair, run)| {
                let base = if run.backend == Backend::Plain {
                    1000.0
                } else {
                    200.0
                };
                let slow = (pair.client.as_str(), pair.server.as_str()) == slow && run.backend.encrypts();
                let factor = if slow { 0.5 } else { 1.0 };
                // Noise of a few percent, different in each pair.
                let wobble = (pair.client.len() + pair.server.as_bytes()[1] as usize) as f64 % 3.0;
                let rates: Vec<f64> = [0.98, 1.0, 1.02]
                    .iter()
                    .map(|n| base * factor * (n + wobble / 100.0))
                    .collect();
                let r = run_report(
                    run.backend.name(),
                    &run.suite.name(),
                    &rates,
                    seconds,
                    (&pair.client, &pair.server),
                    "abc1234",
                );
                (run.report.clone(), Outcome::Measured(Box::new(r)))
            })
            .collect()
    }

    #[test]
    fn the_slow_pair_stands_out_and_every_cell_is_read_against_its_plain() {
        let plan = four_host_plan();
        let outcomes = outcomes(&plan, ("h2", "h3"), 2.0);
        let fleet = build(&plan, &outcomes, CompareOptions::default()).unwrap();
        assert_eq!(fleet.tables.len(), 2);
        for t in &fleet.tables {
            assert_eq!(t.cells.len(), 12, "{}", t.label());
        }
        let flagged: Vec<(String, &str, &str)> = fleet
            .standouts()
            .map(|(t, c)| (t.label(), c.client.as_str(), c.server.as_str()))
            .collect();
        assert_eq!(
            flagged,
            [("userspace aes-256-cbc-hmac-sha256".to_string(), "h2", "h3")]
        );
        let userspace = &fleet.tables[1];
        let CellState::Measured {
            percent_of_plain,
            standout,
            ratio_to_rest,
            ..
        } = &userspace.cell("h2", "h3").unwrap().state
        else {
            panic!("measured")
        };
        assert_eq!(standout, &Standout::Slower);
        assert!(
            (percent_of_plain.unwrap() - 10.0).abs() < 0.5,
            "{percent_of_plain:?}"
        );
        assert!((ratio_to_rest.unwrap() - 0.5).abs() < 0.05, "{ratio_to_rest:?}");
        let CellState::Measured {
            percent_of_plain,
            standout,
            ..
        } = &userspace.cell("h3", "h2").unwrap().state
        else {
            panic!("measured")
        };
        assert_eq!(standout, &Standout::NotApart);
        assert!(
            (percent_of_plain.unwrap() - 20.0).abs() < 1.0,
            "{percent_of_plain:?}"
        );
        // Plain is the line rate itself.
        let CellState::Measured { percent_of_plain, .. } = &fleet.tables[0].cells[0].state else {
            panic!()
        };
        assert_eq!(*percent_of_plain, None);
        // Every host's environment came from the reports.
        assert!(fleet
            .environments
            .iter()
            .all(|h| h.environment.as_ref().is_some_and(|e| e.hostname == h.host)));
    }

    #[test]
    fn short_transfers_and_single_repeats_flag_nothing() {
        let plan = four_host_plan();
        let fleet = build(
            &plan,
            &outcomes(&plan, ("h2", "h3"), 0.01),
            CompareOptions::default(),
        )
        .unwrap();
        assert_eq!(fleet.standouts().count(), 0);
        let CellState::Measured { standout, .. } = &fleet.tables[1].cell("h2", "h3").unwrap().state else {
            panic!()
        };
        assert!(
            matches!(standout, Standout::Inconclusive(why) if why.contains("too short")),
            "{standout:?}"
        );
    }

    #[test]
    fn failed_and_missing_runs_are_cells_with_their_reason() {
        let plan = four_host_plan();
        let mut outcomes = outcomes(&plan, ("h2", "h3"), 2.0);
        let runs: Vec<&PlannedRun> = plan
            .runs()
            .filter(|(p, _)| p.client == "h4")
            .map(|(_, r)| r)
            .collect();
        outcomes.insert(
            runs[0].report.clone(),
            Outcome::Failed("h4 unreachable over SSH\n".into()),
        );
        outcomes.remove(&runs[1].report);
        let fleet = build(&plan, &outcomes, CompareOptions::default()).unwrap();
        let failed: Vec<&str> = fleet
            .failed_cells()
            .map(|(_, c)| match &c.state {
                CellState::Failed { reason } => reason.as_str(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(failed, ["h4 unreachable over SSH", NOTHING_CAME_BACK]);
        // The slow pair still stands out among the cells that remain.
        assert_eq!(fleet.standouts().count(), 1);
    }

    #[test]
    fn reports_of_other_builds_or_payloads_are_refused_unless_allowed() {
        let plan = four_host_plan();
        let mut outcomes = outcomes(&plan, ("h2", "h3"), 2.0);
        let (pair, run) = plan.runs().nth(5).unwrap();
        let other = run_report(
            run.backend.name(),
            &run.suite.name(),
            &[100.0, 101.0],
            2.0,
            (&pair.client, &pair.server),
            "def5678",
        );
        outcomes.insert(run.report.clone(), Outcome::Measured(Box::new(other)));
        let refused = build(&plan, &outcomes, CompareOptions::default()).unwrap_err();
        let what: Vec<&str> = refused.0.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(what, ["ipsec-lab version", "repeats"], "{refused}");
        assert!(
            refused.to_string().contains("--allow-different-conditions"),
            "{refused}"
        );
        let allowed = CompareOptions {
            allow_different_conditions: true,
            ..CompareOptions::default()
        };
        let fleet = build(&plan, &outcomes, allowed).unwrap();
        assert_eq!(fleet.different_conditions.len(), 2);
        assert_eq!(
            fleet.standouts().count(),
            0,
            "nothing is flagged across different conditions"
        );
    }

    #[test]
    fn a_host_whose_kernel_changed_between_its_reports_is_refused() {
        let plan = four_host_plan();
        let mut outcomes = outcomes(&plan, ("h2", "h3"), 2.0);
        let (_, run) = plan.runs().next().unwrap();
        let Some(Outcome::Measured(r)) = outcomes.get_mut(&run.report) else {
            panic!()
        };
        r.environment.kernel_release = "6.12.0-other".into();
        let refused = build(&plan, &outcomes, CompareOptions::default()).unwrap_err();
        assert_eq!(refused.0.len(), 1, "{refused}");
        assert_eq!(refused.0[0].what, "host");
        assert!(refused.0[0].detail.contains("6.12.0-other"), "{refused}");
    }
}
