//! The running kernel's symbols, from `/proc/kallsyms`: which kernel function (or module
//! function) an address lies in.
//!
//! `/proc/kallsyms` shows real addresses only to whom `kernel.kptr_restrict` allows
//! (zeros otherwise): then there is no table ([`Kallsyms::load`] is `None`), and kernel
//! addresses stay unnamed.
//!
//! This module must never invent a symbol: an address below the first text symbol or
//! past the last one has none.

/// One text symbol: `[start, start + size)`, its name, and its module (empty for the
/// kernel image).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    /// First address.
    pub start: u64,
    /// Bytes up to the next text symbol.
    pub size: u64,
    /// The name.
    pub name: String,
    /// The module, as `/proc/kallsyms` shows it in brackets (`ext4`); empty for the
    /// kernel image.
    pub module: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Sym {
    start: u64,
    /// Where the next text symbol starts (the start itself for the last one: no size).
    end: u64,
    name: Box<str>,
    module: Box<str>,
}

/// The kernel's text symbols, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct Kallsyms {
    syms: Vec<Sym>,
}

impl Kallsyms {
    /// Parses `/proc/kallsyms` text (`ADDR TYPE NAME [MODULE]` lines), keeping text
    /// symbols (`t`, `T`, `w`, `W`); `None` when every address is zero (hidden) or none
    /// is listed.
    pub fn parse(text: &str) -> Option<Kallsyms> {
        let mut syms = Vec::new();
        let mut nonzero = false;
        for line in text.lines() {
            let Some((start, name, module)) = text_symbol(line) else { continue };
            nonzero |= start != 0;
            syms.push(Sym { start, end: start, name: name.into(), module: module.into() });
        }
        if !nonzero {
            return None;
        }
        syms.sort_by_key(|s| s.start);
        let starts: Vec<u64> = syms.iter().map(|s| s.start).skip(1).collect();
        for (s, next) in syms.iter_mut().zip(starts) {
            s.end = next;
        }
        Some(Kallsyms { syms })
    }

    /// The symbols of `text` (as [`Kallsyms::parse`] reads it) that hold the addresses
    /// `addrs` (sorted): the same answers for those addresses as the whole table, from one
    /// pass that keeps only what they need and stops after the last. `/proc/kallsyms`
    /// lists symbols in address order; text in another order is read whole.
    pub fn for_addresses(text: &str, addrs: &[u64]) -> Option<Kallsyms> {
        let mut syms: Vec<Sym> = Vec::new();
        // The last text symbol's start and line; only the lines kept are split into fields.
        let mut prev: Option<(u64, &str)> = None;
        let mut k = 0;
        let mut nonzero = false;
        for line in text.lines() {
            let Some(start) = text_symbol_start(line) else { continue };
            nonzero |= start != 0;
            if prev.is_some_and(|(p, _)| start < p) {
                return Self::parse(text); // not in address order
            }
            // The addresses before this symbol belong to the one before it.
            while let Some(&a) = addrs.get(k).filter(|&&a| a < start) {
                if let Some((p, pline)) = prev.filter(|&(p, _)| a >= p) {
                    if syms.last().is_none_or(|s| s.start != p) {
                        if let Some((_, name, module)) = text_symbol(pline) {
                            let (name, module) = (name.into(), module.into());
                            syms.push(Sym { start: p, end: start, name, module });
                        }
                    }
                }
                k += 1;
            }
            if k >= addrs.len() {
                break;
            }
            prev = Some((start, line));
        }
        nonzero.then_some(Kallsyms { syms })
    }

    /// Reads `/proc/kallsyms`; `None` when unreadable or hidden.
    pub fn load() -> Option<Kallsyms> {
        Kallsyms::parse(&std::fs::read_to_string("/proc/kallsyms").ok()?)
    }

    /// Text symbols listed.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// True when no symbol is listed.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The index of the symbol holding `addr` (the last one starting at or below it),
    /// unless `addr` lies past the last symbol.
    pub fn find(&self, addr: u64) -> Option<usize> {
        let i = self.syms.partition_point(|s| s.start <= addr).checked_sub(1)?;
        self.syms.get(i).filter(|s| addr < s.end).map(|_| i)
    }

    /// Symbol `i` (from [`Kallsyms::find`]).
    pub fn symbol(&self, i: usize) -> Option<KernelSymbol> {
        let s = self.syms.get(i).filter(|s| s.end > s.start)?;
        Some(KernelSymbol {
            start: s.start,
            size: s.end - s.start,
            name: s.name.to_string(),
            module: s.module.to_string(),
        })
    }

    /// The symbol holding `addr`.
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol> {
        self.symbol(self.find(addr)?)
    }
}

/// A text symbol's line (`ADDR TYPE NAME [MODULE]`, type `t`, `T`, `w` or `W`): its
/// address, name and module (empty for the kernel image).
fn text_symbol(line: &str) -> Option<(u64, &str, &str)> {
    let mut f = line.split_ascii_whitespace();
    let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
    if !matches!(kind, "t" | "T" | "w" | "W") {
        return None;
    }
    let start = u64::from_str_radix(addr, 16).ok()?;
    let module = f.next().map_or("", |m| m.trim_start_matches('[').trim_end_matches(']'));
    Some((start, name, module))
}

/// The address of a text symbol's line, read without splitting the line (most lines of
/// `/proc/kallsyms` are only passed over): `None` for a line of another type.
fn text_symbol_start(line: &str) -> Option<u64> {
    let (addr, rest) = line.split_once(' ')?;
    let kind = rest.as_bytes().first()?;
    if !matches!(kind, b't' | b'T' | b'w' | b'W') || rest.as_bytes().get(1) != Some(&b' ') {
        return None;
    }
    u64::from_str_radix(addr, 16).ok()
}

