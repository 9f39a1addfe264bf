#!/usr/bin/env bash
# Type-checks the aarch64 target in CI (`make test`), without the cross build's root and
# twenty minutes: Debian sid's rustc and its two standard libraries (x86-64 for build
# scripts and proc macros, aarch64 for the target) unpacked with dpkg-deb -x into
# /var/lib/ipsec-lab/cross/rustc-sid (no debootstrap, nothing in dpkg's database), run by the
# machine's cargo through sid's own loader, then
#
#   cargo check --target aarch64-unknown-linux-gnu -p model
#
# model holds the code that differs on ARM (its environment, the hardware-AES mask) and has
# no C dependencies; the crates that compile C (aws-lc-sys) are built for aarch64 by the
# full cross build, `make test-arm64`. Idempotent: a second run downloads nothing. CARGO
# names the cargo to run (make's $(CARGO)).
set -euo pipefail
cd "$(dirname "$0")/.."
. lab/private-apt.sh

dir=/var/lib/ipsec-lab/cross/rustc-sid
say() { echo "lab/arm64-check.sh: $*"; }

# One fetch at a time (make test's own tests run make test side by side); the parents of
# $dir do not exist on a fresh machine, and dpkg-deb -x makes only its last directory.
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/.ready" ]; then
  # The packages sid's rustc loads (ldd), not its whole Depends (gcc, binutils): checking
  # links nothing for the target, and build scripts link with the machine's cc.
  packages=(rustc libstd-rust-1.97 libstd-rust-dev libstd-rust-dev:arm64 libllvm22 libc6 libstdc++6
            libgcc-s1 libffi8 libedit2 libz3-4 zlib1g libzstd1 libxml2-16 libtinfo6 libbsd0 libmd0)
  work=$(mktemp -d /tmp/ipl-arm64-check-XXXXXX)
  trap 'rm -rf "$work"' EXIT
  : >"$work/status"
  private_apt "$work" sid -o "Dir::State::status=$work/status" -o APT::Architecture=amd64 \
    -o APT::Architectures::=amd64 -o APT::Architectures::=arm64 -o Acquire::Check-Valid-Until=false || exit 3
  say "fetching sid's rustc and its aarch64 standard library from $found"
  (cd "$work" && apt-get -qq "${apt_opts[@]}" download "${packages[@]}")
  rm -rf "$dir.new"
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$dir.new"; done
  rm -rf "$dir"
  mv "$dir.new" "$dir"
  touch "$dir/.ready"
fi

# rustc through sid's loader and libraries; the host's own C library stays untouched.
rustc="$dir/rustc"
cat >"$rustc" <<EOF
#!/bin/sh
exec $dir/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path $dir/usr/lib/x86_64-linux-gnu \\
  $dir/usr/bin/rustc --sysroot $dir/usr "\$@"
EOF
chmod +x "$rustc"
say "$("$rustc" --version): cargo check --target aarch64-unknown-linux-gnu -p model"
# Build scripts and proc macros unoptimised: they only run once here (half the time).
RUSTC="$rustc" CARGO_TARGET_DIR=target/arm64-check \
  "${CARGO:-cargo}" check --locked --target aarch64-unknown-linux-gnu -p model \
  --config 'profile.dev.package."*".opt-level=0' --config profile.dev.debug=0
