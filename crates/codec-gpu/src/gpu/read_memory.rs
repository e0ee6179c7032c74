//! Pinned host memory that chunk reads land in ([`ReadMemory`]): a chunk read into it uploads
//! to the device as it is, without the staging copy, and the read skips the page faults of
//! fresh heap memory.
//!
//! The memory is cut from slabs, each handed out front to back; a slab is reused once every
//! chunk read into it has been dropped (a batch keeps its chunks until the device has copied
//! them). With every slab in use, reads go to ordinary memory and are staged as before.
//!
//! `cudaHostAlloc` is slow (19-214 ms a slab on an H100, 35 ms median on an H200) and holds up
//! every other CUDA call of the process meanwhile: on the H200 an upload call that takes 5 us
//! waited 30 ms (median) beside it (`benches/pinned_allocation_probe.py`; 2026-11-25,
//! docs/benchmarks.md, "Defaults and the measurements behind them").
//! So the slabs a pipeline will need are allocated ahead, on a thread of their own, from when
//! it is built ([`ReadMemory::expect_batches`]); a read finding no room allocates one more
//! itself, unless an allocation is under way.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Instant;

use zarrpipe_cuda::alloc_pinned_host;
use zarrpipe_cuda::cudarc::driver::{CudaContext, DriverError, PinnedHostSlice};
use zarrpipe_store::{ReadBuffer, ReadMemory};

/// Bytes of one slab: many chunks each, few slabs to look through.
pub(super) const SLAB_BYTES: usize = 64 << 20;

/// Where pieces of a slab start (a cache line).
const PIECE_ALIGN: usize = 64;

/// One pinned allocation; its pieces keep it alive.
struct Slab {
    /// Never read through: the pieces hold its address.
    _memory: PinnedHostSlice<u8>,
    base: usize,
}

/// Pinned memory for reads, at most `most_slabs` slabs of [`SLAB_BYTES`].
pub(crate) struct PinnedReadMemory {
    context: Arc<CudaContext>,
    most_slabs: usize,
    /// Batches of reads the owning decoder holds past the fetch stage.
    batches_held: usize,
    state: Mutex<State>,
    /// Held through each allocation: one at a time.
    allocation: Mutex<()>,
    /// Signalled when the allocating thread stops.
    prepared: Condvar,
}

#[derive(Default)]
struct State {
    slabs: Vec<Arc<Slab>>,
    /// The slab being handed out, and how much of it is.
    current: Option<(usize, usize)>,
    /// Slabs to allocate ahead ([`ReadMemory::expect_batches`]).
    wanted: usize,
    /// The allocating thread runs.
    allocating_ahead: bool,
    /// An allocation failed: use what there is.
    no_more: bool,
}

impl std::fmt::Debug for PinnedReadMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedReadMemory")
            .field("most_slabs", &self.most_slabs)
            .finish_non_exhaustive()
    }
}

impl PinnedReadMemory {
    /// Up to `bytes` of pinned memory (rounded down to slabs; 0: none), allocated ahead once
    /// a pipeline says what it reads, and as reads need it. The decoder that owns it holds
    /// `batches_held` batches of reads past the fetch stage.
    pub(crate) fn new(context: Arc<CudaContext>, bytes: usize, batches_held: usize) -> Self {
        Self {
            context,
            most_slabs: bytes / SLAB_BYTES,
            batches_held,
            state: Mutex::new(State::default()),
            allocation: Mutex::new(()),
            prepared: Condvar::new(),
        }
    }

