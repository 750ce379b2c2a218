//! Where the injected agent comes from.
//!
//! The agent .so is embedded in the `strobe` binary at build time (see build.rs) and
//! written once to a per-user cache directory, named by a hash of its bytes so that
//! different strobe builds never overwrite each other's agent while a target uses it.
//! `STROBE_AGENT=/path/to/libstrobe_agent.so` overrides this, for agent development.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

static AGENT_SO: &[u8] = include_bytes!(env!("STROBE_AGENT_SO"));

/// The path of a loadable copy of the agent, writing it out if needed.
pub(crate) fn agent_path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("STROBE_AGENT") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            bail!(
                "STROBE_AGENT={} does not name a file; unset it to use the built-in agent",
                p.display()
            );
        }
        return Ok(p);
    }
    let dir = cache_dir()?;
    let path = dir.join(format!("libstrobe_agent-{:016x}.so", fnv1a(AGENT_SO)));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == AGENT_SO.len() as u64) {
        return Ok(path);
    }
    // Write to a private temporary name, then rename: a concurrent strobe either sees
    // no file or the complete one, never a half-written library.
    let tmp = dir.join(format!(".agent-{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp)
        .with_context(|| format!("cannot write the agent library to {}", tmp.display()))?;
    f.write_all(AGENT_SO).with_context(|| format!("writing {}", tmp.display()))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    drop(f);
    std::fs::rename(&tmp, &path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(path)
}

/// `$XDG_CACHE_HOME/strobe`, else `~/.cache/strobe`, else `/tmp/strobe-UID` (created 0700
/// and checked to be ours, so no other user can plant a library there).
fn cache_dir() -> anyhow::Result<PathBuf> {
    let candidates = [
        std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("strobe")),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/strobe")),
    ];
    for dir in candidates.into_iter().flatten() {
        if std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).is_ok()
            && is_private_dir(&dir)
        {
            return Ok(dir);
        }
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("strobe-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    if !is_private_dir(&dir) {
        bail!(
            "no safe place to write the agent library: {} is not a directory owned by uid {uid}; \
             set XDG_CACHE_HOME to a writable directory",
            dir.display()
        );
    }
    Ok(dir)
}

fn is_private_dir(dir: &Path) -> bool {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0)
}

/// FNV-1a, 64-bit: a stable content hash for the cache file name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    #[test]
    fn embedded_agent_is_an_elf_shared_object() {
        assert_eq!(&super::AGENT_SO[..4], b"\x7fELF");
        let p = super::agent_path().unwrap();
        assert_eq!(std::fs::read(p).unwrap(), super::AGENT_SO);
    }
}
