//! Watch specs: what the user types after `strobe watch`, parsed and checked.
//!
//! ```text
//! SPEC     := [LIBRARY ":"] LOCATION [":" LEN] [":" ACCESS]
//! LIBRARY  := a shared library the program loads, named by file name, soname, short name
//!             or path: libfoo.so, libfoo, ./libfoo.so.1. The first field is a library
//!             when it contains ".so" or "/", or starts with "lib" and the field after it
//!             is not a length or an access (`libfoo:state`; `state:4` and `libx:w` are a
//!             symbol with a length or an access).
//! LOCATION := SYMBOL ["+" OFFSET]          counter, table+16, ns::state
//!           | "0x" HEX ["+" OFFSET]        0x7ffd1234 (with LIBRARY: a link-time address
//!                                          in that library)
//! LEN      := 1 | 2 | 4 | 8                bytes covered (default: the symbol's size when
//!                                          that is 1, 2, 4 or 8, else 8)
//! ACCESS   := w | rw                       writes only (default) or reads and writes
//! ```
//!
//! Without LIBRARY a symbol is looked up in the executable, then in the libraries it loads
//! (see [`crate::resolve`](mod@crate::resolve)). Fields are separated by single colons; a double colon belongs to the symbol (C++ and
//! Rust paths such as `ns::counter`). A symbol literally named `w` or `rw` with no fields
//! after it must be written with a length (`rw:8`).
//!
//! This module owns the grammar and the checks that need no ELF file: the length is one the
//! hardware supports, a raw address is aligned to it. Symbol lookup is in
//! [`crate::resolve`](mod@crate::resolve); the final, checked location is a [`Watchpoint`]. It must never touch
//! the file system or the target.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Which accesses trigger a watchpoint.
///
/// x86 debug registers trap on writes, or on reads and writes; there is no read-only mode,
/// so `r` is rejected with a pointer to `rw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Writes only (`w`, the default).
    Write,
    /// Reads and writes (`rw`).
    ReadWrite,
}

impl Access {
    /// The `bp_type` of a `PERF_TYPE_BREAKPOINT` event for this access.
    pub fn bp_type(self) -> u32 {
        match self {
            Access::Write => strobe_perf::sys::HW_BREAKPOINT_W,
            Access::ReadWrite => strobe_perf::sys::HW_BREAKPOINT_RW,
        }
    }

    /// The spelling in a spec: `w` or `rw`.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Write => "w",
            Access::ReadWrite => "rw",
        }
    }
}

impl From<Access> for strobe_protocol::watch::Access {
    fn from(a: Access) -> Self {
        match a {
            Access::Write => strobe_protocol::watch::Access::Write,
            Access::ReadWrite => strobe_protocol::watch::Access::ReadWrite,
        }
    }
}

impl From<strobe_protocol::watch::Access> for Access {
    fn from(a: strobe_protocol::watch::Access) -> Self {
        match a {
            strobe_protocol::watch::Access::Write => Access::Write,
            strobe_protocol::watch::Access::ReadWrite => Access::ReadWrite,
        }
    }
}

/// How many bytes a watchpoint covers: 1, 2, 4 or 8, the lengths x86 debug registers offer.
/// The watched address must be aligned to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Len {
    /// One byte.
    B1 = 1,
    /// Two bytes.
    B2 = 2,
    /// Four bytes.
    B4 = 4,
    /// Eight bytes.
    B8 = 8,
}

impl Len {
    /// The length for `bytes`, if the hardware supports it.
    pub fn new(bytes: u64) -> Option<Len> {
        match bytes {
            1 => Some(Len::B1),
            2 => Some(Len::B2),
            4 => Some(Len::B4),
            8 => Some(Len::B8),
            _ => None,
        }
    }

    /// The number of bytes covered.
    pub fn bytes(self) -> u64 {
        self as u64
    }

    /// The `bp_len` of a `PERF_TYPE_BREAKPOINT` event (`HW_BREAKPOINT_LEN_N` is `N`).
    pub fn bp_len(self) -> u64 {
        self as u64
    }

    /// The longest supported length that `addr` is aligned to.
    pub fn widest_aligned(addr: u64) -> Len {
        [Len::B8, Len::B4, Len::B2].into_iter().find(|l| addr % l.bytes() == 0).unwrap_or(Len::B1)
    }
}

