#!/usr/bin/env bash
# Benchmark (not a test): the lab's userspace tunnel against its peers and its own limits.
# Rows: the plain line rate (the lab's and iperf3's), the tunnel with no cipher (`none`: what
# its TUN and UDP path costs alone), the tunnel for AES-256-GCM, ChaCha20-Poly1305 and
# AES-256-CBC+HMAC-SHA256, the offload-era wireguard-go (ChaCha20),
# real OpenVPN 2.6 (CBC+HMAC and GCM) and the tunnel with --crypto soft. Every row is
# `ipsec-lab run` on a fresh, identical namespace pair + veth, back to back in one invocation
# of this script; the figures that matter are the ratios between rows of the same
# invocation (the machines are noisy; absolute numbers move between runs). Each tunnel row
# also shows where its threads' time went (the `time` of each end's evidence), and every
# row what a gigabyte costs the whole machine: CPU-seconds of all CPUs (/proc/stat) per
# extra GB, the slope between a BYTES run and a BIG_BYTES run of the row, so that set-up
# and teardown cancel out; that figure does not move with the core count the way MB/s does.
# Under each tunnel row: its floor (the plain row's cost plus the suite's crypto at both
# ends, timed by `ipsec-lab speed --clock cpu` at 1400 B in the same invocation), the
# `none` row plus that crypto (an estimate of this TUN+UDP path's cost with the suite's
# crypto added, not a bound) and where the cost goes, per phase of the two tunnel threads,
# in CPU-s per GB.
#
#   lab/bench-userspace.sh                 # 500MB x 3 repeats per row
#   BYTES=1GB REPEAT=5 lab/bench-userspace.sh
#   BIG_BYTES=4GB lab/bench-userspace.sh   # the second point of the CPU-s/GB slope (default 2GB, once)
#   ROUNDS=3 lab/bench-userspace.sh        # the whole set 3 times, then the median ratios
#
# Needs root, /dev/net/tun, openvpn, iperf3, wireguard-go (lab/wireguard-go.sh), a release
# build (make build) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ipsec-lab}
BYTES=${BYTES:-500MB}
REPEAT=${REPEAT:-3}
BIG_BYTES=${BIG_BYTES:-2GB}
ROUNDS=${ROUNDS:-1}
[ -x "$BIN" ] || { echo "no $BIN: run 'cargo build --release' first" >&2; exit 3; }
out=$(mktemp -d /tmp/ipl-bench-userspace.XXXXXX)
trap 'rm -rf "$out"' EXIT

row() {
    local name=$1; shift
    echo "running $name (round $round of $ROUNDS) ..." >&2
    "$BIN" run --no-progress --bytes "$BYTES" --repeat "$REPEAT" --json "$out/r$round/$name.json" "$@" >/dev/null
    echo "running $name with $BIG_BYTES, for the CPU-s/GB slope ..." >&2
    "$BIN" run --no-progress --bytes "$BIG_BYTES" --repeat 1 --json "$out/r$round/$name.big.json" "$@" >/dev/null
}

SUITES="aes-256-gcm chacha20-poly1305 aes-256-cbc-hmac-sha256"
for round in $(seq 1 "$ROUNDS"); do
    mkdir -p "$out/r$round"
    row plain --backend plain --with-iperf3
    row userspace-none --backend userspace --cipher none
    for suite in $SUITES; do
        row "userspace-$suite" --backend userspace --cipher "$suite"
    done
    row wireguard-go --backend wireguard-go
    for suite in aes-256-cbc-hmac-sha256 aes-256-gcm; do
        row "openvpn-$suite" --backend openvpn --cipher "$suite"
    done
    row "userspace-soft-aes-256-cbc-hmac-sha256" --backend userspace --cipher aes-256-cbc-hmac-sha256 --crypto soft
    # What the suites' crypto costs per CPU-second at the tunnel's packet size, for each
    # row's floor (CBC+HMAC's opening is the MAC and CBC decryption, timed on their own).
    echo "timing the suites' crypto at 1400 B (round $round of $ROUNDS) ..." >&2
    # shellcheck disable=SC2086
    "$BIN" speed $SUITES hmac-sha256 aes-256-cbc --crypto auto --sizes 1400 --clock cpu \
        --json "$out/r$round/speed.json" >/dev/null
done

python3 - "$out" "$ROUNDS" "$SUITES" <<'PY'
import json, os, statistics, sys

out, rounds, suites = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
ratios = {}  # name -> one value per round


def mbs(r):
    return r["mb_per_s"]["median"]


def per_transfer(r):
    c = r["machine_cost"]
    n = len(r["transfers"])
    return c["bytes"] / n / 1e9, c["cpu_s"] / n, c


