//! The environment interface `strobe probe` uses on a Rust program: the
//! load-time constructor reads STROBE_PROBE_COUNT / STROBE_PROBE_LIST and the
//! exit report counts every hit. The test re-runs this test binary as the
//! "program" with the variables set.

use std::process::Command;

#[inline(never)]
fn env_work(i: u64) {
    strobe_probe::probe!(e_work, i);
    if i % 4 == 0 {
        let _s = strobe_probe::probe_scope!(e_quarter, i);
    }
}

/// The program: fires e_work 1000 times and e_quarter 250 times. Does nothing
/// unless run as the child of the test below.
#[test]
fn child_program() {
    if std::env::var_os("STROBE_PROBE_TEST_CHILD").is_none() {
        return;
    }
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..250 {
                    env_work(t * 250 + i);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn env_counting_lists_and_counts_a_rust_program() {
    let dir = std::env::temp_dir().join(format!("strobe-probe-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("report.jsonl");
    let st = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_program", "--test-threads", "1"])
        .env("STROBE_PROBE_TEST_CHILD", "1")
        .env("STROBE_PROBE_COUNT", "*")
        .env("STROBE_PROBE_LIST", "1")
        .env("STROBE_PROBE_OUT", &out)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let line = |name: &str| {
        report
            .lines()
            .find(|l| l.starts_with(&format!("{{\"type\":\"count\",\"probe\":\"{name}\",")))
            .unwrap_or_else(|| panic!("no count for {name}: {report}"))
            .to_string()
    };
    assert!(line("e_work").contains("\"hits\":1000,\"exits\":0,"), "{report}");
    assert!(line("e_quarter").contains("\"hits\":250,\"exits\":250,"), "{report}");
    // `*` counted every Rust site's name, and listing names them with their file.
    assert!(
        report.contains(
            "{\"type\":\"site\",\"probe\":\"e_work\",\"file\":\"crates/strobe-probe/tests/env.rs\""
        ),
        "{report}"
    );
}
