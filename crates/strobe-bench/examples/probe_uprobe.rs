//! The kernel-uprobe rows of `strobe bench probe`, runnable on their own:
//! `cargo run --release -p strobe-bench --example probe_uprobe [-- --quick] [-- --repeats N]`
//! prints one JSON row per line: `{"variant","threads","mtrig_per_s"}`, then how the
//! uprobes were opened on stderr.

use strobe_bench::{probe_uprobe_rows, BenchOpts};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = BenchOpts { quick: args.iter().any(|a| a == "--quick"), ..Default::default() };
    if let Some(n) = args.iter().position(|a| a == "--repeats").and_then(|i| args.get(i + 1)) {
        opts.repeats = n.parse().unwrap_or(opts.repeats).max(1);
    }
    match probe_uprobe_rows(&opts) {
        Ok((rows, how)) => {
            for r in rows {
                println!("{}", serde_json::Value::Object(r));
            }
            eprintln!("{how}");
        }
        Err(e) => {
            eprintln!("probe_uprobe: {e}");
            std::process::exit(1);
        }
    }
}
