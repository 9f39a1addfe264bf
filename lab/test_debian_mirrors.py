"""Tests of lab/debian-mirrors.sh: the Debian mirrors lab/second-uml.sh fetches from are the
ones this machine's apt sources name, read by apt itself from a one-line sources.list, .list
files and deb822 .sources files alike. Each test points apt (APT_CONFIG) at sources written
under a TemporaryDirectory it made; the machine's own are only read by the last test. Run:
python3 -B -m unittest discover -s lab -p 'test_*.py'"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "debian-mirrors.sh")


def apt_or_skip(test):
    """apt-get is the parser under test; without it the test cannot run (a failure in CI)."""
    if shutil.which("apt-get"):
        return
    if os.environ.get("CI") == "true":
        test.fail("apt-get missing (CI=true: a missing capability is a failure)")
    test.skipTest("apt-get missing: this is not a Debian machine")


class Mirrors(unittest.TestCase):
    def setUp(self):
        apt_or_skip(self)
        tmp = tempfile.TemporaryDirectory(prefix="ipl-mirrors-")
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.parts = os.path.join(self.dir, "sources.list.d")
        os.mkdir(self.parts)
        self.conf = os.path.join(self.dir, "apt.conf")
        with open(self.conf, "w") as f:
            f.write(
                f'Dir::Etc::SourceList "{self.dir}/sources.list";\n'
                f'Dir::Etc::SourceParts "{self.parts}";\n'
            )

    def write(self, path, text):
        with open(os.path.join(self.dir, path), "w") as f:
            f.write(textwrap.dedent(text))

    def mirrors(self):
        env = dict(os.environ, APT_CONFIG=self.conf)
        return subprocess.run(["sh", SCRIPT], env=env, capture_output=True, text=True)

    def test_one_line_sources_give_the_debian_mirrors_in_order(self):
        self.write(
            "sources.list",
            """\
            # deb http://commented.example/debian bookworm main
            deb-src http://source-only.example/debian bookworm main
            deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://ftp.de.debian.org/debian/ bookworm main contrib
            deb https://download.docker.com/linux/debian bookworm stable
            deb http://security.debian.org/debian-security bookworm-security main
            deb http://ftp.de.debian.org/debian bookworm-updates main
            """,
        )
        self.write("sources.list.d/local.list", "deb http://apt-cache.lan:3142/debian bookworm main\n")
        r = self.mirrors()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["http://ftp.de.debian.org/debian/", "http://apt-cache.lan:3142/debian/"])

    def test_deb822_sources_give_every_uri_of_an_enabled_binary_entry(self):
        self.write("sources.list", "")
        self.write(
            "sources.list.d/debian.sources",
            """\
            Types: deb deb-src
            URIs: http://mirror.one/debian http://mirror.two/debian/
            Suites: bookworm bookworm-updates
            Components: main contrib
            Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

            Types: deb
            URIs: http://deb.debian.org/debian-security
            Suites: bookworm-security
            Components: main

            Types: deb
            URIs: http://disabled.example/debian
            Suites: bookworm
            Components: main
            Enabled: no

            Types: deb-src
            URIs: http://source-only.example/debian
            Suites: bookworm
            Components: main
            """,
        )
        r = self.mirrors()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["http://mirror.one/debian/", "http://mirror.two/debian/"])

    def test_no_debian_mirror_is_an_error_naming_what_is_missing(self):
        self.write("sources.list", "deb https://download.docker.com/linux/debian bookworm stable\n")
        self.write(
            "sources.list.d/nodesource.sources",
            "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\nComponents: contrib\n",
        )
        r = self.mirrors()
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stdout, "")
        self.assertIn("no Debian mirror", r.stderr)

    def test_this_machines_sources_name_a_mirror(self):
        # Only where there are sources to read: a Debian machine's apt has at least one.
        r = subprocess.run(["sh", SCRIPT], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        print(f"this machine's Debian mirrors: {r.stdout.split()}", file=sys.stderr)
        self.assertTrue(all("://" in m for m in r.stdout.split()), r.stdout)


if __name__ == "__main__":
    unittest.main()
