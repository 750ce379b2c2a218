//! The watch configuration `strobe watch` sets in the environment (see the module note of
//! `watch/mod.rs` for the variables), parsed into options and points, and the load biases
//! that turn the points' link-time addresses into run-time ones.
//!
//! Owns reading and parsing `STROBE_WATCH_FD`, `STROBE_WATCH_POINTS` and
//! `STROBE_WATCH_OPTS`, and removing them. Parsing is pure ([`parse_opts`],
//! [`parse_points`]); the environment and the loader are read only by the functions that
//! say so. It must never panic on a malformed variable (an error line says what was
//! wrong) and never be called after the constructor (it reads and changes the
//! environment).

use std::os::fd::RawFd;
use std::time::Duration;

use strobe_watch::{Access, Len};

/// Options from `STROBE_WATCH_OPTS`.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// `thread`: per-thread events instead of inherited ones.
    pub per_thread: bool,
    /// `nomux`: never rotate.
    pub no_mux: bool,
    /// `stack`: walk frame pointers per hit.
    pub stack: bool,
    /// `rotate_us=N`: the rotation interval.
    pub rotate: Duration,
}

/// The channel's fd from `STROBE_WATCH_FD`, if it is set and names a pipe.
pub fn channel_fd() -> Option<RawFd> {
    let fd: RawFd = std::env::var("STROBE_WATCH_FD").ok()?.parse().ok()?;
    // SAFETY: fstat on an arbitrary number writes one stat or fails with EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` is a valid out-parameter.
    let is_pipe =
        unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO;
    is_pipe.then_some(fd)
}

/// The options `STROBE_WATCH_OPTS` asks for.
pub fn opts() -> Opts {
    parse_opts(&std::env::var("STROBE_WATCH_OPTS").unwrap_or_default())
}

/// Parses `STROBE_WATCH_OPTS` text (`a,b,...`). Unknown words are ignored (an older agent
/// under a newer strobe), as is a `rotate_us` that is not a number.
pub fn parse_opts(text: &str) -> Opts {
    let mut o =
        Opts { per_thread: false, no_mux: false, stack: false, rotate: Duration::from_millis(4) };
    for w in text.split(',') {
        match w {
            "thread" => o.per_thread = true,
            "nomux" => o.no_mux = true,
            "stack" => o.stack = true,
            _ => {
                if let Some(us) = w.strip_prefix("rotate_us=").and_then(|v| v.parse().ok()) {
                    o.rotate = Duration::from_micros(us);
                }
            }
        }
    }
    o
}

/// One watched location, as `STROBE_WATCH_POINTS` gives it, relocated to run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// The run-time address.
    pub addr: u64,
    /// Bytes watched: 1, 2, 4 or 8.
    pub len: u64,
    /// What access traps.
    pub access: Access,
}

/// The points `STROBE_WATCH_POINTS` asks for, relocated by this process's load biases.
pub fn points() -> Result<Vec<Point>, String> {
    let text = std::env::var("STROBE_WATCH_POINTS").unwrap_or_default();
    parse_points(&text, exe_bias(), library_bias)
}

/// Parses `STROBE_WATCH_POINTS` text: `pie` addresses are relocated by `exe_bias`, `lib=`
/// ones by what `lib_bias` says of the library (device, inode), `abs` ones are taken as
/// they are. An error names the malformed entry, or the library that is not loaded.
pub fn parse_points(
    text: &str,
    exe_bias: u64,
    lib_bias: impl Fn(u64, u64) -> Option<u64>,
) -> Result<Vec<Point>, String> {
    let mut out = Vec::new();
    for p in text.split(';').filter(|p| !p.is_empty()) {
        let f: Vec<&str> = p.split(',').collect();
        let bad = || format!("malformed STROBE_WATCH_POINTS entry '{p}'");
        let [kind, addr, len, acc] = f.as_slice() else { return Err(bad()) };
        let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).map_err(|_| bad())?;
        let addr = match *kind {
            "pie" => exe_bias.wrapping_add(addr),
            "abs" => addr,
            k => {
                let id = k.strip_prefix("lib=").and_then(|id| id.split_once(':'));
                let Some((dev, ino)) = id else { return Err(bad()) };
                let dev = u64::from_str_radix(dev, 16).map_err(|_| bad())?;
                let ino = u64::from_str_radix(ino, 16).map_err(|_| bad())?;
                let Some(lib_bias) = lib_bias(dev, ino) else {
                    return Err(format!(
                        "watchpoint {}: its shared library (device {dev:#x}, inode {ino}) is \
                         not loaded in the program at start",
                        out.len()
                    ));
                };
                lib_bias.wrapping_add(addr)
            }
        };
        let len: u64 = len.parse().map_err(|_| bad())?;
        Len::new(len).ok_or_else(bad)?;
        let access = match *acc {
            "w" => Access::Write,
            "rw" => Access::ReadWrite,
            _ => return Err(bad()),
        };
        out.push(Point { addr, len, access });
    }
    if out.is_empty() {
        return Err("no watchpoints configured".into());
    }
    Ok(out)
}

