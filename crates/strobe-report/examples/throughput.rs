//! Prints the report engine's throughput, in memory and through a record file.
//!
//! `cargo run --release -p strobe-report --example throughput [SAMPLES]` (default 10M).

fn main() {
    let samples: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10_000_000);
    match strobe_report::throughput::measure_median(samples, 3) {
        Ok(t) => println!(
            "engine (in memory): {} samples, {} unique IPs: aggregation {:.2} M samples/s, \
             with symbolization and folding {:.2} M samples/s ({:.3} s)",
            t.samples,
            t.unique_ips,
            t.aggregate_samples_per_s() / 1e6,
            t.samples_per_s() / 1e6,
            t.seconds
        ),
        Err(e) => eprintln!("throughput: {e}"),
    }
    let mut runs = Vec::new();
    for _ in 0..3 {
        match strobe_report::throughput::measure_file(samples, &std::env::temp_dir()) {
            Ok(r) => runs.push(r),
            Err(e) => {
                eprintln!("throughput: {e}");
                return;
            }
        }
    }
    runs.sort_by(|a, b| a.0.seconds.total_cmp(&b.0.seconds));
    if let Some((t, bytes)) = runs.get(runs.len() / 2) {
        println!(
            "end to end (record file of {:.1} MB, {:.1} bytes/sample): {:.2} M samples/s ({:.3} s)",
            *bytes as f64 / 1e6,
            *bytes as f64 / t.samples as f64,
            t.samples_per_s() / 1e6,
            t.seconds
        );
    }
}
