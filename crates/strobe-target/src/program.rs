//! The executable a command runs, found by `execvp`'s rules.
//!
//! A name with a `/` is a path, relative to the current directory. Any other name is
//! looked up in each directory of `PATH` in turn (an empty entry means the current
//! directory); the first regular file the caller may execute wins. Without `PATH`, glibc's
//! default (`/bin:/usr/bin`) is searched. When the name exists only as files that may not
//! be executed, the error says so instead of "not found", as `execvp`'s `EACCES` does.
//!
//! Which `PATH` is the caller's choice: the target's environment, when strobe sets one
//! for it, so that strobe finds what the target's exec will run.
//!
//! This module uses std and `access(2)` alone and never runs anything.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::Error;

/// glibc's search path when `PATH` is unset (`confstr(_CS_PATH)`).
pub const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// What a candidate file is.
enum Candidate {
    Executable,
    NotExecutable,
    Missing,
}

fn check(p: &Path) -> Candidate {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => {
            let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
                return Candidate::Missing;
            };
            // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
            if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
                Candidate::Executable
            } else {
                Candidate::NotExecutable
            }
        }
        Ok(_) => Candidate::NotExecutable,
        Err(_) => Candidate::Missing,
    }
}

/// The executable `execvp(name)` would run with `path` as `PATH` (`None`: unset).
pub fn find_program(name: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, Error> {
    let shown = name.to_string_lossy().into_owned();
    let fail = |why: String| Error::ProgramNotFound { program: shown.clone(), why };
    if name.is_empty() {
        return Err(fail("the program name is empty".to_string()));
    }
    let p = Path::new(name);
    if name.as_bytes().contains(&b'/') {
        return match check(p) {
            Candidate::Executable => Ok(p.to_path_buf()),
            Candidate::NotExecutable if p.is_dir() => Err(fail("it is a directory".to_string())),
            Candidate::NotExecutable => Err(fail(
                "it is not executable (chmod +x it, or run it through its interpreter)".to_string(),
            )),
            Candidate::Missing => Err(fail("no such file".to_string())),
        };
    }
    let path = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut denied: Option<PathBuf> = None;
    for dir in path.as_bytes().split(|&b| b == b':') {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(OsStr::from_bytes(dir)) };
        let candidate = dir.join(p);
        match check(&candidate) {
            Candidate::Executable => return Ok(candidate),
            Candidate::NotExecutable => {
                denied.get_or_insert(candidate);
            }
            Candidate::Missing => {}
        }
    }
    Err(fail(match denied {
        Some(d) => {
            format!("{} is not executable, and no executable of that name is in PATH", d.display())
        }
        None => "command not found in PATH".to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let d =
                std::env::temp_dir().join(format!("strobe-program-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }

        fn file(&self, name: &str, mode: u32) -> PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, b"#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn names_are_searched_in_path_order_and_paths_taken_as_they_are() {
        let (a, b) = (Dir::new("a"), Dir::new("b"));
        let in_b = b.file("tool", 0o755);
        a.file("tool", 0o644); // first in PATH, but not executable: skipped, as execvp does
        let path = format!("{}:{}", a.0.display(), b.0.display());
        assert_eq!(find_program(OsStr::new("tool"), Some(OsStr::new(&path))).unwrap(), in_b);
        assert_eq!(find_program(in_b.as_os_str(), Some(OsStr::new(""))).unwrap(), in_b);
        let sh = find_program(OsStr::new("sh"), None).unwrap();
        assert!(sh.starts_with("/bin") || sh.starts_with("/usr/bin"), "{sh:?}");
    }

    #[test]
    fn failures_say_what_was_found() {
        let a = Dir::new("fail");
        let plain = a.file("plain", 0o644);
        let path = a.0.display().to_string();
        let e = find_program(OsStr::new("plain"), Some(OsStr::new(&path))).unwrap_err();
        assert!(e.to_string().contains("is not executable"), "{e}");
        let e = find_program(OsStr::new("strobe-no-such"), Some(OsStr::new(&path))).unwrap_err();
        assert!(e.to_string().contains("not found in PATH"), "{e}");
        let e = find_program(plain.as_os_str(), None).unwrap_err();
        assert!(e.to_string().contains("not executable"), "{e}");
        let e = find_program(a.0.join("missing").as_os_str(), None).unwrap_err();
        assert!(e.to_string().contains("no such file"), "{e}");
        let e = find_program(a.0.as_os_str(), None).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
    }
}
