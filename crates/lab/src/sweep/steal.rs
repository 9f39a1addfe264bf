//! CPU time the hypervisor stole while a cell ran, from the first line of /proc/stat: on a
//! shared virtual machine a neighbour's load shows there, and a cell measured under it is
//! marked instead of trusted.

/// The machine's CPU time counters (in clock ticks) at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuTimes {
    total: u64,
    steal: u64,
}

impl CpuTimes {
    /// None where /proc/stat is missing or has no steal column (kernels before 2.6.11).
    pub fn now() -> Option<CpuTimes> {
        parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The stolen share of the CPU time since `self`, in percent; None when no time passed.
    pub fn steal_percent_since(&self, later: &CpuTimes) -> Option<f64> {
        let total = later.total.checked_sub(self.total).filter(|t| *t > 0)?;
        let steal = later.steal.checked_sub(self.steal)?;
        Some(100.0 * steal as f64 / total as f64)
    }
}

fn parse(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait irq softirq steal; guest time is already counted in user.
    let values: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if values.len() < 8 {
        return None;
    }
    Some(CpuTimes {
        total: values.iter().sum(),
        steal: values[7],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_its_share_of_all_ticks() {
        let before = parse("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 1 2 3\n").unwrap();
        let after = parse("cpu  200 0 100 1500 10 0 0 190 0 0\n").unwrap();
        // 150 of 1000 ticks stolen.
        assert_eq!(before.steal_percent_since(&after), Some(15.0));
        assert_eq!(after.steal_percent_since(&after), None);
        assert_eq!(parse("cpu  1 2 3 4\n"), None);
        assert_eq!(parse("intr 5\n"), None);
    }

    #[test]
    fn this_machine_has_counters() {
        let now = CpuTimes::now().expect("/proc/stat with a steal column");
        assert!(now.total >= now.steal);
    }
}
