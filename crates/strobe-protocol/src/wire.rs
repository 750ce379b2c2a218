//! The binary encoding of protocol messages: unsigned LEB128 varints, length-prefixed
//! byte strings, `f64` as its bits, and a decoder that never panics and names what it
//! could not read.
//!
//! Owns: these primitives. Must never panic on any input or allocate more than the input
//! announces and holds.

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What was being read.
    pub what: &'static str,
    /// Byte offset in the message.
    pub at: usize,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot read {} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for DecodeError {}

/// Appends encoded values to a byte vector.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    /// The bytes so far.
    pub bytes: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Writer {
        Writer::default()
    }

    /// A varint.
    pub fn u64(&mut self, mut v: u64) -> &mut Self {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.bytes.push(b);
                return self;
            }
            self.bytes.push(b | 0x80);
        }
    }

    /// A bool as one byte.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.bytes.push(u8::from(v));
        self
    }

    /// An `f64` as its 8 bytes, little-endian.
    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_bits().to_le_bytes());
        self
    }

    /// Length-prefixed bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u64(b.len() as u64);
        self.bytes.extend_from_slice(b);
        self
    }

    /// An optional varint: 0 for none, v + 1 for v.
    pub fn opt(&mut self, v: Option<u64>) -> &mut Self {
        self.u64(v.map_or(0, |v| v.saturating_add(1)))
    }
}

/// Reads encoded values from a byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    fn err(&self, what: &'static str) -> DecodeError {
        DecodeError { what, at: self.at }
    }

    /// A varint.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.bytes.get(self.at).ok_or_else(|| self.err(what))?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err(what))
    }

    /// A varint that must fit in `u32`.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let at = self.at;
        u32::try_from(self.u64(what)?).map_err(|_| DecodeError { what, at })
    }

    /// A bool (one byte, 0 or 1).
    pub fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.bytes.get(self.at) {
            Some(&b) if b <= 1 => {
                self.at += 1;
                Ok(b == 1)
            }
            _ => Err(self.err(what)),
        }
    }

    /// An `f64`.
    pub fn f64(&mut self, what: &'static str) -> Result<f64, DecodeError> {
        let b = self.bytes.get(self.at..self.at + 8).ok_or_else(|| self.err(what))?;
        self.at += 8;
        Ok(f64::from_bits(u64::from_le_bytes(b.try_into().map_err(|_| self.err(what))?)))
    }

    /// Length-prefixed bytes, borrowed.
    pub fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.u64(what)?;
        let len = usize::try_from(len).map_err(|_| self.err(what))?;
        let end = self.at.checked_add(len).ok_or_else(|| self.err(what))?;
        let b = self.bytes.get(self.at..end).ok_or_else(|| self.err(what))?;
        self.at = end;
        Ok(b)
    }

    /// Length-prefixed UTF-8.
    pub fn str(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let at = self.at;
        let b = self.bytes(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError { what, at })
    }

    /// An optional varint.
    pub fn opt(&mut self, what: &'static str) -> Result<Option<u64>, DecodeError> {
        Ok(self.u64(what)?.checked_sub(1))
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_truncation_is_an_error() {
        let mut w = Writer::new();
        w.u64(0).u64(300).u64(u64::MAX).bool(true).f64(-2.5).bytes(b"abc").opt(None).opt(Some(7));
        let mut r = Reader::new(&w.bytes);
        assert_eq!(r.u64("a").unwrap(), 0);
        assert_eq!(r.u64("b").unwrap(), 300);
        assert_eq!(r.u64("c").unwrap(), u64::MAX);
        assert!(r.bool("d").unwrap());
        assert_eq!(r.f64("e").unwrap(), -2.5);
        assert_eq!(r.bytes("f").unwrap(), b"abc");
        assert_eq!(r.opt("g").unwrap(), None);
        assert_eq!(r.opt("h").unwrap(), Some(7));
        assert_eq!(r.remaining(), 0);
        assert_eq!(
            r.u64("past the end"),
            Err(DecodeError { what: "past the end", at: w.bytes.len() })
        );
        for cut in 0..w.bytes.len() {
            let mut r = Reader::new(&w.bytes[..cut]);
            let all = (|| -> Result<(), DecodeError> {
                r.u64("a")?;
                r.u64("b")?;
                r.u64("c")?;
                r.bool("d")?;
                r.f64("e")?;
                r.bytes("f")?;
                r.opt("g")?;
                r.opt("h")?;
                Ok(())
            })();
            assert!(all.is_err(), "cut at {cut} still decoded");
        }
    }

    #[test]
    fn a_huge_length_is_an_error_not_an_allocation() {
        let mut w = Writer::new();
        w.u64(u64::MAX);
        assert!(Reader::new(&w.bytes).bytes("x").is_err());
        assert!(Reader::new(&[0x80; 11]).u64("y").is_err(), "an over-long varint");
        assert!(Reader::new(&[2]).bool("z").is_err());
    }
}
