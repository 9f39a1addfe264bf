#!/usr/bin/env bash
# Benchmark (not a test): small datagrams, the lab's UDP sender and receiver against iperf3's
# on the same kind of namespace pair + veth, back to back in one invocation (issue 49).
# iperf3 (-u -l SIZE -b 0) sends one datagram per system call and checks nothing; the lab
# sends batches with sendmmsg, receives with recvmmsg and verifies every datagram's payload.
# For each row: datagrams sent and delivered per second, where the lost ones were dropped
# (the receiving socket's full buffer, by the kernel's counters), and what each end's thread
# spent per delivered datagram, which says whether the sender or the receiver is the limit.
#
#   lab/bench-datagrams.sh                  # 64 B, 5 s per row, 3 rounds
#   SIZE=256 TIME=10 ROUNDS=5 lab/bench-datagrams.sh
#
# Needs root, iperf3, a release build (make build) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/ipsec-lab}
SIZE=${SIZE:-64}
TIME=${TIME:-5}
ROUNDS=${ROUNDS:-3}
[ -x "$BIN" ] || { echo "no $BIN: run 'cargo build --release' first" >&2; exit 3; }
command -v iperf3 >/dev/null || { echo "no iperf3: apt-get install iperf3 (or make setup)" >&2; exit 3; }
out=$(mktemp -d /tmp/ipl-bench-datagrams.XXXXXX)
# iperf3's pair: this script's own, named after its PID, removed however it ends.
A=iplbd-a-$$ B=iplbd-b-$$
cleanup() {
    ip netns pids "$A" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns pids "$B" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# As the lab makes its pair (crates/netns): a veth between two namespaces, MTU 1500, lo up.
ip netns add "$A"
ip netns add "$B"
ip link add va netns "$A" type veth peer name vb netns "$B"
ip -n "$A" addr add 198.18.0.1/24 dev va
ip -n "$B" addr add 198.18.0.2/24 dev vb
for ns in "$A" "$B"; do
    ip -n "$ns" link set lo up
done
ip -n "$A" link set va up
ip -n "$B" link set vb up

for round in $(seq 1 "$ROUNDS"); do
    echo "round $round of $ROUNDS: iperf3 -u -l $SIZE -b 0 ..." >&2
    ip netns exec "$B" iperf3 --server --one-off --bind 198.18.0.2 >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 1 50); do
        ip netns exec "$B" ss -lun | grep -q 198.18.0.2:5201 && break
        sleep 0.1
    done
    ip netns exec "$A" iperf3 --client 198.18.0.2 --udp --length "$SIZE" --bitrate 0 --time "$TIME" \
        --json >"$out/iperf3-$round.json"
    wait "$server" || true
    echo "round $round of $ROUNDS: ipsec-lab run --backend plain --udp --packet-size $SIZE ..." >&2
    "$BIN" run --no-progress --backend plain --udp --packet-size "$SIZE" --time "$TIME" \
        --json "$out/lab-$round.json" >/dev/null
done

python3 - "$out" "$ROUNDS" "$SIZE" <<'PY'
import json, statistics, sys

out, rounds, size = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def iperf3(path):
    j = json.load(open(path))
    s = j["end"]["sum"]
    cpu = j["end"]["cpu_utilization_percent"]
    sent, seconds = s["packets"], s["seconds"]
    delivered = sent - s["lost_packets"]
    return {
        "sent_pps": sent / seconds,
        "pps": delivered / seconds,
        "loss_pct": s["lost_percent"],
        "socket_drops": None,
        "sender_core": cpu["host_total"],
        "receiver_core": cpu["remote_total"],
        "seconds": seconds,
        "delivered": delivered,
    }


def lab(path):
    r = json.load(open(path))
    t = r["udp"]["trials"][-1]
    x = r["transfers"][-1]
    drops = (t.get("outside_drops") or {}).get("receiver_socket")
    return {
        "sent_pps": t["sent_pps"],
        "pps": t["received"] / t["send_seconds"],
        "loss_pct": t["lost"] * 100 / max(t["sent"], 1),
        "socket_drops": drops,
        "sender_core": x["sender_cpu"]["percent_of_core"],
        "receiver_core": x["receiver_cpu"]["percent_of_core"],
        "seconds": t["send_seconds"],
        "delivered": t["received"],
    }


def show(name, m):
    # ns of each end's thread CPU per delivered datagram: core share x seconds / datagrams.
    per = lambda core: core / 100 * m["seconds"] / max(m["delivered"], 1) * 1e9
    drops = "-" if m["socket_drops"] is None else f"{m['socket_drops']:,}"
    print(f"{name:<34}{m['sent_pps'] / 1e3:>12.0f}k{m['pps'] / 1e3:>12.0f}k{m['loss_pct']:>8.1f}{drops:>14}"
          f"{m['sender_core']:>7.0f} %{per(m['sender_core']):>7.0f}{m['receiver_core']:>7.0f} %{per(m['receiver_core']):>7.0f}")


ratios = []
print(f"{'row (' + size + ' B datagrams)':<34}{'sent/s':>13}{'delivered/s':>13}{'loss %':>8}{'socket drops':>14}"
      f"{'sender (ns/dg)':>17}{'receiver (ns/dg)':>17}")
for rnd in range(1, rounds + 1):
    i, l = iperf3(f"{out}/iperf3-{rnd}.json"), lab(f"{out}/lab-{rnd}.json")
    show(f"iperf3 -u -l {size} -b 0 (round {rnd})", i)
    show(f"ipsec-lab plain --udp (round {rnd})", l)
    ratios.append(l["pps"] / i["pps"])
print(f"delivered/s, ipsec-lab / iperf3: median {statistics.median(ratios):.2f} "
      f"({', '.join(f'{v:.2f}' for v in ratios)}), target >= 1")
PY
