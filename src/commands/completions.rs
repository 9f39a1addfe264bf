//! `ipsec-lab completions SHELL` and the hidden `ipsec-lab man --out DIR`: shell completions
//! and man pages generated from the clap definitions at run time, so they cannot drift from
//! `--help`. The package and `make install` ship what these print.

use std::io::Write;

use clap::{Command, CommandFactory, ValueHint};
use clap_complete::Shell;
use clap_mangen::roff::{bold, roman, Roff};
use lab::{LabError, LabResult};

use crate::cli::{CompletionsArgs, ManArgs};

pub fn completions(args: CompletionsArgs) -> LabResult<()> {
    let mut out = std::io::stdout();
    out.write_all(&script(args.shell))
        .and_then(|()| out.flush())
        .map_err(|e| LabError::failed(anyhow::anyhow!("writing the completion script: {e}")))
}

/// The command line as completion sees it: without the hidden subcommands and options
/// (clap_complete offers them otherwise, e.g. `speed --child`), and with every free-form
/// value (a size, a port, a host) marked as such, so the shell offers no file names where
/// no file is meant.
fn for_completion(command: Command) -> Command {
    let any_hidden = command.get_subcommands().any(Command::is_hide_set)
        || command.get_arguments().any(|a| a.is_hide_set());
    let mut visible = match any_hidden {
        false => command,
        // clap cannot remove a subcommand or an option: rebuild the command without them.
        true => {
            let mut rebuilt = Command::new(command.get_name().to_string());
            if let Some(version) = command.get_version() {
                rebuilt = rebuilt.version(version.to_string());
            }
            if let Some(about) = command.get_about() {
                rebuilt = rebuilt.about(about.clone());
            }
            rebuilt
                .args(command.get_arguments().filter(|a| !a.is_hide_set()).cloned())
                .subcommands(command.get_subcommands().filter(|s| !s.is_hide_set()).cloned())
        }
    };
    visible = visible.mut_args(|arg| {
        let free_form = arg.get_action().takes_values()
            && arg.get_value_hint() == ValueHint::Unknown
            && arg.get_possible_values().is_empty();
        match free_form {
            true => arg.value_hint(ValueHint::Other),
            false => arg,
        }
    });
    let subcommands: Vec<String> = visible
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in subcommands {
        visible = visible.mut_subcommand(name, for_completion);
    }
    visible
}

/// The completion script for `shell`.
fn script(shell: Shell) -> Vec<u8> {
    let mut command = for_completion(crate::cli::Cli::command());
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
    let failed = |e: std::io::Error| {
        LabError::failed(anyhow::anyhow!(
            "writing man pages to {}: {e}",
            args.out.display()
        ))
    };
    std::fs::create_dir_all(&args.out).map_err(failed)?;
    for (name, page) in pages() {
        std::fs::write(args.out.join(name), page).map_err(failed)?;
    }
    Ok(())
}

/// Every man page, as (file name, roff): ipsec-lab.1 and one per visible subcommand.
fn pages() -> Vec<(String, Vec<u8>)> {
    let mut command = crate::cli::Cli::command().disable_help_subcommand(true);
    command.build();
    let mut pages = Vec::new();
    collect_pages(&command, &mut pages);
    pages
}

fn collect_pages(command: &Command, pages: &mut Vec<(String, Vec<u8>)>) {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect_pages(sub, pages);
    }
    // clap_mangen's footer names the command and its version, and a subcommand has none:
    // "run" would stand where the version belongs.
    // The date must not be empty either: roff drops an empty argument, and the version
    // slides into the date's place.
    let man = clap_mangen::Man::new(command.clone())
        .date(page_date())
        .source(format!("ipsec-lab {}", env!("CARGO_PKG_VERSION")))
        .manual("ipsec-lab manual");
    let mut page = Vec::new();
    man.render(&mut page).expect("rendering into memory");
    // "ipsec-lab-psk-generate" -> "psk-generate"; the top page's is "".
    let name = command.get_display_name().unwrap_or(command.get_name());
    let subcommand = name
        .strip_prefix("ipsec-lab")
        .unwrap_or(name)
        .trim_start_matches('-');
    page.extend(extra_sections(subcommand).render().into_bytes());
    pages.push((man.get_filename(), page));
}

