//! The watch request `strobe watch` sets in the environment (its type and encoding are
//! strobe-protocol's `watch` module, its variables `strobe_protocol::env`), read once by
//! the constructor, and the load biases that turn the points' link-time addresses into
//! run-time ones.
//!
//! Owns reading the request and the channel's fd from the environment, removing them, and
//! relocating the points. Relocation is pure ([`relocate`]); the environment and the loader
//! are read only by the functions that say so. It must never panic on a malformed variable
//! (an error line says what was wrong) and never be called after the constructor (it reads
//! and changes the environment).

use std::os::fd::RawFd;

use strobe_protocol::env;
use strobe_protocol::watch::{self, Base, WatchPoint, WatchRequest};
use strobe_watch::Access;

/// The options of the request: how to watch.
pub type Opts = watch::WatchOptions;

/// The channel's fd from the environment, if it is set and names a pipe.
pub fn channel_fd() -> Option<RawFd> {
    let fd = watch::fd_from_env(&std::env::var_os(env::WATCH_FD)?)?;
    // SAFETY: fstat on an arbitrary number writes one stat or fails with EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` is a valid out-parameter.
    let is_pipe =
        unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO;
    is_pipe.then_some(fd)
}

/// The request strobe set in the environment.
pub fn request() -> Result<WatchRequest, String> {
    let Some(value) = std::env::var_os(env::WATCH) else {
        return Err(format!(
            "strobe set no watch request ({} is not in the environment)",
            env::WATCH
        ));
    };
    WatchRequest::from_env(&value)
        .map_err(|e| format!("the watch request from strobe is malformed: {e}"))
}

/// One watched location, relocated to run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    /// The run-time address.
    pub addr: u64,
    /// Bytes watched: 1, 2, 4 or 8.
    pub len: u64,
    /// What access traps.
    pub access: Access,
}

/// Relocates the request's points: executable-relative ones by `exe_bias`, library-relative
/// ones by what `lib_bias` says of the library (device, inode), absolute ones are taken as
/// they are. An error names the library that is not loaded, or says that there are none.
pub fn relocate(
    points: &[WatchPoint],
    exe_bias: u64,
    lib_bias: impl Fn(u64, u64) -> Option<u64>,
) -> Result<Vec<Point>, String> {
    let mut out = Vec::with_capacity(points.len());
    for (i, p) in points.iter().enumerate() {
        let addr = match p.base {
            Base::Executable => exe_bias.wrapping_add(p.addr),
            Base::Absolute => p.addr,
            Base::Library { dev, ino } => {
                let Some(bias) = lib_bias(dev, ino) else {
                    return Err(format!(
                        "watchpoint {i}: its shared library (device {dev:#x}, inode {ino}) is \
                         not loaded in the program at start"
                    ));
                };
                bias.wrapping_add(p.addr)
            }
        };
        out.push(Point { addr, len: u64::from(p.len), access: p.access.into() });
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
    for v in env::WATCH_ALL {
        // Edition 2021: safe. Called from the constructor, before the target's main.
        std::env::remove_var(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_relocated_by_their_base() {
        let lib = |dev, ino| (dev == 0x803 && ino == 0x1f).then_some(0x7f00_0000_0000);
        let pt = |base, addr, len, access| WatchPoint { base, addr, len, access };
        let points = [
            pt(Base::Executable, 0x4010, 8, watch::Access::Write),
            pt(Base::Absolute, 0x1000, 1, watch::Access::ReadWrite),
            pt(Base::Library { dev: 0x803, ino: 0x1f }, 0x20, 4, watch::Access::Write),
        ];
        assert_eq!(
            relocate(&points, 0x5500_0000, lib).unwrap(),
            [
                Point { addr: 0x5500_4010, len: 8, access: Access::Write },
                Point { addr: 0x1000, len: 1, access: Access::ReadWrite },
                Point { addr: 0x7f00_0000_0020, len: 4, access: Access::Write },
            ]
        );
        let e = relocate(&points, 0, |_, _| None).unwrap_err();
        assert!(e.starts_with("watchpoint 2: its shared library (device 0x803, inode 31)"), "{e}");
        assert_eq!(relocate(&[], 0, lib).unwrap_err(), "no watchpoints configured");
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
