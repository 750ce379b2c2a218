//! libstrobe_agent.so: the in-process capture agent that `strobe record`, `strobe probe`
//! and `strobe watch` inject into a target with LD_PRELOAD.
//!
//! It owns: reading its configuration from the environment, following the target's
//! threads, and running the requested capture. It must never allocate, lock or panic in
//! a signal handler, never change the target's output or exit status, and never unwind
//! into the target's frames (this crate builds with `panic = "abort"`).
//! (Being built.)
