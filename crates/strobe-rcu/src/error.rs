//! The crate's typed errors. Owns only error values and their messages; must
//! never be constructed on a signal-handler path (formatting allocates).

/// Why an operation of this crate refused to run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A call that waits for a grace period was made inside a read section:
    /// the grace period would wait for that very section, forever.
    #[error(
        "strobe_rcu::{what}() called inside a read section (nesting depth {depth}): it would \
         wait for that section forever; drop every ReadGuard on this thread first"
    )]
    InReadSection {
        /// The function that was called.
        what: &'static str,
        /// The calling thread's read-section nesting depth.
        depth: usize,
    },
}
