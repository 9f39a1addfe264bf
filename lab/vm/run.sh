#!/bin/sh
# Runs a command inside a virtme-ng guest booting a stock kernel, with the host's root
# filesystem shared read-only and OUTDIR shared read-write (results come back there).
# The guest loads the modules the xfrm backend needs and sets IPSEC_LAB_VIRT, so reports
# made inside say whether the VM ran under KVM or TCG emulation.
#
#   lab/vm/run.sh [-k /boot/vmlinuz-VERSION] [-o OUTDIR] -- COMMAND [ARGS...]
#
# KVM is used when a KVM guest boots within 40 s (checked once, cached in
# ${XDG_CACHE_HOME:-~/.cache}/ipsec-lab/vm-accel, the same cache `ipsec-lab run --vm` uses);
# IPSEC_LAB_VM_ACCEL=kvm|tcg overrides. The guest's exit code is written to OUTDIR/rc and
# returned. Needs: vng (pip install virtme-ng), qemu-system-x86, a kernel image in /boot.
# vng passes the kernel and OUTDIR on inside a command string it splits on spaces, so both
# must be plain paths (letters, digits, /._+-); anything else is refused with exit 2.
set -eu

# Single-quotes $1 for the guest's shell.
q() {
    printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

# Refuses a path vng would split into extra arguments.
plain_path() {
    case "$2" in
        ''|*[!A-Za-z0-9/._+-]*)
            echo "lab/vm: $1 '$2' has characters virtme-ng cannot pass on (only letters, digits and /._+- work)" >&2
            exit 2 ;;
    esac
}

kernel=""
outdir=""
while [ $# -gt 0 ]; do
    case "$1" in
        -k) kernel=$2; shift 2 ;;
        -o) outdir=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "usage: $0 [-k KERNEL] [-o OUTDIR] -- COMMAND..." >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [-k KERNEL] [-o OUTDIR] -- COMMAND..." >&2; exit 2; }
command -v vng >/dev/null || { echo "vng not found: pip install virtme-ng" >&2; exit 3; }
if [ -z "$kernel" ]; then
    # The image Debian's linux-image-amd64 points at (as `ipsec-lab --vm`), else the newest.
    stock=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null | grep -o 'linux-image-[0-9][^ ,]*' | head -n 1)
    if [ -n "$stock" ] && [ -e "/boot/vmlinuz-${stock#linux-image-}" ]; then
        kernel=/boot/vmlinuz-${stock#linux-image-}
    else
        kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
    fi
fi
[ -n "$kernel" ] && [ -e "$kernel" ] || { echo "no kernel image in /boot: apt-get install linux-image-amd64" >&2; exit 3; }
plain_path kernel "$kernel"
if [ -z "$outdir" ]; then
    # Fresh and private (mktemp: random name, mode 0700), never an existing directory.
    outdir=$(mktemp -d /tmp/ipl-vm-XXXXXX)
fi
plain_path OUTDIR "$outdir"
mkdir -p "$outdir"

accel=${IPSEC_LAB_VM_ACCEL:-}
if [ -z "$accel" ]; then
    if [ ! -e /dev/kvm ]; then
        accel=tcg
    else
        cache=${XDG_CACHE_HOME:-$HOME/.cache}/ipsec-lab/vm-accel
        key=$(printf '%s\t%s\t' "$(cat /proc/sys/kernel/osrelease)" "$kernel")
        accel=$(grep -F "$key" "$cache" 2>/dev/null | tail -n 1 | cut -f 3 || true)
        if [ -z "$accel" ]; then
            if timeout --kill-after=5 40 vng --memory 512M --cpus 1 -r "$kernel" --exec 'echo ipl-kvm-boot-ok' \
                    </dev/null 2>/dev/null | grep -q ipl-kvm-boot-ok; then
                accel=kvm
            else
                accel=tcg
            fi
            mkdir -p "$(dirname "$cache")"
            printf '%s%s\n' "$key" "$accel" >> "$cache"
        fi
    fi
fi
case "$accel" in
    kvm) virt="vm (kvm)"; kvm_flag="" ;;
    *) virt="vm (tcg: emulated, speeds not representative)"; kvm_flag="--disable-kvm" ;;
esac

quoted=""
for a in "$@"; do
    quoted="$quoted $(q "$a")"
done
script="modprobe -q -a esp4 xfrm_user xfrm4_tunnel aesni_intel sha256_ssse3 gcm crypto_user pcrypt sch_netem 2>/dev/null; \
cd $(q "$(pwd)"); IPSEC_LAB_VIRT=$(q "$virt") IPSEC_LAB_VM_OUT=$(q "$outdir") $quoted; echo \$? > $(q "$outdir/rc")"

echo "lab/vm: booting $kernel ($virt), results in $outdir" >&2
start=$(date +%s)
# From / (the script changes directory itself); the console through a pipe, so qemu never
# opens (and truncates) a file the caller redirected our output to.
# shellcheck disable=SC2086
(cd / && vng $kvm_flag -r "$kernel" --memory 2G --cpus 2 --rwdir "$outdir" --exec "$script" </dev/null 2>&1 | cat)
echo "lab/vm: VM done in $(( $(date +%s) - start )) s" >&2
[ -s "$outdir/rc" ] || { echo "lab/vm: the guest did not run the command" >&2; exit 1; }
exit "$(cat "$outdir/rc")"
