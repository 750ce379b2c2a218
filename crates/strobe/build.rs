//! Builds the preload agent (`agent/`, its own cargo workspace with `panic = "abort"`)
//! and hands its path to the `strobe` crate, which embeds the .so so that one binary is
//! all a user installs.
//!
//! The agent is always built in release mode: it runs inside the profiled program, and
//! an unoptimised agent would inflate the very overhead strobe measures.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.join("../..").canonicalize().unwrap();
    let agent_manifest = root.join("agent/Cargo.toml");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    // OUT_DIR is <target>/<profile>/build/strobe-<hash>/out: build the agent in a sibling
    // target directory so the nested cargo never waits on the outer one's lock.
    let target_root = out_dir.ancestors().nth(4).map(Path::to_path_buf).unwrap_or(out_dir.clone());
    let agent_target = target_root.join("agent");

    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .args(["build", "--release", "--manifest-path"])
        .arg(&agent_manifest)
        .arg("--target-dir")
        .arg(&agent_target)
        // The outer build's flags (a loom cfg, sanitizers, coverage) are for strobe's own
        // crates, not for code that runs inside targets.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_PROFILE_RELEASE_PANIC")
        .status()
        .expect("run cargo to build the strobe agent");
    assert!(status.success(), "building the strobe agent (agent/) failed; see the errors above");

    let built = agent_target.join("release/libstrobe_agent.so");
    let embedded = out_dir.join("libstrobe_agent.so");
    std::fs::copy(&built, &embedded).expect("copy libstrobe_agent.so into OUT_DIR");
    println!("cargo:rustc-env=STROBE_AGENT_SO={}", embedded.display());
    println!("cargo:rerun-if-changed={}", root.join("agent/src").display());
    println!("cargo:rerun-if-changed={}", root.join("agent/Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", root.join("crates").display());
}
