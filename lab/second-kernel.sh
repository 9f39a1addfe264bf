#!/usr/bin/env bash
# Installs further kernels for the VM lab only: Debian's bookworm-backports kernel (6.12,
# `matrix --vm STOCK,SECOND`, kernel rows per kernel) and sid's (7.x: what the newest kernel
# data paths need, per-CPU SAs from 6.13 and OpenVPN's `ovpn` from 6.16), each the image its
# suite's linux-image-amd64 points at. Idempotent: a second run downloads nothing.
#
# They are not installed as packages: the host never boots them, and a new /boot/vmlinuz-*
# would become the newest image there. apt-get fetches each through a private source list
# and state (nothing in /etc/apt or dpkg's database changes), from the Debian mirror this
# machine's apt uses (lab/debian-mirrors.sh), checked against Debian's archive keyring; the
# image goes to /var/lib/ipsec-lab/kernels/ and its modules, with depmod's index, to
# /lib/modules/RELEASE, where the guest (which shares the host's root filesystem) loads them
# from. A marker, kernels/.from-SUITE holding the release, says which kernel a suite gave.
# Called by `lab/setup.sh --second-kernel` (or IPSEC_LAB_SECOND_KERNEL=1).
set -euo pipefail

kernels=/var/lib/ipsec-lab/kernels
suites=${IPSEC_LAB_SECOND_KERNEL_SUITES:-bookworm-backports sid}
here=$(dirname "$0")
. "$here/private-apt.sh"
# The suite being fetched: removed however the script ends (a failed step exits at once).
work=""
trap '[ -z "$work" ] || rm -rf "$work"' EXIT

install_suite() {
    local suite=$1 marker="$kernels/.from-$1"
    if [ -f "$marker" ]; then
        local have
        have=$(cat "$marker")
        # Image and modules both here: nothing to fetch, not even the index (so the test
        # suite's set-up also runs where the mirrors cannot be reached).
        if [ -f "$kernels/vmlinuz-$have" ] && [ -f "/lib/modules/$have/modules.dep" ]; then
            echo "lab/second-kernel.sh: $have ($suite) already in $kernels"
            return 0
        fi
    fi
    local apt_opts found
    work=$(mktemp -d /tmp/ipl-second-kernel-XXXXXX)
    mkdir -p "$kernels"
    private_apt "$work" "$suite" || return 3
    local package release
    package=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 \
        | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    [ -n "$package" ] || { echo "lab/second-kernel.sh: no kernel image in $suite" >&2; return 3; }
    release=${package#linux-image-}
    # Newer kernels split the image package: the image in linux-binary-RELEASE, the modules in
    # linux-modules-RELEASE, modules.builtin and the config in linux-base-RELEASE, all under
    # /usr/lib/modules; older ones have all in one, the image in /boot.
    local parts
    parts=$(apt-cache "${apt_opts[@]}" depends "$package" \
        | awk -v r="$release" '$1 == "Depends:" && $2 ~ "^linux-(binary|modules|base)-" && substr($2, length($2) - length(r) + 1) == r { print $2 }')
    echo "lab/second-kernel.sh: fetching $package $(echo $parts) from $suite ($found)"
    (cd "$work" && apt-get -qq "${apt_opts[@]}" download "$package" $parts)
    local deb
    for deb in "$work"/*.deb; do
        dpkg-deb -x "$deb" "$work/root"
    done
    local base=$work/root
    [ -d "$base/lib/modules/$release" ] || base=$work/root/usr
    depmod -b "$base" "$release"
    local image=$work/root/boot/vmlinuz-$release
    [ -f "$image" ] || image=$base/lib/modules/$release/vmlinuz
    rm -rf "/lib/modules/$release"
    cp -a "$base/lib/modules/$release" /lib/modules/
    cp "$image" "$kernels/vmlinuz-$release"
    echo "$release" > "$marker"
    rm -rf "$work"
    work=""
    echo "lab/second-kernel.sh: $kernels/vmlinuz-$release (modules in /lib/modules/$release)"
}

for suite in $suites; do
    install_suite "$suite"
done
