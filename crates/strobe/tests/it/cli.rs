//! The CLI as a whole: help, errors, exit codes.

use crate::util::{run, show, strobe};

#[test]
fn unknown_benchmark_is_one_clear_line() {
    let out = run(strobe().args(["bench", "no-such-bench"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{}", show(&out));
    assert!(err.contains("unknown benchmark 'no-such-bench'") && err.contains("reclaim"), "{err}");
}

#[test]
fn every_subcommand_has_help_with_an_example() {
    for sub in ["record", "report", "probe", "watch", "bench", "workload"] {
        let out = run(strobe().args([sub, "--help"]));
        assert!(out.status.success(), "{sub}: {}", show(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Example"), "strobe {sub} --help lacks an example:\n{text}");
    }
}
