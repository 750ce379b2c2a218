//! Stack walks of real programs built from tests/c, taken inside a SIGPROF
//! handler by the preload harness `examples/unwind_preload.rs` (what the agent
//! does: module table at start, interposed dlopen/dlclose, a walk per sample
//! into preallocated memory), checked against the programs' ELF symbols.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Mod, Symbolizer};
use strobe_unwind::WalkEnd;

const ENDS: [WalkEnd; 7] = [
    WalkEnd::Complete,
    WalkEnd::DepthLimit,
    WalkEnd::OutOfBounds,
    WalkEnd::NoUnwindInfo,
    WalkEnd::NotInModule,
    WalkEnd::Implausible,
    WalkEnd::Unsupported,
];

struct Sample {
    end: WalkEnd,
    ip: u64,
    frames: Vec<u64>,
}

struct Profile {
    samples: Vec<Sample>,
    sym: Symbolizer,
}

impl Profile {
    /// The function of the interrupted ip, then those of the frames (each
    /// one past an instruction of its function).
    fn names(&mut self, s: &Sample) -> Vec<String> {
        let mut v = vec![self.sym.name(s.ip)];
        v.extend(s.frames.iter().map(|&a| self.sym.name(a - 1)));
        v
    }

    fn complete_share(&self) -> f64 {
        let c = self.samples.iter().filter(|s| s.end == WalkEnd::Complete).count();
        c as f64 / self.samples.len().max(1) as f64
    }
}

fn preload() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let so = dir.join("examples/libunwind_preload.so");
    let hint = "run the tests with `cargo test -p strobe-unwind` (no --test filter), which builds \
                the examples, or `cargo build -p strobe-unwind --example unwind_preload` first";
    let built = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let so_time = built(&so).unwrap_or_else(|| panic!("{} is missing: {hint}", so.display()));
    // The library this test binary was linked with: the harness must not be older.
    let newest_lib = std::fs::read_dir(dir.join("deps"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("libstrobe_unwind-") && n.ends_with(".rlib")
        })
        .filter_map(|p| built(&p))
        .max();
    assert!(
        newest_lib.is_none_or(|t| so_time >= t),
        "{} is older than the strobe-unwind library: {hint}",
        so.display()
    );
    so
}

fn run(prog: &str, args: &[&str], mode: &str) -> Profile {
    let path = strobe_testprogs::path(prog);
    let out = std::env::temp_dir()
        .join(format!("strobe-unwind-{prog}-{mode}-{}.txt", std::process::id()));
    let status = Command::new(&path)
        .args(args)
        .env("LD_PRELOAD", preload())
        .env("STROBE_UNWIND_OUT", &out)
        .env("STROBE_UNWIND_MODE", mode)
        // The programs print their own measurements, for strobe's stacks tests.
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{prog} under the sampler exited with {status}");
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let mut mods = Vec::new();
    let mut samples = Vec::new();
    let mut threads = None;
    for line in text.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
        match w[0] {
            "module" => mods.push(Mod {
                bias: hex(w[1]),
                start: hex(w[2]),
                end: hex(w[3]),
                path: if w[4] == "[main]" { path.clone() } else { PathBuf::from(w[4..].join(" ")) },
            }),
            "time" => {}
            "threads" => threads = w[1].parse::<usize>().ok(),
            "sample" => samples.push(Sample {
                end: ENDS[w[1].parse::<usize>().unwrap()],
                ip: hex(w[2]),
                frames: w[3..].iter().map(|s| hex(s)).collect(),
            }),
            _ => panic!("bad line {line:?}"),
        }
    }
    assert!(samples.len() >= 50, "{prog}: only {} samples", samples.len());
    // The module table, the thread cache and the dlopen/dlclose protocol started no
    // thread in the single-threaded program (strobe-rcu's reclaimer must stay off).
    assert_eq!(threads, Some(1), "{prog}: threads at exit");
    let mut p = Profile { samples, sym: Symbolizer::new(mods) };
    if std::env::var_os("STROBE_UNWIND_DEBUG").is_some() {
        let samples = std::mem::take(&mut p.samples);
        let mut seen = std::collections::BTreeMap::new();
        for s in &samples {
            *seen.entry((format!("{:?}", s.end), p.names(s).join(" <- "))).or_insert(0) += 1;
        }
        for ((e, st), n) in seen {
            println!("{prog} {mode} {n:5} {e}: {st}");
        }
        p.samples = samples;
    }
    p
}

