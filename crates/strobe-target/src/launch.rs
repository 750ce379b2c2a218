//! Starting the target so that strobe sees it from its first instruction, and reaping it.
//!
//! [`HeldChild::spawn`] forks; the child blocks reading a pipe before it calls `execve`.
//! While it waits, the parent may attach events to the child's pid with `enable_on_exec`
//! (they switch on at the exec, so strobe's own code in the forked child is never
//! counted) and `inherit` (threads and processes the target creates are counted too).
//! [`HeldChild::release`] writes one byte; the child execs; a close-on-exec error pipe
//! tells the parent whether the exec succeeded or with which errno it failed. A caller
//! with nothing to attach releases at once. [`HeldChild::wait`] reaps the target and gives
//! its [`Exit`].
//!
//! The program is found as `execvp` finds it ([`crate::program`]), with the `PATH` the
//! target will see. The target gets strobe's environment with [`Command::env`] applied,
//! the signal mask and ignored signals strobe itself started with (as it would have
//! without strobe), and the file
//! descriptors in [`Command::keep_fds`] (an agent's pipe); every other descriptor strobe
//! opened close-on-exec stays closed.
//!
//! Between fork and exec the child runs only async-signal-safe calls (`read`, `close`,
//! `fcntl`, `signal`, `sigprocmask`, `execve`, `write`, `_exit`) on data prepared before
//! the fork, so it is sound even if the parent has other threads. If the parent dies first
//! the pipe reaches EOF and the child exits without running the target.
//!
//! This module must never run the target before [`HeldChild::release`], nor let a held
//! child outlive its [`HeldChild`] unreaped.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;

use crate::{program, Error, Exit};

/// The signals strobe (or Rust's runtime) may change the disposition of; the target gets
/// each as strobe inherited it.
const RESET_SIGNALS: [libc::c_int; 5] =
    [libc::SIGPIPE, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];

/// Strobe's signal state as the process started, before Rust's runtime or strobe changed
/// it: what a launched target inherits.
struct Inherited {
    captured: bool,
    mask: libc::sigset_t,
    ignored: [bool; RESET_SIGNALS.len()],
}

/// Written once, by [`capture_inherited`] before `main` (single-threaded), read-only
/// afterwards (in forked children before exec).
static mut INHERITED: Inherited =
    // SAFETY: a zeroed sigset_t is an empty set on Linux.
    Inherited { captured: false, mask: unsafe { std::mem::zeroed() }, ignored: [false; 5] };

/// Runs before `main` (and before Rust's runtime ignores SIGPIPE): records the signal mask
/// and which signals were ignored, for the targets strobe launches.
extern "C" fn capture_inherited() {
    // SAFETY: single-threaded (constructors run before main); INHERITED is written only
    // here. sigprocmask and sigaction with null new values only read.
    unsafe {
        let s = &mut *std::ptr::addr_of_mut!(INHERITED);
        libc::sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut s.mask);
        for (i, &sig) in RESET_SIGNALS.iter().enumerate() {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut old);
            s.ignored[i] = old.sa_sigaction == libc::SIG_IGN;
        }
        s.captured = true;
    }
}

#[used]
#[link_section = ".init_array"]
static CAPTURE: extern "C" fn() = capture_inherited;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The program as typed (a path, or a name looked up in `PATH`).
    pub program: OsString,
    /// Its arguments (without the program name).
    pub args: Vec<OsString>,
    /// Variables to set (or override) in the target's environment; the rest is inherited.
    /// In-program probe points and agents use this to inject themselves (`LD_PRELOAD`).
    pub env: Vec<(OsString, OsString)>,
    /// Descriptors of strobe's that the target inherits (their close-on-exec flag is
    /// cleared in the child only), such as the write end of an agent's pipe.
    pub keep_fds: Vec<RawFd>,
}

impl Command {
    /// A command that runs `program` with `args` in strobe's environment.
    pub fn new(
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
    ) -> Command {
        Command {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            keep_fds: Vec::new(),
        }
    }

    /// The executable `execve` will run: the program itself when it has a `/`, else the
    /// first executable file of that name in the `PATH` the target will see, as `execvp`
    /// finds it ([`program::find_program`]).
    pub fn resolve_program(&self) -> Result<PathBuf, Error> {
        program::find_program(&self.program, self.env_var("PATH").as_deref())
    }

