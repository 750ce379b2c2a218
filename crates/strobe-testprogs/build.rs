//! Compiles every `tests/c/*.c` (with `$CC`, default `cc`) and `tests/c/*.cpp` (with `$CXX`,
//! default `g++`) into an executable in OUT_DIR, so tests profile programs built from source
//! in this repository, never committed binaries.
//!
//! A file may carry one line `// strobe-testprogs: FLAGS...` with extra compiler/linker
//! flags (e.g. `-lm`, `-O0`). Default flags: `-O1 -g -pthread -I include`, dynamically linked (the
//! agent is injected with LD_PRELOAD, which needs a dynamic executable).
//!
//! Rust programs in `tests/rust/*.rs` are built with `$RUSTC` (the toolchain building this
//! crate), one file each, std only, edition 2021, with debug info and the flags of their
//! `// strobe-testprogs:` line (e.g. `-C opt-level=2`): real Rust binaries as a release
//! build makes them (no frame pointers), independent of the profile the tests build in.
//!
//! Go programs in `tests/go/` are built with the `go` tool when it is installed (`$GO`,
//! else `go` on PATH, else /usr/local/go/bin/go), twice: statically (`CGO_ENABLED=0`,
//! NAME_static) and with cgo (NAME_cgo, adding NAME_cgo.go); stdlib only, no module
//! proxy, the build cache under the target directory. Without `go` the Go programs are
//! absent and [`go_program`](../src/lib.rs) says why, for tests to print as their skip.
//!
//! The word `shared` among the flags makes the file a shared library instead:
//! `tests/c/NAME.c` becomes `libNAME.so` (built before the programs, with `-shared -fPIC`
//! and soname `libNAME.so`). A program that links one (`-lNAME`) gets `-L` and a
//! `DT_RUNPATH` to the output directory, so it runs from anywhere and tools find the
//! library the way the dynamic linker does.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds libstrobe_probe_c.so (crate strobe-probe-c) with a nested cargo in a sibling
/// target directory (as crates/strobe/build.rs does for the agent), for programs that
/// link the probe library (`// strobe-testprogs: -lstrobe_probe_c`). Returns its directory.
fn probe_library(manifest: &Path, out: &Path) -> PathBuf {
    let root = manifest.join("../..").canonicalize().unwrap();
    let target_root = out.ancestors().nth(4).map(Path::to_path_buf).unwrap_or(out.to_path_buf());
    let target = target_root.join("probe-c");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "strobe-probe-c", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("run cargo to build the probe library");
    assert!(status.success(), "building libstrobe_probe_c.so (crates/strobe-probe-c) failed");
    for dir in ["crates/strobe-probe/src", "crates/strobe-probe-c/src", "crates/strobe-rcu/src"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    target.join("release")
}

/// The `go` tool, if installed.
fn find_go() -> Option<PathBuf> {
    if let Some(g) = env::var_os("GO") {
        return Some(PathBuf::from(g));
    }
    let on_path = env::var_os("PATH")
        .map(|p| env::split_paths(&p).map(|d| d.join("go")).find(|g| g.is_file()))
        .unwrap_or(None);
    on_path.or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|g| g.is_file()))
}

/// Builds tests/go/gospin.go statically and with cgo. Returns the programs built, or why
/// none was.
fn go_programs(manifest: &Path, out: &Path) -> Result<Vec<String>, String> {
    let dir = manifest.join("../../tests/go");
    println!("cargo:rerun-if-changed={}", dir.display());
    println!("cargo:rerun-if-env-changed=GO");
    let Some(go) = find_go() else {
        return Err("the go tool is not installed (set $GO or put go on PATH)".into());
    };
    let target_root = out.ancestors().nth(4).map(Path::to_path_buf).unwrap_or(out.to_path_buf());
    let cache = target_root.join("go-build");
    let mut built = Vec::new();
    for (name, cgo, extra) in
        [("gospin_static", "0", "gospin_nocgo.go"), ("gospin_cgo", "1", "gospin_cgo.go")]
    {
        let status = Command::new(&go)
            .args(["build", "-o"])
            .arg(out.join(name))
            .arg(dir.join("gospin.go"))
            .arg(dir.join(extra))
            .env("CGO_ENABLED", cgo)
            .env("GOCACHE", cache.join("cache"))
            .env("GOPATH", cache.join("gopath"))
            .env("GOTOOLCHAIN", "local")
            .env("GOPROXY", "off")
            .env("GOFLAGS", "")
            .env_remove("GOROOT")
            .status()
            .map_err(|e| format!("cannot run {}: {e}", go.display()))?;
        if !status.success() {
            return Err(format!("`{} build` of tests/go/{name} failed", go.display()));
        }
        built.push(name.to_string());
    }
    Ok(built)
}