/// The samples whose interrupted ip is in a function named one of `names`,
/// with their symbolized stacks.
fn stacks_in(p: &mut Profile, names: &[&str]) -> Vec<(WalkEnd, Vec<String>)> {
    let samples = std::mem::take(&mut p.samples);
    let v = samples
        .iter()
        .map(|s| (s.end, p.names(s)))
        .filter(|(_, n)| names.contains(&n[0].as_str()))
        .collect();
    p.samples = samples;
    v
}

fn share(v: &[(WalkEnd, Vec<String>)], ok: impl Fn(&(WalkEnd, Vec<String>)) -> bool) -> f64 {
    v.iter().filter(|s| ok(s)).count() as f64 / v.len().max(1) as f64
}

fn starts(names: &[String], want: &[&str]) -> bool {
    names.len() >= want.len() && names.iter().zip(want).all(|(n, w)| n == w)
}

#[test]
fn through_libc_without_frame_pointers() {
    let mut p = run("unwind_nofp", &["1500"], "dwarf");
    let munmap = stacks_in(&mut p, &["munmap", "__munmap"]);
    let good =
        share(&munmap, |(e, n)| *e == WalkEnd::Complete && starts(&n[1..], &["b", "a", "main"]));
    println!(
        "unwind_nofp: {} samples, {:.1}% complete; {} in munmap, {:.1}% with b <- a <- main",
        p.samples.len(),
        100.0 * p.complete_share(),
        munmap.len(),
        100.0 * good
    );
    assert!(munmap.len() >= 20, "too few samples in munmap ({}) to judge", munmap.len());
    assert!(good >= 0.95, "munmap samples with b <- a <- main: {:.1}%", 100.0 * good);
    // Every stack through b (in b itself, or in libc's mmap, memset, munmap below it)
    // continues a <- main.
    let samples = std::mem::take(&mut p.samples);
    let through_b: Vec<(WalkEnd, Vec<String>)> = samples
        .iter()
        .map(|s| (s.end, p.names(s)))
        .filter_map(|(e, n)| n.iter().position(|f| f == "b").map(|i| (e, n[i..].to_vec())))
        .collect();
    p.samples = samples;
    let good_b =
        share(&through_b, |(e, n)| *e == WalkEnd::Complete && starts(&n[1..], &["a", "main"]));
    assert!(through_b.len() >= 50, "too few samples through b ({})", through_b.len());
    assert!(good_b >= 0.99, "stacks through b with a <- main: {:.1}%", 100.0 * good_b);
    assert!(p.complete_share() >= 0.99, "complete walks: {:.1}%", 100.0 * p.complete_share());
}

#[test]
fn code_described_only_by_debug_frame() {
    let mut p = run("unwind_debugframe", &["1000"], "dwarf");
    let samples = std::mem::take(&mut p.samples);
    let through_b: Vec<(WalkEnd, Vec<String>)> = samples
        .iter()
        .map(|s| (s.end, p.names(s)))
        .filter_map(|(e, n)| n.iter().position(|f| f == "b").map(|i| (e, n[i..].to_vec())))
        .collect();
    p.samples = samples;
    let good =
        share(&through_b, |(e, n)| *e == WalkEnd::Complete && starts(&n[1..], &["a", "main"]));
    println!(
        "unwind_debugframe: {} samples, {:.1}% complete; {} through b, {:.1}% with a <- main",
        p.samples.len(),
        100.0 * p.complete_share(),
        through_b.len(),
        100.0 * good
    );
    assert!(through_b.len() >= 50, "too few samples through b ({})", through_b.len());
    assert!(good >= 0.99, "stacks through b with a <- main: {:.1}%", 100.0 * good);
    assert!(p.complete_share() >= 0.99, "complete walks: {:.1}%", 100.0 * p.complete_share());
}

