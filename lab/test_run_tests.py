"""lab/run-tests.py with a stand-in cargo whose "test binaries" are shell scripts: every
binary runs whatever another's result, the guest lane runs beside the host lane, and an
interruption stops them all. Run by `make lint` (python3 -m unittest discover -s lab)."""

import json
import os
import signal
import subprocess
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run-tests.py")


class RunTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="ipl-run-tests-")
        self.addCleanup(self.dir.cleanup)
        self.calls = os.path.join(self.dir.name, "calls")

    def binary(self, name, body):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\ncd '%s'\n%s\n" % (self.dir.name, body))
        os.chmod(path, 0o755)
        return path

    def runner(self, binaries, doc_tests_fail=False):
        """Starts run-tests.py with a cargo that lists `binaries` as its test targets."""
        artifacts = "\n".join(json.dumps({
            "reason": "compiler-artifact",
            "target": {"name": os.path.basename(b), "kind": ["test"]},
            "profile": {"test": True},
            "manifest_path": os.path.join(self.dir.name, "Cargo.toml"),
            "executable": b,
        }) for b in binaries)
        listing = os.path.join(self.dir.name, "artifacts.json")
        with open(listing, "w") as f:
            f.write(artifacts + "\n")
        cargo = self.binary("cargo", 'echo "$*" >> calls\ncase "$*" in\n'
                            '  *--no-run*) cat artifacts.json ;;\n'
                            '  *--doc*) exit %d ;;\nesac' % (101 if doc_tests_fail else 0))
        return subprocess.Popen(["python3", RUNNER],
                                env=dict(os.environ, CARGO=cargo), cwd=self.dir.name,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def test_every_binary_runs_whatever_another_does_and_a_failure_fails_the_run(self):
        binaries = [self.binary("first", "exit 1"),
                    self.binary("second", "echo second ran; touch second.ran")]
        run = self.runner(binaries)
        out, _ = run.communicate(timeout=60)
        self.assertEqual(run.returncode, 1, out)
        self.assertTrue(os.path.exists(os.path.join(self.dir.name, "second.ran")), out)
        self.assertIn("===== first: FAILED (exit 1)", out)
        self.assertIn("second ran", out)
        self.assertIn("FAILED: first", out)
        self.assertIn("test --workspace --doc --no-fail-fast", read(self.calls))

    def test_failing_doc_tests_fail_the_run(self):
        run = self.runner([self.binary("fine", "exit 0")], doc_tests_fail=True)
        out, _ = run.communicate(timeout=60)
        self.assertEqual(run.returncode, 1, out)
        self.assertIn("FAILED: doc tests", out)

    def test_the_guest_lane_runs_beside_the_host_lane(self):
        # Each passes only if it sees the other started while it runs.
        wait = 'touch %s.started; i=0; while [ ! -e %s.started ]; do ' \
               'i=$((i+1)); [ $i -gt 300 ] && exit 1; sleep 0.1; done'
        binaries = [self.binary("vm", wait % ("vm", "host")),
                    self.binary("host", wait % ("host", "vm"))]
        run = self.runner(binaries)
        out, _ = run.communicate(timeout=60)
        self.assertEqual(run.returncode, 0, out)

    def test_sigterm_stops_every_running_binary_and_exits_143(self):
        binaries = [self.binary("long", "echo $$ > long.pid; exec sleep 60")]
        run = self.runner(binaries)
        pidfile = os.path.join(self.dir.name, "long.pid")
        deadline = time.monotonic() + 30
        while not read(pidfile).strip():
            self.assertLess(time.monotonic(), deadline, "the binary never started")
            time.sleep(0.05)
        pid = int(read(pidfile))
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=30)
        self.assertEqual(run.returncode, 143, out)
        self.assertIn("interrupted", out)
        # Gone, or a zombie that init has not reaped yet.
        stat = read("/proc/%d/stat" % pid)
        self.assertTrue(not stat or stat.rsplit(") ", 1)[1].startswith("Z"), stat)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


if __name__ == "__main__":
    unittest.main()
