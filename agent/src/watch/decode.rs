//! The exact value a `mov` store wrote, recovered from the instruction and the registers.
//!
//! A data watchpoint traps *after* the access, and by the time the handler runs another
//! thread may already have stored something else in the word: reading memory then reports
//! the other thread's value. For the common stores (`mov r/m, reg` and `mov r/m, imm`,
//! opcodes 88, 89, C6 /0, C7 /0, with 66/REX/segment/lock prefixes) the value is still in
//! the source register or the instruction's immediate, and a store changes no register.
//! This module finds the instruction that ends at the trap's IP (trying each start from
//! IP-2 to IP-15 and accepting only a decoding whose computed address overlaps the
//! watchpoint and whose length ends exactly at the IP), and extracts the bytes it stored
//! into the watched range. Anything else (read-modify-write, vector, string or `xchg`
//! stores, FS/GS-relative addresses, stores covering only part of the range) returns
//! `None` and the caller reads memory instead.
//!
//! It owns nothing. It must never fault, allocate, lock or panic: it runs in the SIGTRAP
//! handler; code bytes are read with a fault-free read unless they lie in the page of the
//! instruction just executed.

/// General registers as the handler sees them, in x86 encoding order (rax, rcx, rdx, rbx,
/// rsp, rbp, rsi, rdi, r8..r15).
pub type Gprs = [u64; 16];

/// The registers of an interrupted context, in encoding order.
#[cfg(target_arch = "x86_64")]
pub fn gprs(uc: *mut libc::c_void) -> Option<Gprs> {
    if uc.is_null() {
        return None;
    }
    // SAFETY: an SA_SIGINFO handler's third argument is the interrupted ucontext_t.
    let g = unsafe { &(*(uc as *const libc::ucontext_t)).uc_mcontext.gregs };
    let order = [
        libc::REG_RAX,
        libc::REG_RCX,
        libc::REG_RDX,
        libc::REG_RBX,
        libc::REG_RSP,
        libc::REG_RBP,
        libc::REG_RSI,
        libc::REG_RDI,
        libc::REG_R8,
        libc::REG_R9,
        libc::REG_R10,
        libc::REG_R11,
        libc::REG_R12,
        libc::REG_R13,
        libc::REG_R14,
        libc::REG_R15,
    ];
    let mut out = [0u64; 16];
    for (o, r) in out.iter_mut().zip(order) {
        *o = *g.get(r as usize)? as u64;
    }
    Some(out)
}

#[cfg(not(target_arch = "x86_64"))]
pub fn gprs(_uc: *mut libc::c_void) -> Option<Gprs> {
    None
}

/// Up to 15 code bytes ending at `ip` (the longest x86 instruction).
pub fn code_before(ip: u64, out: &mut [u8; 15]) -> bool {
    let start = ip.wrapping_sub(15);
    if ip < 15 {
        return false;
    }
    if start >> 12 == (ip - 1) >> 12 {
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: the bytes lie in the page holding the last byte of the instruction
            // the CPU just executed, so the page is mapped and readable.
            *b = unsafe { std::ptr::read_volatile((start as *const u8).add(i)) };
        }
        true
    } else {
        super::mem::safe_read(start, out)
    }
}

/// A decoded store: where, how wide, what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Store {
    addr: u64,
    size: u64,
    value: u64,
}

/// The value written to `[waddr, waddr + wlen)` by the store that ends at `ip`, zero-
/// extended, or `None` when it cannot be recovered exactly.
pub fn stored_value(code: &[u8; 15], ip: u64, regs: &Gprs, waddr: u64, wlen: u64) -> Option<u64> {
    // Several starts can decode (a byte of the previous instruction may read as a REX or
    // operand-size prefix): prefer a store of exactly the watched range, then one that
    // covers it; a store covering only part of it tells no whole value.
    let mut best: Option<(u8, Store)> = None;
    for k in 2..=15usize {
        let Some(bytes) = code.get(15 - k..) else { continue };
        let Some(s) = decode(bytes, ip, regs) else { continue };
        let covers = s.addr <= waddr && s.addr.wrapping_add(s.size) >= waddr.wrapping_add(wlen);
        let rank = match (s.addr == waddr && s.size == wlen, covers) {
            (true, _) => 2,
            (false, true) => 1,
            _ => continue,
        };
        if best.is_none_or(|(r, _)| rank > r) {
            best = Some((rank, s));
        }
    }
    let (_, s) = best?;
    let shift = 8 * (waddr - s.addr);
    let v = if shift >= 64 { 0 } else { s.value >> shift };
    let mask = if wlen >= 8 { u64::MAX } else { (1u64 << (8 * wlen)) - 1 };
    Some(v & mask)
}

