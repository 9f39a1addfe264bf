//! Renders a single run's report ([`RunReport`](model::RunReport), `ipsec-lab run`) as the
//! binary prints it on a terminal.
//!
//! * [`modes`]: the interval lines of `--interval`, and the table's rows and summary lines
//!   of a reversed, two-way or `--omit` run.

pub mod modes;