/// Where a spec points, before symbol resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A data symbol of the target (or one of its libraries), plus a byte offset into it.
    Symbol {
        /// The symbol as typed (a plain name, or a `a::b` path for C++/Rust).
        name: String,
        /// Bytes from the symbol's start.
        offset: u64,
    },
    /// An absolute address in the target's address space.
    Address(u64),
}

/// A parsed watch spec: the location, the length if one was given, and the access kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSpec {
    /// The spec exactly as typed, for messages.
    pub text: String,
    /// The shared library named before the location (`libfoo.so:counter`), as typed.
    pub module: Option<String>,
    /// What to watch.
    pub location: Location,
    /// The length given with `:LEN`; `None` means "the default" (see [`crate::resolve`](mod@crate::resolve)).
    pub len: Option<Len>,
    /// Which accesses to report.
    pub access: Access,
}

/// The length used when none is given and the symbol's size is not 1, 2, 4 or 8.
pub const DEFAULT_LEN: Len = Len::B8;

/// A spec that cannot be parsed or cannot be watched as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Nothing to watch.
    #[error(
        "empty watch spec '{spec}': expected SYMBOL[+OFF][:LEN][:w|rw] or 0xADDR[:LEN][:w|rw]"
    )]
    Empty {
        /// The spec as typed.
        spec: String,
    },
    /// `:LEN` is not 1, 2, 4 or 8.
    #[error(
        "watch spec '{spec}': length {len} is not supported; a hardware watchpoint covers 1, 2, \
         4 or 8 bytes (watch a wider variable with several specs, e.g. 'buf:8' and 'buf+8:8')"
    )]
    BadLength {
        /// The spec as typed.
        spec: String,
        /// The length as typed.
        len: String,
    },
    /// `:r` (read-only) or `:x` (execute), which `strobe watch` does not offer.
    #[error("watch spec '{spec}': access '{access}' is not supported: {why}")]
    BadAccess {
        /// The spec as typed.
        spec: String,
        /// The access as typed.
        access: String,
        /// Why, and what to use instead.
        why: &'static str,
    },
    /// A field after the location that is neither a length nor an access.
    #[error(
        "watch spec '{spec}': '{field}' is neither a length (1, 2, 4, 8) nor an access (w, rw)"
    )]
    BadField {
        /// The spec as typed.
        spec: String,
        /// The field as typed.
        field: String,
    },
    /// The length or the access was given twice.
    #[error("watch spec '{spec}': the {what} is given twice")]
    Duplicate {
        /// The spec as typed.
        spec: String,
        /// `"length"` or `"access"`.
        what: &'static str,
    },
    /// `+OFF` is not a number.
    #[error(
        "watch spec '{spec}': offset '{offset}' is not a number (write +16 or +0x10 after the \
         symbol)"
    )]
    BadOffset {
        /// The spec as typed.
        spec: String,
        /// The offset as typed.
        offset: String,
    },
    /// A symbol name no symbol can have.
    #[error("watch spec '{spec}': '{symbol}' is not a symbol name ({why})")]
    BadSymbol {
        /// The spec as typed.
        spec: String,
        /// The name as typed.
        symbol: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A library name no file can be named by on the command line.
    #[error("watch spec '{spec}': '{library}' is not a library name ({why})")]
    BadLibrary {
        /// The spec as typed.
        spec: String,
        /// The name as typed.
        library: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The location is a library's path or file name, not a variable in it.
    #[error(
        "watch spec '{spec}': '{library}' names a library, not a variable; write \
         LIBRARY:SYMBOL (e.g. '{library}:counter')"
    )]
    LibraryAsLocation {
        /// The spec as typed.
        spec: String,
        /// The location as typed.
        library: String,
    },
    /// A raw address that is not a hex number, or is zero.
    #[error("watch spec '{spec}': '{address}' is not a usable address ({why})")]
    BadAddress {
        /// The spec as typed.
        spec: String,
        /// The address as typed.
        address: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The address is not a multiple of the length.
    #[error(
        "watch spec '{spec}': address {addr:#x} is not aligned to the watched length of {len} \
         bytes (debug registers need an address that is a multiple of the length); {hint}"
    )]
    Misaligned {
        /// The spec as typed.
        spec: String,
        /// The address (for symbols: the link-time address plus the offset).
        addr: u64,
        /// The length in bytes.
        len: u64,
        /// What to write instead.
        hint: String,
    },
}