/// The running kernel's table as text (`/proc/kallsyms`), for [`Kallsyms::for_addresses`]:
/// the kernel formats it on every read, which is most of its cost, so a reader can take
/// it on another thread while it does other work.
pub fn read_text() -> Option<String> {
    std::fs::read_to_string("/proc/kallsyms").ok()
}

/// The running kernel's GNU build id, from the notes it exports
/// (`/sys/kernel/notes`), to tell whether a recording was made on this kernel.
pub fn running_build_id() -> Option<Vec<u8>> {
    build_id_of_notes(&std::fs::read("/sys/kernel/notes").ok()?)
}

/// The `NT_GNU_BUILD_ID` descriptor of an ELF note section's bytes.
pub fn build_id_of_notes(mut b: &[u8]) -> Option<Vec<u8>> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let align = |n: usize| n.div_ceil(4) * 4;
    while b.len() >= 12 {
        let (namesz, descsz, kind) = (word(b, 0)? as usize, word(b, 4)? as usize, word(b, 8)?);
        let name_end = 12usize.checked_add(align(namesz))?;
        let desc_end = name_end.checked_add(align(descsz))?;
        let name = b.get(12..12 + namesz)?;
        if kind == NT_GNU_BUILD_ID && name.starts_with(b"GNU") {
            return Some(b.get(name_end..name_end + descsz)?.to_vec());
        }
        b = b.get(desc_end..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small table in /proc/kallsyms' form: text, data and weak symbols, a module's.
    /// Tests of other crates that need one read this file (`testdata/kallsyms`).
    const TEXT: &str = include_str!("../testdata/kallsyms");

    #[test]
    fn text_symbols_are_found_by_address() {
        let k = Kallsyms::parse(TEXT).unwrap();
        assert_eq!(k.len(), 6, "data symbols are not text");
        let name = |a| k.lookup(a).map(|s| (s.name, s.module, s.size));
        assert_eq!(name(0xffffffff81000000), Some(("_stext".into(), "".into(), 0x100)));
        assert_eq!(name(0xffffffff81000250), Some(("helper".into(), "".into(), 0x200)));
        assert_eq!(name(0xffffffffc0001010), Some(("ext4_read".into(), "ext4".into(), 0x1000)));
        assert_eq!(name(0xffffffff80000000), None, "below the first symbol");
        assert_eq!(name(0xffffffffc0002010), None, "past the last symbol");
        assert!(Kallsyms::parse("0000000000000000 T _stext\n").is_none(), "hidden");
        assert!(Kallsyms::parse("").is_none());
    }

    #[test]
    fn the_table_for_some_addresses_names_them_as_the_whole_table() {
        let whole = Kallsyms::parse(TEXT).unwrap();
        let addrs = [
            0xffffffff80000000, // below every symbol
            0xffffffff81000010,
            0xffffffff81000250,
            0xffffffff81000260,
            0xffffffff81000450,
            0xffffffffc0001010,
            0xffffffffc0002010, // past the last symbol
        ];
        let some = Kallsyms::for_addresses(TEXT, &addrs).unwrap();
        for a in addrs {
            assert_eq!(some.lookup(a), whole.lookup(a), "{a:#x}");
        }
        assert_eq!(some.len(), 4, "the symbols the addresses need, once each");
        // Text not in address order is read whole.
        let shuffled: String = TEXT.lines().rev().map(|l| format!("{l}\n")).collect();
        let k = Kallsyms::for_addresses(&shuffled, &addrs).unwrap();
        assert_eq!(k.lookup(0xffffffff81000250), whole.lookup(0xffffffff81000250));
        assert!(Kallsyms::for_addresses("0000000000000000 T _stext\n", &addrs).is_none());
    }

    #[test]
    fn this_machines_table_and_build_id_are_read_where_allowed() {
        match Kallsyms::load() {
            Some(k) => {
                assert!(k.len() > 1000, "{} text symbols", k.len());
                assert!(k.lookup(k.syms[10].start).is_some());
                // The table read for a few addresses answers as the whole one.
                let addrs: Vec<u64> = k.syms.iter().step_by(997).map(|s| s.start + 1).collect();
                let some = Kallsyms::for_addresses(&read_text().unwrap(), &addrs).unwrap();
                for &a in &addrs {
                    assert_eq!(some.lookup(a), k.lookup(a), "{a:#x}");
                }
            }
            None => eprintln!("/proc/kallsyms hides addresses here (kptr_restrict)"),
        }
        if let Some(id) = running_build_id() {
            assert!((16..=64).contains(&id.len()), "{id:?}");
        }
    }

    #[test]
    fn a_build_id_note_is_found_among_others() {
        let mut b = Vec::new();
        // A note of another kind, then the GNU build id (namesz 4 "GNU\0", desc 20).
        for (name, kind, desc) in [(&b"Linux\0"[..], 1u32, &[9u8; 3][..]), (b"GNU\0", 3, &[7; 20])]
        {
            b.extend((name.len() as u32).to_ne_bytes());
            b.extend((desc.len() as u32).to_ne_bytes());
            b.extend(kind.to_ne_bytes());
            b.extend(name);
            b.resize(b.len().div_ceil(4) * 4, 0);
            b.extend(desc);
            b.resize(b.len().div_ceil(4) * 4, 0);
        }
        assert_eq!(build_id_of_notes(&b), Some(vec![7; 20]));
        assert_eq!(build_id_of_notes(&b[..30]), None, "cut short");
        assert_eq!(build_id_of_notes(&[]), None);
    }
}
