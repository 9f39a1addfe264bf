#!/usr/bin/env bash
# Runs COMMAND under the restrictions a systemd unit's [Service] section sets, for machines
# where systemd is not PID 1 (containers, CI) and the unit cannot be started for real:
#
#   lab/deb/sandbox.sh UNIT -- COMMAND [ARGS...]
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
set -euo pipefail

unit=$1
shift
[[ ${1:-} == -- ]] && shift
(($#)) || { echo "usage: $0 UNIT -- COMMAND [ARGS...]" >&2; exit 2; }

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
  RuntimeDirectoryPreserve ReadWritePaths PrivateTmp PrivateMounts ProtectHome ProtectKernelTunables
  ProtectControlGroups ProtectKernelModules ProtectKernelLogs UMask)
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
for dir in ${set[RuntimeDirectory]:-}; do
  mkdir -p "/run/$dir"
  writable+=("/run/$dir")
done
for dir in ${set[ReadWritePaths]:-}; do
  writable+=("${dir#-}")
done
privs=(--inh-caps=-all --ambient-caps=-all --bounding-set="$bounding")
yes NoNewPrivileges && privs+=(--no-new-privs)

# Everything below happens in a private mount namespace that ends with the command.
export SANDBOX_WRITABLE="${writable[*]}" SANDBOX_UMASK="${set[UMask]:-0022}"
export SANDBOX_TMP=$(yes PrivateTmp && echo 1 || true) SANDBOX_HOME=$(yes ProtectHome && echo 1 || true)
export SANDBOX_TUNABLES=$(yes ProtectKernelTunables && echo 1 || true)
export SANDBOX_MODULES=$(yes ProtectKernelModules && echo 1 || true)
export SANDBOX_LOGS=$(yes ProtectKernelLogs && echo 1 || true)
exec unshare --mount --propagation private -- bash -euo pipefail -c '
for dir in $SANDBOX_WRITABLE; do mount --bind "$dir" "$dir"; done
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
inaccessible() { [[ -d $1 ]] && mount -t tmpfs -o ro,mode=000 tmpfs "$1" || true; }
if [[ -n $SANDBOX_HOME ]]; then
  inaccessible /home; inaccessible /root; inaccessible /run/user
fi
if [[ -n $SANDBOX_MODULES ]]; then
  inaccessible /usr/lib/modules
fi
if [[ -n $SANDBOX_LOGS ]]; then
  [[ -e /dev/kmsg ]] && mount --bind /dev/null /dev/kmsg
fi
umask "$SANDBOX_UMASK"
exec setpriv "$@"
' sandbox "${privs[@]}" -- "$@"
