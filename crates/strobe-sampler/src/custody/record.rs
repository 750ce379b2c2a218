//! One sample as words inside a block: the encoding the handler writes and the recorder
//! reads. Records never span blocks and are whole words, so a block's `head` (in words)
//! always falls between records.
//!
//! ```text
//! word 0   len (16: words, this one included) | kind (8) | ncounters (8) | nframes (16) | flags (16)
//! word 1   time (CLOCK_MONOTONIC ns, taken in the handler)
//! word 2   ip (the interrupted instruction)
//! ...      ncounters counter values (the group read, leader first)
//! ...      nframes return addresses of the callers, innermost first
//! ```
//!
//! Owns: this layout. Must never panic on any words (decoding checks every length) and
//! never allocate.

/// Words before the counters.
pub const HEAD_WORDS: usize = 3;
/// Most counters a record carries.
pub const MAX_COUNTERS: usize = 8;
/// Most caller frames a record carries.
pub const MAX_FRAMES: usize = 256;
/// The longest record, in words.
pub const MAX_WORDS: usize = HEAD_WORDS + MAX_COUNTERS + MAX_FRAMES;

/// Flag: the stack walk stopped at its depth limit (more callers exist).
pub const FLAG_TRUNCATED: u16 = 1;
/// Flag: the stack walk reached the thread's outermost frame.
pub const FLAG_COMPLETE: u16 = 2;
/// Flag: a stack was asked for (call graph fp or dwarf), even if it has no frame.
pub const FLAG_HAS_STACK: u16 = 4;

/// A record to write (the handler's view).
#[derive(Debug, Clone, Copy)]
pub struct Rec<'a> {
    /// The sample's kind (`Kind` as a byte: plain, window start, window end).
    pub kind: u8,
    /// Flags (`FLAG_*`).
    pub flags: u16,
    /// When.
    pub time: u64,
    /// Where.
    pub ip: u64,
    /// The group values, leader first (at most [`MAX_COUNTERS`]).
    pub counters: &'a [u64],
    /// Caller return addresses, innermost first (at most [`MAX_FRAMES`]).
    pub frames: &'a [u64],
}

impl Rec<'_> {
    /// The record's length in words, with counters and frames cut to their maxima.
    #[inline]
    pub fn words(&self) -> usize {
        HEAD_WORDS + self.counters.len().min(MAX_COUNTERS) + self.frames.len().min(MAX_FRAMES)
    }

    /// The first word.
    #[inline]
    pub fn header_word(&self) -> u64 {
        let nc = self.counters.len().min(MAX_COUNTERS) as u64;
        let nf = self.frames.len().min(MAX_FRAMES) as u64;
        self.words() as u64
            | (u64::from(self.kind) << 16)
            | (nc << 24)
            | (nf << 32)
            | (u64::from(self.flags) << 48)
    }

    /// Calls `put(i, word)` for every word of the record, in order.
    #[inline]
    pub fn for_each_word(&self, mut put: impl FnMut(usize, u64)) {
        put(0, self.header_word());
        put(1, self.time);
        put(2, self.ip);
        let counters = self.counters.get(..self.counters.len().min(MAX_COUNTERS)).unwrap_or(&[]);
        let frames = self.frames.get(..self.frames.len().min(MAX_FRAMES)).unwrap_or(&[]);
        for (i, &w) in counters.iter().chain(frames).enumerate() {
            put(HEAD_WORDS + i, w);
        }
    }
}

/// A record read back (the recorder's view), borrowing its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecView<'a> {
    /// The sample's kind byte.
    pub kind: u8,
    /// Flags (`FLAG_*`).
    pub flags: u16,
    /// When.
    pub time: u64,
    /// Where.
    pub ip: u64,
    /// Group values, leader first.
    pub counters: &'a [u64],
    /// Caller return addresses, innermost first.
    pub frames: &'a [u64],
}

/// The length in words announced by a record's first word (0 if malformed).
#[inline]
pub fn len_of(header: u64) -> usize {
    (header & 0xffff) as usize
}

/// Decodes the record filling `words` exactly, or `None` if its lengths disagree.
pub fn decode(words: &[u64]) -> Option<RecView<'_>> {
    let h = *words.first()?;
    let len = len_of(h);
    let nc = ((h >> 24) & 0xff) as usize;
    let nf = ((h >> 32) & 0xffff) as usize;
    if len != words.len() || len != HEAD_WORDS + nc + nf || nc > MAX_COUNTERS || nf > MAX_FRAMES {
        return None;
    }
    Some(RecView {
        kind: ((h >> 16) & 0xff) as u8,
        flags: (h >> 48) as u16,
        time: *words.get(1)?,
        ip: *words.get(2)?,
        counters: words.get(HEAD_WORDS..HEAD_WORDS + nc)?,
        frames: words.get(HEAD_WORDS + nc..len)?,
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_bad_lengths_are_refused() {
        let frames = [0x4000_1000, 0x4000_2000, 0x7f00_0000_1234];
        let r = Rec {
            kind: 1,
            flags: FLAG_COMPLETE,
            time: 99,
            ip: 0x1234,
            counters: &[5, 6, 7],
            frames: &frames,
        };
        let mut w = vec![0u64; r.words()];
        r.for_each_word(|i, v| w[i] = v);
        let v = decode(&w).unwrap();
        assert_eq!(
            v,
            RecView {
                kind: 1,
                flags: FLAG_COMPLETE,
                time: 99,
                ip: 0x1234,
                counters: &[5, 6, 7],
                frames: &frames
            }
        );
        assert_eq!(len_of(w[0]), 9);
        assert!(decode(&w[..8]).is_none(), "cut short");
        let mut bad = w.clone();
        bad[0] = (bad[0] & !0xff00_0000) | (7 << 24);
        assert!(decode(&bad).is_none(), "counter count disagrees with the length");
        assert!(decode(&[]).is_none());
    }

    #[test]
    fn oversized_parts_are_cut_to_their_maxima() {
        let counters = [1u64; 20];
        let frames = vec![2u64; 300];
        let r = Rec { kind: 0, flags: 0, time: 0, ip: 0, counters: &counters, frames: &frames };
        assert_eq!(r.words(), MAX_WORDS);
        let mut w = vec![0u64; r.words()];
        r.for_each_word(|i, v| w[i] = v);
        let v = decode(&w).unwrap();
        assert_eq!((v.counters.len(), v.frames.len()), (MAX_COUNTERS, MAX_FRAMES));
    }
}