    /// The value variable `name` will have in the target: set by [`Command::env`] (the
    /// last setting wins) or inherited from strobe.
    pub fn env_var(&self, name: &str) -> Option<OsString> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os(name))
    }

    /// The value `LD_LIBRARY_PATH` will have in the target.
    pub fn ld_library_path(&self) -> Option<String> {
        self.env_var("LD_LIBRARY_PATH").map(|v| v.to_string_lossy().into_owned())
    }
}

fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd), Error> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(Error::sys("pipe2"));
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn cstring(s: &OsStr, what: &str) -> Result<CString, Error> {
    CString::new(s.as_bytes()).map_err(|_| Error::Exec {
        program: what.to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "argument contains a NUL byte",
        ),
    })
}

/// A forked child held before `execve`.
#[derive(Debug)]
pub struct HeldChild {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    go: Option<OwnedFd>,
    exec_err: Option<OwnedFd>,
    program: String,
    reaped: bool,
}

impl HeldChild {
    /// Forks a child that will exec `cmd` once released.
    pub fn spawn(cmd: &Command) -> Result<HeldChild, Error> {
        let exe = cmd.resolve_program()?;
        let program = cmd.program.to_string_lossy().into_owned();
        // Everything the child needs is built before the fork: it must not allocate.
        let exe_c = cstring(exe.as_os_str(), &program)?;
        let mut argv_c = vec![cstring(&cmd.program, &program)?];
        for a in &cmd.args {
            argv_c.push(cstring(a, &program)?);
        }
        let mut env: Vec<(OsString, OsString)> =
            std::env::vars_os().filter(|(k, _)| !cmd.env.iter().any(|(ek, _)| ek == k)).collect();
        // The last setting of a variable wins, and the target sees it once.
        for (i, (k, v)) in cmd.env.iter().enumerate() {
            if !cmd.env[i + 1..].iter().any(|(later, _)| later == k) {
                env.push((k.clone(), v.clone()));
            }
        }
        let keep_fds = cmd.keep_fds.clone();
        let mut envp_c = Vec::with_capacity(env.len());
        for (k, v) in &env {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            envp_c.push(cstring(&kv, &program)?);
        }
        let argv: Vec<*const libc::c_char> =
            argv_c.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        let envp: Vec<*const libc::c_char> =
            envp_c.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();

        let (go_r, go_w) = pipe_cloexec()?;
        let (err_r, err_w) = pipe_cloexec()?;
        // SAFETY: fork has no memory-safety preconditions; the child branch below only
        // makes async-signal-safe calls on memory prepared above, then execs or exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(Error::sys("fork"));
        }
        if pid == 0 {
            // SAFETY: in the child, before exec: only async-signal-safe calls, no
            // allocation, no unwinding (every path ends in execve or _exit).
            unsafe {
                libc::close(go_w.as_raw_fd());
                libc::close(err_r.as_raw_fd());
                let mut byte = 0u8;
                loop {
                    let n = libc::read(go_r.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
                    if n == 1 {
                        break;
                    }
                    if n == 0 || *libc::__errno_location() != libc::EINTR {
                        // The parent went away or gave up: never run the target unprobed.
                        libc::_exit(127);
                    }
                }
                for &fd in &keep_fds {
                    if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                        let errno = *libc::__errno_location();
                        let bytes = errno.to_ne_bytes();
                        libc::write(err_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                        libc::_exit(127);
                    }
                }
                // The target starts with the signal mask and the ignored signals strobe
                // itself started with (before Rust ignored SIGPIPE and strobe blocked the
                // signals it forwards), as it would have without strobe.
                let inherited = &*std::ptr::addr_of!(INHERITED);
                libc::sigprocmask(libc::SIG_SETMASK, &inherited.mask, std::ptr::null_mut());
                for (i, &sig) in RESET_SIGNALS.iter().enumerate() {
                    let ignored = inherited.captured && inherited.ignored[i];
                    libc::signal(sig, if ignored { libc::SIG_IGN } else { libc::SIG_DFL });
                }
                libc::execve(exe_c.as_ptr(), argv.as_ptr(), envp.as_ptr());
                let errno = *libc::__errno_location();
                let bytes = errno.to_ne_bytes();
                libc::write(err_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                libc::_exit(127);
            }
        }
        drop(go_r);
        drop(err_w);
        // SAFETY: pidfd_open on our own unreaped child returns a new fd or -1.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        if pidfd < 0 {
            let err = Error::sys("pidfd_open (Linux 5.3+)");
            // SAFETY: killing and reaping the child we just forked.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            return Err(err);
        }
        Ok(HeldChild {
            pid,
            // SAFETY: a fresh fd owned by nobody else.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
            go: Some(go_w),
            exec_err: Some(err_r),
            program,
            reaped: false,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// A pidfd of the child: readable once it has exited (for `poll`).
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        // SAFETY: the pidfd lives as long as `self`, which bounds the borrow.
        unsafe { BorrowedFd::borrow_raw(self.pidfd.as_raw_fd()) }
    }

    /// Lets the child exec. Returns once the exec has happened, or the exec's error.
    pub fn release(&mut self) -> Result<(), Error> {
        let Some(go) = self.go.take() else { return Ok(()) };
        let byte = 1u8;
        // SAFETY: writing one byte from a live local to our pipe.
        let n = unsafe { libc::write(go.as_raw_fd(), (&byte as *const u8).cast(), 1) };
        if n != 1 {
            return Err(Error::sys("releasing the target (write to its start pipe)"));
        }
        drop(go);
        let Some(err_r) = self.exec_err.take() else { return Ok(()) };
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            // SAFETY: reading into the unfilled tail of a live local buffer.
            let n =
                unsafe { libc::read(err_r.as_raw_fd(), buf[got..].as_mut_ptr().cast(), 4 - got) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        if got == 4 {
            let errno = i32::from_ne_bytes(buf);
            let _ = self.wait();
            return Err(Error::Exec {
                program: self.program.clone(),
                source: std::io::Error::from_raw_os_error(errno),
            });
        }
        Ok(())
    }

    /// Waits for the child to exit, reaps it, and says how it ended.
    pub fn wait(&mut self) -> Result<Exit, Error> {
        self.wait_status().map(Exit::from_status)
    }

    /// Waits for the child to exit and reaps it: the raw status.
    pub fn wait_status(&mut self) -> Result<ExitStatus, Error> {
        self.wait_with_cpu().map(|(s, _)| s)
    }

    /// Waits for the child to exit and reaps it: the raw status, and the CPU time (ns,
    /// user and system) of the child and of every descendant it reaped, as `wait4`'s
    /// rusage counts it.
    pub fn wait_with_cpu(&mut self) -> Result<(ExitStatus, u64), Error> {
        let mut status = 0;
        loop {
            // SAFETY: an all-zero rusage is a valid out-parameter.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: wait4 on our own child, writing into live locals.
            let r = unsafe { libc::wait4(self.pid, &mut status, 0, &mut ru) };
            if r == self.pid {
                self.reaped = true;
                let tv =
                    |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
                return Ok((ExitStatus::from_raw(status), tv(ru.ru_utime) + tv(ru.ru_stime)));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::Sys { what: "waitpid".to_string(), source: err });
            }
        }
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: libc::c_int) {
        if !self.reaped {
            // SAFETY: kill on our own unreaped child's pid (it cannot be recycled before
            // we reap it).
            unsafe { libc::kill(self.pid, sig) };
        }
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        if self.go.is_some() {
            // Never released: closing the pipe makes it exit without running the target.
            self.go = None;
        } else {
            self.signal(libc::SIGKILL);
        }
        let _ = self.wait_status();
    }
}

/// Ignores SIGINT and SIGQUIT while alive (the target, in the same process group, gets
/// them and ends; strobe stays to report, as `time` does), then restores the previous
/// dispositions. A target started with [`HeldChild`] has the default dispositions
/// whatever strobe's are.
#[derive(Debug)]
pub struct InterruptGuard {
    old: [libc::sighandler_t; 2],
}

impl InterruptGuard {
    /// Starts ignoring SIGINT and SIGQUIT.
    pub fn ignore() -> InterruptGuard {
        // SAFETY: signal() with SIG_IGN installs no handler code; it returns the previous
        // disposition, which Drop restores.
        unsafe {
            InterruptGuard {
                old: [
                    libc::signal(libc::SIGINT, libc::SIG_IGN),
                    libc::signal(libc::SIGQUIT, libc::SIG_IGN),
                ],
            }
        }
    }
}

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        // SAFETY: restoring dispositions previously returned by signal().
        unsafe {
            libc::signal(libc::SIGINT, self.old[0]);
            libc::signal(libc::SIGQUIT, self.old[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_child_runs_and_its_status_is_mirrored() {
        let mut c = HeldChild::spawn(&Command::new("sh", ["-c", "exit 7"])).unwrap();
        c.release().unwrap();
        assert_eq!(c.wait().unwrap(), Exit::Code(7));
        let mut c = HeldChild::spawn(&Command::new("sh", ["-c", "kill -TERM $$"])).unwrap();
        c.release().unwrap();
        let e = c.wait().unwrap();
        assert_eq!(
            (e.code(), e.to_string()),
            (128 + libc::SIGTERM as u8, "signal 15 (SIGTERM)".into())
        );
    }

    #[test]
    fn kept_descriptors_reach_the_target_and_others_do_not() {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into the array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both fds were just created and are owned by nobody else.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let script = format!(
            "echo kept >&{0}; if [ -e /proc/$$/fd/{1} ]; then echo open; else echo closed; fi >&{0}",
            w.as_raw_fd(),
            r.as_raw_fd()
        );
        let mut cmd = Command::new("sh", ["-c", &script]);
        cmd.keep_fds.push(w.as_raw_fd());
        let mut c = HeldChild::spawn(&cmd).unwrap();
        c.release().unwrap();
        assert!(c.wait().unwrap().success());
        drop(w);
        let got = std::io::read_to_string(std::fs::File::from(r)).unwrap();
        assert_eq!(got, "kept\nclosed\n", "the read end stays closed in the target");
    }

    #[test]
    fn exec_failures_are_reported() {
        let e = HeldChild::spawn(&Command::new("no-such-command-strobe", Vec::<String>::new()))
            .unwrap_err();
        assert!(e.to_string().contains("not found"), "{e}");
        // The target's own PATH decides where a name is looked up.
        let mut cmd = Command::new("sh", ["-c", "true"]);
        cmd.env.push(("PATH".into(), "/nonexistent-strobe-dir".into()));
        assert!(HeldChild::spawn(&cmd).unwrap_err().to_string().contains("not found in PATH"));
        // An executable file that is neither ELF nor a script: execve says ENOEXEC.
        use std::os::unix::fs::PermissionsExt;
        let f = std::env::temp_dir().join(format!("strobe-noexec-{}", std::process::id()));
        std::fs::write(&f, b"plain text").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = HeldChild::spawn(&Command::new(&f, Vec::<String>::new())).unwrap();
        let e = c.release().unwrap_err();
        let _ = std::fs::remove_file(&f);
        assert!(e.to_string().contains("Exec format error"), "{e}");
    }

    #[test]
    fn a_child_never_released_never_runs_the_target() {
        let dir = std::env::temp_dir().join(format!("strobe-held-{}", std::process::id()));
        let marker = dir.with_extension("ran");
        let cmd = Command::new("touch", [marker.as_os_str()]);
        drop(HeldChild::spawn(&cmd).unwrap());
        assert!(!marker.exists(), "the held child must exit without exec");
    }

    #[test]
    fn environment_overrides_reach_the_target() {
        let dir = std::env::temp_dir().join(format!("strobe-env-{}", std::process::id()));
        let mut cmd =
            Command::new("sh", ["-c", &format!("echo \"$STROBE_TEST_VAR\" > {}", dir.display())]);
        cmd.env.push(("STROBE_TEST_VAR".into(), "overridden".into()));
        cmd.env.push(("STROBE_TEST_VAR".into(), "hello".into()));
        let mut c = HeldChild::spawn(&cmd).unwrap();
        c.release().unwrap();
        assert!(c.wait().unwrap().success());
        assert_eq!(std::fs::read_to_string(&dir).unwrap(), "hello\n");
        let _ = std::fs::remove_file(dir);
    }
}
