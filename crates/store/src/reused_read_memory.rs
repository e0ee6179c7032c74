//! Heap memory for chunk reads, used again: a buffer goes back to the pool when the last
//! clone of its chunk's bytes is dropped, and the next read of a chunk that fits takes it.
//! Read into fresh memory instead, every chunk file faults its pages in and the kernel zeroes
//! them first: on a 2-core development machine, a fifth of the host path's time on W1
//! (`perf`, 2026-11-27; docs/benchmarks.md, "The CPU path against the cores' bound").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use crate::{ReadBuffer, ReadMemory};

/// Freed buffers kept before the first batch's size is known.
const FIRST_MOST_BYTES: usize = 1 << 30;

/// Reused heap buffers for the reads of a CPU decoder's chunks.
#[derive(Debug, Default)]
pub struct ReusedReadMemory {
    pool: Arc<Pool>,
    /// Whole local chunk files are read by their decoder instead ([`ReadMemory::reads_at_decode`]).
    at_decode: bool,
}

#[derive(Debug, Default)]
struct Pool(Mutex<Free>);

/// Freed buffers by length (each written whole), and how many bytes may be kept.
#[derive(Debug, Default)]
struct Free {
    buffers: BTreeMap<usize, Vec<Vec<u8>>>,
    bytes: usize,
    most: Option<usize>,
}

impl ReusedReadMemory {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same, for a decoder that reads whole local chunk files itself, just before
    /// decoding each: the fetch stage hands those on unread, and reads only the rest (inner
    /// chunks of shards, other stores) into this memory.
    pub fn read_at_decode() -> Self {
        Self {
            at_decode: true,
            ..Self::default()
        }
    }

    /// Bytes of freed buffers kept now, for tests and reports.
    pub fn kept_bytes(&self) -> usize {
        self.pool.lock().bytes
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Free> {
        self.0.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// The smallest kept buffer of at least `len` bytes, else the largest (to grow).
    fn take(&self, len: usize) -> Option<Vec<u8>> {
        let mut free = self.lock();
        let key = match free.buffers.range(len..).next() {
            Some((&key, _)) => key,
            None => *free.buffers.keys().next_back()?,
        };
        let buffers = free.buffers.get_mut(&key)?;
        let buffer = buffers.pop()?;
        if buffers.is_empty() {
            free.buffers.remove(&key);
        }
        free.bytes -= buffer.len();
        Some(buffer)
    }

    fn give(&self, buffer: Vec<u8>) {
        let mut free = self.lock();
        let most = free.most.unwrap_or(FIRST_MOST_BYTES);
        if free.bytes + buffer.len() > most {
            return;
        }
        free.bytes += buffer.len();
        free.buffers.entry(buffer.len()).or_default().push(buffer);
    }
}

impl ReadMemory for ReusedReadMemory {
    fn buffer(&self, len: usize) -> Option<Box<dyn ReadBuffer>> {
        let mut bytes = self.pool.take(len).unwrap_or_default();
        // Zeroes only what the buffer never held: a fresh one once, a smaller one's growth,
        // with room to spare so that chunks a little larger find it fits next time.
        if bytes.len() < len {
            bytes.resize(room_for(len), 0);
        }
        Some(Box::new(Reused {
            bytes,
            len,
            pool: Arc::downgrade(&self.pool),
        }))
    }

    fn reads_at_decode(&self) -> bool {
        self.at_decode
    }

    /// Keeps up to the reads of the batches read ahead and one more being decoded.
    fn expect_batches(self: Arc<Self>, batch_bytes: u64, read_ahead: usize) {
        let most = usize::try_from(batch_bytes)
            .unwrap_or(usize::MAX)
            .saturating_mul(read_ahead + 1);
        self.pool.lock().most = Some(most);
    }
}

/// The size of a new or grown buffer for a chunk of `len` bytes: an eighth more, in whole
/// 64 KiB pages. Compressed chunks of one variable differ in size by a few percent; grown to
/// each one's exact size, the pool's buffers were grown (faulted in and zeroed) again and
/// again.
pub(crate) fn room_for(len: usize) -> usize {
    const PAGE: usize = 64 << 10;
    len.saturating_add(len / 8)
        .div_ceil(PAGE)
        .saturating_mul(PAGE)
}

/// A pool buffer lent to one read: its first `len` bytes are the chunk's.
struct Reused {
    bytes: Vec<u8>,
    len: usize,
    pool: Weak<Pool>,
}

impl AsRef<[u8]> for Reused {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl AsMut<[u8]> for Reused {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..self.len]
    }
}

impl ReadBuffer for Reused {}

impl Drop for Reused {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(std::mem::take(&mut self.bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(buffer: &dyn ReadBuffer) -> &[u8] {
        AsRef::<[u8]>::as_ref(buffer)
    }

    #[test]
    fn a_freed_buffer_serves_the_next_read_that_fits() {
        let memory = ReusedReadMemory::new();
        let mut first = memory.buffer(1000).expect("a buffer");
        AsMut::<[u8]>::as_mut(&mut *first).fill(7);
        let address = read(&*first).as_ptr();
        drop(first);
        assert_eq!(memory.kept_bytes(), room_for(1000));
        // A smaller read takes the kept buffer, its first bytes the read's.
        let second = memory.buffer(600).expect("a buffer");
        assert_eq!(read(&*second).len(), 600);
        assert_eq!(read(&*second).as_ptr(), address);
        assert_eq!(memory.kept_bytes(), 0);
        drop(second);
        // One larger than its room grows it.
        let larger = room_for(1000) + 1;
        let third = memory.buffer(larger).expect("a buffer");
        assert_eq!(read(&*third).len(), larger);
        assert!(read(&*third)[..1000].iter().all(|&byte| byte == 7));
    }

    #[test]
    fn a_chunk_a_little_larger_than_the_last_takes_the_same_buffer() {
        let memory = ReusedReadMemory::new();
        let len = 2_000_000;
        let first = memory.buffer(len).unwrap();
        let address = read(&*first).as_ptr();
        drop(first);
        let larger = memory.buffer(len + len / 10).unwrap();
        assert_eq!(read(&*larger).as_ptr(), address);
        assert_eq!(read(&*larger).len(), len + len / 10);
    }

    #[test]
    fn the_smallest_buffer_that_fits_is_taken() {
        let memory = ReusedReadMemory::new();
        let (small, large) = (memory.buffer(100).unwrap(), memory.buffer(200_000).unwrap());
        let small_address = read(&*small).as_ptr();
        drop((small, large));
        assert_eq!(read(&*memory.buffer(50).unwrap()).as_ptr(), small_address);
    }

    #[test]
    fn it_keeps_no_more_than_the_batches_in_flight_read() {
        let memory = Arc::new(ReusedReadMemory::new());
        let room = room_for(1000);
        memory.clone().expect_batches(room as u64, 2);
        let buffers: Vec<_> = (0..5).map(|_| memory.buffer(1000).unwrap()).collect();
        drop(buffers);
        assert_eq!(memory.kept_bytes(), 3 * room);
    }

    #[test]
    fn buffers_outliving_their_pool_are_freed() {
        let memory = ReusedReadMemory::new();
        let buffer = memory.buffer(10).unwrap();
        drop(memory);
        drop(buffer);
    }
}
