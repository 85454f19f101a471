//! [`CountingAlloc`]: the system allocator, counting the bytes currently allocated.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// A global allocator that forwards to [`System`] and keeps the number of
/// bytes currently allocated (requested sizes, not the allocator's overhead).
///
/// Install it in a binary with `#[global_allocator]`; only the binaries that
/// measure memory do, so the others pay nothing for the counting.
#[derive(Debug)]
pub struct CountingAlloc {
    live: AtomicIsize,
    allocations: AtomicUsize,
}

impl CountingAlloc {
    /// A counter at zero.
    pub const fn new() -> Self {
        CountingAlloc {
            live: AtomicIsize::new(0),
            allocations: AtomicUsize::new(0),
        }
    }

    /// Bytes allocated and not yet freed.
    pub fn live_bytes(&self) -> isize {
        self.live.load(Ordering::Relaxed)
    }

    /// Allocations made so far (reallocations count as one more).
    pub fn allocations(&self) -> usize {
        self.allocations.load(Ordering::Relaxed)
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters are plain atomics and never affect the memory handed out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we forward.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            self.live
                .fetch_add(layout.size() as isize, Ordering::Relaxed);
            self.allocations.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            self.live
                .fetch_add(layout.size() as isize, Ordering::Relaxed);
            self.allocations.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (we hand out nothing else).
        unsafe { System.dealloc(ptr, layout) };
        self.live
            .fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; the caller guarantees `new_size` is valid for `layout`'s alignment.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            self.live.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
            self.allocations.fetch_add(1, Ordering::Relaxed);
        }
        p
    }
}