impl WatchSpec {
    /// Parses one spec.
    pub fn parse(text: &str) -> Result<WatchSpec, SpecError> {
        let spec = text.to_string();
        let mut fields = split_fields(text.trim());
        let module = match fields.as_slice() {
            [first, second, ..]
                if names_library(first)
                    || (first.trim().starts_with("lib") && !is_len_or_access(second)) =>
            {
                Some(first.trim().to_string())
            }
            _ => None,
        };
        if let Some(m) = &module {
            let bad = |why| SpecError::BadLibrary { spec: spec.clone(), library: m.clone(), why };
            if m.chars().any(char::is_control) {
                return Err(bad("it has control characters"));
            }
            if m.ends_with(':') {
                // `lib::` before `:sym` would read back as `lib` and `::sym`.
                return Err(bad("it ends with ':'"));
            }
            fields.remove(0);
        }
        let (loc_text, rest) = match fields.split_first() {
            Some((loc, rest)) if !loc.is_empty() => (*loc, rest),
            _ => return Err(SpecError::Empty { spec }),
        };
        let mut len = None;
        let mut access = None;
        for field in rest {
            let f = field.trim();
            if f.chars().all(|c| c.is_ascii_digit()) && !f.is_empty() {
                if len.is_some() {
                    return Err(SpecError::Duplicate { spec, what: "length" });
                }
                let l =
                    f.parse::<u64>().ok().and_then(Len::new).ok_or_else(|| {
                        SpecError::BadLength { spec: spec.clone(), len: f.into() }
                    })?;
                len = Some(l);
                continue;
            }
            let a = match f {
                "w" | "W" => Access::Write,
                "rw" | "RW" | "wr" => Access::ReadWrite,
                "r" | "R" => {
                    return Err(SpecError::BadAccess {
                        spec,
                        access: f.into(),
                        why: "x86 debug registers cannot trap on reads alone; use 'rw' to see \
                              reads and writes",
                    })
                }
                "x" | "X" => {
                    return Err(SpecError::BadAccess {
                        spec,
                        access: f.into(),
                        why: "strobe watch watches data; to count executions of code use \
                              'strobe probe'",
                    })
                }
                _ if f.starts_with("0x") || f.parse::<i64>().is_ok() => {
                    return Err(SpecError::BadLength { spec, len: f.into() })
                }
                _ => return Err(SpecError::BadField { spec, field: f.into() }),
            };
            if access.is_some() {
                return Err(SpecError::Duplicate { spec, what: "access" });
            }
            access = Some(a);
        }
        let location = parse_location(&spec, loc_text.trim())?;
        let parsed = WatchSpec {
            text: spec,
            module,
            location,
            len,
            access: access.unwrap_or(Access::Write),
        };
        if let Location::Address(addr) = parsed.location {
            check_aligned(
                &parsed.text,
                addr,
                parsed.len.unwrap_or(DEFAULT_LEN),
                parsed.len.is_none(),
            )?;
        }
        Ok(parsed)
    }

    /// For a raw address spec, the final watchpoint (no ELF needed). `None` for a symbol
    /// or an address in a named library.
    pub fn as_absolute(&self) -> Option<Watchpoint> {
        if self.module.is_some() {
            return None;
        }
        match self.location {
            Location::Address(addr) => Some(Watchpoint {
                label: self.text.clone(),
                place: Place::Absolute(addr),
                len: self.len.unwrap_or(DEFAULT_LEN),
                access: self.access,
                symbol: None,
            }),
            Location::Symbol { .. } => None,
        }
    }
}

impl FromStr for WatchSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        WatchSpec::parse(s)
    }
}

/// Whether the first field of a spec names a shared library rather than a symbol: a path,
/// or a name with `.so` in it (no C, C++ or Rust variable name contains a `/` or a `.`).
fn names_library(field: &str) -> bool {
    let f = field.trim();
    f.contains('/') || f.ends_with(".so") || f.contains(".so.")
}

