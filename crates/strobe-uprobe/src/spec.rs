//! The text form of a kernel probe, as typed on the command line.
//!
//! ```text
//! FUNC                      a function of the main binary (mangled, or demangled Rust/C++)
//! FUNC+OFF                  OFF bytes into it (decimal or 0x hex)
//! LIB:FUNC[+OFF]            a function of a shared library: a path (has a /), a file name
//!                           or soname (libc.so.6), or a short name (libc)
//! usdt:PROVIDER:NAME        a USDT probe of the main binary
//! usdt:LIB:PROVIDER:NAME    a USDT probe of a shared library
//! ```
//!
//! The library separator is the first `:` that is not part of a `::`, so C++ and Rust paths
//! (`ns::f`, `app::main`) need no quoting beyond the shell's. Other `SCHEME:` prefixes
//! (such as `point:` for in-program probe points) belong to the caller, which must dispatch
//! on them before handing the rest here.
//!
//! Owns the parser and the printed form. Must never look at the file system: resolving a
//! library or a symbol is the session's.

use crate::Error;

/// A parsed kernel probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeSpec {
    /// A function entry (plus an optional byte offset).
    Function {
        /// The library, if not the main binary.
        lib: Option<String>,
        /// The function name (mangled or demangled).
        func: String,
        /// Bytes into the function.
        offset: u64,
    },
    /// A USDT probe (`.note.stapsdt`).
    Usdt {
        /// The library, if not the main binary.
        lib: Option<String>,
        /// The provider.
        provider: String,
        /// The probe name.
        name: String,
    },
}

/// The prefix that marks a USDT probe.
pub const USDT_PREFIX: &str = "usdt:";

/// Splits at the first `:` that is not part of a `::`.
fn split_lib(s: &str) -> (Option<&str>, &str) {
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b':' && (i == 0 || b[i - 1] != b':') && b.get(i + 1) != Some(&b':') {
            return (Some(&s[..i]), &s[i + 1..]);
        }
    }
    (None, s)
}

fn parse_offset(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

impl ProbeSpec {
    /// Parses one probe as typed.
    pub fn parse(text: &str) -> Result<ProbeSpec, Error> {
        let bad = |why: &str| Error::BadSpec { spec: text.to_string(), why: why.to_string() };
        if let Some(rest) = text.strip_prefix(USDT_PREFIX) {
            let parts: Vec<&str> = rest.split(':').collect();
            let (lib, provider, name) = match parts.as_slice() {
                [p, n] => (None, *p, *n),
                [l, p, n] => (Some(l.to_string()), *p, *n),
                _ => return Err(bad("write usdt:PROVIDER:NAME or usdt:LIB:PROVIDER:NAME")),
            };
            if provider.is_empty() || name.is_empty() || lib.as_deref() == Some("") {
                return Err(bad("write usdt:PROVIDER:NAME or usdt:LIB:PROVIDER:NAME"));
            }
            return Ok(ProbeSpec::Usdt { lib, provider: provider.into(), name: name.into() });
        }
        let (lib, rest) = split_lib(text);
        if lib == Some("") {
            return Err(bad("the library before ':' is empty"));
        }
        let (func, offset) = match rest.rsplit_once('+') {
            Some((f, off)) if !f.is_empty() => match parse_offset(off) {
                Some(o) => (f, o),
                // `operator+` and friends: the '+' is part of the name.
                None if off.starts_with(|c: char| c.is_ascii_digit()) => {
                    return Err(bad("the offset after '+' must be a number (16 or 0x10)"))
                }
                None => (rest, 0),
            },
            _ => (rest, 0),
        };
        if func.is_empty() {
            return Err(bad("no function name"));
        }
        Ok(ProbeSpec::Function { lib: lib.map(str::to_string), func: func.to_string(), offset })
    }

    /// The library part, if any.
    pub fn lib(&self) -> Option<&str> {
        match self {
            ProbeSpec::Function { lib, .. } | ProbeSpec::Usdt { lib, .. } => lib.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn func(lib: Option<&str>, f: &str, off: u64) -> ProbeSpec {
        ProbeSpec::Function { lib: lib.map(Into::into), func: f.into(), offset: off }
    }

    #[test]
    fn functions_libraries_and_offsets() {
        assert_eq!(ProbeSpec::parse("work").unwrap(), func(None, "work", 0));
        assert_eq!(ProbeSpec::parse("work+0x10").unwrap(), func(None, "work", 16));
        assert_eq!(ProbeSpec::parse("work+8").unwrap(), func(None, "work", 8));
        assert_eq!(
            ProbeSpec::parse("libc.so.6:malloc").unwrap(),
            func(Some("libc.so.6"), "malloc", 0)
        );
        assert_eq!(
            ProbeSpec::parse("/opt/x/libfoo.so:bar+4").unwrap(),
            func(Some("/opt/x/libfoo.so"), "bar", 4)
        );
    }

    #[test]
    fn cpp_and_rust_paths_are_not_split() {
        assert_eq!(ProbeSpec::parse("ns::work(int)").unwrap(), func(None, "ns::work(int)", 0));
        assert_eq!(
            ProbeSpec::parse("libx.so:app::run").unwrap(),
            func(Some("libx.so"), "app::run", 0)
        );
        assert_eq!(
            ProbeSpec::parse("ns::operator+(A, B)").unwrap(),
            func(None, "ns::operator+(A, B)", 0)
        );
    }

    #[test]
    fn usdt_forms() {
        assert_eq!(
            ProbeSpec::parse("usdt:app:tick").unwrap(),
            ProbeSpec::Usdt { lib: None, provider: "app".into(), name: "tick".into() }
        );
        assert_eq!(ProbeSpec::parse("usdt:libfoo.so:app:tick").unwrap().lib(), Some("libfoo.so"));
        assert!(ProbeSpec::parse("usdt:tick").is_err());
        assert!(ProbeSpec::parse("usdt:a:b:c:d").is_err());
    }

    #[test]
    fn malformed_specs_say_why() {
        assert!(ProbeSpec::parse(":work").unwrap_err().to_string().contains("library"));
        assert!(ProbeSpec::parse("work+12x").unwrap_err().to_string().contains("offset"));
        assert!(ProbeSpec::parse("libc:").is_err());
    }
}
