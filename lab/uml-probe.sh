#!/bin/sh
# Whether a user-mode Linux kernel runs processes on this host: one boot of /bin/true as its
# init, with the host's / read-only. Kernels before 7.x hand ptrace a register area of the
# size they know; on a CPU with a larger XSAVE area (AVX-512) the host refuses it and every
# process in the guest dies at its first system call ("ptrace set fp regs failed, errno =
# 14"). The one probe of the lab: lab/setup.sh runs it, and the binary runs this same text
# (crates/lab/src/uml.rs embeds it).
#
# Usage: uml-probe.sh LINUX_UML
# Exit 0: it runs here. Exit 1: it does not; stdout says why (after "user-mode Linux
# RELEASE "). Exit 2: bad usage. About a second; at most $PROBE_SECONDS (30).
set -u
[ $# -eq 1 ] || { echo "usage: uml-probe.sh LINUX_UML" >&2; exit 2; }
limit=${PROBE_SECONDS:-30}
# The kernel ends by abort(): the shell's "Aborted" is kept off stderr with the kernel's own.
{
    out=$(timeout -s KILL "$limit" "$1" mem=64M root=/dev/root rootfstype=hostfs rootflags=/ ro \
        init=/bin/true con=null con0=null,fd:1 </dev/null)
    rc=$?
} 2>/dev/null
# init (/bin/true) ran and exited 0: the kernel then panics "Attempted to kill init!
# exitcode=0x00000000", which is how a UML guest without a halt ends.
case $out in *exitcode=0x00000000*) exit 0 ;; esac
failed=$(printf '%s\n' "$out" | grep -m1 'ptrace set fp regs failed' | sed 's/^ *//')
if [ -n "$failed" ]; then
    echo "cannot run processes on this CPU ($failed): its XSAVE area is larger than this kernel hands to ptrace"
elif [ "$rc" -eq 137 ]; then
    echo "did not end within $limit s"
elif [ "$rc" -eq 126 ] || [ "$rc" -eq 127 ]; then
    echo "cannot be started ($1: exit $rc)"
else
    echo "did not run /bin/true to its end"
fi
exit 1
