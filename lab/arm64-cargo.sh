#!/usr/bin/env bash
# Runs cargo for 64-bit ARM with the cross toolchain of lab/arm64-toolchain.sh:
#
#   lab/arm64-cargo.sh build --release
#
# Debian sid's cargo and rustc (with their aarch64 standard library) run in the toolchain's
# root, with this checkout and the host's cargo registry mounted at the same paths, in a
# private mount namespace (the mounts go away with the process). The target is
# aarch64-unknown-linux-gnu, the target directory target/arm64 (so the binary is
# target/arm64/aarch64-unknown-linux-gnu/release/ipsec-lab). aarch64-linux-gnu-gcc links
# against Debian 12's arm64 C library and compiles the C dependencies (aws-lc-sys) with it.
# Exit 3 when the toolchain is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

root=${IPSEC_LAB_CROSS_ROOT:-/var/lib/ipsec-lab/cross/sid}
sysroot=/opt/bookworm-arm64
[ -f "$root/.ready" ] || { echo "lab/arm64-cargo.sh: no cross toolchain in $root (run lab/arm64-toolchain.sh)" >&2; exit 3; }
checkout=$(pwd)
registry=${CARGO_HOME:-$HOME/.cargo}/registry
mkdir -p "$registry"
# Git is not in the root: the build script takes the commit from here.
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
triple=AARCH64_UNKNOWN_LINUX_GNU

exec unshare --mount --propagation private bash -euo pipefail -c '
  root=$1 checkout=$2 registry=$3
  shift 3
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  mkdir -p "$root$checkout" "$root/root/.cargo/registry"
  mount --bind "$checkout" "$root$checkout"
  mount --bind "$registry" "$root/root/.cargo/registry"
  exec chroot "$root" env -C "$checkout" "$@"
' _ "$root" "$checkout" "$registry" \
  env -i PATH=/usr/bin:/bin HOME=/root TERM="${TERM:-dumb}" CI="${CI:-}" IPSEC_LAB_COMMIT="$commit" \
  CARGO_TARGET_DIR="$checkout/target/arm64" CARGO_BUILD_TARGET=aarch64-unknown-linux-gnu \
  "CARGO_TARGET_${triple}_LINKER=aarch64-linux-gnu-gcc" \
  "CARGO_TARGET_${triple}_RUSTFLAGS=-C link-arg=--sysroot=$sysroot" \
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
  CFLAGS_aarch64_unknown_linux_gnu="--sysroot=$sysroot" \
  cargo "$@"
