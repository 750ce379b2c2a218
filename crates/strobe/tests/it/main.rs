//! strobe's integration tests: one test binary, one module per theme. Each test runs the
//! real `strobe` binary against real programs built from source (strobe-testprogs).

mod util;

mod cli;
mod coverage;
mod fleet;
mod golden;
mod handler;
mod kernel;
mod perfdata;
mod probe;
mod rates;
mod record;
mod report;
mod stacks;
mod trust;
mod views;
mod watch;
