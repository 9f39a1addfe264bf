#!/usr/bin/env bash
# Installs a second kernel for the VM lab only (`matrix --vm STOCK,SECOND`, kernel rows per
# kernel): Debian's bookworm-backports kernel (6.12), the image the backports
# linux-image-amd64 points at. Idempotent: a second run downloads nothing.
#
# It is not installed as a package: the host never boots it, and a new /boot/vmlinuz-*
# would become the newest image there. apt-get fetches it through a private source list
# and state (nothing in /etc/apt or dpkg's database changes); the image goes to
# /var/lib/ipsec-lab/kernels/ and its modules, with depmod's index, to
# /lib/modules/RELEASE, where the guest (which shares the host's root filesystem) loads
# them from. Called by `lab/setup.sh --second-kernel` (or IPSEC_LAB_SECOND_KERNEL=1).
set -euo pipefail

kernels=/var/lib/ipsec-lab/kernels
suite=${IPSEC_LAB_SECOND_KERNEL_SUITE:-bookworm-backports}
# A second kernel already here, image and modules: nothing to fetch, not even the index
# (so the test suite's set-up also runs where the mirrors cannot be reached).
for image in "$kernels"/vmlinuz-*; do
    [ -f "$image" ] || continue
    release=${image##*/vmlinuz-}
    if [ -f "/lib/modules/$release/modules.dep" ]; then
        echo "lab/second-kernel.sh: $release already in $kernels"
        exit 0
    fi
done
work=$(mktemp -d /tmp/ipl-second-kernel-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$kernels"
echo "deb http://deb.debian.org/debian $suite main" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)

apt-get -qq "${apt_opts[@]}" update
package=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 \
    | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$package" ] || { echo "lab/second-kernel.sh: no kernel image in $suite" >&2; exit 3; }
release=${package#linux-image-}
echo "lab/second-kernel.sh: fetching $package from $suite"
(cd "$work" && apt-get -qq "${apt_opts[@]}" download "$package")
dpkg-deb -x "$work"/"$package"_*.deb "$work/root"
depmod -b "$work/root" "$release"
rm -rf "/lib/modules/$release"
cp -a "$work/root/lib/modules/$release" /lib/modules/
cp "$work/root/boot/vmlinuz-$release" "$kernels/"
echo "lab/second-kernel.sh: $kernels/vmlinuz-$release (modules in /lib/modules/$release)"