#[test]
fn frame_pointer_walk_of_the_same_program() {
    // The cheap walker on code without frame pointers: it must end cleanly (and the
    // module-checked form must never report a frame outside a module); how far it
    // gets is what `--call-graph fp` trades away.
    for mode in ["fp", "fp-in"] {
        let mut p = run("unwind_nofp", &["600"], mode);
        let samples = std::mem::take(&mut p.samples);
        let outside = samples
            .iter()
            .flat_map(|s| &s.frames)
            .filter(|&&a| mode == "fp-in" && p.sym.name(a - 1) == "?")
            .count();
        println!(
            "unwind_nofp --call-graph {mode}: {} samples, {:.1}% complete",
            samples.len(),
            100.0 * samples.iter().filter(|s| s.end == WalkEnd::Complete).count() as f64
                / samples.len() as f64
        );
        assert_eq!(outside, 0, "{mode}: frames outside every module");
    }
}

#[test]
fn across_the_programs_own_signal_handler() {
    let mut p = run("unwind_sighandler", &["1500"], "dwarf");
    let samples = std::mem::take(&mut p.samples);
    let stacks: Vec<(WalkEnd, Vec<String>)> = samples.iter().map(|s| (s.end, p.names(s))).collect();
    p.samples = samples;
    // Samples in the SIGUSR1 handler: in_handler <- on_usr1 <- __restore_rt <- libc's
    // pthread_kill/raise <- victim <- main.
    let inh: Vec<_> = stacks.iter().filter(|(_, n)| n[0] == "in_handler").cloned().collect();
    let good = share(&inh, |(e, n)| {
        *e == WalkEnd::Complete
            && starts(&n[1..], &["on_usr1", "__restore_rt"])
            && n.windows(2).any(|w| w[0] == "victim" && w[1] == "main")
    });
    // Every stack that crosses a trampoline (either handler) reaches the entry.
    let crossing: Vec<_> =
        stacks.iter().filter(|(_, n)| n.iter().any(|f| f == "__restore_rt")).cloned().collect();
    let crossing_ok =
        share(&crossing, |(e, n)| *e == WalkEnd::Complete && n.iter().any(|f| f == "main"));
    let alarm = crossing.iter().filter(|(_, n)| n[0] == "on_alarm").count();
    println!(
        "unwind_sighandler: {} samples, {:.1}% complete; {} in in_handler, {:.1}% crossing \
         __restore_rt to victim <- main; {} crossing a trampoline ({alarm} at on_alarm), \
         {:.1}% complete to main",
        stacks.len(),
        100.0 * p.complete_share(),
        inh.len(),
        100.0 * good,
        crossing.len(),
        100.0 * crossing_ok
    );
    assert!(inh.len() >= 20, "too few samples in the handler ({})", inh.len());
    assert!(good >= 0.95, "handler samples crossing the trampoline: {:.1}%", 100.0 * good);
    assert!(
        crossing_ok >= 0.99,
        "stacks crossing a trampoline that reach main: {:.1}%",
        100.0 * crossing_ok
    );
    assert!(p.complete_share() >= 0.99, "complete walks: {:.1}%", 100.0 * p.complete_share());
}

