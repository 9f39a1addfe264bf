#!/usr/bin/env bash
# Benchmark (not a test): the lab's userspace tunnel against real OpenVPN 2.6 and the plain
# baseline, for AES-256-CBC+HMAC-SHA256 and AES-256-GCM, plus --crypto soft against auto.
# Every row is `ipsec-lab run` on a fresh, identical namespace pair + veth, back to back in
# one invocation of this script; the figures that matter are the ratios between rows of the
# same invocation (the machines are noisy; absolute numbers move between runs).
#
#   lab/bench-userspace.sh                 # 200MB x 3 repeats per row
#   BYTES=1GB REPEAT=5 lab/bench-userspace.sh
#
# Needs root, /dev/net/tun, openvpn, a release build (make build) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ipsec-lab}
BYTES=${BYTES:-200MB}
REPEAT=${REPEAT:-3}
[ -x "$BIN" ] || { echo "no $BIN: run 'cargo build --release' first" >&2; exit 3; }
out=$(mktemp -d /tmp/ipl-bench-userspace.XXXXXX)
trap 'rm -rf "$out"' EXIT

row() {
    local name=$1; shift
    echo "running $name ..." >&2
    "$BIN" run --no-progress --bytes "$BYTES" --repeat "$REPEAT" --json "$out/$name.json" "$@" >/dev/null
}

row plain --backend plain
for suite in aes-256-cbc-hmac-sha256 aes-256-gcm; do
    row "userspace-$suite" --backend userspace --cipher "$suite"
    row "openvpn-$suite" --backend openvpn --cipher "$suite"
done
row "userspace-soft-aes-256-cbc-hmac-sha256" --backend userspace --cipher aes-256-cbc-hmac-sha256 --crypto soft

python3 - "$out" <<'PY'
import json, sys, os
d = sys.argv[1]
def load(name):
    return json.load(open(os.path.join(d, name + ".json")))
def mbs(r):
    return r["mb_per_s"]["median"]
plain = load("plain")
print(f"{'row':<42} {'MB/s':>8} {'% plain':>8}")
print(f"{'plain':<42} {mbs(plain):8.1f} {100.0:8.1f}")
for suite in ["aes-256-cbc-hmac-sha256", "aes-256-gcm"]:
    us, ov = load(f"userspace-{suite}"), load(f"openvpn-{suite}")
    for name, r in [(f"userspace {suite}", us), (f"openvpn {suite}", ov)]:
        print(f"{name:<42} {mbs(r):8.1f} {mbs(r) / mbs(plain) * 100:8.1f}")
    u = us["backend_details"]["userspace"]
    e, a = u["efficiency"], u["a"]["cpu"]
    print(f"  userspace/openvpn = {mbs(us) / mbs(ov):.2f}  (target >= 3)")
    print(f"  encrypting thread: {a['user_s']:.2f} s user + {a['system_s']:.2f} s system, "
          f"{a['percent_of_core']:.0f} % of a core; {e['tunnel_payload_mb_per_cpu_s']:.0f} MB per CPU-second "
          f"vs {e['crypto_single_core_mb_per_s']:.0f} MB/s single-core {u['implementation']['label']} on "
          f"{e['packet_bytes']}-byte packets = {e['ratio'] * 100:.0f} % (target >= 50 %)")
    ovd = ov["backend_details"]["openvpn"]
    print(f"  openvpn: {ovd['mode']}, {ovd['cipher']}/{ovd['auth']}, sender process "
          f"{ovd['ends']['a']['cpu']['percent_of_core']:.0f} % of a core")
soft = load("userspace-soft-aes-256-cbc-hmac-sha256")
auto = load("userspace-aes-256-cbc-hmac-sha256")
s = soft["backend_details"]["userspace"]
print(f"{'userspace aes-256-cbc-hmac-sha256 --crypto soft':<42} {mbs(soft):8.1f} {mbs(soft) / mbs(plain) * 100:8.1f}")
print(f"  auto/soft = {mbs(auto) / mbs(soft):.2f}  ({s['implementation']['label']}; "
      f"single-core crypto {auto['backend_details']['userspace']['efficiency']['crypto_single_core_mb_per_s']:.0f} "
      f"vs {s['efficiency']['crypto_single_core_mb_per_s']:.0f} MB/s)")
PY
