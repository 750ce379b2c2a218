//! Golden files: every output format of `strobe report`, byte for byte, on committed
//! recordings (tests/golden/inputs: agent mode with and without stacks and windows,
//! kernel mode with off-CPU time, and perf.data files perf wrote: plain, `-g`, a
//! leader-sampling group). They prove that a change meant to leave the output alone
//! does, and show in the diff what a change meant to alter it alters.
//!
//! The inputs name their code with files committed beside them (`--symfs`, the test
//! programs only: library samples stay `[unknown in libc.so.6]`), a cut of the recording
//! machine's /proc/kallsyms (`--kallsyms`) and perf's vDSO copy (`PERF_BUILDID_DIR`), so
//! the outputs do not depend on this machine's files.
//!
//! When an output changes on purpose: `STROBE_BLESS=1 cargo test -p strobe --test it
//! golden` writes the expected files again; review and commit them (CONTRIBUTING.md).
//! `tests/golden/make.sh` records the inputs again (after a change to the record file).

use std::path::{Path, PathBuf};

use crate::util::{run, show, strobe, Scratch};

/// Where the golden files live.
fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Where an output goes.
#[derive(Clone, Copy)]
enum Out {
    /// Standard output, saved as `NAME.EXT`.
    Stdout(&'static str),
    /// A file the command writes (the option that names it, and the file's extension).
    File(&'static str, &'static str),
}

/// One command and the output it is checked on.
struct Case {
    /// The expected file's name without extension, under `expected/INPUT/`.
    name: &'static str,
    /// Arguments after `strobe report INPUT`.
    args: &'static [&'static str],
    out: Out,
    /// Also check standard error (warnings and notes), as `NAME.stderr`.
    stderr: bool,
}

