#!/usr/bin/env python3
"""Runs every test of the workspace in two lanes side by side: `make test`'s tests.

`cargo test --workspace` runs its test binaries one after another, and on this project most
binaries spend much of their time waiting (for a guest to boot, WireGuard's two-minute
rekey timer, a server's deadline) with a core free. Here the binaries are built once
(`cargo test --no-run`) and run in two lanes at once, each binary from its package's
directory as cargo would run it: the guest lane (the binaries that boot user-mode Linux or
a VM, whose runs happen in a kernel of their own, and WireGuard's rekey, which waits two
minutes for its timer) and the host lane (every other binary, then the doc tests). Within a lane one binary runs at a time, as before: tests that make lab
objects still take turns within their binary (`tests/common::lab_lock`), and a test's run
counts only what its own sandbox holds (`tests/common/own.rs`), whatever the other lane does.

Each binary's output is printed whole when it ends (with its time and result), so the log
reads binary by binary; a line every minute says what is still running. Every binary runs
whatever another's result (no fail-fast); the exit code is 1 if any failed, 130/143 if
interrupted (every running binary's process group is stopped first).

Usage: lab/run-tests.py [ARGS for every test binary]   (CARGO: the cargo to use)
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

# The binaries whose runs boot a guest kernel (user-mode Linux or a VM; the package's
# installed service is tested in one), and WireGuard's two-minute rekey, which mostly waits:
# in the order they run. About as long together as the host lane is.
GUEST_LANE = ["vm", "kernels_vm", "uml", "deb_package", "wireguard_rekey"]

DOC_TESTS = "doc tests"


class Job:
    def __init__(self, name, argv, cwd):
        self.name, self.argv, self.cwd = name, argv, cwd
        self.proc = None
        self.log = None
        self.started = None
        self.seconds = None
        self.code = None

    def start(self):
        self.log = tempfile.TemporaryFile()
        self.started = time.monotonic()
        # A session of its own: an interruption stops the binary and what it started.
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def finish(self, code):
        self.code = code
        self.seconds = time.monotonic() - self.started

    def output(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")


def test_binaries(cargo):
    """Builds every test target and returns [(name, executable, package directory)]."""
    build = subprocess.run(
        [cargo, "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"],
        stdout=subprocess.PIPE, text=True)
    if build.returncode != 0:
        return None
    binaries = []
    for line in build.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        package = os.path.dirname(msg["manifest_path"])
        name = target["name"]
        if target["kind"] != ["test"]:
            # A library's or binary's unit tests: named by their package, as cargo does.
            name = "%s (%s)" % (os.path.basename(package), "+".join(target["kind"]))
        binaries.append((name, msg["executable"], package))
    return binaries


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("args", nargs="*", help="passed to every test binary")
    opts = parser.parse_args()
    cargo = os.environ.get("CARGO", "cargo")

    binaries = test_binaries(cargo)
    if binaries is None:
        print("lab/run-tests.py: the tests did not build", file=sys.stderr)
        return 1
    jobs = [Job(name, [exe] + opts.args, cwd) for name, exe, cwd in binaries]
    rank = {name: i for i, name in enumerate(GUEST_LANE)}
    lanes = [sorted((j for j in jobs if j.name in rank), key=lambda j: rank[j.name]),
             [j for j in jobs if j.name not in rank]]
    lanes[1].append(Job(DOC_TESTS, [cargo, "test", "--workspace", "--doc", "--no-fail-fast",
                                    "--"] + opts.args, os.getcwd()))

    stopping = []

    def stop(signum, _frame):
        stopping.append(signum)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    running, done = [], []
    started = last_word = time.monotonic()
    while any(lanes) or running:
        if stopping:
            break
        for lane in lanes:
            if lane and not any(j in running for j in lane):
                lane[0].start()
                running.append(lane[0])
        time.sleep(0.2)
        for job in list(running):
            code = job.proc.poll()
            if code is None:
                continue
            job.finish(code)
            running.remove(job)
            next(lane for lane in lanes if job in lane).remove(job)
            done.append(job)
            word = "ok" if code == 0 else "FAILED (exit %d)" % code
            print("\n===== %s: %s in %.0f s =====" % (job.name, word, job.seconds))
            sys.stdout.write(job.output())
            sys.stdout.flush()
        if running and time.monotonic() - last_word >= 60:
            last_word = time.monotonic()
            print("----- still running: %s" % ", ".join(
                "%s (%.0f s)" % (j.name, last_word - j.started) for j in running), flush=True)

    if stopping:
        for job in running:
            try:
                os.killpg(job.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2
        for job in running:
            try:
                job.proc.wait(timeout=max(0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(job.proc.pid, signal.SIGKILL)
        print("lab/run-tests.py: interrupted; %d jobs had not finished" % sum(map(len, lanes)),
              file=sys.stderr)
        return 128 + stopping[0]

    failed = [j for j in done if j.code != 0]
    print("\n===== %d jobs (test binaries and the doc tests) in %.0f s, two lanes; longest:" %
          (len(done), time.monotonic() - started))
    for job in sorted(done, key=lambda j: -j.seconds)[:8]:
        print("  %6.0f s  %s" % (job.seconds, job.name))
    if failed:
        print("FAILED: %s" % ", ".join(j.name for j in failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
