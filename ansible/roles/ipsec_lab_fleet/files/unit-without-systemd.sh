#!/usr/bin/env bash
# Starts and stops a systemd service on a host where systemd is not PID 1 (a container, a
# chroot, CI), the way its installed unit says: the unit's EnvironmentFile read, its
# ExecStart run with those variables expanded, under the unit's restrictions (sandbox.sh,
# beside this script: lab/deb/sandbox.sh), detached, its pid and log kept in this script's
# directory (/run/ipsec-lab-fleet, root only).
#
#   unit-without-systemd.sh start|stop UNIT READY_TEXT
#
# start waits until the log shows READY_TEXT (exit 0) or the process ends (exit 1, the log
# printed). stop sends the unit's KillSignal (SIGTERM), waits TimeoutStopSec (30 s), then
# SIGKILL; a stop with nothing running succeeds.
set -euo pipefail

action=${1:?usage: $0 start|stop UNIT READY_TEXT}
unit=${2:?usage: $0 start|stop UNIT READY_TEXT}
ready=${3:-}
here=$(dirname "$(realpath "$0")")
pidfile=$here/$unit.pid
log=$here/$unit.log

unit_file=
for dir in /etc/systemd/system /lib/systemd/system /usr/lib/systemd/system; do
  [[ -e $dir/$unit.service ]] && { unit_file=$dir/$unit.service; break; }
done
[[ -n $unit_file ]] || { echo "$0: no $unit.service installed" >&2; exit 1; }
setting() { sed -n "s/^$1=//p" "$unit_file" | tail -1; }

# The pid in the pid file, where it is still the unit's process (not a reused pid).
running() {
  [[ -s $pidfile ]] || return 1
  local pid
  pid=$(<"$pidfile")
  [[ -r /proc/$pid/cmdline ]] || return 1
  local exec
  exec=$(setting ExecStart)
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "${exec%% *}" || return 1
  echo "$pid"
}

stop() {
  local pid timeout signal
  pid=$(running) || { rm -f "$pidfile"; return 0; }
  timeout=$(setting TimeoutStopSec)
  signal=$(setting KillSignal)
  signal=${signal#SIG}
  kill "-${signal:-TERM}" "$pid"
  for ((i = 0; i < ${timeout:-30} * 10; i++)); do
    [[ -d /proc/$pid ]] || { rm -f "$pidfile"; echo "stopped $unit ($pid)"; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid"
  rm -f "$pidfile"
  echo "$unit ($pid) did not stop within ${timeout:-30} s: killed" >&2
}

start() {
  stop >/dev/null
  # EnvironmentFile=-FILE: the variables, where the file exists.
  local env_file
  env_file=$(setting EnvironmentFile)
  env_file=${env_file#-}
  if [[ -n $env_file && -e $env_file ]]; then
    set -a
    # shellcheck disable=SC1090
    . "$env_file"
    set +a
  fi
  # ExecStart's words; $VAR and ${VAR} words become the variable's words, as systemd splits them.
  local -a argv=()
  local word name
  set -f
  for word in $(setting ExecStart); do
    if [[ $word =~ ^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$ ]]; then
      name=${BASH_REMATCH[1]}
      # shellcheck disable=SC2206
      argv+=(${!name:-})
    else
      argv+=("$word")
    fi
  done
  set +f
  : >"$log"
  # setsid: its own session, so the SSH session that started it can end. sandbox.sh execs
  # down to the service, so this pid is the service's.
  setsid bash "$here/sandbox.sh" "$unit_file" -- "${argv[@]}" </dev/null >>"$log" 2>&1 &
  local pid=$!
  echo "$pid" >"$pidfile"
  for ((i = 0; i < 300; i++)); do
    if [[ -n $ready ]] && grep -qF -- "$ready" "$log"; then
      echo "started $unit ($pid)"
      return 0
    fi
    if ! [[ -d /proc/$pid ]]; then
      rm -f "$pidfile"
      echo "$unit ended at start:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.1
  done
  [[ -z $ready ]] || { echo "$unit: no \"$ready\" in its log within 30 s:" >&2; cat "$log" >&2; stop; return 1; }
}

case $action in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop UNIT READY_TEXT" >&2; exit 2 ;;
esac
