#!/usr/bin/env bash
# Installs what the lab and its tests need on a Debian machine, idempotently: a second run
# installs nothing. Needs root (apt) and the package mirrors; Rust comes from the machine.
set -euo pipefail

packages=(
  iproute2          # ip(8): interop tests and inspection
  iperf3            # reference throughput on the same link
  openvpn           # the real userspace VPN the lab compares with
  openssl           # openssl speed: the openvpn rows' crypto ceiling, speed --with-openssl
  charon-systemd    # strongSwan's IKE daemon (the strongswan backend; no pid file)
  strongswan-swanctl # swanctl, configuring charon over VICI
  wireguard-go      # the Go userspace WireGuard, if lab/wireguard-go.sh cannot fetch Debian 13's
  wireguard-tools   # wg(8): captures the WireGuard fixtures (tests/fixtures/wireguard)
  util-linux        # setpriv: run the binary without capabilities in tests
  strace            # captures iproute2's netlink requests for fixtures
  user-mode-linux   # the kernel lab at native speed: kernel ESP as a process, no KVM needed
  patchelf          # points the second UML kernel (lab/second-uml.sh) at its own libc
  qemu-system-x86   # the VM lab: a stock kernel with ESP under virtme-ng
  linux-image-amd64
  busybox-static
  python3-pip
  lintian           # checks the .deb (make deb, tests/deb_package.rs)
  man-db            # man -l on the generated man pages
  systemd           # systemd-analyze verify/security on ipsec-lab-serve.service
  dpkg-dev          # dpkg-shlibdeps: cargo-deb's $auto Depends
)

# The fleet (ansible/, tests/fleet.rs): Ansible drives `serve` and `run --peer` on every host
# over SSH; the test gives each of its host namespaces an sshd of its own (not started here).
packages+=(
  ansible-core      # ansible-playbook (Debian 12: 2.14)
  ansible-lint      # the role and playbook are kept lint-clean
  openssh-server    # sshd(8) per test host
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "lab/setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v vng >/dev/null 2>&1; then
  echo "lab/setup.sh: installing virtme-ng"
  pip install --quiet virtme-ng 2>/dev/null || pip install --quiet --break-system-packages virtme-ng
fi

# The Debian package's test builds it with the pinned cargo-deb (compiled once: minutes).
bash "$(dirname "$0")/deb/cargo-deb.sh"

# Debian 13's wireguard-go beside the host's (never into dpkg's database): Debian 12's
# predates the offloads, and the wireguard-go row should be wireguard-go at its best. Without
# it the backend runs the one in PATH and says so in its evidence.
bash "$(dirname "$0")/wireguard-go.sh" \
  || echo "lab/setup.sh: warning: lab/wireguard-go.sh failed; --backend wireguard-go runs the PATH's build" >&2

# A user-mode Linux that runs on this CPU, so `--vm auto` takes the native path rather than
# an emulated VM: Debian 12's cannot run processes on AVX-512 CPUs; there Debian sid's (7.x),
# which can, goes beside it. Probed as the binary probes (lab/uml-probe.sh, a boot of
# /bin/true: about a second).
if ! why=$(sh "$(dirname "$0")/uml-probe.sh" /usr/bin/linux.uml); then
  echo "lab/setup.sh: Debian's user-mode Linux $why; installing Debian sid's (7.x)"
  IPSEC_LAB_SECOND_UML_SUITES=sid bash "$(dirname "$0")/second-uml.sh"
  sid=/var/lib/ipsec-lab/uml/$(cat /var/lib/ipsec-lab/uml/.from-sid)/linux.uml
  why=$(sh "$(dirname "$0")/uml-probe.sh" "$sid") \
    || echo "lab/setup.sh: warning: $sid $why either; --vm auto will boot an emulated VM" >&2
fi

# A second kernel for the VM lab and a second user-mode Linux (kernel rows per kernel), only
# when asked; with sid's kernel the programs of its newest data paths, each beside the
# host's: OpenVPN 2.7 (ovpn) and strongSwan 6 (per-CPU SAs).
if [[ " $* " == *" --second-kernel "* || "${IPSEC_LAB_SECOND_KERNEL:-0}" == 1 ]]; then
  bash "$(dirname "$0")/second-kernel.sh"
  bash "$(dirname "$0")/second-uml.sh"
  bash "$(dirname "$0")/openvpn-dco.sh"
  bash "$(dirname "$0")/strongswan6.sh"
fi

# Tests create namespaces under /run/netns like ip(8) does.
mkdir -p /run/netns
echo "lab/setup.sh: ready ($(ls /boot/vmlinuz-* /var/lib/ipsec-lab/kernels/vmlinuz-* /usr/bin/linux.uml /var/lib/ipsec-lab/uml/*/linux.uml 2>/dev/null | tr '\n' ' '))"
