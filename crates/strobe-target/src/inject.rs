//! Whether an agent can be injected into a program with `LD_PRELOAD`.
//!
//! `LD_PRELOAD` is read by the dynamic linker, so it works only for a program the kernel
//! starts through one: a 64-bit ELF executable with a `PT_INTERP` program header. A `#!`
//! script is run by its interpreter, so the question passes to the interpreter (followed
//! through up to four levels of scripts, as the kernel does). A statically linked program,
//! a 32-bit one (the agent is 64-bit) or a file that is neither ELF nor a script cannot be
//! injected, and [`check_injectable`] says which.
//!
//! This module reads headers and `#!` lines only; it must never run the program.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::elf;
use crate::Error;

/// How many `#!` interpreters are followed (the kernel allows four levels too).
const MAX_SCRIPT_DEPTH: u32 = 4;

/// The kernel reads at most this much of a `#!` line (`BINPRM_BUF_SIZE`).
const SHEBANG_MAX: usize = 256;

/// Why `LD_PRELOAD` cannot inject into a program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInjectable {
    /// An ELF executable without a program interpreter.
    #[error("it is statically linked (no PT_INTERP program header)")]
    Static,
    /// A 32-bit ELF executable: the 64-bit agent cannot load into it.
    #[error("it is a 32-bit program, and strobe's agent is 64-bit")]
    ThirtyTwoBit,
    /// Neither ELF nor `#!`.
    #[error("it is neither an ELF executable nor a #! script")]
    NotExecutable,
    /// A `#!` line with nothing after it.
    #[error("its #! line names no interpreter")]
    EmptyShebang,
    /// A script whose interpreter cannot be injected.
    #[error("its interpreter {}: {why}", interpreter.display())]
    Interpreter {
        /// The interpreter the `#!` line names.
        interpreter: PathBuf,
        /// Why that one cannot be injected.
        why: Box<NotInjectable>,
    },
}

/// `Ok(None)` when an agent preloaded with `LD_PRELOAD` will load into the program at
/// `path`; `Ok(Some(why))` when it cannot; an error when the file (or a script's
/// interpreter) cannot be read.
pub fn check_injectable(path: &Path) -> Result<Option<NotInjectable>, Error> {
    check(path, 0)
}

fn check(path: &Path, depth: u32) -> Result<Option<NotInjectable>, Error> {
    let mut head = Vec::with_capacity(SHEBANG_MAX);
    std::fs::File::open(path)
        .and_then(|f| f.take(SHEBANG_MAX as u64).read_to_end(&mut head))
        .map_err(|source| Error::Io { what: format!("reading {}", path.display()), source })?;
    if let Some(rest) = head.strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let Some(interp) = line.split_whitespace().next() else {
            return Ok(Some(NotInjectable::EmptyShebang));
        };
        if depth >= MAX_SCRIPT_DEPTH {
            // The kernel itself refuses deeper nesting (ELOOP); the exec will say so.
            return Ok(None);
        }
        let interpreter = PathBuf::from(interp);
        return Ok(check(&interpreter, depth + 1)?
            .map(|why| NotInjectable::Interpreter { interpreter, why: Box::new(why) }));
    }
    let Some(id) = elf::identify(path)? else { return Ok(Some(NotInjectable::NotExecutable)) };
    Ok(if !id.is_64 {
        Some(NotInjectable::ThirtyTwoBit)
    } else if id.interpreter.is_none() {
        Some(NotInjectable::Static)
    } else {
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn dynamic_programs_and_their_scripts_are_injectable_and_others_say_why() {
        let dir =
            Scratch(std::env::temp_dir().join(format!("strobe-inject-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        let me = std::env::current_exe().unwrap();
        assert_eq!(check_injectable(&me).unwrap(), None, "the test binary is dynamic");
        let script = dir.0.join("s.sh");
        std::fs::write(&script, format!("#!{} --flag\nbody\n", me.display())).unwrap();
        assert_eq!(check_injectable(&script).unwrap(), None, "a script follows its interpreter");
        let nested = dir.0.join("n.sh");
        std::fs::write(&nested, format!("#! {}\n", script.display())).unwrap();
        assert_eq!(check_injectable(&nested).unwrap(), None, "and nested scripts theirs");

        std::fs::write(&script, b"plain text").unwrap();
        assert_eq!(check_injectable(&script).unwrap(), Some(NotInjectable::NotExecutable));
        std::fs::write(&script, b"#!   \n").unwrap();
        assert_eq!(check_injectable(&script).unwrap(), Some(NotInjectable::EmptyShebang));
        std::fs::write(&script, b"#!/nonexistent/strobe-interp\n").unwrap();
        let e = check_injectable(&script).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/strobe-interp"), "{e}");
    }

    /// `static_hello` (tests/c/static_hello.c, linked with `-static`), and a script that
    /// runs it.
    #[test]
    fn a_static_program_is_refused_through_its_script_too() {
        let exe = strobe_testprogs::path("static_hello");
        let dir =
            Scratch(std::env::temp_dir().join(format!("strobe-inject-s-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        assert_eq!(check_injectable(&exe).unwrap(), Some(NotInjectable::Static));
        let script = dir.0.join("run");
        std::fs::write(&script, format!("#!{}\n", exe.display())).unwrap();
        let why = check_injectable(&script).unwrap().expect("refused");
        assert_eq!(
            why,
            NotInjectable::Interpreter { interpreter: exe, why: Box::new(NotInjectable::Static) }
        );
        assert!(why.to_string().contains("statically linked"), "{why}");
    }
}
