#!/usr/bin/env bash
# Installs Debian 13's wireguard-go for `--backend wireguard-go`: the lab compares its own
# tunnel with peers at their best, and Debian 12's build (0.0.20220316) predates the TUN
# and UDP offloads (GSO/GRO) that 0.0.20231211 has: about 5x slower here. The trixie
# binary runs on Debian 12. Idempotent: a second run downloads nothing.
#
# It is not installed as a package (the host's /usr/bin/wireguard-go and dpkg's database
# stay as they are): apt-get fetches the .deb through a private source list and state, as
# lab/second-kernel.sh does, and only the binary goes to /var/lib/ipsec-lab/wireguard-go/,
# where the backend looks first (crates/lab/src/backend/wireguard/go.rs). Called by
# lab/setup.sh; IPSEC_LAB_WIREGUARD_GO_SUITE picks another suite.
set -euo pipefail

dir=/var/lib/ipsec-lab/wireguard-go
binary=$dir/wireguard-go
# The package version, which the backend reports: 0.0.20231211 (an upstream snapshot) prints
# "v0.0.20230223" for --version.
package_file=$dir/wireguard-go.deb-version
suite=${IPSEC_LAB_WIREGUARD_GO_SUITE:-trixie}
if [ -x "$binary" ] && [ -s "$package_file" ] && "$binary" --version >/dev/null 2>&1; then
    echo "lab/wireguard-go.sh: wireguard-go $(cat "$package_file") already in $dir"
    exit 0
fi

work=$(mktemp -d /tmp/ipl-wireguard-go-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$dir"
echo "deb http://deb.debian.org/debian $suite main" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)

echo "lab/wireguard-go.sh: fetching wireguard-go from $suite"
apt-get -qq "${apt_opts[@]}" update
(cd "$work" && apt-get -qq "${apt_opts[@]}" download wireguard-go)
dpkg-deb -x "$work"/wireguard-go_*.deb "$work/root"
# Checked before it replaces anything: a binary this system cannot run is no upgrade.
if ! version=$("$work/root/usr/bin/wireguard-go" --version 2>&1 | head -n1) || [ -z "$version" ]; then
    echo "lab/wireguard-go.sh: $suite's wireguard-go does not run here: $version" >&2
    exit 1
fi
package="$(dpkg-deb -f "$work"/wireguard-go_*.deb Version) (Debian $suite)"
install -m 0755 "$work/root/usr/bin/wireguard-go" "$binary.new"
mv -f "$binary.new" "$binary"
echo "$package" > "$package_file"
echo "lab/wireguard-go.sh: wireguard-go $package in $binary (its --version: $version)"
