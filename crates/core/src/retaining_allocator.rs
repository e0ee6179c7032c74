//! A global allocator that keeps freed blocks of batch-tensor and chunk size for the next
//! allocation of the same size. Host batches are hundreds of megabytes each, made and
//! dropped every few milliseconds; the allocators beneath hand such blocks back to the
//! kernel at once, and every page of the next batch is then faulted in and zeroed again (a
//! third of the host path's time in `perf` on W1). Decoded chunks of a split batch's CPU part
//! (megabytes each, hundreds a batch) go the same way: beside setup A's bf16 model their
//! threads spent 8-15 ms of CPU time a chunk where the same chunks decoded in place took 7
//! (H200, 2026-11-29; docs/training-runs.md). Blocks asked for zeroed are not served from here:
//! only memory its user writes whole (the host collator's tensors, a chunk decoded into a
//! buffer it filled first) skips the zeroing.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Mutex;

/// Batch tensors: blocks of at least 32 MiB, at most 8 of them and 4 GiB kept at once.
const BATCH_LEAST: usize = 32 << 20;
const BATCH_BLOCKS: usize = 8;
const BATCH_BYTES: usize = 4 << 30;
/// Decoded chunks: blocks of at least 1 MiB (and under a batch's), at most 512 of them and
/// 1 GiB kept at once: a few batches' worth of chunks where a chunk is a few megabytes.
const CHUNK_LEAST: usize = 1 << 20;
const CHUNK_BLOCKS: usize = 512;
const CHUNK_BYTES: usize = 1 << 30;

/// Wraps allocator `A`, keeping freed blocks of 32 MiB or more (up to 8, 4 GiB in all) and
/// of 1 to 32 MiB (up to 512, 1 GiB in all) for reuse by allocations of exactly their size
/// and alignment.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOCATOR: zarrpipe_core::RetainingAllocator<std::alloc::System> =
///     zarrpipe_core::RetainingAllocator::new(std::alloc::System);
/// ```
pub struct RetainingAllocator<A> {
    inner: A,
    batches: Mutex<Kept<BATCH_BLOCKS>>,
    chunks: Mutex<Kept<CHUNK_BLOCKS>>,
}

/// One class's kept blocks: each its address, size and alignment; at most `most_bytes` of
/// them.
struct Kept<const N: usize> {
    blocks: [Option<(usize, usize, usize)>; N],
    bytes: usize,
    most_bytes: usize,
}

impl<const N: usize> Kept<N> {
    const fn new(most_bytes: usize) -> Self {
        Self {
            blocks: [None; N],
            bytes: 0,
            most_bytes,
        }
    }

    // Out of line: inlined into the allocator shims, it crashes rustc 1.95's LLVM.
    #[inline(never)]
    fn take(&mut self, layout: Layout) -> Option<*mut u8> {
        let slot = self.blocks.iter().position(|block| {
            matches!(block, Some((_, size, align)) if *size == layout.size() && *align == layout.align())
        })?;
        let (address, _, _) = self.blocks[slot].take()?;
        self.bytes -= layout.size();
        Some(address as *mut u8)
    }

    /// Keeps the block, making room by letting the largest kept one go; returns the blocks
    /// to free (the one let go, and this one when it still does not fit).
    // Out of line, as `take`.
    #[inline(never)]
    fn keep(&mut self, ptr: *mut u8, layout: Layout) -> [Option<(*mut u8, Layout)>; 2] {
        let full = |kept: &Self| {
            kept.bytes + layout.size() > kept.most_bytes || kept.blocks.iter().all(Option::is_some)
        };
        let mut let_go = None;
        if full(self) {
            let largest = (0..N).max_by_key(|&i| self.blocks[i].map_or(0, |b| b.1));
            if let Some((address, size, align)) = largest.and_then(|i| self.blocks[i].take()) {
                self.bytes -= size;
                // SAFETY: the layout the block was allocated with.
                let old = unsafe { Layout::from_size_align_unchecked(size, align) };
                let_go = Some((address as *mut u8, old));
            }
        }
        if full(self) {
            return [let_go, Some((ptr, layout))];
        }
        let slot = self
            .blocks
            .iter()
            .position(Option::is_none)
            .expect("not full");
        self.blocks[slot] = Some((ptr as usize, layout.size(), layout.align()));
        self.bytes += layout.size();
        [let_go, None]
    }
}

impl<A> RetainingAllocator<A> {
    /// Keeps freed large blocks of `inner`'s.
    pub const fn new(inner: A) -> Self {
        Self {
            inner,
            batches: Mutex::new(Kept::new(BATCH_BYTES)),
            chunks: Mutex::new(Kept::new(CHUNK_BYTES)),
        }
    }

