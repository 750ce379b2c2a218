//! Prints the attrs and records of a perf.data file, one line each (a debugging aid,
//! like `perf script -D` without the hex).
//!
//! usage: cargo run -p strobe-perfdata --example perfdata_dump -- FILE [--ordered]

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().ok_or("usage: perfdata_dump FILE [--ordered]")?);
    let ordered = args.next().as_deref() == Some("--ordered");
    let file = strobe_perfdata::PerfFile::open(&path)?;
    let data = file.parse()?;
    println!("pipe: {}  info: {:?}", data.is_pipe(), data.info());
    for (i, a) in data.attrs().iter().enumerate() {
        println!("attr {i}: {} ids {:?} {:?}", a.name, a.ids, a.attr);
    }
    let records: Box<dyn Iterator<Item = _>> =
        if ordered { Box::new(data.ordered()) } else { Box::new(data.records()) };
    for r in records {
        let r = r?;
        println!(
            "{:#x} type {} misc {:#x} attr {:?} {:?} {:?}",
            r.offset, r.kind, r.misc, r.attr, r.sample_id, r.event
        );
    }
    Ok(())
}
