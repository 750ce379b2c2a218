//! The agent's signal handler takes no lock and allocates nothing, checked on the real
//! handler paths: a program whose malloc family and pthread locks count the calls made on
//! the alternate signal stack (where the agent's handler runs, and nothing else of that
//! program) is recorded at the default options (windows, DWARF stacks), and every count
//! must be zero. agent/clippy.toml bans crate-wide what can be banned; allocation cannot
//! be (the agent allocates outside the handler), so this test covers it.

use std::process::{Command, Output};

use crate::util::{record_to, run, show, Scratch};

/// The program's line: calls made on the signal stack, and in all.
#[derive(Debug)]
struct Counts {
    onstack_allocs: u64,
    onstack_locks: u64,
    allocs: u64,
    locks: u64,
}

fn counts(out: &Output) -> Counts {
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> u64 {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the program's line\n{}", show(out)))
    };
    Counts {
        onstack_allocs: field("onstack_allocs"),
        onstack_locks: field("onstack_locks"),
        allocs: field("allocs"),
        locks: field("locks"),
    }
}

#[test]
fn handler_takes_no_lock_and_allocates_nothing() {
    let prog = strobe_testprogs::path("handler_allocs");
    // The detector sees what it must: the program's own SA_ONSTACK handler allocates and
    // frees once and locks once on each of its 4 threads.
    let out = run(Command::new(&prog).arg("control"));
    assert!(out.status.success(), "{}", show(&out));
    let c = counts(&out);
    assert!(c.onstack_allocs >= 8 && c.onstack_locks >= 4, "control: {c:?}");

    let dir = Scratch::new("handler-allocs");
    let file = dir.path("h.strobe");
    let out = run(record_to(&file).arg("--").arg(&prog));
    assert!(out.status.success(), "{}", show(&out));
    let c = counts(&out);
    // Off the signal stack the program allocates and locks thousands of times (every 64th
    // round of each thread), so the counters were live while the handler ran.
    assert!(c.allocs > 1000 && c.locks > 1000, "{c:?}\n{}", show(&out));
    let rec = strobe_format::read_all(&file).unwrap_or_else(|e| panic!("{e}"));
    let agent: Vec<_> =
        rec.processes.iter().filter(|p| p.info.as_ref().is_some_and(|i| !i.floor)).collect();
    let samples: usize = agent.iter().map(|p| p.samples.len()).sum();
    let with_stacks: usize =
        agent.iter().map(|p| p.samples.iter().filter(|s| s.stack != 0).count()).sum();
    // 4 threads burn 0.4 s of CPU each: at the default period (about a millisecond) the
    // handler runs well over a thousand times; 100 with a walked stack is a floor that
    // only a handler that did not run (or walked no stack) falls under.
    assert!(samples >= 100 && with_stacks >= 100, "{samples} samples, {with_stacks} with stacks");
    assert_eq!(
        (c.onstack_allocs, c.onstack_locks),
        (0, 0),
        "the agent's handler allocated or locked ({samples} samples)\n{}",
        show(&out)
    );
}