/// Whether a field after the location is (or is meant as) a length or an access, so the
/// field before it is the location, not a library.
fn is_len_or_access(field: &str) -> bool {
    let f = field.trim();
    f.parse::<i64>().is_ok() || matches!(f, "w" | "W" | "rw" | "RW" | "wr" | "r" | "R" | "x" | "X")
}

/// Splits on single colons, keeping `::` inside the fields. In a run of an odd number of
/// colons the first one separates (`lib.so:::ns` is `lib.so` and `::ns`: a path may start
/// with `::` but never ends with it).
fn split_fields(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b':' {
            let run = b[i..].iter().take_while(|&&c| c == b':').count();
            if run % 2 == 1 {
                out.push(&s[start..i]);
                start = i + 1;
            }
            i += run;
            continue;
        }
        i += 1;
    }
    out.push(&s[start..]);
    out
}

fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn parse_location(spec: &str, loc: &str) -> Result<Location, SpecError> {
    let (base, offset) = match loc.rsplit_once('+') {
        Some((base, off)) => {
            let off = off.trim();
            let n = parse_number(off)
                .ok_or_else(|| SpecError::BadOffset { spec: spec.into(), offset: off.into() })?;
            (base.trim(), n)
        }
        None => (loc, 0),
    };
    if base.is_empty() {
        return Err(SpecError::Empty { spec: spec.into() });
    }
    if base.starts_with("0x") || base.starts_with("0X") {
        let addr = parse_number(base).ok_or_else(|| SpecError::BadAddress {
            spec: spec.into(),
            address: base.into(),
            why: "expected hex digits after 0x, at most 16 of them",
        })?;
        let addr = addr.checked_add(offset).ok_or_else(|| SpecError::BadAddress {
            spec: spec.into(),
            address: base.into(),
            why: "the offset takes it past the end of the address space",
        })?;
        if addr == 0 {
            return Err(SpecError::BadAddress {
                spec: spec.into(),
                address: base.into(),
                why: "address 0 is never mapped",
            });
        }
        return Ok(Location::Address(addr));
    }
    if base.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(SpecError::BadAddress {
            spec: spec.into(),
            address: base.into(),
            why: "write raw addresses in hex with a 0x prefix; symbols cannot start with a digit",
        });
    }
    if names_library(base) {
        // A path or a file name, which no symbol is (and which, printed back as
        // `NAME:w`, would read as a library followed by a symbol `w`).
        return Err(SpecError::LibraryAsLocation { spec: spec.into(), library: base.into() });
    }
    let bad_symbol = |why| SpecError::BadSymbol { spec: spec.into(), symbol: base.into(), why };
    if base.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad_symbol("symbols contain no spaces or control characters"));
    }
    if base.ends_with(':') {
        return Err(bad_symbol("a path such as ns::value never ends with '::'"));
    }
    Ok(Location::Symbol { name: base.to_string(), offset })
}

/// Checks that `addr` is aligned to `len`; the error suggests a length (or an address) that
/// works. `defaulted` says the length was not typed, so the hint explains the default.
pub(crate) fn check_aligned(
    spec: &str,
    addr: u64,
    len: Len,
    defaulted: bool,
) -> Result<(), SpecError> {
    if addr % len.bytes() == 0 {
        return Ok(());
    }
    let fits = Len::widest_aligned(addr);
    let down = addr - addr % len.bytes();
    let hint = if defaulted {
        format!(
            "no length was given, so {} bytes was assumed; add ':{}' to watch {} byte{} here",
            len.bytes(),
            fits.bytes(),
            fits.bytes(),
            if fits == Len::B1 { "" } else { "s" }
        )
    } else {
        format!(
            "watch ':{}' here instead, or {} bytes from the aligned address {down:#x}",
            fits.bytes(),
            len.bytes()
        )
    };
    Err(SpecError::Misaligned { spec: spec.into(), addr, len: len.bytes(), hint })
}

/// Where a resolved watchpoint lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// At a link-time address inside a module. When `relocatable` (a PIE executable or a
    /// shared library), the run-time address is the module's load bias plus `vaddr`; the
    /// agent learns the bias from `dl_iterate_phdr`.
    Module {
        /// The ELF file the symbol was found in.
        path: PathBuf,
        /// Its link-time virtual address, offset included.
        vaddr: u64,
        /// Whether the module is loaded at a bias (ELF type `ET_DYN`).
        relocatable: bool,
    },
    /// A fixed address in the target.
    Absolute(u64),
}

