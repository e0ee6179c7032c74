//! A global allocator that keeps a few freed blocks of batch-tensor size for the next
//! allocation of the same size. Host batches are hundreds of megabytes each, made and
//! dropped every few milliseconds; the allocators beneath hand such blocks back to the
//! kernel at once, and every page of the next batch is then faulted in and zeroed again (a
//! third of the host path's time in `perf` on W1). Blocks asked for zeroed are not served
//! from here: only the host collator's tensors, which it writes whole, skip the zeroing.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Mutex;

/// Blocks at least this large are kept when freed.
const MIN_KEPT: usize = 32 << 20;
/// At most this many blocks, and this many bytes, are kept at once.
const MAX_BLOCKS: usize = 8;
const MAX_BYTES: usize = 4 << 30;

/// Wraps allocator `A`, keeping up to [`MAX_BLOCKS`] freed blocks of 32 MiB or more (4 GiB
/// in all) for reuse by allocations of exactly their size and alignment.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOCATOR: zarrpipe_core::RetainingAllocator<std::alloc::System> =
///     zarrpipe_core::RetainingAllocator::new(std::alloc::System);
/// ```
pub struct RetainingAllocator<A> {
    inner: A,
    kept: Mutex<Kept>,
}

struct Kept {
    /// Each kept block: its address, size and alignment.
    blocks: [Option<(usize, usize, usize)>; MAX_BLOCKS],
    bytes: usize,
}

impl<A> RetainingAllocator<A> {
    /// Keeps freed large blocks of `inner`'s.
    pub const fn new(inner: A) -> Self {
        Self {
            inner,
            kept: Mutex::new(Kept {
                blocks: [None; MAX_BLOCKS],
                bytes: 0,
            }),
        }
    }

    // Out of line: inlined into the allocator shims, it crashes rustc 1.95's LLVM.
    #[inline(never)]
    fn take(&self, layout: Layout) -> Option<*mut u8> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let slot = kept
            .blocks
            .iter()
            .position(|block| {
                matches!(block, Some((_, size, align)) if *size == layout.size() && *align == layout.align())
            })?;
        let (address, _, _) = kept.blocks[slot].take()?;
        kept.bytes -= layout.size();
        Some(address as *mut u8)
    }

    /// Keeps the block, making room by letting the largest kept one go; returns the blocks
    /// to free (the one let go, and this one when it still does not fit).
    // Out of line, as `take`.
    #[inline(never)]
    fn keep(&self, ptr: *mut u8, layout: Layout) -> [Option<(*mut u8, Layout)>; 2] {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let full = |kept: &Kept| {
            kept.bytes + layout.size() > MAX_BYTES || kept.blocks.iter().all(Option::is_some)
        };
        let mut let_go = None;
        if full(&kept) {
            let largest = (0..MAX_BLOCKS).max_by_key(|&i| kept.blocks[i].map_or(0, |b| b.1));
            if let Some((address, size, align)) = largest.and_then(|i| kept.blocks[i].take()) {
                kept.bytes -= size;
                // SAFETY: the layout the block was allocated with.
                let old = unsafe { Layout::from_size_align_unchecked(size, align) };
                let_go = Some((address as *mut u8, old));
            }
        }
        if full(&kept) {
            return [let_go, Some((ptr, layout))];
        }
        let slot = kept
            .blocks
            .iter()
            .position(Option::is_none)
            .expect("not full");
        kept.blocks[slot] = Some((ptr as usize, layout.size(), layout.align()));
        kept.bytes += layout.size();
        [let_go, None]
    }
}

// SAFETY: blocks come from `inner` and go back to it with the layout they were allocated
// with; a kept block is handed out once, to an allocation of exactly its layout.
unsafe impl<A: GlobalAlloc> GlobalAlloc for RetainingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= MIN_KEPT {
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
        if layout.size() < MIN_KEPT {
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
        let layout = Layout::from_size_align(MIN_KEPT, 64).unwrap();
        let other = Layout::from_size_align(MIN_KEPT + 4096, 64).unwrap();
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

    #[test]
    fn keeps_at_most_its_bytes() {
        let allocator = RetainingAllocator::new(std::alloc::System);
        let layout = Layout::from_size_align(MAX_BYTES / 2 + 1, 64).unwrap();
        unsafe {
            let (a, b) = (allocator.alloc(layout), allocator.alloc(layout));
            allocator.dealloc(a, layout);
            allocator.dealloc(b, layout);
            let kept = allocator.kept.lock().unwrap();
            assert!(kept.bytes <= MAX_BYTES);
            assert_eq!(kept.blocks.iter().flatten().count(), 1);
        }
    }
}
