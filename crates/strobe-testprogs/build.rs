//! Compiles every `tests/c/*.c` into an executable in OUT_DIR, so tests profile programs
//! built from source in this repository, never committed binaries.
//!
//! A file may carry one line `// strobe-testprogs: FLAGS...` with extra compiler/linker
//! flags (e.g. `-lm`, `-O0`). Default flags: `-O1 -g -pthread`, dynamically linked (the
//! agent is injected with LD_PRELOAD, which needs a dynamic executable).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let src_dir = manifest.join("../../tests/c");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", src_dir.display());
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let mut names = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&src_dir)
        .expect("tests/c exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let extra: Vec<String> = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("// strobe-testprogs:"))
            .map(|f| f.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let exe = out.join(&name);
        let status = Command::new(&cc)
            .args(["-O1", "-g", "-pthread", "-Wall", "-o"])
            .arg(&exe)
            .arg(&path)
            .args(&extra)
            .status()
            .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}': {e} (install gcc)"));
        assert!(status.success(), "compiling {} failed", path.display());
        names.push(name);
    }
    let list: String = names.iter().map(|n| format!("    \"{n}\",\n")).collect();
    std::fs::write(
        out.join("programs.rs"),
        format!("/// Every test program built from tests/c.\npub const PROGRAMS: &[&str] = &[\n{list}];\n"),
    )
    .unwrap();
}