def cpu_per_extra_gb(name, d):
    """Machine CPU-seconds per extra GB: the slope between the row's two payload sizes."""
    small = per_transfer(json.load(open(os.path.join(d, name + ".json"))))
    big = per_transfer(json.load(open(os.path.join(d, name + ".big.json"))))
    return (big[1] - small[1]) / (big[0] - small[0]), small[2]


def time_line(end):
    t = end.get("time", {})
    phases = [("TUN read", "tun_read_s"), ("segmenting", "segmenting_s"), ("crypto", "crypto_s"),
              ("UDP send", "udp_send_s"), ("UDP receive", "udp_recv_s"), ("joining", "joining_s"),
              ("TUN write", "tun_write_s"), ("idle", "idle_s"), ("other", "other_s")]
    total = sum(t.get(k, 0.0) for _, k in phases) or 1e-9
    parts = sorted(((t.get(k, 0.0) / total * 100, name) for name, k in phases), reverse=True)
    line = ", ".join(f"{name} {p:.0f} %" for p, name in parts if p >= 0.5)
    if t.get("run_queue_s") is not None:
        line += f"; waiting for a CPU {t['run_queue_s'] / total * 100:.0f} %"
    return line


def crypto_cost(suite, speed):
    """CPU-s per GB to seal at one end and open at the other, by `speed --clock cpu` at
    1400 B, as a lower bound: an AEAD opens in the same passes as it seals (speed times the
    seal). CBC+HMAC is the MAC at each end and CBC decryption twice: the tunnel encrypts a
    batch of packets side by side, which goes no faster than decryption's blocks in
    parallel, while speed's CBC encryption is one packet's chain at a time."""
    rate = {(r["suite"], r["direction"]): r["mb_per_s"] for r in speed if r["block_bytes"] == 1400}
    if suite.endswith("-hmac-sha256"):
        cbc = suite.removesuffix("-hmac-sha256")
        return 2 * (1000 / rate[("hmac-sha256", "mac")] + 1000 / rate[(cbc, "decrypt")])
    return 2 * 1000 / rate[(suite, "encrypt")]


PHASES = [("TUN read", "tun_read_s"), ("TUN write", "tun_write_s"), ("UDP send", "udp_send_s"),
          ("UDP receive", "udp_recv_s"), ("crypto", "crypto_s"), ("segmenting", "segmenting_s"),
          ("joining", "joining_s"), ("other", "other_s")]


def thread_lines(run, roles):
    """Each end's share of a core and where its time went, in one BYTES run of the row."""
    for side, role in zip(("a", "b"), roles):
        e = run["backend_details"]["userspace"][side]
        print(f"  {role} thread, {e['cpu']['percent_of_core']:.0f} % of a core: {time_line(e)}")


def threads_line(measured, big):
    """Where both tunnel threads' time went in the BIG_BYTES run, per GB it carried: each
    phase scaled to the threads' CPU time (a phase is timed by the wall clock, waiting for a
    CPU included); and what the rest of the machine spent."""
    u = big["backend_details"]["userspace"]
    gb = sum(t["bytes"] for t in big["transfers"]) / 1e9
    phases = {}
    threads = 0.0
    for side in ("a", "b"):
        e = u[side]
        t = e["time"]
        cpu = e["cpu"]["user_s"] + e["cpu"]["system_s"]
        busy = sum(v for k, v in t.items() if k not in ("idle_s", "run_queue_s")) or 1e-9
        for k, v in t.items():
            if k not in ("idle_s", "run_queue_s"):
                phases[k] = phases.get(k, 0.0) + v * cpu / busy / gb
        threads += cpu / gb
    print(f"  the tunnel's two threads {threads:.2f} CPU-s/GB: "
          + ", ".join(f"{n} {phases.get(k, 0.0):.2f}" for n, k in PHASES)
          + f"; the rest of the machine {measured - threads:.2f} (the TCP ends, softirq)")


def floor_lines(suite, measured, plain, none, speed, big):
    """The row's floor, a lower bound: the plain row's cost (the inner TCP's own work)
    and the suite's crypto at both ends. Then an estimate, not a bound: the tunnel with no
    cipher plus that crypto (its receiver checks each segment's TCP checksum, which the
    authenticated suites leave to their tag). Then where the rest goes. The TUN and UDP
    calls are not added to the floor: the kernel does part of the inner stack's work inside
    them (a TUN write delivers the segment to the receiving TCP socket in the writing
    thread), work the plain row's cost already holds."""
    crypto = crypto_cost(suite, speed)
    floor = plain + crypto
    print(f"  CPU-s/GB: floor {floor:.2f} = plain {plain:.2f} + crypto {crypto:.2f} (both ends at 1400 B);"
          f" measured {measured:.2f} = floor + {measured - floor:.2f} ({measured / floor:.2f}x)")
    path = none + crypto
    print(f"  the tunnel with no cipher {none:.2f} + crypto {crypto:.2f} = {path:.2f} ({path / plain:.2f}x plain);"
          f" measured = that + {measured - path:.2f} ({measured / path:.2f}x)")
    threads_line(measured, big)


