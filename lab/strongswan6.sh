#!/usr/bin/env bash
# Unpacks strongSwan 6 for `--backend strongswan --per-cpu-sa`: charon negotiates per-CPU
# CHILD_SAs (RFC 9611, swanctl's `per_cpu_sas`) from 6.0 on; Debian 12's 5.9 has none.
# Debian sid's charon-systemd and swanctl, with their plugins and the libraries they need
# (sid's C library among them), go to /var/lib/ipsec-lab/strongswan/VERSION/, and patchelf
# points them there; the host's strongSwan 5.9, its plugins and libraries stay as they are.
# Idempotent: a second run downloads nothing.
#
# charon looks for its plugins in a directory compiled in (/usr/lib/ipsec/plugins, where the
# host's 5.9 plugins are, which 6.x refuses by version), and no setting or variable moves
# it. But before it opens a plugin's file it looks for the plugin's constructor among the
# symbols already loaded: so each plugin the lab loads (the `load` list of
# crates/lab/src/backend/strongswan/config.rs, PLUGINS below; a test holds the two equal)
# becomes a library the program needs (DT_NEEDED), found through its DT_RPATH, and charon
# finds `<plugin>_plugin_create` in the process. The libraries' own RUNPATH
# (/usr/lib/ipsec) is removed: with it the loader would take their dependencies from the
# host (the host's libm beside sid's libc). patchelf 0.14 garbles the RPATH when
# --add-needed and --set-rpath are given in one call, so they are separate calls.
#
# It is not installed as a package: apt-get fetches the packages through a private source
# list and state (nothing in /etc/apt or dpkg's database changes), from the Debian mirror
# this machine's apt uses (lab/debian-mirrors.sh), checked against Debian's archive keyring.
# A marker, /var/lib/ipsec-lab/strongswan/.from-sid holding the version, says it is done.
# Called by `lab/setup.sh --second-kernel` (or IPSEC_LAB_SECOND_KERNEL=1), beside sid's
# kernel: per-CPU SAs need Linux 6.13 or later, which that kernel is.
set -euo pipefail

dir=/var/lib/ipsec-lab/strongswan
marker=$dir/.from-sid
here=$(dirname "$0")
# charon's plugins, as the lab loads them (config.rs's PLUGINS); swanctl's (`swanctl.load`).
PLUGINS="random nonce aes sha1 sha2 hmac kdf gmp kernel-netlink socket-default vici"
SWANCTL_PLUGINS="random"
# The packages holding the programs, libstrongswan, libcharon and those plugins (aes, sha1,
# sha2, hmac, kdf and gmp are among the extra plugins from 6.0 on).
packages="charon-systemd strongswan-swanctl libstrongswan strongswan-libcharon libstrongswan-extra-plugins"
. "$here/private-apt.sh"
command -v patchelf >/dev/null || { echo "lab/strongswan6.sh: patchelf missing (lab/setup.sh installs it)" >&2; exit 3; }

# Whether the swanctl in $1 runs: its usage (its --version asks a running charon), with
# $1/strongswan.conf, which loads only its own plugins (the host's /etc/strongswan.conf
# would have it try the host's 5.9 ones). The lab reads the version so too.
runs() {
    local said
    said=$(STRONGSWAN_CONF=$1/strongswan.conf "$1/swanctl" --help 2>&1) || true
    grep -q "^strongSwan .* swanctl" <<<"$said"
}

if [ -f "$marker" ] && runs "$dir/$(cat "$marker")"; then
    echo "lab/strongswan6.sh: strongSwan $(cat "$marker") already in $dir"
    exit 0
fi
work=$(mktemp -d /tmp/ipl-strongswan6-XXXXXX)
trap 'rm -rf "$work"' EXIT
private_apt "$work" sid || exit 3
# The libraries they link, and those libraries' own, each sid's: sid's libc is newer than
# the host's, and a library built against it needs it (and its libm, not the host's).
# Of the extra plugins' libraries only gmp's: the others serve plugins the lab does not load
# (curl, LDAP, TPM).
new="charon-systemd strongswan-swanctl libstrongswan strongswan-libcharon libgmp10"
all="$packages libgmp10"
while [ -n "$new" ]; do
    deps=$(apt-cache "${apt_opts[@]}" depends $new \
        | awk '$1 == "Depends:" && $2 ~ /^(lib|zlib)/ { print $2 }' | sort -u)
    new=""
    for d in $deps; do
        case " $all " in *" $d "*) ;; *) all="$all $d"; new="$new $d" ;; esac
    done
