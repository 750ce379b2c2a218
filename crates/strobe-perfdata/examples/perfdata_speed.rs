//! Times strobe-perfdata's iterators on a perf.data file (a measuring aid).
//!
//! usage: cargo run --release -p strobe-perfdata --example perfdata_speed -- FILE

use std::time::Instant;

use strobe_perfdata::{Event, PerfFile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: perfdata_speed FILE")?;
    let file = PerfFile::open(path.as_ref())?;
    let data = file.parse()?;
    for round in 0..2 {
        // The bare walk over record headers, as a floor.
        let t = Instant::now();
        let bytes = file.bytes();
        let mut pos = data.records().next().and_then(Result::ok).map_or(0, |r| r.offset as usize);
        let (mut n, mut sum) = (0u64, 0u64);
        while let Some(h) = bytes.get(pos..pos + 8) {
            let size = u16::from_le_bytes([h[6], h[7]]) as usize;
            if size < 8 {
                break;
            }
            sum = sum.wrapping_add(u64::from(h[0]));
            n += 1;
            pos += size;
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "round {round}: header walk {n} records in {s:.3} s: {:.1} M/s ({sum})",
            n as f64 / s / 1e6
        );
        for ordered in [false, true] {
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
            let name = if ordered { "ordered" } else { "file order" };
            println!(
                "round {round}: {name} {n} samples in {s:.3} s: {:.1} M/s ({ips:x})",
                n as f64 / s / 1e6
            );
        }
    }
    Ok(())
}
