//! Pinned host memory that chunk reads land in ([`ReadMemory`]): a chunk read into it uploads
//! to the device as it is, without the staging copy, and the read skips the page faults of
//! fresh heap memory.
//!
//! The memory is cut from slabs, each handed out front to back; a slab is reused once every
//! chunk read into it has been dropped (a batch keeps its chunks until the device has copied
//! them). With every slab in use, reads go to ordinary memory and are staged as before.

use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{CudaContext, PinnedHostSlice};
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
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    slabs: Vec<Arc<Slab>>,
    /// The slab being handed out, and how much of it is.
    current: Option<(usize, usize)>,
    /// An allocation failed: use what there is.
    no_more: bool,
    /// A slab is being allocated.
    allocating: bool,
}

impl std::fmt::Debug for PinnedReadMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedReadMemory")
            .field("most_slabs", &self.most_slabs)
            .finish_non_exhaustive()
    }
}

impl PinnedReadMemory {
    /// Up to `bytes` of pinned memory (rounded down to slabs; 0: none), allocated as needed.
    pub(crate) fn new(context: Arc<CudaContext>, bytes: usize) -> Self {
        Self {
            context,
            most_slabs: bytes / SLAB_BYTES,
            state: Mutex::new(State::default()),
        }
    }

    /// The address ranges of the slabs so far: a chunk's bytes inside one of them were read
    /// here ([`SlabRanges::slab_of`]).
    pub(super) fn ranges(&self) -> SlabRanges {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut starts: Vec<usize> = state.slabs.iter().map(|slab| slab.base).collect();
        starts.sort_unstable();
        SlabRanges(starts)
    }

    /// A new slab, allocated outside the lock (it takes milliseconds): reads meanwhile go to
    /// ordinary memory rather than wait.
    fn grow(&self) -> Option<Arc<Slab>> {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.allocating || state.no_more || state.slabs.len() >= self.most_slabs {
                return None;
            }
            state.allocating = true;
        }
        // SAFETY: bytes are read by the host or the device only after a read wrote them.
        // Not write-combined (cudarc's default): the host reads chunks too (frame checks, CPU
        // decoding), and reading write-combined memory is uncached.
        let allocated = unsafe { self.context.alloc_pinned_with_flags::<u8>(SLAB_BYTES, 0) }
            .and_then(|mut memory| {
                let base = memory.as_mut_ptr()? as usize;
                Ok(Arc::new(Slab {
                    _memory: memory,
                    base,
                }))
            });
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.allocating = false;
        match allocated {
            Ok(slab) => Some(slab),
            Err(error) => {
                tracing::warn!("pinned memory for reads: {error:?}; reading into ordinary memory");
                state.no_more = true;
                None
            }
        }
    }
}

impl State {
    /// A slab with room for `len` more bytes: the current one or one no chunk holds any more.
    /// Returns its index and where the piece starts.
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

    /// Hands out `len` bytes of slab `slab` from `start`.
    fn piece(&mut self, slab: usize, start: usize, len: usize) -> Box<dyn ReadBuffer> {
        self.current = Some((slab, start + len));
        Box::new(Piece {
            slab: self.slabs[slab].clone(),
            start,
            len,
        })
    }
}

impl ReadMemory for PinnedReadMemory {
    fn buffer(&self, len: usize) -> Option<Box<dyn ReadBuffer>> {
        if len == 0 || len > SLAB_BYTES {
            return None;
        }
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((slab, start)) = state.room(len) {
                return Some(state.piece(slab, start, len));
            }
        }
        let slab = self.grow()?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.slabs.push(slab);
        let index = state.slabs.len() - 1;
        Some(state.piece(index, 0, len))
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
