#!/usr/bin/env bash
# Benchmark (not a test): the lab's userspace tunnel against real OpenVPN 2.6 and the plain
# baseline, for AES-256-CBC+HMAC-SHA256 and AES-256-GCM, plus --crypto soft against auto.
# Every row is `ipsec-lab run` on a fresh, identical namespace pair + veth, back to back in
# one invocation of this script; the figures that matter are the ratios between rows of the
# same invocation (the machines are noisy; absolute numbers move between runs).
#
#   lab/bench-userspace.sh                 # 200MB x 3 repeats per row
#   BYTES=1GB REPEAT=5 lab/bench-userspace.sh
#   ROUNDS=3 lab/bench-userspace.sh        # the whole set 3 times, then the median ratios
#
# Needs root, /dev/net/tun, openvpn, a release build (make build) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ipsec-lab}
BYTES=${BYTES:-200MB}
REPEAT=${REPEAT:-3}
ROUNDS=${ROUNDS:-1}
[ -x "$BIN" ] || { echo "no $BIN: run 'cargo build --release' first" >&2; exit 3; }
out=$(mktemp -d /tmp/ipl-bench-userspace.XXXXXX)
trap 'rm -rf "$out"' EXIT

row() {
    local name=$1; shift
    echo "running $name (round $round of $ROUNDS) ..." >&2
    "$BIN" run --no-progress --bytes "$BYTES" --repeat "$REPEAT" --json "$out/r$round/$name.json" "$@" >/dev/null
}

for round in $(seq 1 "$ROUNDS"); do
    mkdir -p "$out/r$round"
    row plain --backend plain
    for suite in aes-256-cbc-hmac-sha256 aes-256-gcm; do
        row "userspace-$suite" --backend userspace --cipher "$suite"
        row "openvpn-$suite" --backend openvpn --cipher "$suite"
    done
    row "userspace-soft-aes-256-cbc-hmac-sha256" --backend userspace --cipher aes-256-cbc-hmac-sha256 --crypto soft
done

python3 - "$out" "$ROUNDS" <<'PY'
import json, os, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
ratios = {}  # name -> one value per round


def mbs(r):
    return r["mb_per_s"]["median"]


def one_round(d):
    load = lambda name: json.load(open(os.path.join(d, name + ".json")))
    plain = load("plain")
    print(f"{'row':<42} {'MB/s':>8} {'% plain':>8}")
    print(f"{'plain':<42} {mbs(plain):8.1f} {100.0:8.1f}")
    for suite in ["aes-256-cbc-hmac-sha256", "aes-256-gcm"]:
        us, ov = load(f"userspace-{suite}"), load(f"openvpn-{suite}")
        for name, r in [(f"userspace {suite}", us), (f"openvpn {suite}", ov)]:
            print(f"{name:<42} {mbs(r):8.1f} {mbs(r) / mbs(plain) * 100:8.1f}")
        u = us["backend_details"]["userspace"]
        e, a, b = u["efficiency"], u["a"], u["b"]
        ca, cb = a["cpu"], b["cpu"]
        ratios.setdefault(f"userspace/openvpn {suite} (target >= 3)", []).append(mbs(us) / mbs(ov))
        ratios.setdefault(f"efficiency {suite} (target >= 0.5)", []).append(e["ratio"])
        print(f"  userspace/openvpn = {mbs(us) / mbs(ov):.2f}  (target >= 3)")
        print(f"  encrypting thread: {ca['user_s']:.2f} s user + {ca['system_s']:.2f} s system, "
              f"{ca['percent_of_core']:.0f} % of a core; {e['tunnel_payload_mb_per_cpu_s']:.0f} MB per CPU-second "
              f"vs {e['crypto_single_core_mb_per_s']:.0f} MB per CPU-second single-core "
              f"{u['implementation']['label']} on {e['packet_bytes']}-byte packets = {e['ratio'] * 100:.0f} % "
              f"(target >= 50 %)")
        print(f"  decrypting thread: {cb['user_s']:.2f} s user + {cb['system_s']:.2f} s system, "
              f"{cb['percent_of_core']:.0f} % of a core")
        if "tun_reads" in a:
            print(f"  {u['batching']}: a {a['sent']['packets'] / max(a['tun_reads'], 1):.1f} packets per TUN read, "
                  f"{a['sent']['packets'] / max(a['send_calls'], 1):.1f} per send; "
                  f"b {b['delivered']['packets'] / max(b['tun_writes'], 1):.1f} packets per TUN write")
        ovd = ov["backend_details"]["openvpn"]
        print(f"  openvpn: {ovd['mode']}, {ovd['cipher']}/{ovd['auth']}, sender process "
              f"{ovd['ends']['a']['cpu']['percent_of_core']:.0f} % of a core")
    soft = load("userspace-soft-aes-256-cbc-hmac-sha256")
    auto = load("userspace-aes-256-cbc-hmac-sha256")
    s = soft["backend_details"]["userspace"]
    ratios.setdefault("auto/soft aes-256-cbc-hmac-sha256", []).append(mbs(auto) / mbs(soft))
    print(f"{'userspace aes-256-cbc-hmac-sha256 --crypto soft':<42} {mbs(soft):8.1f} "
          f"{mbs(soft) / mbs(plain) * 100:8.1f}")
    print(f"  auto/soft = {mbs(auto) / mbs(soft):.2f}  ({s['implementation']['label']}; single-core crypto "
          f"{auto['backend_details']['userspace']['efficiency']['crypto_single_core_mb_per_s']:.0f} "
          f"vs {s['efficiency']['crypto_single_core_mb_per_s']:.0f} MB per CPU-second)")


for rnd in range(1, rounds + 1):
    if rounds > 1:
        print(f"== round {rnd}")
    one_round(os.path.join(out, f"r{rnd}"))
if rounds > 1:
    print(f"== medians over {rounds} rounds")
    for name, values in ratios.items():
        print(f"  {name}: {statistics.median(values):.2f}  ({', '.join(f'{v:.2f}' for v in values)})")
PY
