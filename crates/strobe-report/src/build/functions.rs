//! Phase 2, function folding: each symbolized address to its function, one
//! [`FunctionStats`] per function. Two addresses are the same function when they have
//! the same name in the same file (module path). With inlined frames (`--inline`), an
//! address belongs to its innermost inlined function (where its self samples and windows
//! go), and the functions it is inlined into are its callers on every path through it.
//!
//! What a frame is called is decided in one place, [`identity`], after one renaming
//! rule: every frame in strobe's agent library is [`AGENT`] (one row for the
//! profiler's own work in the target), and such frames are marked so call paths can
//! leave them out (the agent's thread trampoline sits between libc's thread start and
//! the user's routine).
//!
//! Owns: the function list and each address's function. Must never count samples.

use rustc_hash::FxHashMap;

use crate::report::{FunctionStats, AGENT};
use crate::symbolize::Frame;

/// Whether a module is strobe's agent library.
fn is_agent_module(module: &str) -> bool {
    module.starts_with("libstrobe_agent")
}

/// Names every frame in strobe's agent library [`AGENT`], without inlined frames or
/// source line.
pub(crate) fn name_agent_frames(frames: &mut [Frame]) {
    for f in frames.iter_mut().filter(|f| is_agent_module(&f.module)) {
        f.function = AGENT.to_string();
        f.inlined.clear();
        f.source = None;
    }
}

/// The functions, and each address's.
#[derive(Debug, Default)]
pub(crate) struct Functions {
    /// Every function met, in the order first met.
    pub list: Vec<FunctionStats>,
    /// Per address: its (innermost) function.
    pub of_addr: Vec<usize>,
    /// Per address: the functions it is inlined into, outermost first (empty without
    /// inlined frames).
    pub inline_callers: Vec<Vec<usize>>,
    /// Per address: whether it is in strobe's agent (no place in a caller chain).
    pub agent: Vec<bool>,
}

impl Functions {
    /// The function of address `a`.
    #[inline]
    pub(crate) fn of(&self, a: usize) -> Option<usize> {
        self.of_addr.get(a).copied()
    }

    /// Whether address `a` is in strobe's agent.
    #[inline]
    pub(crate) fn is_agent(&self, a: usize) -> bool {
        self.agent.get(a).copied().unwrap_or(false)
    }
}

/// The identity of the function `name` met at a frame of `f`: its module path and name.
fn identity<'a>(f: &'a Frame, name: &'a str) -> (&'a str, &'a str) {
    (f.module_path.as_str(), name)
}

/// Folds `frames` (one per interned address) to functions with `width` counters.
pub(crate) fn fold(frames: &[Frame], width: usize) -> Functions {
    let mut index: FxHashMap<(String, String), usize> = FxHashMap::default();
    let mut out = Functions::default();
    let list = &mut out.list;
    let mut function_of = |f: &Frame, name: &str| -> usize {
        let (module_path, name) = identity(f, name);
        *index.entry((module_path.to_string(), name.to_string())).or_insert_with(|| {
            list.push(FunctionStats::empty(name, &f.module, module_path, width));
            list.len() - 1
        })
    };
    for f in frames {
        let outer = function_of(f, &f.function);
        let mut chain = vec![outer];
        for g in &f.inlined {
            chain.push(function_of(f, &g.function));
        }
        let leaf = chain.pop().unwrap_or(outer);
        out.inline_callers.push(chain);
        out.of_addr.push(leaf);
        out.agent.push(is_agent_module(&f.module));
    }
    out
}

/// The source line (`file:line`) of address `a` in its innermost function.
pub(crate) fn line_of(frames: &[Frame], a: usize) -> Option<&String> {
    let f = frames.get(a)?;
    match f.inlined.last() {
        Some(g) => g.source.as_ref(),
        None => f.source.as_ref(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::symbolize::InlinedFrame;

    /// A frame of `function` in the module at `path`.
    pub(crate) fn frame(function: &str, path: &str, source: Option<&str>) -> Frame {
        Frame {
            function: function.into(),
            module: path.rsplit('/').next().unwrap_or(path).into(),
            module_path: path.into(),
            source: source.map(str::to_string),
            inlined: Vec::new(),
        }
    }

    #[test]
    fn same_name_in_the_same_file_is_one_function_in_another_file_another() {
        let frames = [
            frame("f", "/bin/a", Some("a.c:1")),
            frame("g", "/bin/a", None),
            frame("f", "/bin/a", Some("a.c:2")),
            frame("f", "/lib/b.so", None),
        ];
        let fns = fold(&frames, 2);
        let names: Vec<(&str, &str)> =
            fns.list.iter().map(|f| (f.function.as_str(), f.module.as_str())).collect();
        assert_eq!(names, [("f", "a"), ("g", "a"), ("f", "b.so")]);
        assert_eq!(fns.of_addr, [0, 1, 0, 2]);
        assert!(fns.inline_callers.iter().all(Vec::is_empty));
        assert!(fns.list.iter().all(|f| f.sums.width() == 2 && f.samples == 0));
        assert_eq!(line_of(&frames, 2).map(String::as_str), Some("a.c:2"));
    }

    #[test]
    fn the_agents_frames_are_one_function_marked_as_the_agents() {
        let mut frames = [
            frame("strobe_thread_start", "/usr/lib/libstrobe_agent.so", Some("agent.rs:1")),
            frame("on_signal", "/usr/lib/libstrobe_agent.so", None),
            frame("main", "/bin/a", None),
        ];
        name_agent_frames(&mut frames);
        assert!(frames[0].source.is_none());
        let fns = fold(&frames, 1);
        let names: Vec<&str> = fns.list.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, [AGENT, "main"]);
        assert_eq!(fns.of_addr, [0, 0, 1]);
        assert_eq!((fns.is_agent(0), fns.is_agent(1), fns.is_agent(2)), (true, true, false));
    }

    #[test]
    fn an_address_belongs_to_its_innermost_inlined_function() {
        let mut f = frame("outer", "/bin/a", Some("a.c:10"));
        f.inlined = vec![
            InlinedFrame { function: "mid".into(), source: Some("a.c:20".into()) },
            InlinedFrame { function: "inner".into(), source: Some("a.c:30".into()) },
        ];
        let frames = [f, frame("mid", "/bin/a", None)];
        let fns = fold(&frames, 1);
        let names: Vec<&str> = fns.list.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["outer", "mid", "inner"]);
        assert_eq!(fns.of_addr, [2, 1]);
        assert_eq!(fns.inline_callers[0], [0, 1], "outermost first");
        assert_eq!(line_of(&frames, 0).map(String::as_str), Some("a.c:30"));
    }
}
