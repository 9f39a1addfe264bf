#!/usr/bin/env bash
# Benchmark (not a test): the userspace tunnel at 1 and 2 tunnel threads per end
# (--tunnel-threads, a multi-queue TUN device) with 2 streams (-P 2, one application thread
# each), for AES-256-CBC+HMAC-SHA256 and AES-256-GCM, with OpenVPN beside them; and where
# the CPU went: each tunnel thread, the application threads, and the machine's softirq time
# over the run (/proc/stat, all CPUs: the kernel's network work no thread is charged for).
# Rows run back to back on fresh namespace pairs; compare rows of one invocation only.
#
#   lab/bench-threads.sh                          # release build, 200MB x 3 repeats per row
#   BYTES=1GB REPEAT=5 THREADS="1 2 4" lab/bench-threads.sh
#   BIN=target/debug/ipsec-lab BYTES=50MB REPEAT=1 lab/bench-threads.sh
#
# Needs root, /dev/net/tun, python3; openvpn for its rows (skipped with a note without).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ipsec-lab}
BYTES=${BYTES:-200MB}
REPEAT=${REPEAT:-3}
THREADS=${THREADS:-1 2}
STREAMS=${STREAMS:-2}
[ -x "$BIN" ] || { echo "no $BIN: run 'cargo build --release' first (or set BIN)" >&2; exit 3; }
out=$(mktemp -d /tmp/ipl-bench-threads.XXXXXX)
trap 'rm -rf "$out"' EXIT

softirq() { awk '/^cpu /{print $7+$8}' /proc/stat; }  # irq + softirq jiffies, all CPUs

row() {
    local name=$1; shift
    echo "running $name ..." >&2
    local s0; s0=$(softirq)
    local t0; t0=$(date +%s.%N)
    "$BIN" run --no-progress --bytes "$BYTES" --repeat "$REPEAT" -P "$STREAMS" \
        --json "$out/$name.json" "$@" >/dev/null
    echo "$(softirq) $s0 $(date +%s.%N) $t0 $(getconf CLK_TCK)" >"$out/$name.softirq"
}

for suite in aes-256-cbc-hmac-sha256 aes-256-gcm; do
    for t in $THREADS; do
        row "userspace-$suite-t$t" --backend userspace --cipher "$suite" --tunnel-threads "$t"
    done
    if command -v openvpn >/dev/null; then
        row "openvpn-$suite" --backend openvpn --cipher "$suite"
    fi
done

python3 - "$out" "$THREADS" <<'PY'
import json, os, sys

out, threads = sys.argv[1], sys.argv[2].split()


def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None


def softirq_cores(name):
    s1, s0, t1, t0, hz = open(os.path.join(out, name + ".softirq")).read().split()
    return (float(s1) - float(s0)) / float(hz) / (float(t1) - float(t0))


def cpu(c):
    return f"{c['user_s']:.2f}u+{c['system_s']:.2f}s ({c['percent_of_core']:.0f}%)"


for suite in ["aes-256-cbc-hmac-sha256", "aes-256-gcm"]:
    base = None
    for t in threads:
        name = f"userspace-{suite}-t{t}"
        r = load(name)
        mbs = r["mb_per_s"]["median"]
        base = base or mbs
        tr = r["transfers"]
        print(f"{name}: median {mbs:.1f} MB/s (min {r['mb_per_s']['min']:.1f}, max {r['mb_per_s']['max']:.1f}), "
              f"x{mbs / base:.2f} of 1 thread; machine softirq {softirq_cores(name):.2f} cores")
        for i, x in enumerate(tr):
            x = x.get("transfer", x)
            print(f"  transfer {i}: sender {x['sender_threads']} threads {cpu(x['sender_cpu'])}, "
                  f"receiver {x['receiver_threads']} threads {cpu(x['receiver_cpu'])}")
        u = r["backend_details"]["userspace"]
        for end, role in [("a", "encrypting"), ("b", "decrypting")]:
            for q in u[end].get("queues") or [u[end]]:
                tag = f"/{q['queue']}" if "queue" in q else ""
                print(f"  {role} thread {q['tun']}{tag}: {cpu(q['cpu'])}, "
                      f"{q['sent']['packets']} sent, {q['delivered']['packets']} delivered")
    o = load(f"openvpn-{suite}")
    if o:
        print(f"openvpn-{suite}: median {o['mb_per_s']['median']:.1f} MB/s, "
              f"machine softirq {softirq_cores('openvpn-' + suite):.2f} cores")
        for end, p in sorted(o["backend_details"]["openvpn"].get("ends", {}).items()):
            print(f"  openvpn process {end}: {cpu(p['cpu'])}")
    else:
        print(f"openvpn-{suite}: not run (openvpn not installed)")
PY
