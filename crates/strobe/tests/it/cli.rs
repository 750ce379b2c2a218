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
fn bad_workload_options_name_their_flag_in_one_line() {
    for (args, flag, says) in [
        (&["--threads", "0"][..], "--threads", "at least 1 thread"),
        (&["--rounds", "0"][..], "--rounds", "at least 1"),
        (&["--seconds", "0"][..], "--seconds", "positive number of seconds"),
        (&["--only", "nope"][..], "--only", "no function nope"),
    ] {
        let out = run(strobe().arg("workload").args(args));
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{}", show(&out));
        assert!(
            err.starts_with(&format!("strobe: error: {flag}: ")) && err.contains(says),
            "{err}"
        );
    }
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

#[test]
fn long_help_explains_how_each_command_works() {
    // `--help` shows the long description; `-h` keeps to the one-line summaries.
    for (sub, explains) in
        [("record", "LD_PRELOAD"), ("report", "short windows"), ("workload", "new random order")]
    {
        let long = run(strobe().args([sub, "--help"]));
        let long = String::from_utf8_lossy(&long.stdout).into_owned();
        assert!(
            long.contains(explains),
            "strobe {sub} --help does not explain {explains}:\n{long}"
        );
        let short = run(strobe().args([sub, "-h"]));
        let short = String::from_utf8_lossy(&short.stdout);
        assert!(short.len() < long.len(), "strobe {sub} -h is as long as --help:\n{short}");
    }
}
