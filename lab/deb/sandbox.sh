#!/usr/bin/env bash
# Runs COMMAND under the restrictions a systemd unit's [Service] section sets, for machines
# where systemd is not PID 1 (containers, CI) and the unit cannot be started for real:
#
#   lab/deb/sandbox.sh [--keep DIR]... UNIT -- COMMAND [ARGS...]
#
# Applied the way systemd applies them: the capability bounding set and no_new_privs
# (setpriv; root's capabilities after exec are then exactly the bounding set), and in a
# private mount namespace (PrivateMounts) ProtectSystem=strict (every mount read-only but /dev, /proc, /sys,
# RuntimeDirectory= and ReadWritePaths=), PrivateTmp, ProtectHome, ProtectKernelTunables,
# ProtectControlGroups, ProtectKernelModules, ProtectKernelLogs, UMask.
# Seccomp-, cgroup- and namespace-level directives (SystemCallFilter, RestrictAddressFamilies,
# RestrictNamespaces, DeviceAllow, ...) are not applied here: they are listed on stderr, and
# tests/deb_package.rs checks the syscalls, socket families and namespace calls the command
# makes against them. A directive this script does not know is refused (exit 2), so the unit
# cannot gain a restriction that nothing tries.
#
# --keep DIR: DIR stays reachable (read-only) where it is, even where PrivateTmp or ProtectHome
# hides what is around it: for a test whose installed files live in a root under the checkout,
# which may itself be under /tmp or /home. A real install has them in /usr and /etc.
set -euo pipefail

usage="usage: $0 [--keep DIR]... UNIT -- COMMAND [ARGS...]"
keep=()
while [[ ${1:-} == --keep ]]; do
  [[ -d ${2:-} ]] || { echo "sandbox.sh: --keep needs a directory: ${2:-}" >&2; exit 2; }
  # As named (symlinks kept): that is the path the command is given.
  keep+=("$(realpath -s -- "$2")")
  shift 2
