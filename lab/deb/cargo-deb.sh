#!/usr/bin/env bash
# Installs the pinned cargo-deb once (`cargo install` compiles it: minutes); a second run
# does nothing. `make deb` and lab/setup.sh call it.
set -euo pipefail
version=3.7.0
if cargo deb --version 2>/dev/null | grep -qx "cargo-deb $version"; then
  exit 0
fi
echo "lab/deb/cargo-deb.sh: installing cargo-deb $version"
cargo install --quiet --locked --version "$version" cargo-deb
