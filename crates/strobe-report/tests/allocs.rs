//! The aggregation pass allocates nothing per sample: once every thread, IP and window
//! key has been seen, feeding more samples leaves the allocation count unchanged.
//! Counted with a global allocator, so any hidden allocation fails the test. The count is
//! this thread's allocator calls: the test harness's own thread may allocate while the
//! samples are fed (a CI run here counted 2 process-wide allocations, in a test that
//! passes everywhere else).

use strobe_report::{Aggregator, Mapping, RecordInfo, Sample, SampleKind};

#[global_allocator]
static GLOBAL: strobe_alloc_count::Counting = strobe_alloc_count::Counting;

#[test]
fn pushing_samples_of_known_keys_does_not_allocate() {
    let info = RecordInfo {
        events: vec!["task-clock".into(), "page-faults".into()],
        period: 1_000_000,
        window: 20_000,
        ..Default::default()
    };
    let mut agg = Aggregator::new(info).unwrap();
    agg.add_mapping(1, Mapping { start: 0x1000, end: 0x9000, offset: 0, path: "/bin/x".into() });
    let mut values = [0u64; 2];
    let mut feed = |agg: &mut Aggregator, rounds: u64| {
        for r in 0..rounds {
            for tid in 1..=4u32 {
                let ip = 0x1000 + u64::from(tid) * 0x100 + (r % 8) * 4;
                values[0] += 1_000_000;
                let start = values;
                let s = Sample {
                    pid: 1,
                    tid,
                    time: r,
                    ip,
                    kind: SampleKind::WindowStart,
                    stack: 0,
                    values: &start,
                };
                agg.push(&s);
                values[0] += 20_000;
                values[1] += 1;
                let e = Sample { kind: SampleKind::WindowEnd, ip: ip + 2, values: &values, ..s };
                agg.push(&e);
            }
        }
    };
    // Warm up: every thread, IP and (start, end) pair appears, tables grow to size.
    feed(&mut agg, 64);
    let before = strobe_alloc_count::thread_calls();
    feed(&mut agg, 100_000);
    let after = strobe_alloc_count::thread_calls();
    assert_eq!(after - before, 0, "allocator calls while aggregating 800,000 samples");
    assert_eq!(agg.samples_seen(), 4 * 100_064);
}