/// The main executable's load bias (0 for a non-PIE executable).
pub fn exe_bias() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; `data` is the u64 below.
        unsafe { *(data as *mut u64) = (*info).dlpi_addr };
        1 // the first object is the main program
    }
    let mut bias = 0u64;
    // SAFETY: the callback matches the expected signature and writes only `bias`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut bias as *mut u64).cast()) };
    bias
}

/// The load bias of the loaded object whose file has this device and inode number.
pub fn library_bias(dev: u64, ino: u64) -> Option<u64> {
    struct Find {
        dev: u64,
        ino: u64,
        bias: Option<u64>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; `data` is the Find below.
        let (info, find) = unsafe { (&*info, &mut *(data as *mut Find)) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: a zeroed stat is a valid out-parameter; dlpi_name is a NUL-terminated
        // path (empty for the main program, which stat refuses).
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::stat(info.dlpi_name, &mut st) } == 0
            && st.st_dev == find.dev
            && st.st_ino == find.ino
        {
            find.bias = Some(info.dlpi_addr);
            return 1;
        }
        0
    }
    let mut find = Find { dev, ino, bias: None };
    // SAFETY: the callback matches the expected signature and writes only `find`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut find as *mut Find).cast()) };
    find.bias
}

/// Removes strobe's variables from the environment, so that a program this one execs (or
/// spawns) does not mistake an unrelated fd with the same number for the channel.
pub fn forget_config() {
    for v in ["STROBE_WATCH_FD", "STROBE_WATCH_POINTS", "STROBE_WATCH_OPTS"] {
        // Edition 2021: safe. Called from the constructor, before the target's main.
        std::env::remove_var(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_default() {
        let d = parse_opts("");
        assert!(!d.per_thread && !d.no_mux && !d.stack);
        assert_eq!(d.rotate, Duration::from_millis(4));
        let o = parse_opts("thread,nomux,stack,rotate_us=250");
        assert!(o.per_thread && o.no_mux && o.stack);
        assert_eq!(o.rotate, Duration::from_micros(250));
        let o = parse_opts("rotate_us=soon,colour,stack");
        assert_eq!(o.rotate, Duration::from_millis(4), "a bad interval keeps the default");
        assert!(o.stack && !o.per_thread, "unknown words are skipped");
    }

    #[test]
    fn points_are_relocated_by_their_kind() {
        let lib = |dev, ino| (dev == 0x803 && ino == 0x1f).then_some(0x7f00_0000_0000);
        let p = parse_points("pie,0x4010,8,w;abs,0x1000,1,rw;lib=803:1f,20,4,w", 0x5500_0000, lib)
            .unwrap();
        assert_eq!(
            p,
            [
                Point { addr: 0x5500_4010, len: 8, access: Access::Write },
                Point { addr: 0x1000, len: 1, access: Access::ReadWrite },
                Point { addr: 0x7f00_0000_0020, len: 4, access: Access::Write },
            ]
        );
        // Empty entries (a trailing ';') are skipped.
        assert_eq!(parse_points("abs,10,2,w;", 0, lib).unwrap().len(), 1);
    }

    #[test]
    fn bad_points_say_what_is_wrong() {
        let none = |_, _| None;
        for bad in [
            "pie,0x10,8",
            "pie,0x10,8,w,extra",
            "pie,zz,8,w",
            "pie,10,3,w",
            "pie,10,16,w",
            "pie,10,8,r",
            "elf,10,8,w",
            "lib=803,10,8,w",
            "lib=xyz:1,10,8,w",
        ] {
            let e = parse_points(bad, 0, none).unwrap_err();
            assert_eq!(e, format!("malformed STROBE_WATCH_POINTS entry '{bad}'"));
        }
        let e = parse_points("abs,10,8,w;lib=803:1f,10,8,w", 0, none).unwrap_err();
        assert!(e.starts_with("watchpoint 1: its shared library (device 0x803, inode 31)"), "{e}");
        assert_eq!(parse_points("", 0, none).unwrap_err(), "no watchpoints configured");
    }

    #[test]
    fn this_process_has_its_biases() {
        // The test binary is a PIE: its bias is where it was loaded, so a function of it
        // lies above the bias.
        let here = this_process_has_its_biases as *const () as u64;
        assert!(exe_bias() > 0 && exe_bias() < here);
        // The C library is loaded: the loader names it by its file's device and inode.
        // SAFETY: zeroed stat and Dl_info (integers, pointers and nulls) are valid
        // out-parameters.
        let (mut st, mut info): (libc::stat, libc::Dl_info) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: dladdr and stat write through valid out-pointers; `dli_fname` is a
        // NUL-terminated path owned by the loader.
        let found = unsafe {
            libc::dladdr(libc::write as *const () as *const libc::c_void, &mut info) != 0
                && libc::stat(info.dli_fname, &mut st) == 0
        };
        assert!(found);
        assert_eq!(library_bias(st.st_dev, st.st_ino), Some(info.dli_fbase as u64));
        assert_eq!(library_bias(st.st_dev, u64::MAX), None);
    }
}