done
echo "lab/strongswan6.sh: fetching $all from sid ($found)"
(cd "$work" && apt-get -qq "${apt_opts[@]}" download $all)
for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$work/root"
done
version=$(dpkg-deb -f "$work"/charon-systemd_*.deb Version)
version=${version%%-*}
version=${version#*:}
[ -n "$version" ] || { echo "lab/strongswan6.sh: no version in sid's charon-systemd" >&2; exit 3; }
dest=$dir/$version
stage=$work/stage
mkdir -p "$stage/lib" "$stage/ipsec/plugins"
cp "$work/root/usr/sbin/charon-systemd" "$work/root/usr/sbin/swanctl" "$stage/"
cp -a "$work/root/usr/lib/ipsec/"*.so* "$stage/ipsec/"
for p in $PLUGINS $SWANCTL_PLUGINS; do
    cp "$work/root/usr/lib/ipsec/plugins/libstrongswan-$p.so" "$stage/ipsec/plugins/" \
        || { echo "lab/strongswan6.sh: sid's packages ($(echo $packages)) have no $p plugin" >&2; exit 3; }
done
# The libraries and plugins: no RUNPATH of their own, so the programs' DT_RPATH serves
# their dependencies too.
find "$stage/ipsec" -name '*.so*' -type f | while read -r lib; do
    if [ -n "$(patchelf --print-rpath "$lib")" ]; then
        patchelf --remove-rpath "$lib"
    fi
done
for p in $PLUGINS; do
    patchelf --add-needed "libstrongswan-$p.so" "$stage/charon-systemd"
done
for p in $SWANCTL_PLUGINS; do
    patchelf --add-needed "libstrongswan-$p.so" "$stage/swanctl"
done
for program in charon-systemd swanctl; do
    patchelf --set-interpreter "$dest/lib/ld-linux-x86-64.so.2" --force-rpath \
        --set-rpath "$dest/ipsec:$dest/ipsec/plugins:$dest/lib" "$stage/$program"
done
# sid's C library whole (its loader, libm, ...), and of the other libraries only those the
# two programs load, as sid's loader resolves them (the packages bring many more: curl,
# LDAP, TPM, for plugins the lab does not load).
rm -rf "$dest"
libs=$work/root/usr/lib/x86_64-linux-gnu
dpkg-deb -x "$work"/libc6_*.deb "$work/libc"
cp -a "$work/libc/usr/lib/x86_64-linux-gnu/." "$stage/lib/"
rm -rf "$stage/lib/gconv"
for program in charon-systemd swanctl; do
    listed=$("$libs/ld-linux-x86-64.so.2" --library-path "$stage/ipsec:$stage/ipsec/plugins:$libs" \
        --list "$stage/$program")
    if grep -q 'not found' <<<"$listed"; then
        echo "lab/strongswan6.sh: $program misses libraries:" >&2
        grep 'not found' <<<"$listed" >&2
        exit 3
    fi
    awk -v libs="$libs/" '$2 == "=>" && index($3, libs) == 1 { print $1, $3 }' <<<"$listed" \
        | while read -r name path; do cp -L "$path" "$stage/lib/${name##*/}"; done
done
echo "swanctl { load = $SWANCTL_PLUGINS }" > "$stage/strongswan.conf"
rm -rf "$dest"
mkdir -p "$dir"
mv "$stage" "$dest"
# Every library of both programs resolves inside $dest (none from the host), and swanctl
# runs.
for program in charon-systemd swanctl; do
    listed=$("$dest/lib/ld-linux-x86-64.so.2" --list "$dest/$program")
    if grep -v -e "$dest/" -e linux-vdso <<<"$listed" >&2; then
        echo "lab/strongswan6.sh: $dest/$program loads the libraries above from outside $dest" >&2
        exit 3
    fi
done
runs "$dest" || { echo "lab/strongswan6.sh: $dest/swanctl does not run" >&2; exit 3; }
echo "$version" > "$marker"
echo "lab/strongswan6.sh: $dest/charon-systemd and $dest/swanctl (strongSwan $version from sid)"
