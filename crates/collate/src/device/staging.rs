//! Small host-to-device uploads (gather tables, padding masks) through pinned buffers: a copy
//! from pageable memory would make the driver wait for the stream, stalling the pipeline
//! until the batch before has decoded.

use std::sync::{Arc, Mutex};

use zarrpipe_cuda::cudarc::driver::{
    result, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice,
};

use rayon::prelude::*;

use zarrpipe_cuda::{alloc_pinned_host, During};

/// Alignment of each part of [`Staging::upload_parts`] in its buffer.
pub(super) const PART_ALIGN: usize = 256;
use crate::Result;

pub(super) struct Staging {
    context: Arc<CudaContext>,
    /// Pinned buffers, each with the event after its last upload.
    buffers: Mutex<Vec<(PinnedHostSlice<u8>, CudaEvent)>>,
}

impl Staging {
    pub fn new(context: Arc<CudaContext>) -> Self {
        Self {
            context,
            buffers: Mutex::new(Vec::new()),
        }
    }

    /// Uploads `bytes` into a new device buffer, in stream order.
    pub fn upload(&self, bytes: &[u8], stream: &Arc<CudaStream>) -> Result<CudaSlice<u8>> {
        // SAFETY: written by the upload below before the stream reads it.
        let buffer = unsafe { stream.alloc::<u8>(bytes.len().max(1)) }
            .during("allocating an upload buffer")?;
        self.upload_to(buffer.device_ptr(stream).0, bytes, stream)?;
        Ok(buffer)
    }

    /// Uploads `bytes` to device address `dst`, in stream order.
    pub fn upload_to(&self, dst: u64, bytes: &[u8], stream: &Arc<CudaStream>) -> Result<()> {
        self.upload_parts_to(dst, &[bytes.len()], &[0], stream, |mut targets| {
            targets[0].copy_from_slice(bytes);
            Ok(())
        })
    }

    /// Uploads `parts` into one new device buffer, each at an offset aligned to
    /// [`PART_ALIGN`], in stream order; returns the buffer and the offsets. The parts are
    /// copied into one pinned buffer on every core, then uploaded in one copy.
    pub fn upload_parts(
        &self,
        parts: &[&[u8]],
        stream: &Arc<CudaStream>,
    ) -> Result<(CudaSlice<u8>, Vec<usize>)> {
        let lens: Vec<usize> = parts.iter().map(|part| part.len()).collect();
        self.upload_written(&lens, stream, |targets| {
            targets
                .into_par_iter()
                .zip(parts)
                .for_each(|(target, part)| target.copy_from_slice(part));
            Ok(())
        })
    }

    /// Uploads parts of `lens` bytes into one new device buffer, each at an offset aligned
    /// to [`PART_ALIGN`], in stream order; returns the buffer and the offsets. `write` fills
    /// the parts where they lie in one pinned buffer (a CPU decoder decodes into them), which
    /// is then uploaded in one copy.
    pub fn upload_written(
        &self,
        lens: &[usize],
        stream: &Arc<CudaStream>,
        write: impl FnOnce(Vec<&mut [u8]>) -> Result<()>,
    ) -> Result<(CudaSlice<u8>, Vec<usize>)> {
        let mut offsets = Vec::with_capacity(lens.len());
        let mut len = 0;
        for part in lens {
            offsets.push(len);
            len = (len + part).next_multiple_of(PART_ALIGN);
        }
        // SAFETY: written by the upload below before the stream reads it; the gaps between
        // parts are never read.
        let buffer =
            unsafe { stream.alloc::<u8>(len.max(1)) }.during("allocating an upload buffer")?;
        let dst = buffer.device_ptr(stream).0;
        self.upload_parts_to(dst, lens, &offsets, stream, write)?;
        Ok((buffer, offsets))
    }

