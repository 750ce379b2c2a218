//! Data symbols of an ELF file, and watch specs resolved against them.
//!
//! [`ElfSymbols`] takes one module's symbols (the target executable or a library) from
//! strobe-target's ELF reader and keeps what a watch needs of them: name, link-time
//! address, size, kind (variable, thread-local, function). A spec's
//! symbol resolves to a [`Watchpoint`] at `(module path, vaddr + offset, len)`. For a PIE
//! executable or a shared library the agent adds the module's load bias at run time; that
//! bias is page-aligned, so the alignment checked here on the link-time address holds at
//! run time too.
//!
//! Names match exactly or demangled (`_ZN2ns5stateE` is `ns::state`; a Rust static is named
//! without its hash), so C++ and Rust statics can be named the way they are written. A
//! miss lists the closest variable names.
//!
//! This module must never read the target's memory or run it, nor parse ELF itself: the
//! symbols come from strobe-target.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use strobe_target::elf::ElfFile;

use crate::spec::{check_aligned, Len, Location, Place, SpecError, WatchSpec, Watchpoint};

/// What a symbol names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymKind {
    /// A variable (`STT_OBJECT`, or an untyped symbol in a data section).
    Data,
    /// A thread-local variable (`STT_TLS`): one copy per thread, at a per-thread address.
    Tls,
    /// A function.
    Function,
}

/// One defined symbol of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfSymbol {
    /// The symbol's name as stored (possibly mangled).
    pub name: String,
    /// The demangled name of a Rust or C++ symbol (for a C++ function, without its
    /// parameters), else `None`.
    pub demangled: Option<String>,
    /// Link-time virtual address (for TLS: the offset in the TLS block).
    pub vaddr: u64,
    /// Size in bytes (0 when the symbol table does not say).
    pub size: u64,
    /// What it names.
    pub kind: SymKind,
    /// Visible outside its compilation unit.
    pub global: bool,
}

impl ElfSymbol {
    fn matches(&self, name: &str) -> bool {
        self.name == name || self.demangled.as_deref() == Some(name)
    }

    /// The name to show the user.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.name)
    }
}

/// The defined symbols of one ELF module.
#[derive(Debug, Clone)]
pub struct ElfSymbols {
    path: PathBuf,
    relocatable: bool,
    has_symtab: bool,
    symbols: Vec<ElfSymbol>,
}

/// Why a watch spec could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The spec itself is wrong (bad length, misaligned).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The module could not be read, or is not an ELF file strobe can read.
    #[error(transparent)]
    Target(#[from] strobe_target::Error),
    /// No variable of that name.
    #[error("no variable named '{name}' in {searched}{}", suggestion(.close, .stripped))]
    NotFound {
        /// The name as typed.
        name: String,
        /// The modules searched, comma-separated.
        searched: String,
        /// Close names, best first.
        close: Vec<String>,
        /// True when no module searched has a `.symtab` (stripped binaries).
        stripped: bool,
    },
    /// The name is a function.
    #[error(
        "'{name}' is a function, not a variable; strobe watch watches data (to count calls \
         use 'strobe probe')"
    )]
    NotData {
        /// The name as typed.
        name: String,
    },
    /// The name is a thread-local variable.
    #[error(
        "'{name}' is thread-local: every thread has its own copy at a different address, so \
         it cannot be watched by name; watch one thread's copy by address (0xADDR:LEN)"
    )]
    ThreadLocal {
        /// The name as typed.
        name: String,
    },
    /// Several local variables share the name.
    #[error(
        "'{name}' names {count} different variables in {path} (static variables of several \
         source files); watch one by address, or rename it"
    )]
    Ambiguous {
        /// The name as typed.
        name: String,
        /// How many.
        count: usize,
        /// The module.
        path: PathBuf,
    },
    /// `+OFF` is past the variable's end.
    #[error("'{spec}': offset {offset} is past the end of '{name}', which is {size} bytes long")]
    OffsetPastEnd {
        /// The spec as typed.
        spec: String,
        /// The symbol.
        name: String,
        /// The offset.
        offset: u64,
        /// The symbol's size.
        size: u64,
    },
}

fn suggestion(close: &[String], stripped: &bool) -> String {
    if *stripped {
        "; it has no symbol table (stripped): rebuild without -s or strip, or watch by \
         address (0xADDR:LEN)"
            .to_string()
    } else if close.is_empty() {
        "; check the spelling, or watch by address (0xADDR:LEN)".to_string()
    } else {
        format!("; did you mean {}?", close.join(", "))
    }
}

