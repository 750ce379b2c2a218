//! The encoders that run in the target's hot paths allocate nothing: a watch hit encoded
//! by the agent's writer into a buffer with room, and a probe trace line encoded on the
//! probe's trigger path (possibly in a signal handler) into a fixed buffer. Counted with
//! a global allocator, as this thread's allocator calls: the test harness's own thread may
//! allocate meanwhile (the report's like test counted 2 process-wide in a CI run here).

use strobe_protocol::probe::{LineBuf, TraceKind, TraceLine};
use strobe_protocol::watch::{CodeAddr, HitRecord, Message, MAX_ADDRS};

#[global_allocator]
static GLOBAL: strobe_alloc_count::Counting = strobe_alloc_count::Counting;

#[test]
fn hot_path_encoders_allocate_nothing() {
    let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut hit = HitRecord::new(3, 4242, false, Some(1), 2);
    let before = strobe_alloc_count::thread_calls();
    for i in 0..MAX_ADDRS as u64 {
        hit.push(CodeAddr { module: 1, vaddr: 0x1000 + i });
    }
    for _ in 0..1000 {
        Message::Hit(hit).encode(&mut out);
        Message::Lost(7).encode(&mut out);
    }
    let args = [1, 2, u64::MAX];
    for kind in [TraceKind::Fire, TraceKind::Entry, TraceKind::Exit { dur_ns: 99 }] {
        let mut line = LineBuf::<512>::new();
        TraceLine { probe: "a \"name\"\n", tid: 1, ns: 2, kind, args: &args }.encode(&mut line);
        assert!(!line.is_cut());
    }
    let after = strobe_alloc_count::thread_calls();
    assert_eq!(after - before, 0, "allocator calls on the hot path");
    assert!(out.len() > 1000 * 20, "the hits were encoded: {} bytes", out.len());
}
