//! One module per subcommand: its clap arguments and the glue that runs it.
//!
//! Must never hold engine logic: sessions live in the library crates.

pub(crate) mod bench;
pub(crate) mod export;
pub(crate) mod probe;
pub(crate) mod record;
pub(crate) mod report;
pub(crate) mod watch;
pub(crate) mod workload;

/// A size for people: bytes below 10 KiB, then KB and MB with one decimal (at least three
/// significant digits).
pub(crate) fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{:.1} MB", n as f64 / 1048576.0),
        n if n >= 10 << 10 => format!("{:.1} KB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_bytes_keeps_three_digits() {
        use super::human_bytes;
        assert_eq!(human_bytes(9596), "9596 bytes");
        assert_eq!(human_bytes(10 << 10), "10.0 KB");
        assert_eq!(human_bytes(40_331), "39.4 KB");
        assert_eq!(human_bytes(13_500_000), "12.9 MB");
    }
}
