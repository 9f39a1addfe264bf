//! `ipsec-lab`: measures how fast encrypted tunnels move data, per backend, in MB/s.
//!
//! The binary parses and prints; the `lab` crate does the work. Arguments are parsed in two
//! stages: clap turns the command line into raw arguments (`cli`, and each command's own
//! `Args`), and each command validates them into a plan before anything touches the
//! kernel; then one `lab` call, then the report is printed (`output`, `progress`).

mod args;
mod build_info;
mod cli;
mod commands;
mod output;
mod progress;
mod runtime;
mod values;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            // boringtun warns of its own protocol timers (a rekey on receive, a handshake
            // retried): its normal work, which the run reports where it matters.
            tracing_subscriber::EnvFilter::try_from_env("IPSEC_LAB_LOG")
                .unwrap_or_else(|_| "warn,boringtun=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    build_info::record();
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Run(args) => commands::run::run(args),
        cli::Command::Clean(args) => commands::clean::run(args),
        cli::Command::Speed(args) => commands::speed::run(args),
        cli::Command::SetupRate(args) => commands::setup_rate::run(args),
        cli::Command::Serve(args) => commands::serve::run(args),
        cli::Command::Psk(args) => commands::psk::run(args),
        cli::Command::Matrix(args) => commands::matrix::run(args),
        cli::Command::Report(args) => commands::report::run(args),
        cli::Command::Compare(args) => commands::compare::run(args),
        cli::Command::Fleet(args) => commands::fleet::run(args),
        cli::Command::Completions(args) => commands::completions::completions(args),
        cli::Command::Man(args) => commands::completions::man(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // An error may quote a report, a peer or a host: inert on the terminal, line by line.
            let message = format!("{e:#}");
            let lines: Vec<String> = message.lines().map(report::escape::terminal).collect();
            eprintln!("ipsec-lab: {}", lines.join("\n"));
            ExitCode::from(e.exit_code())
        }
    }
}