const fn case(name: &'static str, args: &'static [&'static str], out: Out) -> Case {
    Case { name, args, out, stderr: false }
}

/// The cases every input is checked on.
const EVERY_INPUT: &[Case] = &[
    Case { name: "table", args: &[], out: Out::Stdout("txt"), stderr: true },
    case("csv", &["--format", "csv"], Out::Stdout("csv")),
    case("json", &["--format", "json"], Out::Stdout("json")),
    case("folded", &["--format", "folded"], Out::Stdout("txt")),
    case("pprof", &["-q"], Out::File("--pprof", "pb.gz")),
];

/// The views whose files are large, on a few inputs.
const VIEWS: &[Case] = &[
    case("flamegraph", &["-q"], Out::File("--flamegraph", "svg")),
    case("html", &["-q"], Out::File("--html", "html")),
];

const FIREFOX: Case = case("firefox", &["-q"], Out::File("--firefox", "json"));

/// The inputs, and the cases besides [`EVERY_INPUT`] each is checked on.
fn inputs() -> Vec<(&'static str, Vec<&'static Case>)> {
    static STACKS: &[Case] = &[
        case("callers-leaf", &["--callers", "leaf"], Out::Stdout("txt")),
        case("callees-main", &["--callees", "main"], Out::Stdout("txt")),
        case(
            "folded-faults",
            &["--format", "folded", "--metric", "page-faults"],
            Out::Stdout("txt"),
        ),
        case("table-fold", &["--window-policy", "fold"], Out::Stdout("txt")),
        case("table-sorted", &["--sort", "faults/ms", "--top", "3"], Out::Stdout("txt")),
        case(
            "flamegraph-faults",
            &["-q", "--color-by", "faults/ms"],
            Out::File("--flamegraph", "svg"),
        ),
    ];
    static KERNEL: &[Case] = &[
        case("folded-off-cpu", &["--format", "folded", "--metric", "off-cpu"], Out::Stdout("txt")),
        case("folded-wall", &["--format", "folded", "--metric", "wall"], Out::Stdout("txt")),
    ];
    let with = |extra: &'static [Case], views: bool, firefox: bool| -> Vec<&'static Case> {
        let mut v: Vec<&Case> = extra.iter().collect();
        if views {
            v.extend(VIEWS);
        }
        if firefox {
            v.push(&FIREFOX);
        }
        v
    };
    vec![
        ("agent-stacks.strobe", with(STACKS, true, true)),
        ("agent-nostacks.strobe", with(&[], false, false)),
        ("agent-fixed.strobe", with(&[], false, true)),
        ("kernel.strobe", with(KERNEL, true, true)),
        ("perf-plain.data", with(&[], false, false)),
        ("perf-g.data", with(&[], true, false)),
        ("perf-group.data", with(&[], false, false)),
    ]
}

/// The `--diff` cases: BASE NEW, then the cases.
const DIFFS: &[(&str, &str, &[Case])] = &[(
    "agent-nostacks.strobe",
    "agent-stacks.strobe",
    &[
        case("table", &[], Out::Stdout("txt")),
        case("csv", &["--format", "csv"], Out::Stdout("csv")),
        case("json", &["--format", "json"], Out::Stdout("json")),
        case("flamegraph", &["-q"], Out::File("--flamegraph", "svg")),
    ],
)];

/// `strobe report` with the golden inputs' symbol sources, run in the golden directory
/// (so file names print as `inputs/NAME`).
fn report() -> std::process::Command {
    let dir = golden_dir();
    let mut cmd = strobe();
    cmd.current_dir(&dir).env("PERF_BUILDID_DIR", dir.join("buildid")).arg("report").args([
        "--symfs",
        "symfs",
        "--kallsyms",
        "kallsyms",
    ]);
    cmd
}

/// One output compared (or, blessing, written): `None` when it matches.
fn check(expected: &Path, actual: &[u8], bless: bool, scratch: &Scratch) -> Option<String> {
    if bless {
        std::fs::create_dir_all(expected.parent().unwrap()).unwrap();
        std::fs::write(expected, actual).unwrap();
        return None;
    }
    let want = std::fs::read(expected).unwrap_or_default();
    if want == actual {
        return None;
    }
    let rel = expected.strip_prefix(golden_dir()).unwrap_or(expected);
    let saved = scratch.path(&rel.to_string_lossy().replace('/', "__"));
    std::fs::write(&saved, actual).unwrap();
    let at = want.iter().zip(actual).take_while(|(a, b)| a == b).count();
    let line = 1 + want[..at].iter().filter(|&&b| b == b'\n').count();
    let show_line = |b: &[u8]| {
        let start = b[..at.min(b.len())].iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
        let end = b[start..].iter().position(|&c| c == b'\n').map_or(b.len(), |i| start + i);
        String::from_utf8_lossy(&b[start..end]).chars().take(200).collect::<String>()
    };
    Some(format!(
        "{}: differs at byte {at} (line {line}; {} bytes expected, {} now; now saved to {})\n  expected: {}\n  now:      {}",
        rel.display(),
        want.len(),
        actual.len(),
        saved.display(),
        show_line(&want),
        show_line(actual),
    ))
}

/// Runs `cmd` for `c`, returning (the output checked, standard error).
fn output_of(mut cmd: std::process::Command, c: &Case, scratch: &Scratch) -> (Vec<u8>, Vec<u8>) {
    let file = match c.out {
        Out::Stdout(_) => None,
        Out::File(opt, ext) => {
            let f = scratch.path(&format!("out.{ext}"));
            let _ = std::fs::remove_file(&f);
            cmd.arg(opt).arg(&f);
            Some(f)
        }
    };
    cmd.args(c.args);
    let out = run(&mut cmd);
    assert!(out.status.success(), "{cmd:?}: {}", show(&out));
    match file {
        None => (out.stdout, out.stderr),
        Some(f) => (std::fs::read(&f).unwrap(), out.stderr),
    }
}

fn ext(c: &Case) -> &'static str {
    match c.out {
        Out::Stdout(e) | Out::File(_, e) => e,
    }
}

#[test]
fn every_output_format_matches_its_golden_file() {
    let bless = std::env::var_os("STROBE_BLESS").is_some_and(|v| v != "0");
    let scratch = Scratch::new("golden");
    let expected = golden_dir().join("expected");
    let mut failures = Vec::new();
    let mut checked = 0;
    for (input, extra) in inputs() {
        let stem = input.split('.').next().unwrap();
        for c in EVERY_INPUT.iter().chain(extra) {
            let mut cmd = report();
            cmd.arg(format!("inputs/{input}"));
            let (out, err) = output_of(cmd, c, &scratch);
            let base = expected.join(stem).join(c.name);
            let path = base.with_extension(ext(c));
            failures.extend(check(&path, &out, bless, &scratch));
            if c.stderr {
                failures.extend(check(&base.with_extension("stderr"), &err, bless, &scratch));
            }
            checked += 1;
        }
    }
    for (base, new, cases) in DIFFS {
        let dir =
            format!("diff-{}-{}", base.split('.').next().unwrap(), new.split('.').next().unwrap());
        for c in *cases {
            let mut cmd = report();
            cmd.arg("--diff").arg(format!("inputs/{base}")).arg(format!("inputs/{new}"));
            let (out, _) = output_of(cmd, c, &scratch);
            let path = expected.join(&dir).join(c.name).with_extension(ext(c));
            failures.extend(check(&path, &out, bless, &scratch));
            checked += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} outputs differ from their golden files; if the change is meant, write \
         them again with STROBE_BLESS=1 cargo test -p strobe --test it golden, and review the \
         diff:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked > 40, "{checked} outputs checked");
}
