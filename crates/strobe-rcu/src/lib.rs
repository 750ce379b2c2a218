//! strobe-rcu: read-mostly synchronization and batched deferred reclamation.
//! (Being built; see issue 4.)