/// What a watch spec resolved to: a checked, armable watchpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watchpoint {
    /// How the report names it (the spec as typed).
    pub label: String,
    /// Where it is.
    pub place: Place,
    /// Bytes covered; the run-time address is aligned to it.
    pub len: Len,
    /// Which accesses trigger it.
    pub access: Access,
    /// The symbol's name and size in bytes, when it came from a symbol.
    pub symbol: Option<(String, u64)>,
}

impl Watchpoint {
    /// The run-time address, given the load bias of its module (ignored for absolute
    /// addresses and non-relocatable modules).
    pub fn address(&self, load_bias: u64) -> u64 {
        match &self.place {
            Place::Module { vaddr, relocatable: true, .. } => load_bias.wrapping_add(*vaddr),
            Place::Module { vaddr, relocatable: false, .. } => *vaddr,
            Place::Absolute(addr) => *addr,
        }
    }
}

impl fmt::Display for WatchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(m) = &self.module {
            write!(f, "{m}:")?;
        }
        match &self.location {
            // A name with a `+` in it keeps its `+0`, or the name's last `+` would read
            // back as the offset; so does a name that reads as an access (`x`) or a
            // length, or `lib:x` would read back as the symbol `lib` watched for `x`.
            Location::Symbol { name, offset: 0 }
                if !name.contains('+') && !is_len_or_access(name) =>
            {
                write!(f, "{name}")?
            }
            Location::Symbol { name, offset } => write!(f, "{name}+{offset}")?,
            Location::Address(a) => write!(f, "{a:#x}")?,
        }
        if let Some(len) = self.len {
            write!(f, ":{}", len.bytes())?;
        }
        write!(f, ":{}", self.access.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> WatchSpec {
        WatchSpec::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn sym(name: &str, offset: u64) -> Location {
        Location::Symbol { name: name.into(), offset }
    }

    #[test]
    fn library_qualified_forms() {
        let s = p("libfoo.so:counter:4:rw");
        assert_eq!(s.module.as_deref(), Some("libfoo.so"));
        assert_eq!(
            (s.location, s.len, s.access),
            (sym("counter", 0), Some(Len::B4), Access::ReadWrite)
        );
        assert_eq!(p("./lib/libbar.so.1:ns::x+8").module.as_deref(), Some("./lib/libbar.so.1"));
        assert_eq!(p("./lib/libbar.so.1:ns::x+8").location, sym("ns::x", 8));
        let a = p("libfoo.so:0x4010:8");
        assert_eq!(
            (a.module.as_deref(), &a.location),
            (Some("libfoo.so"), &Location::Address(0x4010))
        );
        assert!(a.as_absolute().is_none(), "an address in a library needs its load bias");
        // A short name is a library when what follows is not a length or an access.
        assert_eq!(p("libfoo:state:rw").module.as_deref(), Some("libfoo"));
        assert_eq!(p("libfoo:state:rw").location, sym("state", 0));
        // A bare library name is a symbol named like one, not a library with nothing in it.
        assert_eq!(p("counter").module, None);
        assert_eq!(p("counter:8").module, None);
        assert_eq!(p("counter:rw").module, None);
    }

    #[test]
    fn symbol_forms() {
        let s = p("counter");
        assert_eq!((s.location, s.len, s.access), (sym("counter", 0), None, Access::Write));
        let s = p("counter:4");
        assert_eq!((s.len, s.access), (Some(Len::B4), Access::Write));
        let s = p("counter:rw");
        assert_eq!((s.len, s.access), (None, Access::ReadWrite));
        let s = p("table+16:8:rw");
        assert_eq!(
            (s.location, s.len, s.access),
            (sym("table", 16), Some(Len::B8), Access::ReadWrite)
        );
        assert_eq!(p("table+0x10").location, sym("table", 16));
        assert_eq!(p("ns::inner::state:2:w").location, sym("ns::inner::state", 0));
        assert_eq!(p("ns::state+4:4").location, sym("ns::state", 4));
    }

    #[test]
    fn raw_address_forms() {
        let s = p("0x7ffd1230:8:w");
        assert_eq!((&s.location, s.len), (&Location::Address(0x7ffd_1230), Some(Len::B8)));
        let w = s.as_absolute().unwrap();
        assert_eq!((w.address(0x1000), w.len), (0x7ffd_1230, Len::B8));
        assert_eq!(p("0x1000+4:4").location, Location::Address(0x1004));
        assert_eq!(p("0x1001:1:rw").access, Access::ReadWrite);
        assert!(p("counter").as_absolute().is_none());
    }

    #[test]
    fn lengths_other_than_1_2_4_8_are_refused() {
        for bad in ["counter:3", "counter:16", "counter:0", "0x1000:12"] {
            let e = WatchSpec::parse(bad).unwrap_err();
            assert!(matches!(e, SpecError::BadLength { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("1, 2, 4 or 8 bytes"), "{e}");
        }
        assert!(matches!(WatchSpec::parse("counter:-4").unwrap_err(), SpecError::BadLength { .. }));
    }

    #[test]
    fn misaligned_raw_addresses_are_refused_with_a_hint() {
        let e = WatchSpec::parse("0x7ffd1234:8:w").unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, SpecError::Misaligned { addr: 0x7ffd_1234, len: 8, .. }), "{msg}");
        assert!(msg.contains("':4'") && msg.contains("0x7ffd1230"), "{msg}");
        // With the length defaulted, the hint says so.
        let msg = WatchSpec::parse("0x1002").unwrap_err().to_string();
        assert!(msg.contains("no length was given") && msg.contains("':2'"), "{msg}");
        assert!(WatchSpec::parse("0x1003:1").is_ok());
    }

    #[test]
    fn access_kinds() {
        let e = WatchSpec::parse("counter:r").unwrap_err();
        assert!(e.to_string().contains("use 'rw'"), "{e}");
        let e = WatchSpec::parse("counter:x").unwrap_err();
        assert!(e.to_string().contains("strobe probe"), "{e}");
        let e = WatchSpec::parse("counter:q").unwrap_err();
        assert!(matches!(e, SpecError::BadField { .. }), "{e}");
        let e = WatchSpec::parse("counter:w:rw").unwrap_err();
        assert!(matches!(e, SpecError::Duplicate { what: "access", .. }), "{e}");
        let e = WatchSpec::parse("counter:4:8").unwrap_err();
        assert!(matches!(e, SpecError::Duplicate { what: "length", .. }), "{e}");
    }

    #[test]
    fn malformed_locations() {
        for (bad, want) in [
            ("", "empty"),
            (":8:w", "empty"),
            ("+4", "empty"),
            ("counter+four", "offset 'four'"),
            ("0xzz", "hex digits"),
            ("0x0:1", "never mapped"),
            ("12345:8", "0x prefix"),
        ] {
            let msg = WatchSpec::parse(bad).unwrap_err().to_string();
            assert!(msg.contains(want), "{bad:?}: {msg}");
        }
    }

    /// Found by the `watch_spec` fuzz target: `/` parsed as a symbol named `/`, printed as
    /// `/:w`, which reads back as the library `/` and a symbol `w`.
    #[test]
    fn a_library_is_not_a_location() {
        for (bad, lib) in [
            ("/", "/"),
            ("libfoo.so", "libfoo.so"),
            ("./lib/libx.so.1", "./lib/libx.so.1"),
            ("/usr/lib/libz.so+8", "/usr/lib/libz.so"),
            ("libfoo.so:sub/dir:w", "sub/dir"),
        ] {
            let e = WatchSpec::parse(bad).unwrap_err();
            assert_eq!(
                e,
                SpecError::LibraryAsLocation { spec: bad.into(), library: lib.into() },
                "{bad}"
            );
            assert!(e.to_string().contains("LIBRARY:SYMBOL"), "{e}");
        }
        // A variable in a library is still fine, as is a symbol that merely starts with lib.
        assert_eq!(p("libfoo.so:w").location, sym("w", 0));
        assert_eq!(p("libcount:4").location, sym("libcount", 0));
    }

    /// Found by the `watch_spec` fuzz target: `a+b+0` is the symbol `a+b`, which printed
    /// as `a+b:w`, read back as `a` plus an offset `b` (not a number).
    #[test]
    fn a_symbol_with_a_plus_keeps_its_offset_when_printed() {
        let w = p("operator+=+0:4");
        assert_eq!(w.location, sym("operator+=", 0));
        assert_eq!(w.to_string(), "operator+=+0:4:w");
        assert_eq!(p(&w.to_string()).location, w.location);
    }

    /// Found by the `watch_spec` fuzz target: `lib.so:::w` (the symbol `::w` in
    /// `lib.so`) printed back as itself but read as the library `lib.so::` and a field `w`.
    #[test]
    fn three_colons_separate_then_qualify() {
        let w = p("libfoo.so:::counter:4");
        assert_eq!(w.module.as_deref(), Some("libfoo.so"));
        assert_eq!(w.location, sym("::counter", 0));
        assert_eq!(w.len, Len::new(4));
        assert_eq!(p(&w.to_string()).location, w.location);
        // Pairs of colons stay inside a name.
        assert_eq!(p("ns::inner::value:rw").location, sym("ns::inner::value", 0));
    }

    /// Found by the `watch_spec` fuzz target: a name ending in `::` printed back as
    /// `NAME::w`, whose last colon then read as a separator.
    #[test]
    fn names_no_symbol_can_have_are_refused() {
        for (bad, why) in [
            ("counter::", "never ends with '::'"),
            ("co unt", "no spaces"),
            ("a\u{7f}b", "control"),
        ] {
            let e = WatchSpec::parse(bad).unwrap_err();
            assert!(matches!(e, SpecError::BadSymbol { .. }), "{bad:?}: {e}");
            assert!(e.to_string().contains(why), "{e}");
        }
    }

    /// Found by the `watch_spec` fuzz target: a library name ending in `::` printed back
    /// as `LIB:::SYM`, which reads as `LIB` and `::SYM`.
    #[test]
    fn library_names_no_file_has_are_refused() {
        for bad in ["libz::\n:counter", "lib\u{13}z.so:counter"] {
            let e = WatchSpec::parse(bad).unwrap_err();
            assert!(matches!(e, SpecError::BadLibrary { .. }), "{bad:?}: {e}");
        }
        assert_eq!(p("./my libs/libz.so:counter").module.as_deref(), Some("./my libs/libz.so"));
    }

    /// Found by the `watch_spec` fuzz target: the symbol `X` in a library `lib` printed
    /// as `lib:X:w`, which reads as the symbol `lib` watched for access `X`.
    #[test]
    fn a_symbol_named_like_an_access_keeps_its_offset_when_printed() {
        let w = p("lib:X+0");
        assert_eq!((w.module.as_deref(), &w.location), (Some("lib"), &sym("X", 0)));
        assert_eq!(w.to_string(), "lib:X+0:w");
        assert_eq!(p(&w.to_string()).location, w.location);
    }

    #[test]
    fn display_round_trips() {
        for s in ["counter:w", "table+16:8:rw", "0x1000:4:w", "ns::state:2:w"] {
            assert_eq!(p(s).to_string(), s);
            assert_eq!(p(&p(s).to_string()), WatchSpec { text: s.into(), ..p(s) });
        }
    }

    #[test]
    fn breakpoint_encodings() {
        assert_eq!(Access::Write.bp_type(), 2);
        assert_eq!(Access::ReadWrite.bp_type(), 3);
        assert_eq!(Len::B4.bp_len(), 4);
        assert_eq!(Len::widest_aligned(0x1004), Len::B4);
        assert_eq!(Len::widest_aligned(0x1003), Len::B1);
    }

    #[test]
    fn relocatable_places_add_the_bias() {
        let w = Watchpoint {
            label: "counter".into(),
            place: Place::Module { path: "/bin/x".into(), vaddr: 0x4010, relocatable: true },
            len: Len::B4,
            access: Access::Write,
            symbol: Some(("counter".into(), 4)),
        };
        assert_eq!(w.address(0x5555_0000_0000), 0x5555_0000_4010);
        let fixed = Watchpoint {
            place: Place::Module { path: "/bin/x".into(), vaddr: 0x4010, relocatable: false },
            ..w
        };
        assert_eq!(fixed.address(0x5555_0000_0000), 0x4010);
    }
}