/// The pages' date, YYYY-MM-DD: `SOURCE_DATE_EPOCH` where the build sets it (Debian's
/// packaging does, for reproducible pages), else today.
fn page_date() -> String {
    let unix_s = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    let (y, m, d) = civil_date(unix_s / 86_400);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// days_from_civil, inverted).
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// What every command exits with (`lab::ExitKind`, and `compare --fail-on-regression`).
const EXIT_STATUS: [(&str, &str); 6] = [
    ("0", "Success."),
    (
        "1",
        "The work failed (a transfer, a backend, a VM); for compare --fail-on-regression: a regression was flagged.",
    ),
    (
        "2",
        "Bad usage or input, refused before anything was created; the message says what to give instead.",
    ),
    (
        "3",
        "A capability is missing (root, kernel ESP, a program such as openvpn or virtme-ng); nothing was created.",
    ),
    (
        "130",
        "Interrupted by SIGINT (Ctrl-C); everything the run had created was removed, and no report printed as if it had finished.",
    ),
    (
        "143",
        "Interrupted by SIGTERM; as 130.",
    ),
];

/// The files a command reads or writes beyond its arguments, by subcommand ("": the top page).
fn files(subcommand: &str) -> Vec<(&'static str, &'static str)> {
    let psk = (
        "/etc/ipsec-lab/psk",
        "The pre-shared key of ipsec-lab-serve.service (made by its package, or by ipsec-lab psk generate > /etc/ipsec-lab/psk), mode 0600; run --peer reads a copy of it with --psk-file.",
    );
    let state = (
        owner::STATE_DIR,
        "One state file per live run or server, recording everything it created; ipsec-lab clean removes what dead owners recorded.",
    );
    match subcommand {
        "" | "serve" | "psk" => vec![psk, state],
        "run" | "matrix" | "speed" | "clean" => vec![state],
        _ => vec![],
    }
}

/// Command lines to start from, by subcommand ("": the top page): (what, command).
fn examples(subcommand: &str) -> &'static [(&'static str, &'static str)] {
    match subcommand {
        "" => &[
            ("Kernel IPsec, AES-256-CBC with HMAC-SHA256, in a VM where this kernel has no ESP:", "ipsec-lab run --key-bits 256 --hmac sha256 --vm auto"),
            ("Every backend and cipher configuration, with every report format:", "ipsec-lab matrix --vm --vm-bytes 10MB --out results"),
        ],
        "run" => &[
            ("Kernel IPsec, AES-256-CBC with HMAC-SHA256, in a VM where this kernel has no ESP:", "ipsec-lab run --key-bits 256 --hmac sha256 --vm auto"),
            ("The lab's own tunnel, four streams for ten seconds, a line per second:", "ipsec-lab run --backend userspace -P 4 --time 10 --interval 1"),
            ("Against ipsec-lab serve on another host:", "ipsec-lab run --peer HOST --psk-file /etc/ipsec-lab/psk --backend userspace"),
        ],
        "serve" => &[
            ("Make the key, then serve clients of one network:", "ipsec-lab psk generate > /etc/ipsec-lab/psk && ipsec-lab serve --psk-file /etc/ipsec-lab/psk --allow 192.0.2.0/24"),
        ],
        "psk" | "psk-generate" => &[("A key for serve and run --peer (the file is made mode 0600):", "ipsec-lab psk generate > /etc/ipsec-lab/psk")],
        "matrix" => &[
            ("Every backend and cipher configuration, with every report format:", "ipsec-lab matrix --vm --vm-bytes 10MB --out results"),
            ("A quick look at two backends and one suite:", "ipsec-lab matrix --backends plain,userspace --ciphers aes-256-gcm --bytes 20MB --repeat 1"),
        ],
        "report" => &[("A matrix result as an SVG picture:", "ipsec-lab report results/matrix.json -f svg -o matrix.svg")],
        "compare" => &[("Fail a CI job when a cell got slower beyond the noise:", "ipsec-lab compare before.json after.json --fail-on-regression")],
        "speed" => &[
            ("Every suite and implementation, as openssl speed -evp does:", "ipsec-lab speed"),
            ("One suite at the tunnel's packet size beside OpenSSL:", "ipsec-lab speed aes-256-gcm --sizes 1400 --against-openssl"),
        ],
        "clean" => &[("Remove what killed runs left behind:", "ipsec-lab clean")],
        "completions" => &[("Bash completion for this user:", "ipsec-lab completions bash > ~/.local/share/bash-completion/completions/ipsec-lab")],
        _ => &[],
    }
}

