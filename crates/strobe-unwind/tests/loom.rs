//! loom models of the module table's protocol (`src/modules/registry.rs`),
//! run by `ci/loom.sh`: the real `Registry` code over modules whose
//! "unmapping" loom can see.
//!
//! Each module carries a loom `UnsafeCell` standing for its mapped memory:
//! readers read it for every module of the table they loaded (what a walk
//! does with a module's unwind tables), and the model's "real dlclose"
//! writes it. A write not ordered after every such read (an unmap a reader
//! could still see) is reported by loom as a causality violation; a reader
//! that finds a module already unmapped fails its assertion.
//!
//! 1. `dlclose_against_a_reader`: the dlclose protocol (unpublish, grace
//!    period, unmap, rescan, publish) against a reader in a read section.
//! 2. `stale_scan_cannot_resurrect`: the same with a concurrent `dlopen`
//!    offering a scan taken before the unload: it must not bring the module
//!    back, during the window or after.
#![cfg(loom)]

use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::thread;
use strobe_rcu::Domain;
use strobe_unwind::modules::{ModuleRange, Registry};

const LIVE: u64 = 0x11ce;
const DEAD: u64 = 0xdead;

struct Fake {
    range: (u64, u64),
    permanent: bool,
    memory: &'static UnsafeCell<u64>,
}

// SAFETY: the cell is written only by the model's unmap, which the protocol
// under test orders after every read; loom checks exactly that.
unsafe impl Sync for Fake {}
// SAFETY: as above.
unsafe impl Send for Fake {}

impl ModuleRange for Fake {
    fn range(&self) -> (u64, u64) {
        self.range
    }
    fn permanent(&self) -> bool {
        self.permanent
    }
}

fn module(start: u64, permanent: bool) -> Arc<Fake> {
    Arc::new(Fake {
        range: (start, start + 10),
        permanent,
        memory: Box::leak(Box::new(UnsafeCell::new(LIVE))),
    })
}

/// A walk: one read section reading every listed module's memory.
fn read(reg: &Registry<Fake>, handle: &strobe_rcu::LocalHandle) -> usize {
    let g = handle.read_lock();
    let t = reg.load(&g).expect("published");
    for m in t.modules() {
        // SAFETY: a read of the cell; loom reports it if it races the unmap.
        m.memory.with(|v| assert_eq!(unsafe { *v }, LIVE, "read an unmapped module"));
    }
    t.modules().len()
}

#[test]
fn dlclose_against_a_reader() {
    loom::model(|| {
        let reg = Arc::new(Registry::new(Domain::new()));
        let (main, lib) = (module(0, true), module(100, false));
        reg.publish(1, vec![main.clone(), lib.clone()]);
        let reader = {
            let reg = reg.clone();
            thread::spawn(move || {
                let h = reg.domain().register();
                read(&reg, &h);
                read(&reg, &h);
            })
        };
        reg.begin_close();
        // The real dlclose unmaps the library.
        lib.memory.with_mut(|v| unsafe { *v = DEAD });
        reg.end_close(2, vec![main.clone()]);
        reader.join().unwrap();
        assert_eq!(reg.latest().len(), 1);
    });
}

#[test]
fn stale_scan_cannot_resurrect() {
    loom::model(|| {
        let reg = Arc::new(Registry::new(Domain::new()));
        let (main, lib) = (module(0, true), module(100, false));
        reg.publish(1, vec![main.clone(), lib.clone()]);
        let reader = {
            let reg = reg.clone();
            thread::spawn(move || {
                let h = reg.domain().register();
                read(&reg, &h);
            })
        };
        let opener = {
            let (reg, main, lib) = (reg.clone(), main.clone(), lib.clone());
            // A dlopen's rescan taken before the unload (stamp 1), offered late.
            thread::spawn(move || reg.publish(1, vec![main, lib]))
        };
        reg.begin_close();
        lib.memory.with_mut(|v| unsafe { *v = DEAD });
        reg.end_close(2, vec![main.clone()]);
        opener.join().unwrap();
        reader.join().unwrap();
        // Whatever the order, the unloaded module is gone for good.
        let h = reg.domain().register();
        assert_eq!(read(&reg, &h), 1);
    });
}
