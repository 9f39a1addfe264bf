//! `ipsec-lab completions SHELL` and the hidden `ipsec-lab man --out DIR`: shell completions
//! and man pages generated from the clap definitions at run time, so they cannot drift from
//! `--help`. The package and `make install` ship what these print.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory};
use clap_complete::Shell;
use lab::{LabError, LabResult};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell; e.g. `ipsec-lab completions bash >
    /// /usr/share/bash-completion/completions/ipsec-lab`.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write ipsec-lab.1 and one page per subcommand (ipsec-lab-run.1, ...) into.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn completions(args: CompletionsArgs) -> LabResult<()> {
    let mut out = std::io::stdout();
    out.write_all(&script(args.shell))
        .and_then(|()| out.flush())
        .map_err(|e| LabError::failed(anyhow::anyhow!("writing the completion script: {e}")))
}

/// The completion script for `shell`.
fn script(shell: Shell) -> Vec<u8> {
    let mut command = crate::cli::Cli::command();
    let name = command.get_name().to_string();
    let mut script = Vec::new();
    if shell != Shell::Bash {
        clap_complete::generate(shell, &mut command, name, &mut script);
        return script;
    }
    // clap_complete's bash script never completes a subcommand's options when the name has
    // a hyphen (clap-rs/clap#6421): generate it for "ipsec_lab" and register it for the real
    // name (bash hands the function the typed name, which the script matches as given).
    let plain = name.replace('-', "_");
    clap_complete::generate(shell, &mut command, plain.clone(), &mut script);
    String::from_utf8_lossy(&script)
        .lines()
        .map(|line| match line.trim_start().starts_with("complete ") {
            true => format!("{}{name}\n", line.strip_suffix(plain.as_str()).unwrap_or(line)),
            false => format!("{line}\n"),
        })
        .collect::<String>()
        .into_bytes()
}

pub fn man(args: ManArgs) -> LabResult<()> {
    std::fs::create_dir_all(&args.out)
        .and_then(|()| clap_mangen::generate_to(crate::cli::Cli::command(), &args.out))
        .map_err(|e| {
            LabError::failed(anyhow::anyhow!(
                "writing man pages to {}: {e}",
                args.out.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_registers_the_real_name() {
        let script = String::from_utf8(script(Shell::Bash)).unwrap();
        let registered: Vec<&str> = script
            .lines()
            .filter(|l| l.trim_start().starts_with("complete "))
            .collect();
        assert!(!registered.is_empty());
        assert!(
            registered.iter().all(|l| l.ends_with(" ipsec-lab")),
            "{registered:?}"
        );
    }
}
