//! From a probe as typed to the (file, offset) sites the kernel attaches uprobes to.
//!
//! A [`Resolver`] holds the main binary and every library it has opened, so many probes
//! on one library read it once. Unknown names come back as errors with close names ("did
//! you mean"), or with the library that defines the function when it is not the one named.
//!
//! This module never parses a file itself (strobe-target reads the ELF files and finds
//! the libraries) and never attaches anything ([`crate::attach`]'s job).

use std::path::{Path, PathBuf};

use strobe_target::elf::{ElfFile, Function};
use strobe_target::libpath::{self, SearchEnv};

use crate::spec::ProbeSpec;
use crate::Error;

/// One place the kernel puts a uprobe: a file and an offset into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The ELF file (main binary or library).
    pub path: PathBuf,
    /// File offset of the probed instruction.
    pub offset: u64,
    /// File offset of a USDT semaphore the kernel must increment while the probe is
    /// attached (`ref_ctr_offset`).
    pub ref_ctr_offset: Option<u64>,
}

/// What a probe is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// A function entry (with a return probe too when latency is measured).
    Function,
    /// A USDT probe site: counts and traces, no return.
    Usdt,
}

impl ProbeKind {
    /// `"uprobe"` or `"usdt"`, as reports print it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Function => "uprobe",
            ProbeKind::Usdt => "usdt",
        }
    }
}

/// A probe resolved to its sites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedProbe {
    /// The probe as the user typed it (the report's row name).
    pub name: String,
    /// Function or USDT.
    pub kind: ProbeKind,
    /// What it resolved to: the symbol's display name, or `provider:name`.
    pub symbol: String,
    /// Where the uprobes go. One for a function (more when several functions share the
    /// name, e.g. C++ overloads or static functions of several files); one per site for a
    /// USDT probe that the compiler emitted several times.
    pub sites: Vec<Site>,
}

/// Resolves probes against a main binary and the libraries it loads.
#[derive(Debug)]
pub struct Resolver {
    exe: ElfFile,
    env: SearchEnv,
    pid: Option<u32>,
    libs: Vec<ElfFile>,
}

impl Resolver {
    /// A resolver for programs running `binary`, whose dynamic linker sees `env`. With
    /// `pid`, libraries are looked up in that running process's mappings first.
    pub fn new(binary: &Path, env: SearchEnv, pid: Option<u32>) -> Result<Resolver, Error> {
        Ok(Resolver { exe: ElfFile::open(binary)?, env, pid, libs: Vec::new() })
    }

    /// The main binary.
    pub fn exe(&self) -> &ElfFile {
        &self.exe
    }

    /// The ELF file a probe's library part names (the main binary without one).
    pub fn object(&mut self, lib: Option<&str>) -> Result<&ElfFile, Error> {
        let Some(lib) = lib else { return Ok(&self.exe) };
        let path = libpath::find_library(lib, &self.exe, &self.env, self.pid)?;
        if let Some(i) = self.libs.iter().position(|l| l.path() == path) {
            return Ok(&self.libs[i]);
        }
        self.libs.push(ElfFile::open(&path)?);
        Ok(self.libs.last().expect("just pushed"))
    }

    /// Resolves one probe; `text` is how the user wrote it (used as its name).
    pub fn resolve(&mut self, text: &str, spec: &ProbeSpec) -> Result<ResolvedProbe, Error> {
        match spec {
            ProbeSpec::Function { lib, func, offset } => {
                self.resolve_function(text, lib.as_deref(), func, *offset)
            }
            ProbeSpec::Usdt { lib, provider, name } => {
                self.resolve_usdt(text, lib.as_deref(), provider, name)
            }
        }
    }

    fn resolve_function(
        &mut self,
        text: &str,
        lib: Option<&str>,
        func: &str,
        offset: u64,
    ) -> Result<ResolvedProbe, Error> {
        let obj = self.object(lib)?.clone();
        let found = obj.find_functions(func);
        if found.is_empty() {
            let hint = if lib.is_none() { self.defining_library(func) } else { None };
            let hint = match hint {
                Some(l) => format!("; it is defined in {l}: probe '{l}:{func}'"),
                None => {
                    did_you_mean(&suggest(func, obj.functions().iter().map(Function::display_name)))
                }
            };
            return Err(Error::FunctionNotFound {
                func: func.to_string(),
                binary: obj.path().to_path_buf(),
                hint,
            });
        }
        let mut sites = Vec::new();
        for f in &found {
            if f.ifunc {
                let impls = suggest(
                    func,
                    obj.functions().iter().filter(|g| !g.ifunc).map(Function::display_name),
                );
                return Err(Error::IndirectFunction {
                    func: func.to_string(),
                    binary: obj.path().to_path_buf(),
                    hint: did_you_mean(&impls),
                });
            }
            if offset > 0 && f.size > 0 && offset >= f.size {
                return Err(Error::OffsetOutOfRange {
                    func: func.to_string(),
                    offset,
                    size: f.size,
                });
            }
            sites.push(Site {
                path: obj.path().to_path_buf(),
                offset: f.file_offset + offset,
                ref_ctr_offset: None,
            });
        }
        Ok(ResolvedProbe {
            name: text.to_string(),
            kind: ProbeKind::Function,
            symbol: found[0].display_name().to_string(),
            sites,
        })
    }