/// EXIT STATUS, FILES and EXAMPLES, which clap_mangen does not write.
fn extra_sections(subcommand: &str) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in EXIT_STATUS {
        roff.control("TP", []).text([bold(code)]).text([roman(meaning)]);
    }
    let files = files(subcommand);
    if !files.is_empty() {
        roff.control("SH", ["FILES"]);
        for (path, what) in files {
            roff.control("TP", []).text([bold(path)]).text([roman(what)]);
        }
    }
    let examples = examples(subcommand);
    if !examples.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        for (what, line) in examples {
            roff.control("PP", []).text([roman(*what)]);
            roff.control("IP", []).text([bold(*line)]);
        }
    }
    roff
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

    /// What bash does after `prev` in the block of `subcommand` (e.g. "ipsec_lab__subcmd__run").
    fn bash_case(script: &str, subcommand: &str, prev: &str) -> String {
        let block = script
            .split(&format!("        {subcommand})\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no block for {subcommand}"));
        let case = block
            .split(&format!("                {prev})\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no case for {prev} in {subcommand}"));
        case.split(";;").next().unwrap().to_string()
    }

    /// Regression: bash offered file names after --backend, --cipher and report -f.
    #[test]
    fn bash_offers_the_values_of_named_choices_not_file_names() {
        let script = String::from_utf8(script(Shell::Bash)).unwrap();
        let run = "ipsec_lab__subcmd__run";
        for (subcommand, prev, word) in [
            (run, "--backend", "wireguard-go"),
            (run, "--cipher", "aes-256-cbc-hmac-sha256"),
            (run, "--crypto", "aws-lc"),
            (run, "--mode", "transport"),
            ("ipsec_lab__subcmd__matrix", "--backends", "strongswan"),
            ("ipsec_lab__subcmd__matrix", "--ciphers", "chacha20-poly1305"),
            ("ipsec_lab__subcmd__report", "-f", "svg"),
            ("ipsec_lab__subcmd__report", "--format", "html"),
        ] {
            let case = bash_case(&script, subcommand, prev);
            assert!(
                case.contains("compgen -W") && case.contains(word),
                "{subcommand} {prev}: {case}"
            );
        }
        // Free-form values complete nothing; paths still complete file names.
        for prev in ["--bytes", "--port", "--netem"] {
            let case = bash_case(&script, run, prev);
            assert!(!case.contains("compgen -f"), "{prev}: {case}");
        }
        for prev in ["--json", "--psk-file", "--vm"] {
            let case = bash_case(&script, run, prev);
            assert!(case.contains("compgen -f"), "{prev}: {case}");
        }
    }

    /// Regression: bash offered the hidden `man` subcommand.
    #[test]
    fn hidden_subcommands_are_not_offered() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(script(shell)).unwrap();
            assert!(script.contains("matrix"), "{shell}");
            assert!(
                !script.contains(" man ") && !script.contains("\"man\"") && !script.contains("'man:"),
                "{shell} offers man:\n{script}"
            );
        }
    }

    /// Issue 43: bash offered `speed --child`, an internal option; no shell offers a hidden
    /// option, and the visible ones around it stay.
    #[test]
    fn hidden_options_are_not_offered() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = String::from_utf8(script(shell)).unwrap();
            for visible in ["against-openssl", "openssl-units", "no-ceiling"] {
                assert!(script.contains(visible), "{shell} lost --{visible}");
            }
            for hidden in ["--child", "-l child", "report-cells", "plan-file", "no-baseline"] {
                assert!(!script.contains(hidden), "{shell} offers {hidden}");
            }
        }
    }

    /// A roff request's arguments as roff splits them (quotes group, empty ones vanish).
    fn roff_args(line: &str) -> Vec<String> {
        let mut args = Vec::new();
        let mut rest = line.trim();
        while !rest.is_empty() {
            let (arg, after) = match rest.strip_prefix('"') {
                Some(quoted) => quoted.split_once('"').unwrap_or((quoted, "")),
                None => rest.split_once(' ').unwrap_or((rest, "")),
            };
            if !arg.is_empty() {
                args.push(arg.to_string());
            }
            rest = after.trim_start();
        }
        args
    }

    #[test]
    fn dates_are_gregorian() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(20_788), (2026, 12, 1));
    }

    fn page(name: &str) -> String {
        let (_, page) = pages()
            .into_iter()
            .find(|(file, _)| file == name)
            .unwrap_or_else(|| panic!("no page {name}"));
        String::from_utf8(page).unwrap()
    }

    /// Regression: the pages had no EXIT STATUS, FILES or EXAMPLES, and a subcommand's
    /// footer printed its name ("run") where the version belongs.
    #[test]
    fn man_pages_have_exit_status_files_examples_and_the_version() {
        let names: Vec<String> = pages().into_iter().map(|(name, _)| name).collect();
        assert!(names.contains(&"ipsec-lab.1".to_string()), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("man")), "{names:?}");
        let version = format!("ipsec-lab {}", env!("CARGO_PKG_VERSION"));
        for name in &names {
            let page = page(name);
            // .TH title section date source manual: the footer shows date and source.
            let title = page.lines().find(|l| l.starts_with(".TH ")).unwrap();
            let args = roff_args(title);
            assert_eq!(args.len(), 6, "{name}: {title}");
            assert_eq!(args[4], version, "{name}: {title}");
            assert!(
                args[3].len() == 10 && args[3].starts_with("20"),
                "{name}: {title}"
            );
            assert!(page.contains(".SH \"EXIT STATUS\""), "{name}");
            for code in ["2", "3", "130", "143"] {
                assert!(page.contains(&format!("\\fB{code}\\fR")), "{name}: exit {code}");
            }
        }
        for name in ["ipsec-lab.1", "ipsec-lab-serve.1", "ipsec-lab-psk.1"] {
            let page = page(name);
            assert!(
                page.contains(".SH FILES") && page.contains("/etc/ipsec\\-lab/psk"),
                "{name}"
            );
        }
        let run = page("ipsec-lab-run.1");
        assert!(run.contains(".SH EXAMPLES"), "{run}");
        assert!(run.contains("ipsec\\-lab run \\-\\-key\\-bits 256"), "{run}");
    }
}
