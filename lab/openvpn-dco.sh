#!/usr/bin/env bash
# Unpacks OpenVPN 2.7 for `--backend openvpn-dco`: the OpenVPN that drives the kernel's
# data channel offload (the `ovpn` module, Linux 6.16+; 2.6 drives only the out-of-tree
# ovpn-dco). Debian sid's openvpn with the libraries it needs newer than the host's (sid's C
# library among them) goes to /var/lib/ipsec-lab/openvpn/VERSION/, and patchelf points its
# loader and library path there; the host's openvpn 2.6 and libraries stay as they are.
# Idempotent: a second run downloads nothing.
#
# It is not installed as a package: apt-get fetches the packages through a private source
# list and state (nothing in /etc/apt or dpkg's database changes), from the Debian mirror
# this machine's apt uses (lab/debian-mirrors.sh), checked against Debian's archive keyring.
# A marker, /var/lib/ipsec-lab/openvpn/.from-sid holding the version, says it is done.
# Called by `lab/setup.sh --second-kernel` (or IPSEC_LAB_SECOND_KERNEL=1), beside sid's kernel.
set -euo pipefail

dir=/var/lib/ipsec-lab/openvpn
marker=$dir/.from-sid
here=$(dirname "$0")
. "$here/private-apt.sh"
command -v patchelf >/dev/null || { echo "lab/openvpn-dco.sh: patchelf missing (lab/setup.sh installs it)" >&2; exit 3; }

if [ -f "$marker" ] && "$dir/$(cat "$marker")/openvpn" --version >/dev/null 2>&1; then
    echo "lab/openvpn-dco.sh: OpenVPN $(cat "$marker") already in $dir"
    exit 0
fi
work=$(mktemp -d /tmp/ipl-openvpn-dco-XXXXXX)
trap 'rm -rf "$work"' EXIT
private_apt "$work" sid || exit 3
# openvpn and the libraries it links, each sid's (the rest of what they need, the host has).
libraries=$(apt-cache "${apt_opts[@]}" depends openvpn \
    | awk '$1 == "Depends:" && $2 ~ /^lib/ { print $2 }' | sort -u)
echo "lab/openvpn-dco.sh: fetching openvpn $(echo $libraries) from sid ($found)"
(cd "$work" && apt-get -qq "${apt_opts[@]}" download openvpn $libraries)
for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$work/root"
done
version=$("$work/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "$work/root/usr/lib/x86_64-linux-gnu" \
    "$work/root/usr/sbin/openvpn" --version | awk 'NR == 1 { print $2 }')
[ -n "$version" ] || { echo "lab/openvpn-dco.sh: sid's openvpn does not run here" >&2; exit 3; }
dest=$dir/$version
stage=$work/stage
mkdir -p "$stage/lib"
cp -a "$work/root/usr/lib/x86_64-linux-gnu/." "$stage/lib/"
cp "$work/root/usr/sbin/openvpn" "$stage/openvpn"
# DT_RPATH (--force-rpath), not RUNPATH: the libraries' own dependencies resolve there too.
patchelf --set-interpreter "$dest/lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$dest/lib" "$stage/openvpn"
rm -rf "$dest"
mkdir -p "$dir"
mv "$stage" "$dest"
"$dest/openvpn" --version | head -n 1
echo "$version" > "$marker"
echo "lab/openvpn-dco.sh: $dest/openvpn (OpenVPN $version from sid)"
