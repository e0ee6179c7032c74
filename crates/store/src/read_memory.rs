//! Memory that reads of local chunk files land in. By default a read fills fresh heap memory;
//! a GPU decoder hands out pinned host memory instead, so the chunk's bytes upload to the
//! device as they are, without a staging copy.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// Hands out buffers for chunk reads ([`FetchBatchesExt::fetch_batches_into`]).
///
/// [`FetchBatchesExt::fetch_batches_into`]: crate::FetchBatchesExt::fetch_batches_into
pub trait ReadMemory: Send + Sync + fmt::Debug {
    /// A buffer of exactly `len` bytes to read into, or `None` to read into ordinary memory
    /// (none left, or too large).
    fn buffer(&self, len: usize) -> Option<Box<dyn ReadBuffer>>;

    /// A fetch stage reads batches of up to about `batch_bytes` into this memory,
    /// `read_ahead` at once, and the memory's owner holds some more until it is done with
    /// them (a GPU decoder: the batches it decodes at once): memory that is slow to set aside
    /// may be prepared now, in the background, for all of them. By default nothing is.
    fn expect_batches(self: Arc<Self>, batch_bytes: u64, read_ahead: usize) {
        let _ = (batch_bytes, read_ahead);
    }

    /// Whether the memory's owner reads whole chunk files of a local store itself, each just
    /// before decoding it ([`EncodedChunk::stored`](crate::EncodedChunk::stored)): the fetch
    /// stage then hands those chunks on unread. By default it reads them.
    fn reads_at_decode(&self) -> bool {
        false
    }
}

/// A buffer handed out by [`ReadMemory::buffer`]: written once by the read, then shared
/// read-only as the chunk's [`Bytes`].
pub trait ReadBuffer: AsRef<[u8]> + AsMut<[u8]> + Send + 'static {}

/// Owns a filled buffer behind a [`Bytes`].
struct Filled(Box<dyn ReadBuffer>);

impl AsRef<[u8]> for Filled {
    fn as_ref(&self) -> &[u8] {
        AsRef::<[u8]>::as_ref(&*self.0)
    }
}

/// The buffer's bytes, shared: the buffer is freed when the last clone or slice is dropped.
pub(crate) fn into_bytes(buffer: Box<dyn ReadBuffer>) -> Bytes {
    Bytes::from_owner(Filled(buffer))
}