/// Builds every tests/rust/*.rs into OUT_DIR. Returns the programs built.
fn rust_programs(manifest: &Path, out: &Path) -> Vec<String> {
    let dir = manifest.join("../../tests/rust");
    println!("cargo:rerun-if-changed={}", dir.display());
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/rust exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    sources.sort();
    let mut built = Vec::new();
    for path in sources {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let extra: Vec<String> = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("// strobe-testprogs:"))
            .map(|f| f.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let status = Command::new(&rustc)
            .args(["--edition", "2021", "--crate-type", "bin", "-g", "--crate-name"])
            .arg(&name)
            .args(&extra)
            .arg("-o")
            .arg(out.join(&name))
            .arg(&path)
            .status()
            .unwrap_or_else(|e| panic!("cannot run rustc '{rustc}': {e}"));
        assert!(status.success(), "compiling {} failed", path.display());
        built.push(name);
    }
    built
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let src_dir = manifest.join("../../tests/c");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", src_dir.display());
    let c_compiler = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let cxx_compiler = env::var("CXX").unwrap_or_else(|_| "g++".to_string());
    let compiler_for = |path: &Path| -> String {
        if path.extension().is_some_and(|x| x == "cpp") {
            cxx_compiler.clone()
        } else {
            c_compiler.clone()
        }
    };
    // Programs with probe points include strobe_probe.h from the repository's include/.
    let include_dir = manifest.join("../../include");
    println!("cargo:rerun-if-changed={}", include_dir.display());
    let mut probe_lib: Option<PathBuf> = None;
    let mut names = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&src_dir)
        .expect("tests/c exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "c" || x == "cpp"))
        .collect();
    entries.sort();
    let flags_of = |path: &PathBuf| -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines()
            .find_map(|l| l.trim().strip_prefix("// strobe-testprogs:"))
            .map(|f| f.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default()
    };
    // Shared libraries first: programs link against them.
    let mut libs = Vec::new();
    for path in entries.iter().filter(|p| flags_of(p).iter().any(|f| f == "shared")) {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let extra: Vec<String> = flags_of(path).into_iter().filter(|f| f != "shared").collect();
        let so = out.join(format!("lib{name}.so"));
        let cc = compiler_for(path);
        let status = Command::new(&cc)
            .args(["-O1", "-g", "-pthread", "-Wall", "-shared", "-fPIC"])
            .arg(format!("-I{}", include_dir.display()))
            .arg(format!("-Wl,-soname,lib{name}.so"))
            .arg("-o")
            .arg(&so)
            .arg(path)
            .args(&extra)
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run the compiler '{cc}': {e} (install gcc and g++)")
            });
        assert!(status.success(), "compiling {} failed", path.display());
        libs.push(name);
    }
    for path in entries.iter().filter(|p| !flags_of(p).iter().any(|f| f == "shared")) {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let extra = flags_of(path);
        let links_ours = extra.iter().any(|f| libs.iter().any(|l| *f == format!("-l{l}")));
        let mut local_libs = Vec::new();
        if links_ours {
            local_libs.push(format!("-L{}", out.display()));
            local_libs.push(format!("-Wl,-rpath,{}", out.display()));
        }
        if extra.iter().any(|f| f == "-lstrobe_probe_c") {
            let dir = probe_lib.get_or_insert_with(|| probe_library(&manifest, &out)).clone();
            local_libs.push(format!("-L{}", dir.display()));
            local_libs.push(format!("-Wl,-rpath,{}", dir.display()));
        }
        let exe = out.join(&name);
        let cc = compiler_for(path);
        let status = Command::new(&cc)
            .args(["-O1", "-g", "-pthread", "-Wall"])
            .arg(format!("-I{}", include_dir.display()))
            .arg("-o")
            .arg(&exe)
            .arg(path)
            .args(&local_libs)
            .args(&extra)
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run the compiler '{cc}': {e} (install gcc and g++)")
            });
        assert!(status.success(), "compiling {} failed", path.display());
        names.push(name);
    }
    names.extend(rust_programs(&manifest, &out));
    let (go_list, go_skip) = match go_programs(&manifest, &out) {
        Ok(built) => {
            (built.iter().map(|n| format!("    \"{n}\",\n")).collect::<String>(), String::new())
        }
        Err(why) => (String::new(), why),
    };
    let list: String = names.iter().map(|n| format!("    \"{n}\",\n")).collect();
    let lib =
        probe_lib.map(|d| d.join("libstrobe_probe_c.so").display().to_string()).unwrap_or_default();
    let lib_list: String = libs.iter().map(|n| format!("    \"{n}\",\n")).collect();
    std::fs::write(
        out.join("programs.rs"),
        format!(
            "/// Every test program built from tests/c and tests/rust.\npub const PROGRAMS: &[&str] = &[\n{list}];\n\
             /// Every shared library built from tests/c (`shared` marker).\n\
             pub const SHARED_LIBS: &[&str] = &[\n{lib_list}];\n\
             /// libstrobe_probe_c.so, which the programs with probe points link against.\n\
             pub const PROBE_LIBRARY: &str = {lib:?};\n\
             /// The Go programs built from tests/go (none without the go tool).\n\
             pub const GO_PROGRAMS: &[&str] = &[\n{go_list}];\n\
             /// Why no Go program was built (empty when they were).\n\
             pub const GO_SKIP: &str = {go_skip:?};\n"
        ),
    )
    .unwrap();
}
