#!/usr/bin/env bash
# Installs a second user-mode Linux kernel for the UML lab (`matrix --vm uml,uml:RELEASE`:
# kernel rows per kernel release at native speed): Debian trixie's user-mode-linux (6.12).
# Idempotent: a second run downloads nothing.
#
# It is not installed as a package: trixie's user-mode-linux would replace bookworm's
# /usr/bin/linux.uml, and it needs trixie's C library. apt-get fetches both packages through
# a private source list and state (nothing in /etc/apt or dpkg's database changes); the
# kernel goes to /var/lib/ipsec-lab/uml/RELEASE/ with its modules and trixie's libc beside
# it, and patchelf points the kernel's loader and library path there (the host's libc is
# untouched). Called by `lab/setup.sh --second-kernel` (or IPSEC_LAB_SECOND_KERNEL=1).
set -euo pipefail

umls=/var/lib/ipsec-lab/uml
suite=${IPSEC_LAB_SECOND_UML_SUITE:-trixie}
# A second kernel already here, runnable, with its modules: nothing to fetch.
for binary in "$umls"/*/linux.uml; do
    [ -x "$binary" ] || continue
    release=$(basename "$(dirname "$binary")")
    if [ -f "$umls/$release/modules/$release/modules.dep" ] && "$binary" --version >/dev/null 2>&1; then
        echo "lab/second-uml.sh: user-mode Linux $release already in $umls"
        exit 0
    fi
done
command -v patchelf >/dev/null || { echo "lab/second-uml.sh: patchelf missing (lab/setup.sh installs it)" >&2; exit 3; }
work=$(mktemp -d /tmp/ipl-second-uml-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb http://deb.debian.org/debian $suite main" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)

apt-get -qq "${apt_opts[@]}" update
echo "lab/second-uml.sh: fetching user-mode-linux and libc6 from $suite"
(cd "$work" && apt-get -qq "${apt_opts[@]}" download user-mode-linux libc6)
dpkg-deb -x "$work"/user-mode-linux_*.deb "$work/uml"
dpkg-deb -x "$work"/libc6_*.deb "$work/libc"
release=$(ls "$work/uml/usr/lib/uml/modules")
# The package ships its modules with their index (modules.dep): no depmod needed.
[ -n "$release" ] && [ -f "$work/uml/usr/lib/uml/modules/$release/modules.dep" ] \
    || { echo "lab/second-uml.sh: no modules in $suite's user-mode-linux" >&2; exit 3; }
stage="$work/stage"
mkdir -p "$stage/modules" "$stage/lib"
cp -a "$work/uml/usr/lib/uml/modules/$release" "$stage/modules/"
cp -a "$work/libc/usr/lib/x86_64-linux-gnu/." "$stage/lib/"
cp "$work/uml/usr/bin/linux.uml" "$stage/linux.uml"
dest="$umls/$release"
patchelf --set-interpreter "$dest/lib/ld-linux-x86-64.so.2" --set-rpath "$dest/lib" "$stage/linux.uml"
rm -rf "$dest"
mkdir -p "$umls"
mv "$stage" "$dest"
"$dest/linux.uml" --version >/dev/null
echo "lab/second-uml.sh: $dest/linux.uml (user-mode Linux $release, modules in $dest/modules)"
