//! One module per subcommand: its clap arguments and the glue that runs it.
//!
//! Must never hold engine logic: sessions live in the library crates.

pub mod bench;
pub mod export;
pub mod probe;
pub mod record;
pub mod report;
pub mod watch;
pub mod workload;
