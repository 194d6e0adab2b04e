//! What each thread keeps for retrying calls: the ambient slots (`ambient.rs`: the operation
//! and attempt installed now) and the upstream cache (`hot.rs`), in one thread-local. A fast
//! first attempt (`first.rs`) needs both on its way in and on its way out; one access each way
//! costs half of two. The fast first attempt's marker is kept beside the slots, in cells, so
//! that leaving takes it out without borrowing them (see [`Marker`]).

use std::cell::RefCell;
use std::thread::AccessError;

use crate::ambient::{Marker, Slots};
use crate::hot::Cache;

pub(crate) struct Thread {
    pub(crate) ambient: RefCell<Slots>,
    pub(crate) marker: Marker,
    pub(crate) cache: RefCell<Cache>,
}

thread_local! {
    static THREAD: Thread = const {
        Thread {
            ambient: RefCell::new(Slots::EMPTY),
            marker: Marker::empty(),
            cache: RefCell::new(Cache::EMPTY),
        }
    };
}

/// Runs `f` with this thread's state; an error once the thread is ending (its thread-locals
/// being torn down).
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&Thread) -> R) -> Result<R, AccessError> {
    THREAD.try_with(f)
}