    /// Whether there is no memory to read into (less than a slab was asked for).
    pub(super) fn is_empty(&self) -> bool {
        self.most_slabs == 0
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The address ranges of the slabs so far: a chunk's bytes inside one of them were read
    /// here ([`SlabRanges::slab_of`]).
    pub(super) fn ranges(&self) -> SlabRanges {
        let mut starts: Vec<usize> = self.state().slabs.iter().map(|slab| slab.base).collect();
        starts.sort_unstable();
        SlabRanges(starts)
    }

    /// Slabs allocated so far.
    pub(super) fn slabs(&self) -> usize {
        self.state().slabs.len()
    }

    /// Waits until the slabs asked for ahead are allocated (or an allocation failed).
    pub(super) fn wait_prepared(&self) {
        let state = self.state();
        let _state = self
            .prepared
            .wait_while(state, |state| state.allocating_ahead)
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// Allocates one more slab, waiting for one under way when `wait`, else giving up.
    /// Returns whether it did.
    fn allocate_slab(&self, wait: bool) -> bool {
        let _one_at_a_time = match wait {
            true => self
                .allocation
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            false => match self.allocation.try_lock() {
                Ok(guard) => guard,
                Err(std::sync::TryLockError::Poisoned(poison)) => poison.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return false,
            },
        };
        let had = {
            let state = self.state();
            if state.no_more || state.slabs.len() >= self.most_slabs {
                return false;
            }
            state.slabs.len()
        };
        // Outside the state's lock: reads go on meanwhile.
        match self.new_slab() {
            Ok(slab) => {
                self.state().slabs.push(slab);
                true
            }
            Err(error) => {
                tracing::warn!(
                    "pinned memory for reads: {error:?} after {had} slabs of {SLAB_BYTES} bytes; \
                     the rest of the reads go to ordinary memory"
                );
                self.state().no_more = true;
                false
            }
        }
    }

    /// Marks the allocating thread stopped, under the state's lock.
    fn stop_ahead(&self, mut state: MutexGuard<'_, State>, allocated: usize, started: Instant) {
        state.allocating_ahead = false;
        self.prepared.notify_all();
        // The process's other CUDA calls wait on each allocation: a trace shows until when.
        tracing::debug!(
            slabs = state.slabs.len(),
            allocated,
            seconds = started.elapsed().as_secs_f64(),
            "pinned memory for reads: set aside ahead"
        );
    }

    fn new_slab(&self) -> Result<Arc<Slab>, DriverError> {
        // SAFETY: bytes are read by the host or the device only after a read wrote them. The
        // host reads chunks too (frame checks, CPU decoding).
        let mut memory = unsafe { alloc_pinned_host(&self.context, SLAB_BYTES) }?;
        let base = memory.as_mut_ptr()? as usize;
        Ok(Arc::new(Slab {
            _memory: memory,
            base,
        }))
    }
}

/// Allocates slabs into `memory` until it has the slabs wanted, is dropped, or can have no
/// more.
fn allocate_ahead(memory: &Weak<PinnedReadMemory>) {
    let started = Instant::now();
    let mut allocated = 0;
    while let Some(memory) = memory.upgrade() {
        {
            // Decided and marked under one lock: `expect_batches` raising `wanted` meanwhile
            // either is seen here or starts a new thread.
            let state = memory.state();
            if state.slabs.len() >= state.wanted {
                memory.stop_ahead(state, allocated, started);
                return;
            }
        }
        if !memory.allocate_slab(true) {
            // No more can be had (the most, or an allocation failed).
            memory.stop_ahead(memory.state(), allocated, started);
            return;
        }
        allocated += 1;
    }
}

impl State {
    /// `len` bytes of a slab with room for them: the current one or one no chunk holds any
    /// more.
    fn piece_with_room(&mut self, len: usize) -> Option<Box<dyn ReadBuffer>> {
        let (slab, start) = self.room(len)?;
        self.current = Some((slab, start + len));
        Some(Box::new(Piece {
            slab: self.slabs[slab].clone(),
            start,
            len,
        }))
    }

    /// Where a piece of `len` bytes fits: a slab's index and the piece's start.
    fn room(&mut self, len: usize) -> Option<(usize, usize)> {
        if let Some((slab, used)) = self.current {
            let start = used.next_multiple_of(PIECE_ALIGN);
            if start + len <= SLAB_BYTES {
                return Some((slab, start));
            }
        }
        // `get_mut` succeeds only for a slab no piece holds, and orders this read after the
        // last piece's drop.
        let free = self
            .slabs
            .iter_mut()
            .position(|slab| Arc::get_mut(slab).is_some())?;
        Some((free, 0))
    }
}

impl ReadMemory for PinnedReadMemory {
    fn buffer(&self, len: usize) -> Option<Box<dyn ReadBuffer>> {
        if len == 0 || len > SLAB_BYTES {
            return None;
        }
        if let Some(piece) = self.state().piece_with_room(len) {
            return Some(piece);
        }
        // Another reader may take the new slab first: then this read goes to ordinary memory.
        self.allocate_slab(false)
            .then(|| self.state().piece_with_room(len))
            .flatten()
    }

    /// Allocates ahead, on a thread of its own, the slabs that the batches read ahead and the
    /// decoder's take: their bytes, a quarter more (a slab is reused only once all of it is
    /// free) and one, up to the most.
    fn expect_batches(self: Arc<Self>, batch_bytes: u64, read_ahead: usize) {
        let batches = read_ahead.saturating_add(self.batches_held) as u64;
        let bytes = batch_bytes.saturating_mul(batches);
        let slabs = usize::try_from(bytes + bytes / 4)
            .unwrap_or(usize::MAX)
            .div_ceil(SLAB_BYTES)
            .saturating_add(1)
            .min(self.most_slabs);
        let mut state = self.state();
        state.wanted = state.wanted.max(slabs);
        if state.allocating_ahead || state.slabs.len() >= state.wanted {
            return;
        }
        state.allocating_ahead = true;
        drop(state);
        let memory = Arc::downgrade(&self);
        let started = std::thread::Builder::new()
            .name("zarrpipe-pinned-reads".into())
            .spawn(move || allocate_ahead(&memory));
        if let Err(error) = started {
            tracing::warn!("pinned memory for reads: no thread to allocate it ahead ({error})");
            self.state().allocating_ahead = false;
            self.prepared.notify_all();
        }
    }
}

/// `len` bytes of a slab from `start`; no other piece overlaps them.
struct Piece {
    slab: Arc<Slab>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the slab is alive (held) and `start + len` lies inside it.
        unsafe { std::slice::from_raw_parts((self.slab.base + self.start) as *const u8, self.len) }
    }
}

impl AsMut<[u8]> for Piece {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; no other piece overlaps these bytes, and this piece is borrowed
        // mutably.
        unsafe {
            std::slice::from_raw_parts_mut((self.slab.base + self.start) as *mut u8, self.len)
        }
    }
}

impl ReadBuffer for Piece {}

/// The slabs' start addresses, sorted.
pub(super) struct SlabRanges(Vec<usize>);

impl SlabRanges {
    /// The slab (its start address) holding all of `bytes`, if one does.
    pub(super) fn slab_of(&self, bytes: &[u8]) -> Option<usize> {
        let (start, end) = (
            bytes.as_ptr() as usize,
            bytes.as_ptr() as usize + bytes.len(),
        );
        let after = self.0.partition_point(|&base| base <= start);
        let base = *self.0.get(after.checked_sub(1)?)?;
        (end <= base + SLAB_BYTES).then_some(base)
    }
}