impl ElfSymbols {
    /// Reads the symbols of the ELF file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<ElfSymbols, ResolveError> {
        Ok(ElfSymbols::from_elf(&ElfFile::open(path.as_ref())?))
    }

    /// Reads the symbols of an ELF image already in memory; `path` names it in messages
    /// and in resolved watchpoints.
    pub fn parse(path: impl AsRef<Path>, data: &[u8]) -> Result<ElfSymbols, ResolveError> {
        Ok(ElfSymbols::from_elf(&ElfFile::parse(path.as_ref(), data)?))
    }

    /// The symbols of an ELF file strobe-target has read.
    pub fn from_elf(elf: &ElfFile) -> ElfSymbols {
        let mut seen = HashSet::new();
        let mut symbols = Vec::new();
        for v in elf.variables() {
            if seen.insert((v.name.clone(), v.vaddr)) {
                symbols.push(ElfSymbol {
                    name: v.name.clone(),
                    demangled: v.demangled.clone(),
                    vaddr: v.vaddr,
                    size: v.size,
                    kind: if v.tls { SymKind::Tls } else { SymKind::Data },
                    global: v.global,
                });
            }
        }
        for f in elf.functions() {
            if seen.insert((f.name.clone(), f.vaddr)) {
                symbols.push(ElfSymbol {
                    name: f.name.clone(),
                    demangled: f.demangled_base.clone().or_else(|| f.demangled.clone()),
                    vaddr: f.vaddr,
                    size: f.size,
                    kind: SymKind::Function,
                    global: f.global,
                });
            }
        }
        ElfSymbols {
            path: elf.path().to_path_buf(),
            relocatable: elf.is_position_independent(),
            has_symtab: elf.has_symtab(),
            symbols,
        }
    }

    /// The module's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the module is loaded at a bias (PIE or shared library).
    pub fn relocatable(&self) -> bool {
        self.relocatable
    }

    /// Every defined symbol kept (variables, thread-locals, functions).
    pub fn symbols(&self) -> &[ElfSymbol] {
        &self.symbols
    }

    /// The symbols named `name` (exact or demangled), variables first.
    fn candidates(&self, name: &str) -> Vec<&ElfSymbol> {
        let mut v: Vec<&ElfSymbol> = self.symbols.iter().filter(|s| s.matches(name)).collect();
        v.sort_by_key(|s| match s.kind {
            SymKind::Data => 0,
            SymKind::Tls => 1,
            SymKind::Function => 2,
        });
        v
    }

    /// The variable called `name`: the unique variable of that name, or the unique global
    /// one among several. `Ok(None)` when the module has no such symbol.
    pub fn lookup(&self, name: &str) -> Result<Option<&ElfSymbol>, ResolveError> {
        let c = self.candidates(name);
        let Some(first) = c.first() else { return Ok(None) };
        match first.kind {
            SymKind::Tls => return Err(ResolveError::ThreadLocal { name: name.into() }),
            SymKind::Function => return Err(ResolveError::NotData { name: name.into() }),
            SymKind::Data => {}
        }
        let data: Vec<&&ElfSymbol> = c.iter().filter(|s| s.kind == SymKind::Data).collect();
        if data.len() == 1 {
            return Ok(Some(first));
        }
        let globals: Vec<&&&ElfSymbol> = data.iter().filter(|s| s.global).collect();
        match globals.as_slice() {
            [only] => Ok(Some(only)),
            _ => Err(ResolveError::Ambiguous {
                name: name.into(),
                count: data.len(),
                path: self.path.clone(),
            }),
        }
    }

    /// The variable names closest to `name` (edit distance, or containing it), best first.
    pub fn close_names(&self, name: &str, max: usize) -> Vec<String> {
        close_names(std::slice::from_ref(self), name, max)
    }

    /// Resolves `spec` in this module alone.
    pub fn resolve(&self, spec: &WatchSpec) -> Result<Watchpoint, ResolveError> {
        resolve(spec, std::slice::from_ref(self))
    }
}

/// Resolves `spec` against `modules`, searched in order (the executable first, then its
/// libraries); the first module that defines the variable wins. Raw addresses need no
/// module, except one in a named library (`libfoo.so:0x4010`), which is taken in the first
/// module (the caller passes that library alone).
pub fn resolve(spec: &WatchSpec, modules: &[ElfSymbols]) -> Result<Watchpoint, ResolveError> {
    let (name, offset) = match &spec.location {
        Location::Address(addr) => {
            if let Some(w) = spec.as_absolute() {
                return Ok(w);
            }
            // A link-time address in the named library: the caller passes that library
            // alone (alignment was checked when the spec was parsed).
            let Some(m) = modules.first() else {
                return Err(ResolveError::NotFound {
                    name: format!("{addr:#x}"),
                    searched: "no module".into(),
                    close: Vec::new(),
                    stripped: false,
                });
            };
            return Ok(Watchpoint {
                label: spec.text.clone(),
                place: Place::Module {
                    path: m.path.clone(),
                    vaddr: *addr,
                    relocatable: m.relocatable,
                },
                len: spec.len.unwrap_or(crate::spec::DEFAULT_LEN),
                access: spec.access,
                symbol: None,
            });
        }
        Location::Symbol { name, offset } => (name.as_str(), *offset),
    };
    for m in modules {
        let Some(sym) = m.lookup(name)? else { continue };
        if sym.size != 0 && offset >= sym.size {
            return Err(ResolveError::OffsetPastEnd {
                spec: spec.text.clone(),
                name: name.into(),
                offset,
                size: sym.size,
            });
        }
        let remaining = sym.size.saturating_sub(offset);
        let (len, defaulted) = match spec.len {
            Some(l) => (l, false),
            None => (Len::new(remaining).unwrap_or(crate::spec::DEFAULT_LEN), true),
        };
        let vaddr = sym.vaddr + offset;
        check_aligned(&spec.text, vaddr, len, defaulted)?;
        return Ok(Watchpoint {
            label: spec.text.clone(),
            place: Place::Module { path: m.path.clone(), vaddr, relocatable: m.relocatable },
            len,
            access: spec.access,
            symbol: Some((sym.display_name().to_string(), sym.size)),
        });
    }
    let searched = modules.iter().map(|m| m.path.display().to_string()).collect::<Vec<_>>();
    // Without .symtab only exported symbols remain (.dynsym), which in an executable are
    // hardly ever its variables.
    let stripped = !modules.is_empty() && modules.iter().all(|m| !m.has_symtab);
    Err(ResolveError::NotFound {
        name: name.into(),
        searched: if searched.is_empty() { "no module".into() } else { searched.join(", ") },
        close: close_names(modules, name, 3),
        stripped,
    })
}

