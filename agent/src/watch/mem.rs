//! Reading the target's memory from the SIGTRAP handler and the writer thread without
//! faulting.
//!
//! Owns the one fault-free read ([`safe_read`]): `process_vm_readv` on this process,
//! which fails cleanly on an unmapped address and, being a kernel access, does not
//! re-trigger a user-space watchpoint. It must never touch memory directly, allocate,
//! lock or panic: it runs in the SIGTRAP handler.

/// Reads `buf.len()` bytes at `addr` in this process without faulting: false if any of
/// it is unmapped. Async-signal-safe (one system call).
pub fn safe_read(addr: u64, buf: &mut [u8]) -> bool {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: the local iovec covers `buf`, which we own mutably; the kernel checks the
    // remote range and fails with EFAULT instead of faulting.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == buf.len() as isize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mapped_bytes_and_refuses_unmapped_ones() {
        let word = 0x1122_3344_5566_7788u64.to_le_bytes();
        let mut b = [0u8; 8];
        assert!(safe_read(word.as_ptr() as u64, &mut b));
        assert_eq!(b, word);
        // The zero page is never mapped in a Linux process.
        assert!(!safe_read(16, &mut b));
        // A read that runs off the end of a mapping fails as a whole: map two pages,
        // unmap the second, read across the boundary.
        // SAFETY: an anonymous private mapping of two pages; only its second page is
        // unmapped, and the first is unmapped at the end; nothing else refers to them.
        unsafe {
            let two = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(two, libc::MAP_FAILED);
            assert_eq!(libc::munmap(two.cast::<u8>().add(4096).cast(), 4096), 0);
            let end = two as u64 + 4096;
            assert!(safe_read(end - 8, &mut b), "the last word of the mapped page");
            assert!(!safe_read(end - 4, &mut b), "four bytes past the mapping");
            libc::munmap(two, 4096);
        }
    }
}
