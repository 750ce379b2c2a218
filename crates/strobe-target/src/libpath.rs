//! Finding the shared library a name means, the way the dynamic linker would.
//!
//! A probe `libfoo.so:bar` or a watch `libfoo.so:state` names its library by path
//! (anything with a `/`), by file name or soname (`libc.so.6`), or by a short name (`libc`,
//! `libfoo.so`). Before the target runs,
//! strobe walks the executable's `DT_NEEDED` closure with ld.so's search order: the
//! requesting object's `DT_RPATH` (and the executable's, when no `DT_RUNPATH` is set),
//! `LD_LIBRARY_PATH` (as the target will see it), `DT_RUNPATH`, `/etc/ld.so.cache`, then the
//! default directories, expanding `$ORIGIN` and skipping files of another machine. A
//! running target's `/proc/PID/maps` answers instead when the library is already mapped
//! (it was `dlopen`ed, or the target was started elsewhere).
//!
//! This module must never load or run anything: it reads files and directories only.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use crate::elf::{self, ElfFile};
use crate::maps;
use crate::Error;

/// The directories ld.so searches last, in its order (x86-64 and arm64 Debian layout and
/// the traditional ones).
pub const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// One library of the executable's load closure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The `DT_NEEDED` name that pulled it in.
    pub needed: String,
    /// Where it was found.
    pub path: PathBuf,
    /// Its `DT_SONAME`, if any.
    pub soname: Option<String>,
}

/// How the dynamic linker of the target will search: its environment and the cache.
#[derive(Debug, Clone, Default)]
pub struct SearchEnv {
    /// `LD_LIBRARY_PATH` as the target will see it, split.
    pub ld_library_path: Vec<PathBuf>,
    /// Entries of `/etc/ld.so.cache`: (file name, path).
    pub cache: Vec<(String, PathBuf)>,
}

impl SearchEnv {
    /// The search environment of a program started with `ld_library_path` (the value of
    /// `LD_LIBRARY_PATH` it will get), with this machine's ld.so cache.
    pub fn new(ld_library_path: Option<&str>) -> SearchEnv {
        SearchEnv {
            ld_library_path: ld_library_path
                .map(|s| s.split([':', ';']).filter(|p| !p.is_empty()).map(PathBuf::from).collect())
                .unwrap_or_default(),
            cache: std::fs::read("/etc/ld.so.cache")
                .ok()
                .map(|b| parse_ld_cache(&b))
                .unwrap_or_default(),
        }
    }
}

/// Parses the "new" (glibc 2.32+, also appended to old-format files) `ld.so.cache` format
/// into (file name, path) pairs. Unknown or corrupt files give an empty list.
pub fn parse_ld_cache(bytes: &[u8]) -> Vec<(String, PathBuf)> {
    const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    let Some(start) = bytes.windows(MAGIC.len()).position(|w| w == MAGIC) else {
        return Vec::new();
    };
    let new = &bytes[start..];
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(new.get(at..at + 4)?.try_into().ok()?))
    };
    let cstr = |off: u32| -> Option<String> {
        let s = new.get(off as usize..)?;
        let end = s.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&s[..end]).into_owned())
    };
    let Some(nlibs) = u32_at(20) else { return Vec::new() };
    let mut out = Vec::new();
    // Header: magic+version (20), nlibs, len_strings, flags+pad, extension offset,
    // 3 unused words = 48 bytes; entries are 24 bytes (flags, key, value, osversion,
    // hwcap u64).
    for i in 0..nlibs as usize {
        let at = 48 + i * 24;
        let (Some(key), Some(value)) = (u32_at(at + 4), u32_at(at + 8)) else { break };
        if let (Some(k), Some(v)) = (cstr(key), cstr(value)) {
            out.push((k, PathBuf::from(v)));
        }
    }
    out
}

fn expand_origin(dir: &str, origin: &Path) -> PathBuf {
    let o = origin.to_string_lossy();
    PathBuf::from(dir.replace("${ORIGIN}", &o).replace("$ORIGIN", &o))
}

