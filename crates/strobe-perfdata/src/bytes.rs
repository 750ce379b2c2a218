//! Bounded little-endian reads from a byte slice. Every read checks its bounds and
//! returns `None` past the end; nothing here indexes unchecked, allocates, or assumes
//! alignment (pipe-mode records start at any byte).
//!
//! This module must never panic, whatever the input.

/// The `u64` at `at`, if the slice holds 8 bytes there.
#[inline]
pub(crate) fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = buf.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// The `u32` at `at`, if the slice holds 4 bytes there.
#[inline]
pub(crate) fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// The `u16` at `at`, if the slice holds 2 bytes there.
#[inline]
pub(crate) fn u16_at(buf: &[u8], at: usize) -> Option<u16> {
    let b: [u8; 2] = buf.get(at..at.checked_add(2)?)?.try_into().ok()?;
    Some(u16::from_le_bytes(b))
}

/// A forward reader over a slice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    #[inline]
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let v = u64_at(self.buf, self.pos)?;
        self.pos += 8;
        Some(v)
    }

    #[inline]
    pub(crate) fn u32(&mut self) -> Option<u32> {
        let v = u32_at(self.buf, self.pos)?;
        self.pos += 4;
        Some(v)
    }

    /// Two `u32`s packed in one `u64` slot (pid/tid, cpu/res).
    #[inline]
    pub(crate) fn u32_pair(&mut self) -> Option<(u32, u32)> {
        let a = u32_at(self.buf, self.pos)?;
        let b = u32_at(self.buf, self.pos + 4)?;
        self.pos += 8;
        Some((a, b))
    }

    /// The next `n` bytes.
    #[inline]
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    /// The next `n` u64 words, as bytes (`n * 8`, overflow-checked).
    #[inline]
    pub(crate) fn take_words(&mut self, n: u64) -> Option<&'a [u8]> {
        let len = usize::try_from(n).ok()?.checked_mul(8)?;
        self.take(len)
    }

    /// The unread rest.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }
}

/// The bytes before the first NUL (all of them when there is none).
pub(crate) fn until_nul(s: &[u8]) -> &[u8] {
    match s.iter().position(|&c| c == 0) {
        Some(i) => s.get(..i).unwrap_or(s),
        None => s,
    }
}

/// Iterates over the `u64` words of a slice whose length is a multiple of 8 (a tail
/// shorter than 8 bytes is ignored).
pub(crate) fn words(s: &[u8]) -> impl Iterator<Item = u64> + '_ {
    s.chunks_exact(8).map(|c| {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        u64::from_le_bytes(b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end() {
        let buf = [1u8, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0];
        let mut c = Cursor::new(&buf);
        assert_eq!(c.u64(), Some(1));
        assert_eq!(c.u64(), None, "only 4 bytes left");
        assert_eq!(c.u32(), Some(2));
        assert_eq!(c.u32(), None);
        assert_eq!(c.take(1), None);
        assert_eq!(u64_at(&buf, usize::MAX - 3), None, "no overflow");
        let mut c = Cursor::new(&buf);
        assert_eq!(c.take_words(u64::MAX), None);
        assert_eq!(c.take_words(1).map(|s| s.len()), Some(8));
    }

    #[test]
    fn strings_end_at_nul() {
        assert_eq!(until_nul(b"abc\0\0\0"), b"abc");
        assert_eq!(until_nul(b"abc"), b"abc");
        assert_eq!(words(&[1, 0, 0, 0, 0, 0, 0, 0, 9]).collect::<Vec<_>>(), [1]);
    }
}