/// Decodes `b` as exactly one `mov` store ending at `ip` (all of `b` consumed).
fn decode(b: &[u8], ip: u64, regs: &Gprs) -> Option<Store> {
    let mut i = 0;
    let mut opsize16 = false;
    loop {
        match *b.get(i)? {
            0x66 => opsize16 = true,
            0xf0 | 0x2e | 0x3e | 0x26 | 0x36 => {}
            // Address-size, FS/GS, rep: not the stores handled here.
            0x67 | 0x64 | 0x65 | 0xf2 | 0xf3 => return None,
            _ => break,
        }
        i += 1;
    }
    let mut rex = 0u8;
    if let Some(&r) = b.get(i) {
        if r & 0xf0 == 0x40 {
            rex = r;
            i += 1;
        }
    }
    let (w, rr, x, bb) = (rex & 8 != 0, (rex >> 2) & 1, (rex >> 1) & 1, rex & 1);
    let op = *b.get(i)?;
    i += 1;
    let modrm = *b.get(i)?;
    i += 1;
    let (md, reg, rm) = (modrm >> 6, (modrm >> 3) & 7, modrm & 7);
    if md == 3 {
        return None;
    }
    let size: u64 = match op {
        0x88 | 0xc6 => 1,
        0x89 | 0xc7 if w => 8,
        0x89 | 0xc7 if opsize16 => 2,
        0x89 | 0xc7 => 4,
        _ => return None,
    };
    if matches!(op, 0xc6 | 0xc7) && reg != 0 {
        return None;
    }
    let mut rip_relative = false;
    let mut base: Option<u64> = None;
    let mut index: u64 = 0;
    if rm == 4 {
        let sib = *b.get(i)?;
        i += 1;
        let (scale, idx, bs) = (sib >> 6, ((sib >> 3) & 7) | (x << 3), (sib & 7) | (bb << 3));
        if idx != 4 {
            index = regs.get(idx as usize)?.wrapping_shl(u32::from(scale));
        }
        if !(bs & 7 == 5 && md == 0) {
            base = Some(*regs.get(bs as usize)?);
        }
    } else if rm == 5 && md == 0 {
        rip_relative = true;
    } else {
        base = Some(*regs.get((rm | (bb << 3)) as usize)?);
    }
    let disp: i64 = match (md, rip_relative || (rm == 4 && base.is_none())) {
        (0, false) => 0,
        (1, _) => {
            let d = *b.get(i)? as i8 as i64;
            i += 1;
            d
        }
        _ => {
            let d =
                i32::from_le_bytes([*b.get(i)?, *b.get(i + 1)?, *b.get(i + 2)?, *b.get(i + 3)?]);
            i += 4;
            d as i64
        }
    };
    let value = match op {
        0x88 => {
            let r = reg | (rr << 3);
            if rex == 0 && (4..8).contains(&r) {
                // ah, ch, dh, bh: bits 8-15 of rax, rcx, rdx, rbx.
                (regs.get((r - 4) as usize)? >> 8) & 0xff
            } else {
                regs.get(r as usize)? & 0xff
            }
        }
        0x89 => *regs.get((reg | (rr << 3)) as usize)?,
        0xc6 => {
            let v = *b.get(i)? as u64;
            i += 1;
            v
        }
        _ => {
            if size == 2 {
                let v = u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?]) as u64;
                i += 2;
                v
            } else {
                let v = i32::from_le_bytes([
                    *b.get(i)?,
                    *b.get(i + 1)?,
                    *b.get(i + 2)?,
                    *b.get(i + 3)?,
                ]);
                i += 4;
                v as i64 as u64
            }
        }
    };
    if i != b.len() {
        return None;
    }
    let addr = if rip_relative {
        ip.wrapping_add(disp as u64)
    } else {
        base.unwrap_or(0).wrapping_add(index).wrapping_add(disp as u64)
    };
    let value = if size >= 8 { value } else { value & ((1u64 << (8 * size)) - 1) };
    Some(Store { addr, size, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(bytes: &[u8]) -> [u8; 15] {
        let mut c = [0x90u8; 15];
        c[15 - bytes.len()..].copy_from_slice(bytes);
        c
    }

    #[test]
    fn rip_relative_register_store() {
        // 48 89 05 3b 2f 00 00: mov %rax, 0x2f3b(%rip), ending at 0x1185.
        let c = code(&[0x48, 0x89, 0x05, 0x3b, 0x2f, 0x00, 0x00]);
        let mut r = [0u64; 16];
        r[0] = 0x1234_5678_9abc;
        assert_eq!(stored_value(&c, 0x1185, &r, 0x1185 + 0x2f3b, 8), Some(0x1234_5678_9abc));
        // Another address: not this store.
        assert_eq!(stored_value(&c, 0x1185, &r, 0x9000, 8), None);
    }

    #[test]
    fn based_stores_bytes_words_and_immediates() {
        let mut r = [0u64; 16];
        r[3] = 0x1000; // rbx
        r[0] = 0xffee; // rax: ah = 0xff
                       // 88 63 08: mov %ah, 8(%rbx)
        assert_eq!(stored_value(&code(&[0x88, 0x63, 0x08]), 0x50, &r, 0x1008, 1), Some(0xff));
        // 66 c7 43 04 34 12: movw $0x1234, 4(%rbx)
        let c = code(&[0x66, 0xc7, 0x43, 0x04, 0x34, 0x12]);
        assert_eq!(stored_value(&c, 0x50, &r, 0x1004, 2), Some(0x1234));
        // 48 c7 03 ff ff ff ff: movq $-1, (%rbx)
        let c = code(&[0x48, 0xc7, 0x03, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(stored_value(&c, 0x50, &r, 0x1000, 8), Some(u64::MAX));
        // A 4-byte watch inside an 8-byte store takes its bytes.
        assert_eq!(stored_value(&c, 0x50, &r, 0x1004, 4), Some(0xffff_ffff));
        // 41 89 04 8c? mov %eax, (%r12,%rcx,4): SIB with REX.B.
        r[12] = 0x2000;
        r[1] = 3;
        let c = code(&[0x41, 0x89, 0x04, 0x8c]);
        assert_eq!(stored_value(&c, 0x50, &r, 0x200c, 4), Some(0xffee));
    }

    #[test]
    fn other_instructions_are_not_guessed() {
        let r = [0u64; 16];
        // 48 01 05 00 10 00 00: add %rax, 0x1000(%rip): read-modify-write.
        assert_eq!(
            stored_value(&code(&[0x48, 0x01, 0x05, 0, 0x10, 0, 0]), 0x50, &r, 0x1050, 8),
            None
        );
    }
}
