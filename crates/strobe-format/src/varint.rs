//! LEB128 varints and zigzag, the building blocks of every payload.
//!
//! Decoding works on a byte slice with a cursor and returns `None` on a malformed or
//! short value; callers turn that into a [`crate::FormatError`] with the offset.
//!
//! Owns LEB128 and zigzag coding and the payload cursor. It must never read past the
//! slice it is given, never accept a varint that overflows 64 bits, and never panic.

/// Appends `v` as an unsigned LEB128 varint (1 to 10 bytes).
#[inline]
pub(crate) fn put(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Zigzag-maps a signed value so small magnitudes encode short.
#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A cursor over a payload.
#[derive(Debug, Clone)]
pub(crate) struct Cursor<'a> {
    pub bytes: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    /// Reads one varint; `None` if the bytes end inside it or it exceeds 64 bits.
    #[inline]
    pub(crate) fn varint(&mut self) -> Option<u64> {
        // Fast path: one byte.
        let b0 = *self.bytes.get(self.pos)?;
        if b0 < 0x80 {
            self.pos += 1;
            return Some(u64::from(b0));
        }
        let mut v = 0u64;
        let mut shift = 0u32;
        loop {
            let b = *self.bytes.get(self.pos)?;
            self.pos += 1;
            if shift == 63 && b > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Some(v);
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    pub(crate) fn u32_le(&mut self) -> Option<u32> {
        let s = self.bytes.get(self.pos..self.pos.checked_add(4)?)?;
        self.pos += 4;
        Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    pub(crate) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint()?).ok()?;
        let s = self.bytes.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edge_values() {
        for v in [0, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            assert!(b.len() <= 10);
            let mut c = Cursor::new(&b);
            assert_eq!(c.varint(), Some(v));
            assert!(c.is_empty());
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -300] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
    }

    #[test]
    fn rejects_overlong_and_short() {
        let mut c = Cursor::new(&[0x80, 0x80]);
        assert_eq!(c.varint(), None);
        let eleven = [0xffu8; 11];
        assert_eq!(Cursor::new(&eleven).varint(), None);
        // 10th byte may only carry the top bit.
        let mut b = vec![0xff; 9];
        b.push(0x02);
        assert_eq!(Cursor::new(&b).varint(), None);
    }
}
