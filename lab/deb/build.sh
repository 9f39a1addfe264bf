#!/usr/bin/env bash
# Builds the Debian package from an already built binary:
#
#   lab/deb/build.sh BINARY OUTDIR [TARGET]
#
# TARGET: the Rust target triple of a cross-built binary (aarch64-unknown-linux-gnu: the
# arm64 package; its man pages and completions come from the binary run by qemu-user).
#
# The binary writes its own man pages and completions (from its clap definitions), then
# cargo-deb packs them with the binary as [package.metadata.deb] in Cargo.toml lists. cargo-deb
# reads everything from "target/release/" (with a TARGET, "target/TARGET/release/"); for
# another binary (the tests package the debug build, so CI builds only once) a staging target
# directory stands in for target/.
# Prints the path of the .deb on its last line.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin=$(realpath "$1")
out=$(realpath -m "$2")
root=$(pwd)
triple=${3:-}
release=${triple:+$triple/}release
# qemu-user runs the arm64 binary here with the Debian 12 arm64 root's loader and libraries
# (lab/arm64-toolchain.sh).
if [[ "$triple" == aarch64-* && "$(uname -m)" != aarch64 ]]; then
  export QEMU_LD_PREFIX=${QEMU_LD_PREFIX:-/var/lib/ipsec-lab/cross/bookworm-arm64}
fi
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
if [[ "$bin" != "$target/$release/ipsec-lab" ]]; then
  target="$out/stage"
  mkdir -p "$target/$release"
  cp -f "$bin" "$target/$release/ipsec-lab"
fi
assets="$target/$release/deb-assets"
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin" man --out "$assets/man"
gzip -9n "$assets"/man/*.1
"$bin" completions bash >"$assets/completions/ipsec-lab"
"$bin" completions zsh >"$assets/completions/_ipsec-lab"
"$bin" completions fish >"$assets/completions/ipsec-lab.fish"

mkdir -p "$out"
# --no-build: the binary is the one given, stripped here (the release profile keeps line
# tables, which would otherwise stay in). DEB_FAST=1 (the tests): lighter compression.
flags=(--no-build --strip --manifest-path "$root/Cargo.toml" --output "$out")
[[ -n ${DEB_FAST:-} ]] && flags+=(--fast)
[[ -n $triple ]] && flags+=(--target "$triple")
[[ $triple == aarch64-* ]] && flags+=(--variant arm64)
CARGO_TARGET_DIR="$target" cargo deb "${flags[@]}" | tail -1