    /// A kept block of `layout`'s size, which is at least [`CHUNK_LEAST`].
    fn take(&self, layout: Layout) -> Option<*mut u8> {
        match layout.size() >= BATCH_LEAST {
            true => lock(&self.batches).take(layout),
            false => lock(&self.chunks).take(layout),
        }
    }

    /// The blocks to free after keeping this one, of at least [`CHUNK_LEAST`], where its
    /// class has room.
    fn keep(&self, ptr: *mut u8, layout: Layout) -> [Option<(*mut u8, Layout)>; 2] {
        match layout.size() >= BATCH_LEAST {
            true => lock(&self.batches).keep(ptr, layout),
            false => lock(&self.chunks).keep(ptr, layout),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

// SAFETY: blocks come from `inner` and go back to it with the layout they were allocated
// with; a kept block is handed out once, to an allocation of exactly its layout.
unsafe impl<A: GlobalAlloc> GlobalAlloc for RetainingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= CHUNK_LEAST {
            if let Some(ptr) = self.take(layout) {
                return ptr;
            }
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above; fresh zeroed memory from the allocator beneath.
        unsafe { self.inner.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() < CHUNK_LEAST {
            // SAFETY: allocated by `inner` with this layout.
            return unsafe { self.inner.dealloc(ptr, layout) };
        }
        for (ptr, layout) in self.keep(ptr, layout).into_iter().flatten() {
            // SAFETY: a block of `inner`'s with its own layout.
            unsafe { self.inner.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above: blocks handed out here are `inner`'s, with this layout.
        unsafe { self.inner.realloc(ptr, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_large_block_serves_the_next_allocation_of_its_size() {
        let allocator = RetainingAllocator::new(std::alloc::System);
        for least in [BATCH_LEAST, CHUNK_LEAST] {
            let layout = Layout::from_size_align(least, 64).unwrap();
            let other = Layout::from_size_align(least + 4096, 64).unwrap();
            unsafe {
                let first = allocator.alloc(layout);
                first.write(7);
                allocator.dealloc(first, layout);
                let different = allocator.alloc(other);
                assert_ne!(different, first, "only a block of the same size is reused");
                allocator.dealloc(different, other);
                let again = allocator.alloc(layout);
                assert_eq!(again, first, "the kept block is reused");
                // Zeroed allocations never get a kept block.
                allocator.dealloc(again, layout);
                let zeroed = allocator.alloc_zeroed(layout);
                assert_eq!(*zeroed, 0);
                allocator.dealloc(zeroed, layout);
            }
        }
    }

    #[test]
    fn small_blocks_are_not_kept() {
        let allocator = RetainingAllocator::new(std::alloc::System);
        let layout = Layout::from_size_align(CHUNK_LEAST - 1, 64).unwrap();
        unsafe {
            let block = allocator.alloc(layout);
            allocator.dealloc(block, layout);
        }
        assert_eq!(lock(&allocator.chunks).bytes, 0);
        assert_eq!(lock(&allocator.batches).bytes, 0);
    }

    #[test]
    fn keeps_at_most_its_bytes() {
        let allocator = RetainingAllocator::new(std::alloc::System);
        let layout = Layout::from_size_align(BATCH_BYTES / 2 + 1, 64).unwrap();
        unsafe {
            let (a, b) = (allocator.alloc(layout), allocator.alloc(layout));
            allocator.dealloc(a, layout);
            allocator.dealloc(b, layout);
            let kept = lock(&allocator.batches);
            assert!(kept.bytes <= BATCH_BYTES);
            assert_eq!(kept.blocks.iter().flatten().count(), 1);
        }
    }

    #[test]
    fn keeps_at_most_its_blocks_letting_the_largest_go() {
        let allocator = RetainingAllocator::new(std::alloc::System);
        let small = Layout::from_size_align(CHUNK_LEAST, 64).unwrap();
        let large = Layout::from_size_align(CHUNK_LEAST * 2, 64).unwrap();
        unsafe {
            let first = allocator.alloc(large);
            let rest: Vec<_> = (0..CHUNK_BLOCKS).map(|_| allocator.alloc(small)).collect();
            allocator.dealloc(first, large);
            for block in rest {
                allocator.dealloc(block, small);
            }
            let kept = lock(&allocator.chunks);
            assert_eq!(kept.blocks.iter().flatten().count(), CHUNK_BLOCKS);
            assert_eq!(kept.bytes, CHUNK_BLOCKS * CHUNK_LEAST);
        }
    }
}
