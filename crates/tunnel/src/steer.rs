//! Which queue of a multi-queue TUN device a packet leaving the kernel goes to. By default
//! the kernel hashes the flow, so two flows share one queue half the time with two queues.
//! The lab's flows differ by their server port (the data streams use consecutive ports, the
//! other end an ephemeral one from far above), so a tiny eBPF program attached with
//! `TUNSETSTEERINGEBPF` picks queue `min(source port, destination port) mod N`: stream i on
//! queue `(port + i) mod N`, both ways, every flow spread evenly and the same in every run.
//!
//! The program reads the ports at offsets 20 and 22 of the IPv4 packet (no IP options, as
//! the lab's packets have none); a packet too short for that (an ICMP message, say) ends
//! the program, which the kernel counts as 0: queue 0.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// `_IOR('T', 224, int)`: attach a steering program (by fd) to the device.
const TUNSETSTEERINGEBPF: libc::c_ulong = 0x8004_54e0;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// One eBPF instruction as the kernel reads it (`struct bpf_insn`).
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = dst | (src << 4);
    b[2..4].copy_from_slice(&off.to_le_bytes());
    b[4..8].copy_from_slice(&imm.to_le_bytes());
    b
}

/// The program: r6 = ctx; r0 = port at 20; r7 = r0; r0 = port at 22; r0 = min(r0, r7).
pub(crate) fn min_port_program() -> Vec<u8> {
    const MOV64_X: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
    const LD_ABS_H: u8 = 0x28; // BPF_LD | BPF_ABS | BPF_H: r0 = ntohs(*(u16 *)(data + imm))
    const JLE_X: u8 = 0xbd; // BPF_JMP | BPF_JLE | BPF_X
    const EXIT: u8 = 0x95;
    [
        insn(MOV64_X, 6, 1, 0, 0),
        insn(LD_ABS_H, 0, 0, 0, 20),
        insn(MOV64_X, 7, 0, 0, 0),
        insn(LD_ABS_H, 0, 0, 0, 22),
        insn(JLE_X, 0, 7, 1, 0),
        insn(MOV64_X, 0, 7, 0, 0),
        insn(EXIT, 0, 0, 0, 0),
    ]
    .concat()
}

/// `union bpf_attr` for BPF_PROG_LOAD, as far as it is used (the rest stays zero).
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    rest: [u8; 92],
}

/// Loads [`min_port_program`] and attaches it to the TUN device behind `tun_fd`. The
/// device keeps the program; its fd is closed on return.
pub(crate) fn steer_by_port(tun_fd: RawFd) -> io::Result<()> {
    let program = min_port_program();
    let license = c"GPL";
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: (program.len() / 8) as u32,
        insns: program.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        rest: [0; 92],
    };
    // SAFETY: bpf(2) reads `attr` (and the program and license it points at, which outlive
    // the call) for size_of::<ProgLoad>() bytes.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoad,
            std::mem::size_of::<ProgLoad>() as u32,
        )
    };
    if raw < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("load the steering program: {e}"),
        ));
    }
    // SAFETY: a fresh fd from the kernel.
    let prog = unsafe { OwnedFd::from_raw_fd(raw as RawFd) };
    let fd: libc::c_int = prog.as_raw_fd();
    // SAFETY: TUNSETSTEERINGEBPF reads an int (the program's fd) through the pointer.
    let rc = unsafe { libc::ioctl(tun_fd, TUNSETSTEERINGEBPF as _, &fd as *const libc::c_int) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("TUNSETSTEERINGEBPF: {e}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_seven_instructions_ending_in_exit() {
        let p = min_port_program();
        assert_eq!(p.len(), 7 * 8);
        // r6 = r1 first (LD_ABS needs the context in r6), exit last.
        assert_eq!(&p[..2], &[0xbf, 0x16]);
        assert_eq!(&p[8..16], &[0x28, 0, 0, 0, 20, 0, 0, 0]);
        assert_eq!(&p[32..40], &[0xbd, 0x70, 1, 0, 0, 0, 0, 0]);
        assert_eq!(p[48], 0x95);
    }
}
