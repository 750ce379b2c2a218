//! libstrobe_agent.so: the in-process capture agent that `strobe record`, `strobe probe`
//! and `strobe watch` inject into a target with LD_PRELOAD.
//!
//! It owns: reading its configuration from the environment, following the target's
//! threads, and running the requested capture. It must never allocate, lock or panic in
//! a signal handler, never change the target's output or exit status, and never unwind
//! into the target's frames (this crate builds with `panic = "abort"`).
//! (Being built.)

mod watch;

/// The agent's constructor: runs when the dynamic loader maps the library, before the
/// target's `main`.
extern "C" fn strobe_agent_init() {
    if watch::configured() {
        watch::start();
    }
}

#[used]
#[link_section = ".init_array"]
static STROBE_AGENT_INIT: extern "C" fn() = strobe_agent_init;
