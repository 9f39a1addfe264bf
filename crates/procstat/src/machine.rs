//! The machine's CPU time, from the first line of /proc/stat: all CPUs together, in clock
//! ticks, split as the kernel counts it.

use crate::cpu::ticks_per_s;

/// The machine's CPU time counters (clock ticks, all CPUs) at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineTimes {
    /// user + nice (guest time is already in user).
    user: u64,
    system: u64,
    /// Interrupts and softirqs: much of the network stack's receive work.
    irq: u64,
    idle: u64,
    /// What the hypervisor gave to others.
    steal: u64,
}

/// Machine-wide CPU seconds used between two readings, by kind: the busy time of every
/// CPU, this process's and everyone else's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MachineCpu {
    pub user_s: f64,
    pub system_s: f64,
    /// Interrupt and softirq time.
    pub irq_s: f64,
}

impl MachineCpu {
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s + self.irq_s
    }

    pub fn plus(self, other: MachineCpu) -> MachineCpu {
        MachineCpu {
            user_s: self.user_s + other.user_s,
            system_s: self.system_s + other.system_s,
            irq_s: self.irq_s + other.irq_s,
        }
    }
}

impl MachineTimes {
    /// None where /proc/stat is missing or has no steal column (kernels before 2.6.11).
    pub fn now() -> Option<MachineTimes> {
        parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    fn total(&self) -> u64 {
        self.user + self.system + self.irq + self.idle + self.steal
    }

    /// The stolen share of the CPU time since `self`, in percent; None when no time passed.
    pub fn steal_percent_since(&self, later: &MachineTimes) -> Option<f64> {
        let total = later.total().checked_sub(self.total()).filter(|t| *t > 0)?;
        let steal = later.steal.checked_sub(self.steal)?;
        Some(100.0 * steal as f64 / total as f64)
    }

    /// The busy CPU time between `self` and `later`, in seconds.
    pub fn busy_since(&self, later: &MachineTimes) -> MachineCpu {
        let s = |a: u64, b: u64| b.saturating_sub(a) as f64 / ticks_per_s();
        MachineCpu {
            user_s: s(self.user, later.user),
            system_s: s(self.system, later.system),
            irq_s: s(self.irq, later.irq),
        }
    }
}

fn parse(stat: &str) -> Option<MachineTimes> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    // user nice system idle iowait irq softirq steal; guest time is already counted in user.
    let v: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = v[..] else {
        return None;
    };
    Some(MachineTimes {
        user: user + nice,
        system,
        irq: irq + softirq,
        idle: idle + iowait,
        steal,
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
    fn busy_time_is_split_by_kind_and_leaves_out_idle_and_steal() {
        let before = parse("cpu  100 5 50 800 10 1 2 40 0 0\n").unwrap();
        let after = parse("cpu  200 15 100 1500 20 3 6 190 0 0\n").unwrap();
        let t = ticks_per_s();
        let busy = before.busy_since(&after);
        assert_eq!(busy.user_s, 110.0 / t);
        assert_eq!(busy.system_s, 50.0 / t);
        assert_eq!(busy.irq_s, 6.0 / t);
        assert!((busy.total_s() - 166.0 / t).abs() < 1e-9);
    }

    #[test]
    fn this_machine_has_counters() {
        let now = MachineTimes::now().expect("/proc/stat with a steal column");
        assert!(now.total() >= now.steal);
    }
}