def ratio(name, value, target=None):
    key = f"{name} (target {target})" if target else name
    ratios.setdefault(key, []).append(value)
    print(f"  {name} = {value:.2f}" + (f"  (target {target})" if target else ""))


def one_round(d):
    load = lambda name: json.load(open(os.path.join(d, name + ".json")))
    plain = load("plain")
    iperf3 = plain["references"]["iperf3"]["median"]
    print(f"{'row':<44} {'MB/s':>8} {'% iperf3':>9} {'CPU-s/GB':>9}  machine CPU of a BYTES run: user/system/irq s")
    cost = {}

    def show(label, v, name=None):
        line = f"{label:<44} {v:8.1f} {v / iperf3 * 100:9.1f}"
        if name:
            cost[name], c = cpu_per_extra_gb(name, d)
            line += f" {cost[name]:9.2f}  ({c['cpu_s_per_gb']:.2f} per GB with set-up: {c['user_s']:.2f}/{c['system_s']:.2f}/{c['irq_s']:.2f})"
        print(line)

    show("iperf3 (plain TCP)", iperf3)
    show("plain (ipsec-lab's own sender/receiver)", mbs(plain), "plain")
    ratio("ipsec-lab plain / iperf3", mbs(plain) / iperf3, ">= 1")
    none = load("userspace-none")
    show("userspace none (the TUN+UDP path, no cipher)", mbs(none), "userspace-none")
    thread_lines(none, ("sending", "receiving"))
    threads_line(cost["userspace-none"], load("userspace-none.big"))
    tunnel = {s: load(f"userspace-{s}") for s in suites}
    speed = json.load(open(os.path.join(d, "speed.json")))["records"]
    for s, r in tunnel.items():
        show(f"userspace {s}", mbs(r), f"userspace-{s}")
        thread_lines(r, ("encrypting", "decrypting"))
        floor_lines(s, cost[f"userspace-{s}"], cost["plain"], cost["userspace-none"], speed, load(f"userspace-{s}.big"))
    wg = load("wireguard-go")
    program = next(iter(wg["backend_details"].values())).get("program", {})
    # The package version: Debian 13's offload-era build prints upstream's older snapshot
    # string for --version (crates/lab/src/backend/wireguard/go.rs says why).
    built = program.get("package") or program.get("version", "(version unknown)")
    show(f"wireguard-go {built}", mbs(wg), "wireguard-go")
    ov = {s: load(f"openvpn-{s}") for s in ["aes-256-cbc-hmac-sha256", "aes-256-gcm"]}
    for s, r in ov.items():
        show(f"openvpn {s}", mbs(r), f"openvpn-{s}")
    soft = load("userspace-soft-aes-256-cbc-hmac-sha256")
    show("userspace aes-256-cbc-hmac-sha256 --crypto soft", mbs(soft), "userspace-soft-aes-256-cbc-hmac-sha256")
    ratio("userspace aes-256-gcm / iperf3", mbs(tunnel["aes-256-gcm"]) / iperf3, ">= 0.60")
    ratio("userspace chacha20-poly1305 / wireguard-go", mbs(tunnel["chacha20-poly1305"]) / mbs(wg), ">= 2")
    ratio("userspace aes-256-cbc-hmac-sha256 / openvpn", mbs(tunnel["aes-256-cbc-hmac-sha256"]) / mbs(ov["aes-256-cbc-hmac-sha256"]), ">= 6")
    ratio("userspace aes-256-gcm / openvpn", mbs(tunnel["aes-256-gcm"]) / mbs(ov["aes-256-gcm"]), ">= 3")
    ratio("userspace auto / soft, aes-256-cbc-hmac-sha256", mbs(tunnel["aes-256-cbc-hmac-sha256"]) / mbs(soft), "> 1")
    ratio("CPU-s/GB: userspace none (the TUN+UDP path alone) / plain", cost["userspace-none"] / cost["plain"])
    ratio("CPU-s/GB: userspace aes-256-gcm / plain", cost["userspace-aes-256-gcm"] / cost["plain"], "<= 2")
    ratio("CPU-s/GB: userspace chacha20-poly1305 / wireguard-go", cost["userspace-chacha20-poly1305"] / cost["wireguard-go"], "<= 0.4")


for rnd in range(1, rounds + 1):
    if rounds > 1:
        print(f"== round {rnd}")
    one_round(os.path.join(out, f"r{rnd}"))
if rounds > 1:
    print(f"== medians over {rounds} rounds")
    for name, values in ratios.items():
        print(f"  {name}: {statistics.median(values):.2f}  ({', '.join(f'{v:.2f}' for v in values)})")
PY