/// True when `path` is a 64-bit ELF file of `machine` (so a 32-bit or foreign library of
/// the same name is skipped, as ld.so does).
fn usable(path: &Path, machine: u16) -> bool {
    elf::identify(path).ok().flatten().is_some_and(|id| id.is_64 && id.machine == machine)
}

fn origin_of(path: &Path) -> PathBuf {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    real.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"))
}

/// Finds `needed` as ld.so would when `requester` asks for it, the executable being `exe`.
pub fn search(
    needed: &str,
    requester: &ElfFile,
    exe: &ElfFile,
    env: &SearchEnv,
) -> Option<PathBuf> {
    let machine = exe.machine();
    if needed.contains('/') {
        let p = PathBuf::from(needed);
        return usable(&p, machine).then_some(p);
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    let req_dyn = requester.dynamic();
    if req_dyn.runpath.is_empty() {
        let origin = origin_of(requester.path());
        dirs.extend(req_dyn.rpath.iter().map(|d| expand_origin(d, &origin)));
        if exe.dynamic().runpath.is_empty() && requester.path() != exe.path() {
            let origin = origin_of(exe.path());
            dirs.extend(exe.dynamic().rpath.iter().map(|d| expand_origin(d, &origin)));
        }
    }
    dirs.extend(env.ld_library_path.iter().cloned());
    let origin = origin_of(requester.path());
    dirs.extend(req_dyn.runpath.iter().map(|d| expand_origin(d, &origin)));
    for d in &dirs {
        let p = d.join(needed);
        if usable(&p, machine) {
            return Some(p);
        }
    }
    if req_dyn.nodeflib {
        return None;
    }
    for (name, path) in &env.cache {
        if name == needed && usable(path, machine) {
            return Some(path.clone());
        }
    }
    DEFAULT_DIRS.iter().map(|d| Path::new(d).join(needed)).find(|p| usable(p, machine))
}

/// The executable's load closure: every `DT_NEEDED` library, breadth first as ld.so loads
/// them, each found once. Libraries that cannot be found are left out (the target would
/// fail to start anyway, and says so itself).
pub fn load_closure(exe: &ElfFile, env: &SearchEnv) -> Vec<Loaded> {
    let mut out: Vec<Loaded> = Vec::new();
    let mut queue: VecDeque<(String, ElfFile)> = VecDeque::new();
    let mut seen: Vec<String> = Vec::new();
    for n in &exe.dynamic().needed {
        queue.push_back((n.clone(), exe.clone()));
    }
    while let Some((needed, requester)) = queue.pop_front() {
        if seen.contains(&needed) {
            continue;
        }
        seen.push(needed.clone());
        let Some(path) = search(&needed, &requester, exe, env) else { continue };
        let Ok(lib) = ElfFile::open(&path) else { continue };
        if let Some(s) = &lib.dynamic().soname {
            seen.push(s.clone());
        }
        for n in &lib.dynamic().needed {
            if !seen.contains(n) {
                queue.push_back((n.clone(), lib.clone()));
            }
        }
        out.push(Loaded { needed, path, soname: lib.dynamic().soname.clone() });
    }
    out
}

/// How well a library token (`libc`, `libc.so`, `libc.so.6`) names a file name or soname:
/// exact, or the token followed by a version or `.so` suffix.
fn name_matches(token: &str, name: &str) -> bool {
    if name == token {
        return true;
    }
    let Some(rest) = name.strip_prefix(token) else { return false };
    // `libc` names `libc.so.6` and `libc-2.36.so`; `libc.so` names `libc.so.6`; but
    // `libc` does not name `libcap.so.2`.
    rest.starts_with(".so") || rest.starts_with('.') || rest.starts_with('-')
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Finds the library that `token` names for a target running `exe` (before it starts),
/// or, with `pid`, in the running target's mappings first.
pub fn find_library(
    token: &str,
    exe: &ElfFile,
    env: &SearchEnv,
    pid: Option<u32>,
) -> Result<PathBuf, Error> {
    if token.contains('/') {
        let p = PathBuf::from(token);
        if p.exists() {
            return Ok(p);
        }
        return Err(Error::LibraryNotFound {
            lib: token.to_string(),
            binary: exe.path().to_path_buf(),
            known: Vec::new(),
            why: "no such file".to_string(),
        });
    }
    if let Some(pid) = pid {
        if let Ok(files) = maps::mapped_files(Some(pid)) {
            if let Some(p) = files.iter().find(|p| name_matches(token, &file_name(p))) {
                return Ok(p.clone());
            }
        }
    }
    let closure = load_closure(exe, env);
    for l in &closure {
        let names = [Some(l.needed.clone()), l.soname.clone(), Some(file_name(&l.path))];
        if names.iter().flatten().any(|n| n == token) {
            return Ok(l.path.clone());
        }
    }
    for l in &closure {
        let names = [Some(l.needed.clone()), l.soname.clone(), Some(file_name(&l.path))];
        if names.iter().flatten().any(|n| name_matches(token, n)) {
            return Ok(l.path.clone());
        }
    }
    // Not loaded at start: it may be dlopen()ed later. Search as ld.so would for a
    // dlopen("token") by the executable, then by prefix in the cache.
    if let Some(p) = search(token, exe, exe, env) {
        return Ok(p);
    }
    if let Some((_, p)) =
        env.cache.iter().find(|(name, p)| name_matches(token, name) && usable(p, exe.machine()))
    {
        return Ok(p.clone());
    }
    Err(Error::LibraryNotFound {
        lib: token.to_string(),
        binary: exe.path().to_path_buf(),
        known: closure
            .iter()
            .map(|l| l.soname.clone().unwrap_or_else(|| l.needed.clone()))
            .collect(),
        why: "it is neither loaded by the program nor found where the dynamic linker looks"
            .to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_match_versioned_files_only_at_a_boundary() {
        assert!(name_matches("libc", "libc.so.6"));
        assert!(name_matches("libc.so", "libc.so.6"));
        assert!(name_matches("libc.so.6", "libc.so.6"));
        assert!(name_matches("libfoo", "libfoo-2.0.so"));
        assert!(!name_matches("libc", "libcap.so.2"));
        assert!(!name_matches("libc.so.6", "libc.so"));
    }

    #[test]
    fn origin_is_expanded() {
        assert_eq!(
            expand_origin("$ORIGIN/../lib", Path::new("/opt/app/bin")),
            PathBuf::from("/opt/app/bin/../lib")
        );
        assert_eq!(expand_origin("${ORIGIN}/x", Path::new("/a")), PathBuf::from("/a/x"));
    }

    #[test]
    fn this_machines_cache_names_libc() {
        let env = SearchEnv::new(None);
        if env.cache.is_empty() {
            eprintln!("skipping: /etc/ld.so.cache is missing or in an unknown format");
            return;
        }
        assert!(
            env.cache.iter().any(|(n, p)| n == "libc.so.6" && p.is_absolute()),
            "{:?}",
            &env.cache[..3]
        );
    }

    #[test]
    fn the_test_binary_needs_libc_and_finds_it() {
        let exe = ElfFile::open(&std::fs::read_link("/proc/self/exe").unwrap()).unwrap();
        let env = SearchEnv::new(None);
        let closure = load_closure(&exe, &env);
        let libc = closure
            .iter()
            .find(|l| l.soname.as_deref() == Some("libc.so.6"))
            .expect("libc is loaded");
        assert_eq!(find_library("libc", &exe, &env, None).unwrap(), libc.path);
        assert_eq!(find_library("libc.so.6", &exe, &env, None).unwrap(), libc.path);
        let e = find_library("libnosuchthing", &exe, &env, None).unwrap_err();
        assert!(e.to_string().contains("libc.so.6"), "the error lists the loaded libraries: {e}");
    }
}
