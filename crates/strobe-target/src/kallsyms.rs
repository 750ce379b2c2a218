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
            let mut f = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(start) = u64::from_str_radix(addr, 16) else { continue };
            nonzero |= start != 0;
            let module = f.next().map_or("", |m| m.trim_start_matches('[').trim_end_matches(']'));
            syms.push(Sym { start, name: name.into(), module: module.into() });
        }
        if !nonzero {
            return None;
        }
        syms.sort_by_key(|s| s.start);
        Some(Kallsyms { syms })
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
        (i + 1 < self.syms.len()).then_some(i)
    }

    /// Symbol `i` (from [`Kallsyms::find`]).
    pub fn symbol(&self, i: usize) -> Option<KernelSymbol> {
        let s = self.syms.get(i)?;
        let next = self.syms.get(i + 1)?.start;
        Some(KernelSymbol {
            start: s.start,
            size: next - s.start,
            name: s.name.to_string(),
            module: s.module.to_string(),
        })
    }

    /// The symbol holding `addr`.
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol> {
        self.symbol(self.find(addr)?)
    }
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
    fn this_machines_table_and_build_id_are_read_where_allowed() {
        match Kallsyms::load() {
            Some(k) => {
                assert!(k.len() > 1000, "{} text symbols", k.len());
                assert!(k.lookup(k.syms[10].start).is_some());
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
