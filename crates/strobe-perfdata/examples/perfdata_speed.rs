//! Times strobe-perfdata's iterators on a perf.data file (a measuring aid).
//!
//! usage: cargo run --release -p strobe-perfdata --example perfdata_speed -- FILE

use std::time::Instant;

use strobe_perfdata::{Event, PerfFile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: perfdata_speed FILE")?;
    let file = PerfFile::open(path.as_ref())?;
    let data = file.parse()?;
    for ordered in [false, true, false, true] {
        let t = Instant::now();
        let (mut n, mut ips) = (0u64, 0u64);
        let it: Box<dyn Iterator<Item = _>> =
            if ordered { Box::new(data.ordered()) } else { Box::new(data.records()) };
        for r in it {
            if let Event::Sample(s) = r?.event {
                n += 1;
                ips = ips.wrapping_add(s.ip().unwrap_or(0));
            }
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "{} {n} samples in {s:.3} s: {:.1} M/s ({ips:x})",
            if ordered { "ordered" } else { "file order" },
            n as f64 / s / 1e6
        );
    }
    Ok(())
}
