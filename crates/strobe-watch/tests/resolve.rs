//! Watch specs resolved against real executables built from tests/c/watch_writers.c, as a
//! PIE and as a position-dependent executable, and a stripped copy.

use std::path::PathBuf;
use std::process::Command;

use strobe_watch::resolve::{ElfSymbol, SymKind};
use strobe_watch::{resolve, Access, ElfSymbols, Len, Place, ResolveError, SpecError, WatchSpec};

fn pie() -> ElfSymbols {
    ElfSymbols::open(strobe_testprogs::path("watch_writers")).expect("test program reads")
}

fn nopie() -> ElfSymbols {
    ElfSymbols::open(strobe_testprogs::path("watch_writers_nopie")).expect("test program reads")
}

fn spec(s: &str) -> WatchSpec {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn sym<'a>(m: &'a ElfSymbols, name: &str) -> &'a ElfSymbol {
    m.symbols().iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn variables_resolve_to_module_vaddr_and_their_size() {
    let m = pie();
    assert!(m.relocatable(), "the default test build is PIE");
    for (name, len) in
        [("counter", Len::B8), ("hits32", Len::B4), ("half", Len::B2), ("flag", Len::B1)]
    {
        let w = m.resolve(&spec(name)).unwrap();
        let s = sym(&m, name);
        assert_eq!(
            w.place,
            Place::Module { path: m.path().to_path_buf(), vaddr: s.vaddr, relocatable: true },
            "{name}"
        );
        assert_eq!((w.len, w.access), (len, Access::Write), "{name}: default length is its size");
        assert_eq!(w.symbol, Some((name.to_string(), len.bytes())));
        // The agent adds the load bias.
        assert_eq!(w.address(0x5555_5555_4000), 0x5555_5555_4000 + s.vaddr);
    }
    // An explicit length and access win; a file-local variable resolves too.
    let w = m.resolve(&spec("counter:4:rw")).unwrap();
    assert_eq!((w.len, w.access), (Len::B4, Access::ReadWrite));
    assert!(m.resolve(&spec("file_local")).is_ok());
}

#[test]
fn offsets_index_into_arrays_and_structs() {
    let m = pie();
    let lanes = sym(&m, "lanes").vaddr;
    let w = m.resolve(&spec("lanes+24")).unwrap();
    assert_eq!((w.address(0), w.len), (lanes + 24, Len::B8));
    let triple = sym(&m, "triple").vaddr;
    let w = m.resolve(&spec("triple+4:4")).unwrap();
    assert_eq!(w.address(0), triple + 4);
    let e = m.resolve(&spec("triple+12")).unwrap_err();
    assert!(matches!(e, ResolveError::OffsetPastEnd { offset: 12, size: 12, .. }), "{e}");
    assert!(e.to_string().contains("12 bytes long"), "{e}");
}

#[test]
fn misaligned_symbol_offsets_are_refused() {
    let m = pie();
    let e = m.resolve(&spec("triple+2:4")).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ResolveError::Spec(SpecError::Misaligned { len: 4, .. })), "{msg}");
    assert!(msg.contains("':2'"), "the hint names a length that fits: {msg}");
}

#[test]
fn a_miss_names_close_variables() {
    let m = pie();
    let e = m.resolve(&spec("countr")).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ResolveError::NotFound { stripped: false, .. }), "{msg}");
    assert!(msg.starts_with("no variable named 'countr' in "), "{msg}");
    assert!(msg.contains("did you mean counter"), "{msg}");
    let msg = m.resolve(&spec("zzzzzzzzzzzz")).unwrap_err().to_string();
    assert!(msg.contains("check the spelling"), "{msg}");
}

#[test]
fn functions_and_thread_locals_are_refused_with_the_reason() {
    let m = pie();
    let e = m.resolve(&spec("writer_2")).unwrap_err();
    assert!(matches!(e, ResolveError::NotData { .. }), "{e}");
    assert!(e.to_string().contains("is a function, not a variable"), "{e}");
    assert_eq!(
        m.symbols().iter().find(|s| s.name == "per_thread").map(|s| s.kind),
        Some(SymKind::Tls)
    );
    let e = m.resolve(&spec("per_thread")).unwrap_err();
    assert!(matches!(e, ResolveError::ThreadLocal { .. }), "{e}");
}

#[test]
fn position_dependent_executables_give_absolute_addresses() {
    let m = nopie();
    assert!(!m.relocatable());
    let w = m.resolve(&spec("counter")).unwrap();
    let s = sym(&m, "counter");
    assert!(s.vaddr >= 0x400000, "linked at the ET_EXEC base: {:#x}", s.vaddr);
    assert_eq!(w.address(0x7f00_0000_0000), s.vaddr, "no bias for ET_EXEC");
}

#[test]
fn modules_are_searched_in_order_and_raw_addresses_need_none() {
    let (a, b) = (nopie(), pie());
    let w = resolve(&spec("counter"), &[a.clone(), b.clone()]).unwrap();
    assert!(matches!(&w.place, Place::Module { path, .. } if path == a.path()));
    let w = resolve(&spec("counter"), &[b.clone(), a]).unwrap();
    assert!(matches!(&w.place, Place::Module { path, .. } if path == b.path()));
    let w = resolve(&spec("0x7ffd1230:8"), &[]).unwrap();
    assert_eq!((w.place, w.len), (Place::Absolute(0x7ffd_1230), Len::B8));
    let e = resolve(&spec("counter"), &[]).unwrap_err();
    assert!(e.to_string().contains("in no module"), "{e}");
}

#[test]
fn stripped_binaries_say_so() {
    let dir = std::env::temp_dir().join(format!("strobe-watch-strip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy: PathBuf = dir.join("watch_writers_stripped");
    let status = Command::new("objcopy")
        .arg("--strip-all")
        .arg(strobe_testprogs::path("watch_writers"))
        .arg(&copy)
        .status();
    match status {
        Ok(s) if s.success() => {}
        other => {
            eprintln!("skipping: objcopy (binutils) is not available to strip a copy: {other:?}");
            return;
        }
    }
    let m = ElfSymbols::open(&copy).unwrap();
    let e = m.resolve(&spec("counter")).unwrap_err();
    std::fs::remove_dir_all(&dir).ok();
    assert!(matches!(e, ResolveError::NotFound { stripped: true, .. }), "{e}");
    assert!(e.to_string().contains("no symbol table (stripped)"), "{e}");
}
