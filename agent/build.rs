//! Compiles the C shim for the variadic exec functions (src/execl.c) into the agent.
//!
//! It runs in cargo, not in a target: printing is how it talks to cargo, so the agent's
//! ban on printing (clippy.toml) does not apply here.
#![allow(clippy::disallowed_macros)]

fn main() {
    println!("cargo:rerun-if-changed=src/execl.c");
    cc::Build::new().file("src/execl.c").flag_if_supported("-Wall").compile("strobe_execl");
}
