#!/usr/bin/env bash
# Installs the cross toolchain for the arm64 build (`make deb ARCH=arm64`, `make test-arm64`):
# the machine's rustup toolchain has no aarch64 standard library and cannot fetch one, Debian
# sid ships one. Idempotent: a second run downloads nothing.
#
#   /var/lib/ipsec-lab/cross/sid              Debian sid (debootstrap, minbase): rustc, cargo,
#                                             libstd-rust-dev:arm64, gcc-aarch64-linux-gnu
#   /var/lib/ipsec-lab/cross/sid/opt/bookworm-arm64
#                                             Debian 12's arm64 libc6-dev, the sysroot the binary
#                                             links against: it needs no newer glibc than a
#                                             Raspberry Pi on Debian 12 (or Raspberry Pi OS) has
#   /var/lib/ipsec-lab/cross/bookworm-arm64   a Debian 12 arm64 root (debootstrap under
#                                             qemu-user, minbase and iproute2): where the arm64
#                                             .deb's test installs it (tests/arm64.rs)
#
# None of it enters the host's package database (sid's packages live in their own root; the
# sysroot's are unpacked with dpkg-deb -x). On the host it installs debootstrap and
# qemu-user-static with binfmt-support (runs arm64 binaries: the smoke tests, the .deb's man
# pages) and binutils-aarch64-linux-gnu (the .deb's strip). Packages come from the Debian
# mirror this machine's apt uses (lab/debian-mirrors.sh), checked against Debian's archive
# keyring. lab/arm64-cargo.sh runs cargo with it.
set -euo pipefail

root=${IPSEC_LAB_CROSS_ROOT:-/var/lib/ipsec-lab/cross/sid}
arm64_root=$(dirname "$root")/bookworm-arm64
sysroot=/opt/bookworm-arm64
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
here=$(dirname "$0")
say() { echo "lab/arm64-toolchain.sh: $*"; }
mkdir -p "$(dirname "$root")"

missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
[ -x /usr/bin/qemu-aarch64-static ] || missing+=(qemu-user-static)
command -v update-binfmts >/dev/null || missing+=(binfmt-support)
command -v aarch64-linux-gnu-strip >/dev/null || missing+=(binutils-aarch64-linux-gnu)  # cargo-deb --strip
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# binfmt_misc: mounted and the aarch64 entry enabled (a container may start without either).
[ -f /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -f /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64

# The Debian 12 arm64 root: made once, kept while its marker says it is complete.
arm64_root() {
  [ -f "$arm64_root/.ready" ] && return 0
  local mirror
  for mirror in $(bash "$here/debian-mirrors.sh"); do
    rm -rf "$arm64_root"
    say "debootstrap Debian 12 arm64 (under qemu-user) from $mirror into $arm64_root"
    if debootstrap --arch=arm64 --variant=minbase --include=iproute2 --keyring="$keyring" \
        bookworm "$arm64_root" "$mirror" >"$arm64_root.log" 2>&1; then
      rm -f "$arm64_root.log"
      date -u >"$arm64_root/.ready"
      return 0
    fi
    say "$mirror: debootstrap failed (last lines of $arm64_root.log):"
    tail -3 "$arm64_root.log" >&2
  done
  say "no mirror gave a Debian 12 arm64 root" >&2
  return 3
}
arm64_root

if [ -f "$root/.ready" ] && [ -f "$root$sysroot/usr/lib/aarch64-linux-gnu/libc.so" ] &&
   chroot "$root" rustc --print target-libdir --target aarch64-unknown-linux-gnu >/dev/null 2>&1; then
  say "toolchain already in $root ($(cat "$root/.ready"))"
  exit 0
fi

mirrors=$(bash "$here/debian-mirrors.sh") || exit 3
new="$root.new"
# A root whose debootstrap finished (the marker) is kept: a run stopped later resumes there.
if [ -f "$new/.debootstrapped" ]; then
  found=$(cat "$new/.debootstrapped")
else
  found=""
  for mirror in $mirrors; do
    rm -rf "$new"
    say "debootstrap sid from $mirror into $new"
    if debootstrap --variant=minbase --keyring="$keyring" \
        --include=rustc,cargo,gcc-aarch64-linux-gnu,libc6-dev,ca-certificates sid "$new" "$mirror" >"$new.log" 2>&1; then
      found=$mirror
      break
    fi
    say "$mirror: debootstrap failed (last lines of $new.log):"
    tail -3 "$new.log" >&2
  done
  [ -n "$found" ] || { say "no mirror of apt's sources ($(echo $mirrors)) gave a sid root" >&2; exit 3; }
  rm -f "$new.log"
  echo "$found" >"$new/.debootstrapped"
fi

# In the root: the aarch64 standard library, and Debian 12's arm64 libc as the sysroot. A
# private mount namespace: /proc and /dev go away with it.
cp /etc/resolv.conf "$new/etc/resolv.conf"
echo "deb [signed-by=$keyring] $found sid main" >"$new/etc/apt/sources.list"
unshare --mount --propagation private bash -euo pipefail -c '
  new=$1 found=$2 sysroot=$3 keyring=$4
  mount -t proc proc "$new/proc"
  mount --bind /dev "$new/dev"
  cp "$keyring" "$new/$keyring"
  # The signatures are checked; their freshness is not (a mirror may serve a snapshot
  # whose Release files are past their Valid-Until).
  echo "Acquire::Check-Valid-Until \"false\";" >"$new/etc/apt/apt.conf.d/99ipsec-lab"
  chroot "$new" dpkg --add-architecture arm64
  chroot "$new" apt-get -qq update
  chroot "$new" apt-get install -y -qq --no-install-recommends libstd-rust-dev:arm64 >/dev/null
  work=/tmp/bookworm-arm64
  mkdir -p "$new$work/lists/partial" "$new$work/cache/archives/partial"
  : >"$new$work/status"  # nothing installed: the root'"'"'s own (newer) arm64 libc would win
  echo "deb [arch=arm64 signed-by=$keyring] $found bookworm main" >"$new$work/sources.list"
  opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Dir::State::status=$work/status" -o APT::Architecture=arm64
        -o APT::Architectures=arm64 -o APT::Sandbox::User=root)
  chroot "$new" apt-get -qq "${opts[@]}" update
  chroot "$new" sh -c "cd $work && apt-get -qq $(printf "%q " "${opts[@]}") download libc6 libc6-dev linux-libc-dev libcrypt1 libcrypt-dev"
  for deb in "$new$work"/*.deb; do dpkg-deb -x "$deb" "$new$sysroot"; done
  rm -rf "$new$work"
  chroot "$new" apt-get clean
' _ "$new" "$found" "$sysroot" "$keyring"

rustc=$(chroot "$new" rustc --version)
rm -rf "$root"
mv "$new" "$root"
echo "$rustc" >"$root/.ready"
say "$root: $rustc, aarch64-unknown-linux-gnu std, gcc-aarch64-linux-gnu; Debian 12 arm64 sysroot $sysroot"