done
(($#)) || { echo "$usage" >&2; exit 2; }
unit=$1
shift
[[ ${1:-} == -- ]] && shift
(($#)) || { echo "$usage" >&2; exit 2; }

declare -A set=()
# Values of the [Service] section; a repeated key's values are joined with spaces.
section=
while IFS= read -r line; do
  line=${line%%#*}
  [[ $line =~ ^\[(.*)\]$ ]] && { section=${BASH_REMATCH[1]}; continue; }
  [[ $section == Service && $line == *=* ]] || continue
  key=${line%%=*}
  value=${line#*=}
  set[$key]="${set[$key]:+${set[$key]} }$value"
done <"$unit"

emulated=(CapabilityBoundingSet AmbientCapabilities NoNewPrivileges ProtectSystem RuntimeDirectory
  RuntimeDirectoryMode RuntimeDirectoryPreserve ReadWritePaths PrivateTmp PrivateMounts ProtectHome
  ProtectKernelTunables ProtectControlGroups ProtectKernelModules ProtectKernelLogs UMask)
# Checked by tests/deb_package.rs from what the command does (strace), not applied here.
checked=(SystemCallFilter SystemCallArchitectures RestrictAddressFamilies RestrictNamespaces
  MemoryDenyWriteExecute)
# Not applied: they restrict what the command never needs (devices but the TUN clone device,
# clock, hostname, realtime, personality, set-uid files, other processes in /proc).
not_applied=(DevicePolicy DeviceAllow ProtectClock ProtectHostname RestrictRealtime
  LockPersonality RestrictSUIDSGID ProtectProc)
# How the process is started and stopped: the caller's business.
lifecycle=(Type EnvironmentFile ExecStart KillSignal TimeoutStopSec Restart RestartSec)
for key in "${!set[@]}"; do
  case " ${emulated[*]} ${checked[*]} ${not_applied[*]} ${lifecycle[*]} " in
    *" $key "*) ;;
    *) echo "sandbox.sh: $unit sets $key, which this script neither applies nor checks" >&2; exit 2 ;;
  esac
done
skipped=()
for key in "${checked[@]}" "${not_applied[@]}"; do
  [[ -n ${set[$key]:-} ]] && skipped+=("$key")
done
echo "sandbox.sh: not applied here: ${skipped[*]:-none}" >&2

[[ -z ${set[AmbientCapabilities]:-} ]] || { echo "sandbox.sh: AmbientCapabilities is not supported" >&2; exit 2; }
[[ ${set[ProtectSystem]:-} == strict ]] || { echo "sandbox.sh: only ProtectSystem=strict is supported" >&2; exit 2; }
yes() { [[ ${set[$1]:-no} =~ ^(yes|true|1|on)$ ]]; }

bounding=-all
for cap in ${set[CapabilityBoundingSet]:-}; do
  cap=${cap#CAP_}
  bounding+=",+${cap,,}"
done
writable=()
# systemd makes each runtime directory with RuntimeDirectoryMode (default 0755), and sets that
# mode on one that exists already.
runtime_mode=${set[RuntimeDirectoryMode]:-0755}
[[ $runtime_mode =~ ^0?[0-7]{3}$ ]] || { echo "sandbox.sh: RuntimeDirectoryMode=$runtime_mode is not an octal mode" >&2; exit 2; }
for dir in ${set[RuntimeDirectory]:-}; do
  mkdir -p "/run/$dir"
  chmod "$runtime_mode" "/run/$dir"
  writable+=("/run/$dir")
done
for dir in ${set[ReadWritePaths]:-}; do
  # A leading "-": a path that does not exist is left out rather than an error.
  if [[ $dir == -* ]]; then
    dir=${dir#-}
    [[ -e $dir ]] || continue
  fi
  writable+=("$dir")
done
privs=(--inh-caps=-all --ambient-caps=-all --bounding-set="$bounding")
yes NoNewPrivileges && privs+=(--no-new-privs)

# Everything below happens in a private mount namespace that ends with the command.
export SANDBOX_WRITABLE="${writable[*]}" SANDBOX_UMASK="${set[UMask]:-0022}"
SANDBOX_KEEP=$(printf '%s\n' "${keep[@]}")
export SANDBOX_KEEP
export SANDBOX_TMP=$(yes PrivateTmp && echo 1 || true) SANDBOX_HOME=$(yes ProtectHome && echo 1 || true)
export SANDBOX_TUNABLES=$(yes ProtectKernelTunables && echo 1 || true)
export SANDBOX_MODULES=$(yes ProtectKernelModules && echo 1 || true)
export SANDBOX_LOGS=$(yes ProtectKernelLogs && echo 1 || true)
exec unshare --mount --propagation private -- bash -euo pipefail -c '
# Each kept directory is opened now, before anything hides it, and bound back in at the end.
kept=()
while IFS= read -r dir; do
  [[ -n $dir ]] || continue
  exec {fd}<"$dir"
  kept+=("$fd:$dir")
done <<<"$SANDBOX_KEEP"
# As systemd does: a path that is a mount point already is used as it is; another is bound
# onto itself, recursively. (Binding a mount point onto itself would stack a copy of what is
# mounted below it, such as a namespace in /run/netns, over the original, which then keeps
# that file busy: unlink fails with EBUSY.)
for dir in $SANDBOX_WRITABLE; do mountpoint -q "$dir" || mount --rbind "$dir" "$dir"; done
# ProtectSystem=strict: every mount read-only but the API file systems and the writable paths.
while read -r mountpoint; do
  case "$mountpoint" in /dev|/dev/*|/proc|/proc/*) continue ;; esac
  [[ -n $SANDBOX_TUNABLES || ( $mountpoint != /sys && $mountpoint != /sys/* ) ]] || continue
  for dir in $SANDBOX_WRITABLE; do [[ $mountpoint == "$dir" ]] && continue 2; done
  mount -o remount,bind,ro "$mountpoint" 2>/dev/null || true
done < <(awk "{print \$5}" /proc/self/mountinfo | sort -u)
if touch /.sandbox-probe 2>/dev/null; then
  rm -f /.sandbox-probe; echo "sandbox.sh: / is still writable" >&2; exit 1
fi
if [[ -n $SANDBOX_TUNABLES ]]; then
  mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys
fi
if [[ -n $SANDBOX_TMP ]]; then
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  mount -t tmpfs -o mode=1777 tmpfs /var/tmp
fi
# An empty, read-only directory nobody may enter; one that holds a kept directory lets the
# service through to it (mode 0711) and holds nothing else.
inaccessible() {
  [[ -d $1 ]] || return 0
  mount -t tmpfs -o mode=000 tmpfs "$1"
  for entry in "${kept[@]}"; do
    dir=${entry#*:}
    [[ $dir == "$1"/* ]] || continue
    mkdir -p "$dir"
    chmod 0711 "$1"
  done
  mount -o remount,ro "$1"
}
if [[ -n $SANDBOX_HOME ]]; then
  inaccessible /home; inaccessible /root; inaccessible /run/user
fi
if [[ -n $SANDBOX_MODULES ]]; then
  inaccessible /usr/lib/modules
fi
if [[ -n $SANDBOX_LOGS ]]; then
  [[ -e /dev/kmsg ]] && mount --bind /dev/null /dev/kmsg
fi
for entry in "${kept[@]}"; do
  fd=${entry%%:*}
  dir=${entry#*:}
  if ! [[ $dir -ef /proc/$$/fd/$fd ]]; then
    mkdir -p "$dir"
    mount --no-canonicalize --bind "/proc/$$/fd/$fd" "$dir"
    mount -o remount,bind,ro "$dir"
  fi
  exec {fd}<&-
done
umask "$SANDBOX_UMASK"
exec setpriv "$@"
' sandbox "${privs[@]}" -- "$@"
