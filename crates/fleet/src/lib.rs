//! A fleet: every pair of N hosts measured with `ipsec-lab run --peer`, and the results put
//! in one N×N matrix per backend and suite.
//!
//! * [`schedule`]: rounds of pairs in which no host is in two pairs at once (a round-robin
//!   tournament by the circle method; both directions where asked), so runs do not disturb
//!   each other.
//! * [`plan`]: the schedule with what runs in each pair (backends, suites, payload, the file
//!   each report is fetched to), as the JSON an orchestrator (the Ansible playbook in
//!   `ansible/`) walks round by round.
//! * [`matrix`]: the fetched outcomes of a plan → the matrix: MB/s and % of the pair's plain
//!   line rate per cell, the pairs that stand out from the rest beyond the noise (judged by
//!   `report::compare::judge`, the statistics `compare` uses), every host's environment, and
//!   the reports refused when measured by different versions or under different conditions.
//! * [`render`]: Markdown, CSV and an HTML heatmap of the matrix (JSON is its serde form).
//!
//! Pure: no IO. Leaves out reading the directory, running anything and starting services
//! (the `ipsec-lab fleet` command and the playbook).

pub mod matrix;
pub mod plan;
pub mod render;
pub mod schedule;

pub use matrix::{build, Cell, CellState, FleetReport, Outcome, Standout, StandoutOptions, Table};
pub use plan::{
    FleetPlan, Measure, PlanError, PlannedPair, PlannedRound, PlannedRun, FLEET_PLAN_SCHEMA_VERSION,
};
pub use schedule::{round_robin, Directions, Pair, Round, Schedule, ScheduleError};
