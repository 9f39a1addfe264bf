#!/usr/bin/env bash
# Benchmark (not a test): packets per second and the zero-loss rate of the plain link and
# the lab's userspace tunnel, at 64 and 1400 bytes, side by side (issue 26). Each row is
# `ipsec-lab run --find-ndr` on a fresh, identical namespace pair + veth, back to back in one
# invocation; compare rows of the same invocation (the machines are noisy).
#
#   lab/bench-packets.sh                   # AES-256-GCM, final trials of 2 s
#   CIPHER=aes-256-cbc-hmac-sha256 TIME=4 lab/bench-packets.sh
#
# Needs root, /dev/net/tun, a release build (make build) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ipsec-lab}
CIPHER=${CIPHER:-aes-256-gcm}
TIME=${TIME:-2}
[ -x "$BIN" ] || { echo "no $BIN: run 'cargo build --release' first" >&2; exit 3; }
out=$(mktemp -d /tmp/ipl-bench-packets.XXXXXX)
trap 'rm -rf "$out"' EXIT

for size in 64 1400; do
    echo "running plain, $size B ..." >&2
    "$BIN" run --no-progress --backend plain --find-ndr --packet-size "$size" --time "$TIME" \
        --json "$out/plain-$size.json" >/dev/null
    echo "running userspace ($CIPHER), $size B ..." >&2
    "$BIN" run --no-progress --backend userspace --cipher "$CIPHER" --find-ndr --packet-size "$size" \
        --time "$TIME" --json "$out/userspace-$size.json" >/dev/null
done

python3 - "$out" "$CIPHER" <<'PY'
import json, sys
out, cipher = sys.argv[1], sys.argv[2]
def si(v):
    return f"{v/1e6:.3f}M" if v >= 1e6 else f"{v/1e3:.1f}k"
print(f"{'row':<22}{'size':>6}{'max sent':>11}{'NDR pps':>11}{'NDR Mbit/s':>12}{'PDR 0.5%':>11}")
ndr = {}
for size in (64, 1400):
    for name in ("plain", "userspace"):
        r = json.load(open(f"{out}/{name}-{size}.json"))
        search = r["udp"]["ndr"]
        bounds = {b["tolerance_pct"]: b for b in search["bounds"]}
        n, p = bounds[0.0], bounds[0.5]
        ndr[(name, size)] = n["pps"]
        label = name if name == "plain" else f"userspace {cipher}"
        note = "" if n["upper"] else "  (the sender set it)"
        print(f"{label:<22}{size:>6}{si(search['max_rate']['sent_pps']):>11}{si(n['pps']):>11}"
              f"{n['mbit_per_s']:>12.1f}{si(p['pps']):>11}{note}")
for size in (64, 1400):
    plain, tunnel = ndr[("plain", size)], ndr[("userspace", size)]
    ratio = f"{tunnel / plain:.2f}" if plain > 0 else "not computed (plain found no rate)"
    print(f"userspace/plain NDR at {size} B = {ratio}")
PY
