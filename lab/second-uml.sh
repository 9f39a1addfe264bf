#!/usr/bin/env bash
# Installs further user-mode Linux kernels for the UML lab (`matrix --vm uml,uml:RELEASE`:
# kernel rows per kernel release at native speed): Debian trixie's user-mode-linux (6.12)
# and sid's (7.x). Sid's is also the one that runs where bookworm's and trixie's cannot: on
# a CPU whose XSAVE area is larger than those kernels hand to ptrace (AVX-512 hosts), every
# guest process dies with "ptrace set fp regs failed, errno = 14"; lab::uml probes each
# kernel and boots one that runs. Idempotent: a second run downloads nothing.
#
# It is not installed as a package: trixie's user-mode-linux would replace bookworm's
# /usr/bin/linux.uml, and it needs trixie's C library. apt-get fetches both packages through
# a private source list and state (nothing in /etc/apt or dpkg's database changes); the
# kernel goes to /var/lib/ipsec-lab/uml/RELEASE/ with its modules and trixie's libc beside
# it, and patchelf points the kernel's loader and library path there (the host's libc is
# untouched). The packages come from the Debian mirror this machine's apt uses
# (lab/debian-mirrors.sh), checked against Debian's archive keyring. Called by `lab/setup.sh
# --second-kernel` (or IPSEC_LAB_SECOND_KERNEL=1), and by plain `lab/setup.sh` with
# IPSEC_LAB_SECOND_UML_SUITES=sid where the package's kernel cannot run on this CPU.
set -euo pipefail

umls=/var/lib/ipsec-lab/uml
suites=${IPSEC_LAB_SECOND_UML_SUITES:-trixie sid}
command -v patchelf >/dev/null || { echo "lab/second-uml.sh: patchelf missing (lab/setup.sh installs it)" >&2; exit 3; }
here=$(dirname "$0")
. "$here/private-apt.sh"

# One suite's kernel, with its modules and C library, into $umls/RELEASE; a marker
# ($umls/.from-SUITE, holding the release) says it is done.
install_suite() {
    local suite=$1 marker="$umls/.from-$1"
    if [ -f "$marker" ]; then
        local have
        have=$(cat "$marker")
        if [ -f "$umls/$have/modules/$have/modules.dep" ] && "$umls/$have/linux.uml" --version >/dev/null 2>&1; then
            echo "lab/second-uml.sh: user-mode Linux $have ($suite) already in $umls"
            return 0
        fi
    fi
    local work apt_opts found
    work=$(mktemp -d /tmp/ipl-second-uml-XXXXXX)
    private_apt "$work" "$suite" || { rm -rf "$work"; return 3; }
    echo "lab/second-uml.sh: fetching user-mode-linux and libc6 from $suite ($found)"
    (cd "$work" && apt-get -qq "${apt_opts[@]}" download user-mode-linux libc6)
    dpkg-deb -x "$work"/user-mode-linux_*.deb "$work/uml"
    dpkg-deb -x "$work"/libc6_*.deb "$work/libc"
    local release
    release=$(ls "$work/uml/usr/lib/uml/modules")
    # The package ships its modules with their index (modules.dep): no depmod needed.
    [ -n "$release" ] && [ -f "$work/uml/usr/lib/uml/modules/$release/modules.dep" ] \
        || { echo "lab/second-uml.sh: no modules in $suite's user-mode-linux" >&2; rm -rf "$work"; return 3; }
    local stage="$work/stage" dest="$umls/$release"
    mkdir -p "$stage/modules" "$stage/lib"
    cp -a "$work/uml/usr/lib/uml/modules/$release" "$stage/modules/"
    cp -a "$work/libc/usr/lib/x86_64-linux-gnu/." "$stage/lib/"
    cp "$work/uml/usr/bin/linux.uml" "$stage/linux.uml"
    patchelf --set-interpreter "$dest/lib/ld-linux-x86-64.so.2" --set-rpath "$dest/lib" "$stage/linux.uml"
    rm -rf "$dest"
    mkdir -p "$umls"
    mv "$stage" "$dest"
    rm -rf "$work"
    "$dest/linux.uml" --version >/dev/null
    echo "$release" > "$marker"
    echo "lab/second-uml.sh: $dest/linux.uml (user-mode Linux $release from $suite, modules in $dest/modules)"
}

for suite in $suites; do
    install_suite "$suite"
done