#[test]
fn cxx_throw_and_catch() {
    let mut p = run("unwind_cxx", &["1500"], "dwarf");
    let samples = std::mem::take(&mut p.samples);
    let stacks: Vec<(WalkEnd, Vec<String>)> = samples.iter().map(|s| (s.end, p.names(s))).collect();
    p.samples = samples;
    // Every stack through `thrower` continues middle <- outer <- main.
    let through: Vec<_> = stacks
        .iter()
        .filter_map(|(e, n)| {
            n.iter().position(|f| f == "_Z7throwerm").map(|i| (*e, n[i..].to_vec()))
        })
        .collect();
    let good = share(&through, |(e, n)| {
        *e == WalkEnd::Complete && starts(&n[1..], &["_Z6middlem", "_Z5outerm", "main"])
    });
    let in_unwinder = stacks
        .iter()
        .filter(|(_, n)| {
            n[0].starts_with("_Unwind") || n[0].contains("execute_cfa") || n[0].contains("uw_")
        })
        .count();
    println!(
        "unwind_cxx: {} samples, {:.1}% complete; {} through thrower ({:.1}% with middle <- outer \
         <- main), {} inside libgcc's unwinder",
        stacks.len(),
        100.0 * p.complete_share(),
        through.len(),
        100.0 * good,
        in_unwinder
    );
    assert!(through.len() >= 20, "too few samples through thrower ({})", through.len());
    assert!(good >= 0.95, "stacks through thrower reaching main: {:.1}%", 100.0 * good);
    // The walks that do not complete are the rare samples taken while libgcc's unwinder
    // rewrites the frames above it to install the landing pad's context (every
    // unwinder loses those): nowhere else.
    let samples = std::mem::take(&mut p.samples);
    let libgcc: Vec<(u64, u64)> = p
        .sym
        .modules()
        .iter()
        .filter(|m| m.path.to_string_lossy().contains("libgcc_s"))
        .map(|m| (m.start, m.end))
        .collect();
    for s in samples.iter().filter(|s| s.end != WalkEnd::Complete) {
        assert!(
            libgcc.iter().any(|&(a, b)| s.ip >= a && s.ip < b),
            "incomplete walk ({:?}) outside libgcc's unwinder: {:?}",
            s.end,
            p.names(s)
        );
    }
    p.samples = samples;
    assert!(p.complete_share() >= 0.98, "complete walks: {:.1}%", 100.0 * p.complete_share());
}

#[test]
fn library_loaded_with_dlopen_after_start() {
    let lib = strobe_testprogs::shared_lib("unwind_dllib");
    let mut p = run("unwind_dlopen", &[lib.to_str().unwrap(), "1500"], "dwarf");
    let inner = stacks_in(&mut p, &["dllib_inner"]);
    let good = share(&inner, |(e, n)| {
        *e == WalkEnd::Complete && starts(&n[1..], &["dllib_work", "run_lib", "main"])
    });
    println!(
        "unwind_dlopen: {} samples, {:.1}% complete; {} in dllib_inner, {:.1}% with dllib_work <- \
         run_lib <- main",
        p.samples.len(),
        100.0 * p.complete_share(),
        inner.len(),
        100.0 * good
    );
    assert!(inner.len() >= 20, "too few samples in the library ({})", inner.len());
    assert!(good >= 0.95, "library samples reaching main: {:.1}%", 100.0 * good);
    assert!(p.complete_share() >= 0.98, "complete walks: {:.1}%", 100.0 * p.complete_share());
}

#[test]
fn smashed_frames_end_cleanly() {
    for mode in ["dwarf", "fp", "fp-in"] {
        let mut p = run("unwind_smash", &["600"], mode);
        let smashed = stacks_in(&mut p, &["smash"]);
        assert!(smashed.len() >= 20, "{mode}: too few samples in smash ({})", smashed.len());
        let mut ends = std::collections::BTreeMap::new();
        for (e, n) in &smashed {
            *ends.entry(format!("{e:?}")).or_insert(0) += 1;
            assert_ne!(
                *e,
                WalkEnd::Complete,
                "{mode}: a walk through a smashed frame completed: {n:?}"
            );
            if mode != "fp" {
                // The checked walkers stop at the garbage: no frame outside a module.
                assert!(n[1..].iter().all(|f| f != "?"), "{mode}: garbage frame in {n:?}");
            }
        }
        println!(
            "unwind_smash --call-graph {mode}: {} samples in smash, ends {ends:?}",
            smashed.len()
        );
    }
}