    fn resolve_usdt(
        &mut self,
        text: &str,
        lib: Option<&str>,
        provider: &str,
        name: &str,
    ) -> Result<ResolvedProbe, Error> {
        let obj = self.object(lib)?.clone();
        let notes: Vec<_> =
            obj.usdt().iter().filter(|n| n.provider == provider && n.name == name).collect();
        if notes.is_empty() {
            let all: Vec<String> = obj.usdt().iter().map(|n| n.qualified_name()).collect();
            let hint = if all.is_empty() {
                "; this file has no USDT probes (no .note.stapsdt section)".to_string()
            } else {
                let close = suggest(&format!("{provider}:{name}"), all.iter().map(String::as_str));
                if close.is_empty() {
                    format!("; it has: {}", preview(&all))
                } else {
                    did_you_mean(&close.iter().map(|c| format!("usdt:{c}")).collect::<Vec<_>>())
                }
            };
            return Err(Error::UsdtNotFound {
                probe: format!("{provider}:{name}"),
                binary: obj.path().to_path_buf(),
                hint,
            });
        }
        let mut sites = Vec::new();
        for n in notes {
            let offset = n.file_offset.ok_or_else(|| Error::BadUsdt {
                path: obj.path().to_path_buf(),
                why: format!(
                    "USDT probe {} lies outside every loadable segment",
                    n.qualified_name()
                ),
            })?;
            if n.semaphore != 0 && n.semaphore_offset.is_none() {
                return Err(Error::BadUsdt {
                    path: obj.path().to_path_buf(),
                    why: format!(
                        "the semaphore of USDT probe {} lies outside the file",
                        n.qualified_name()
                    ),
                });
            }
            let site =
                Site { path: obj.path().to_path_buf(), offset, ref_ctr_offset: n.semaphore_offset };
            if !sites.contains(&site) {
                sites.push(site);
            }
        }
        Ok(ResolvedProbe {
            name: text.to_string(),
            kind: ProbeKind::Usdt,
            symbol: format!("{provider}:{name}"),
            sites,
        })
    }

    /// The soname of a library of the program's load closure that defines `func`, for the
    /// "it is defined in" hint.
    fn defining_library(&self, func: &str) -> Option<String> {
        for l in libpath::load_closure(&self.exe, &self.env) {
            let Ok(elf) = ElfFile::open(&l.path) else { continue };
            if !elf.find_functions(func).is_empty() {
                return Some(l.soname.unwrap_or(l.needed));
            }
        }
        None
    }
}

fn preview(names: &[String]) -> String {
    let mut v: Vec<&str> = names.iter().map(String::as_str).collect();
    v.dedup();
    if v.len() > 8 {
        format!("{}, ... ({} in all)", v[..8].join(", "), v.len())
    } else {
        v.join(", ")
    }
}

/// `"; did you mean: a, b?"`, or nothing without suggestions.
pub fn did_you_mean(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!("; did you mean: {}?", names.join(", "))
    }
}

/// Edit distance counting an adjacent transposition as one edit (optimal string
/// alignment), the commonest typo (`mian` for `main`).
pub fn typo_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

/// The names among `candidates` closest to `query`: within an edit distance of about a
/// third of its length, or containing it (for queries of 3+ characters); best first, at
/// most five.
pub fn suggest<'a>(query: &str, candidates: impl Iterator<Item = &'a str>) -> Vec<String> {
    let max = (query.chars().count() / 3).clamp(1, 4);
    let qlen = query.chars().count();
    let lower = query.to_lowercase();
    let mut scored: Vec<(usize, String)> = Vec::new();
    for c in candidates {
        let clen = c.chars().count();
        let contains = qlen >= 3 && c.to_lowercase().contains(&lower);
        let score = if clen.abs_diff(qlen) <= max {
            let d = typo_distance(query, c);
            if d <= max {
                Some(d)
            } else {
                None
            }
        } else {
            None
        };
        // Substring matches rank after close spellings.
        let score = score.or(contains.then_some(max + 1 + clen - qlen.min(clen)));
        if let Some(s) = score {
            if !scored.iter().any(|(_, n)| n == c) {
                scored.push((s, c.to_string()));
            }
        }
    }
    scored.sort();
    scored.into_iter().map(|(_, n)| n).filter(|n| n != query).take(5).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_rank_close_spellings_then_substrings() {
        assert_eq!(typo_distance("mian", "main"), 1);
        assert_eq!(typo_distance("kitten", "sitting"), 3);
        let names = ["do_work", "do_wrk_all", "worker_main", "unrelated", "work"];
        let s = suggest("do_wrok", names.iter().copied());
        assert_eq!(s.first().map(String::as_str), Some("do_work"));
        let s = suggest("work", names.iter().copied());
        assert!(
            s.contains(&"do_work".to_string()) && s.contains(&"worker_main".to_string()),
            "{s:?}"
        );
        assert!(!s.contains(&"work".to_string()), "the query itself is not a suggestion");
        assert!(suggest("zzzz", names.iter().copied()).is_empty());
    }

    #[test]
    fn unknown_function_in_own_binary_suggests_a_close_name() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mut r = Resolver::new(&exe, SearchEnv::new(None), None).unwrap();
        let e = r.resolve("mian", &ProbeSpec::parse("mian").unwrap()).unwrap_err();
        assert!(e.to_string().contains("did you mean: main"), "{e}");
        let ok = r.resolve("main", &ProbeSpec::parse("main").unwrap()).unwrap();
        assert_eq!(ok.sites.len(), 1);
        assert_eq!(ok.kind, ProbeKind::Function);
    }

    #[test]
    fn a_libc_function_named_without_its_library_points_there() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mut r = Resolver::new(&exe, SearchEnv::new(None), None).unwrap();
        let e = r.resolve("getpid", &ProbeSpec::parse("getpid").unwrap()).unwrap_err();
        assert!(e.to_string().contains("libc.so.6:getpid"), "{e}");
        let ok = r.resolve("libc:getpid", &ProbeSpec::parse("libc:getpid").unwrap()).unwrap();
        assert!(ok.sites[0].path.to_string_lossy().contains("libc.so"));
    }
}