    /// Uploads parts of `lens` bytes, which `write` fills in one pinned buffer, to `dst`
    /// plus each part's offset, in one copy.
    fn upload_parts_to(
        &self,
        dst: u64,
        lens: &[usize],
        offsets: &[usize],
        stream: &Arc<CudaStream>,
        write: impl FnOnce(Vec<&mut [u8]>) -> Result<()>,
    ) -> Result<()> {
        let len = lens
            .iter()
            .zip(offsets)
            .map(|(part, offset)| offset + part)
            .max()
            .unwrap_or(0);
        if len == 0 {
            return write(lens.iter().map(|_| <&mut [u8]>::default()).collect());
        }
        let mut pinned = self.take_pinned(len)?;
        let host = pinned.as_mut_slice().during("mapping pinned memory")?;
        let mut targets = Vec::with_capacity(lens.len());
        let mut rest = &mut host[..len];
        let mut at = 0;
        for (&part, &offset) in lens.iter().zip(offsets) {
            let (_, tail) = rest.split_at_mut(offset - at);
            let (target, tail) = tail.split_at_mut(part);
            targets.push(target);
            rest = tail;
            at = offset + part;
        }
        let written = write(targets);
        if let Err(error) = written {
            // Not uploaded: the buffer is free again at once.
            self.give_back(pinned, stream)?;
            return Err(error);
        }
        // SAFETY: `host` is pinned and not written again before `done` completes; `dst`
        // holds `len` bytes (the caller's buffer).
        unsafe { result::memcpy_htod_async(dst, &host[..len], stream.cu_stream()) }
            .during("uploading to the device")?;
        self.give_back(pinned, stream)
    }

    /// Puts `pinned` back for reuse once the work queued on `stream` so far is done.
    fn give_back(&self, pinned: PinnedHostSlice<u8>, stream: &Arc<CudaStream>) -> Result<()> {
        let done = stream
            .record_event(None)
            .during("recording an upload event")?;
        self.buffers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((pinned, done));
        Ok(())
    }

    /// A pinned buffer of at least `len` bytes whose last upload has finished.
    fn take_pinned(&self, len: usize) -> Result<PinnedHostSlice<u8>> {
        let mut buffers = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        // The smallest free one that fits, so small uploads leave the large buffers alone.
        let reusable = (0..buffers.len())
            .filter(|&i| buffers[i].0.len() >= len && buffers[i].1.is_complete())
            .min_by_key(|&i| buffers[i].0.len());
        if let Some(index) = reusable {
            return Ok(buffers.swap_remove(index).0);
        }
        drop(buffers);
        let size = pinned_size(len);
        let started = std::time::Instant::now();
        // SAFETY: host memory; every byte uploaded is written first. Cached, not
        // write-combined: a CPU decoder writes chunks into it and reads them back as it goes.
        let pinned =
            unsafe { alloc_pinned_host(&self.context, size) }.during("allocating pinned memory")?;
        tracing::debug!(
            target: "zarrpipe::timeline",
            "pinned upload buffer of {size} bytes allocated in {:?}",
            started.elapsed()
        );
        Ok(pinned)
    }
}

/// The size a pinned buffer for `len` bytes is allocated at: uploads of CPU-decoded chunks
/// vary in size from batch to batch, and each new size allocated holds up every CUDA call of
/// the process for tens of milliseconds (`cudaHostAlloc`; benches/pinned_allocation_probe.py),
/// so sizes are rounded up to an eighth of their power of two: at most eight sizes an octave,
/// under 25% more than asked for (a power of two would pin 4 GiB for a 2.27 GB batch).
fn pinned_size(len: usize) -> usize {
    let len = len.max(1 << 16);
    let step = len.next_power_of_two() / 8;
    len.next_multiple_of(step)
}

#[cfg(test)]
mod tests {
    use super::pinned_size;

    #[test]
    fn pinned_sizes_come_in_eighths_of_a_power_of_two() {
        assert_eq!(pinned_size(1), 1 << 16);
        assert_eq!(pinned_size(2_270_000_000), 5 << 29);
        assert_eq!(pinned_size(1 << 30), 1 << 30);
        assert_eq!(pinned_size((1 << 30) + 1), 5 << 28);
        for len in [100_000, 3_000_000, 2_270_000_000usize] {
            let size = pinned_size(len);
            assert!(
                size >= len && (size as f64) < len as f64 * 1.25,
                "{len} -> {size}"
            );
        }
    }
}
