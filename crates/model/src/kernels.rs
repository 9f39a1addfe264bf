//! Kernel rows of several kernels in one matrix (`matrix --vm A,B`, `--vm uml,uml:B`): each
//! kernel's rows are keyed `vm RELEASE` (or `uml RELEASE`), and [`kernel_views`] turns one
//! such report into two reports, one per kernel, keyed plain `vm` (or `uml`), so `compare
//! --kernels A,B` pairs their rows cell by cell with the statistics of an ordinary
//! comparison. A VM's kernel and a user-mode Linux one keep their own keys: they never pair.

use crate::matrix::{MatrixReport, UML, VM};

/// The environment key of a VM row measured on kernel `release` when a sweep boots
/// several kernels.
pub fn vm_environment(release: &str) -> String {
    format!("{VM} {release}")
}

/// The same for user-mode Linux kernels.
pub fn uml_environment(release: &str) -> String {
    format!("{UML} {release}")
}

/// The kind (`vm` or `uml`) and release of a per-kernel environment key.
fn kernel_of(environment: &str) -> Option<(&'static str, &str)> {
    [VM, UML]
        .into_iter()
        .find_map(|kind| Some((kind, environment.strip_prefix(kind)?.strip_prefix(' ')?)))
}

/// The releases whose per-kernel rows `report` holds (`vm RELEASE`, `uml RELEASE`
/// environments), in key order.
pub fn kernels_in(report: &MatrixReport) -> Vec<String> {
    let mut out: Vec<String> = report
        .rows
        .iter()
        .filter_map(|r| kernel_of(&r.key.environment).map(|(_, release)| release.to_string()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `report`'s rows of kernel `a` and of kernel `b`, each as a report of its own whose VM
/// rows are keyed `vm`. Both views name the same kernel in their environment (`a vs b`),
/// so the kernel, the one thing meant to differ, does not make the cells incomparable; the
/// CPU, payload and virtualisation still must match.
pub fn kernel_views(report: &MatrixReport, a: &str, b: &str) -> Result<(MatrixReport, MatrixReport), String> {
    let found = kernels_in(report);
    let view = |release: &str| -> Result<MatrixReport, String> {
        let environment = report
            .rows
            .iter()
            .map(|r| r.key.environment.as_str())
            .find(|e| kernel_of(e).is_some_and(|(_, r)| r == release))
            .unwrap_or_default()
            .to_string();
        if !found.iter().any(|k| k == release) {
            return Err(format!(
                "no VM rows of kernel {release} in this report (it has: {}); make one with `matrix --vm KERNEL,KERNEL`",
                if found.is_empty() { "none".to_string() } else { found.join(", ") }
            ));
        }
        let kind = kernel_of(&environment).map_or(VM, |(kind, _)| kind);
        let mut out = report.clone();
        out.rows.retain(|r| r.key.environment == environment);
        for row in &mut out.rows {
            row.key.environment = kind.into();
        }
        out.environments.clear();
        if let Some(mut env) = report.environments.get(&environment).cloned() {
            env.kernel_release = format!("{a} vs {b}");
            out.environments.insert(kind.into(), env);
        }
        default_driver_row_as_default(&mut out, report.environments.get(&environment));
        out.payload_by_environment.clear();
        out.payload = report.payload_of(&environment);
        out.notes = vec![format!("kernel {release}")];
        Ok(out)
    };
    Ok((view(a)?, view(b)?))
}

/// Where a kernel has several `cbc(aes)` drivers its xfrm rows are per driver
/// (`xfrm [cbc-aes-aesni]`), where it has one the row is plain `xfrm`; so the two kernels'
/// rows pair, the row of the driver the kernel picks by itself (its environment's
/// `cbc(aes)` driver) stands as the default row when there is none.
fn default_driver_row_as_default(view: &mut MatrixReport, env: Option<&crate::Environment>) {
    use crate::matrix::RowVariant;
    let Some(default) = env.and_then(|e| e.kernel_drivers.get("cbc(aes)")) else {
        return;
    };
    let xfrm = |r: &crate::matrix::Row| r.key.backend == crate::Backend::Xfrm;
    // Per link condition: each has its own rows.
    let mut conditions: Vec<Option<String>> = view.rows.iter().map(|r| r.key.netem.clone()).collect();
    conditions.dedup();
    for netem in conditions {
        let has_default = view
            .rows
            .iter()
            .any(|r| xfrm(r) && r.key.netem == netem && r.key.variant == RowVariant::Default);
        if has_default {
            continue;
        }
        let own = view.rows.iter_mut().find(|r| {
            xfrm(r) && r.key.netem == netem && r.key.variant == RowVariant::KernelDriver(default.clone())
        });
        if let Some(row) = own {
            row.key.variant = RowVariant::Default;
            row.notes.push(format!(
                "the row of {default}, the kernel's own choice of cbc(aes) driver"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::{Cell, Row, RowKey, RowVariant};
    use crate::{Backend, ByteSize, CipherSuite, Environment, KeyBits};

    fn report() -> MatrixReport {
        let suite = CipherSuite::AesGcm { key: KeyBits::Aes128 };
        let mut r = MatrixReport::new(vec![suite], ByteSize(1_000_000), 1, 0);
        for release in ["6.1.0-57-amd64", "6.12.38+deb12-amd64"] {
            let env = vm_environment(release);
            r.rows.push(Row {
                key: RowKey::new(Backend::Xfrm, RowVariant::Default, &env),
                cells: vec![Cell::not_run(suite, release)],
                notes: vec![],
            });
            let mut e = Environment::detect();
            e.kernel_release = release.into();
            r.environments.insert(env, e);
        }
        r
    }

    #[test]
    fn each_kernels_rows_become_a_report_keyed_vm() {
        let r = report();
        assert_eq!(kernels_in(&r), ["6.1.0-57-amd64", "6.12.38+deb12-amd64"]);
        assert_eq!(r.rows[0].key.label(), "xfrm (vm 6.1.0-57-amd64)");
        let (a, b) = kernel_views(&r, "6.1.0-57-amd64", "6.12.38+deb12-amd64").unwrap();
        for (view, release) in [(&a, "6.1.0-57-amd64"), (&b, "6.12.38+deb12-amd64")] {
            assert_eq!(view.rows.len(), 1);
            assert_eq!(view.rows[0].key.environment, VM);
            let CellOutcomeReason(reason) = reason_of(view);
            assert_eq!(reason, release, "the right kernel's row");
        }
        assert_eq!(
            a.environments[VM].kernel_release,
            b.environments[VM].kernel_release
        );
        let e = kernel_views(&r, "6.1.0-57-amd64", "5.10").unwrap_err();
        assert!(
            e.contains("no VM rows of kernel 5.10") && e.contains("6.12.38"),
            "{e}"
        );
    }

    /// Two user-mode Linux kernels pair as `uml` rows; a VM's kernel and a UML one keep
    /// their own keys, so they never pair.
    #[test]
    fn user_mode_linux_kernels_pair_as_uml_rows() {
        let mut r = report();
        for row in &mut r.rows {
            let release = row.key.environment.strip_prefix("vm ").unwrap().to_string();
            row.key.environment = uml_environment(&release);
        }
        r.environments = r
            .environments
            .into_iter()
            .map(|(k, v)| (k.replacen("vm ", "uml ", 1), v))
            .collect();
        assert_eq!(r.rows[1].key.label(), "xfrm (uml 6.12.38+deb12-amd64)");
        let (a, b) = kernel_views(&r, "6.1.0-57-amd64", "6.12.38+deb12-amd64").unwrap();
        assert_eq!(a.rows[0].key.environment, UML);
        assert_eq!(b.rows[0].key.environment, UML);
        assert!(a.environments.contains_key(UML));
        r.rows[0].key.environment = vm_environment("6.1.0-57-amd64");
        let (a, b) = kernel_views(&r, "6.1.0-57-amd64", "6.12.38+deb12-amd64").unwrap();
        assert_ne!(
            a.rows[0].key, b.rows[0].key,
            "a VM's row and a UML one do not pair"
        );
    }

    #[test]
    fn the_kernels_own_driver_row_pairs_with_a_kernel_that_has_one_driver() {
        let mut r = report();
        let old = vm_environment("6.1.0-57-amd64");
        r.rows[0].key.variant = RowVariant::KernelDriver("cbc-aes-aesni".into());
        let mut generic = r.rows[0].clone();
        generic.key.variant = RowVariant::KernelDriver("cbc(aes-generic)".into());
        r.rows.push(generic);
        let mut shaped = r.rows[0].clone();
        shaped.key.netem = Some("delay 20ms".into());
        r.rows.push(shaped);
        r.environments
            .get_mut(&old)
            .unwrap()
            .kernel_drivers
            .insert("cbc(aes)".into(), "cbc-aes-aesni".into());
        let (a, b) = kernel_views(&r, "6.1.0-57-amd64", "6.12.38+deb12-amd64").unwrap();
        let labels = |v: &MatrixReport| v.rows.iter().map(|r| r.key.label()).collect::<Vec<_>>();
        assert_eq!(
            labels(&a),
            [
                "xfrm (vm)",
                "xfrm [cbc(aes-generic)] (vm)",
                "xfrm (vm) @ delay 20ms"
            ]
        );
        assert_eq!(labels(&b), ["xfrm (vm)"]);
    }

    struct CellOutcomeReason(String);

    fn reason_of(r: &MatrixReport) -> CellOutcomeReason {
        match &r.rows[0].cells[0].outcome {
            crate::matrix::CellOutcome::NotRun { reason } => CellOutcomeReason(reason.clone()),
            other => panic!("{other:?}"),
        }
    }
}
