//! strobe-target: every fact strobe learns about a target program, learned in one place.
//!
//! - [`elf`] (feature `elf`): an ELF file read once and summarised: functions and
//!   variables (demangled), loadable segments (virtual address to file offset), the dynamic
//!   section, the program interpreter and the USDT notes ([`usdt`]). The one ELF reader of
//!   the host side (one version of `object`).
//! - [`debuginfo`] (feature `elf`): names for code without symbols: `.eh_frame` function
//!   boundaries, MiniDebugInfo (`.gnu_debugdata`), and the build id.
//! - [`symtab`] (feature `elf`): the names Linux perf gives a file's code, by file
//!   offset (its symbol rules, PLT entries and lookup), for the report's symbolizer.
//! - [`maps`]: `/proc/PID/maps`, parsed by one borrowing parser that never allocates, with
//!   owned conveniences above it.
//! - [`program`]: the executable a command runs, found the way `execvp` finds it.
//! - [`tasks`]: running processes and their threads (`/proc`), for attaching to them.
//! - [`kallsyms`]: the running kernel's symbols (`/proc/kallsyms`) and build id.
//! - [`libpath`] (feature `elf`): the shared library a name means, found the way ld.so
//!   finds it (`DT_RPATH`, `LD_LIBRARY_PATH`, `DT_RUNPATH`, `ld.so.cache`, defaults).
//! - [`inject`] (feature `elf`): whether `LD_PRELOAD` can inject an agent into a program
//!   (`PT_INTERP`, `#!` scripts followed to their interpreter); [`elf::is_go_program`]
//!   tells a Go program, whose threads the agent cannot follow.
//! - [`launch`]: forking a command held before `execve`, so events can be attached to it
//!   first, then releasing and reaping it.
//! - [`exit`]: how a target ended, as one exit code (the code, or 128 + the signal) and one
//!   description naming the signal.
//!
//! This crate must never run code inside the target, open perf events or decide what a
//! finding means for a report: it reads files and procfs, starts and reaps processes, and
//! says what it found. Without the `elf` feature it needs only std and libc ([`maps`] and
//! [`exit`] need std alone), so that the agent can share it.

#[cfg(feature = "elf")]
pub mod debuginfo;
#[cfg(feature = "elf")]
pub mod elf;
mod error;
pub mod exit;
#[cfg(feature = "elf")]
pub mod inject;
pub mod kallsyms;
pub mod launch;
#[cfg(feature = "elf")]
pub mod libpath;
#[cfg(feature = "elf")]
pub mod mapped;
pub mod maps;
pub mod program;
#[cfg(feature = "elf")]
pub mod symtab;
pub mod tasks;
pub mod usdt;

pub use error::Error;
pub use exit::Exit;
pub use launch::{Command, HeldChild};
