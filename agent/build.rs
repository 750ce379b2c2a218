//! Compiles the C shim for the variadic exec functions (src/execl.c) into the agent.

fn main() {
    println!("cargo:rerun-if-changed=src/execl.c");
    cc::Build::new().file("src/execl.c").flag_if_supported("-Wall").compile("strobe_execl");
}