/// Up to `max` variable names of `modules` closest to `name`: those within a small edit
/// distance, or containing it (case-insensitively), best first.
fn close_names(modules: &[ElfSymbols], name: &str, max: usize) -> Vec<String> {
    let lname = name.to_lowercase();
    let limit = (name.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, String)> = Vec::new();
    let mut seen = HashSet::new();
    for s in modules.iter().flat_map(|m| m.symbols.iter()) {
        if s.kind != SymKind::Data {
            continue;
        }
        let shown = s.display_name();
        if !seen.insert(shown.to_string()) {
            continue;
        }
        let d = levenshtein(&lname, &shown.to_lowercase());
        let contains =
            shown.to_lowercase().contains(&lname) || lname.contains(&shown.to_lowercase());
        if d <= limit || (contains && shown.len() >= 3) {
            scored.push((if d <= limit { d } else { limit + 1 }, shown.to_string()));
        }
    }
    scored.sort();
    scored.into_iter().take(max).map(|(_, n)| n).collect()
}

/// Edit distance between two strings (insertions, deletions, substitutions).
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein("counter", "counter"), 0);
        assert_eq!(levenshtein("conter", "counter"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
    }

    fn module(symbols: Vec<ElfSymbol>) -> ElfSymbols {
        ElfSymbols { path: "/bin/t".into(), relocatable: true, has_symtab: true, symbols }
    }

    fn var(name: &str, vaddr: u64, size: u64, global: bool) -> ElfSymbol {
        ElfSymbol {
            name: name.into(),
            demangled: strobe_target::elf::demangle(name).0,
            vaddr,
            size,
            kind: SymKind::Data,
            global,
        }
    }

    #[test]
    fn same_named_statics_resolve_to_the_one_global_or_are_ambiguous() {
        let m = module(vec![var("state", 0x10, 8, false), var("state", 0x20, 8, true)]);
        let w = m.resolve(&"state".parse().unwrap()).unwrap();
        assert_eq!(w.address(0), 0x20);
        let m = module(vec![var("state", 0x10, 8, false), var("state", 0x20, 8, false)]);
        let e = m.resolve(&"state".parse().unwrap()).unwrap_err();
        assert!(matches!(e, ResolveError::Ambiguous { count: 2, .. }), "{e}");
    }

    #[test]
    fn scoped_names_match_their_mangled_symbols() {
        let m = module(vec![var("_ZN2ns5stateE", 0x40, 4, true)]);
        let w = m.resolve(&"ns::state".parse().unwrap()).unwrap();
        assert_eq!(
            (w.address(0x1000), w.len, w.symbol),
            (0x1040, Len::B4, Some(("ns::state".into(), 4)))
        );
        let e = m.resolve(&"ns::stat".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("did you mean ns::state?"), "{e}");
    }

    #[test]
    fn sizes_without_a_hardware_length_default_to_eight() {
        let m = module(vec![var("buf", 0x100, 32, true), var("odd", 0x200, 0, true)]);
        assert_eq!(m.resolve(&"buf".parse().unwrap()).unwrap().len, Len::B8);
        assert_eq!(m.resolve(&"buf+24".parse().unwrap()).unwrap().len, Len::B8);
        assert_eq!(m.resolve(&"buf+28".parse().unwrap()).unwrap().len, Len::B4);
        // An unknown size (0) allows any offset.
        assert_eq!(m.resolve(&"odd+64".parse().unwrap()).unwrap().address(0), 0x240);
    }

    #[test]
    fn garbage_is_not_elf() {
        let e = ElfSymbols::parse("/tmp/x", b"definitely not an ELF file").unwrap_err();
        assert!(e.to_string().starts_with("/tmp/x: not an ELF file"), "{e}");
        let e = ElfSymbols::open("/nonexistent/strobe-watch-test").unwrap_err();
        assert!(e.to_string().starts_with("reading /nonexistent/strobe-watch-test"), "{e}");
    }
}
