//! A Rust consumer's CUDA stream, to which GPU batches are handed over: the stream waits for
//! each batch on the device, and the consumer's waits are timed on the GPU's timeline
//! ([`HandoverClock`]), as the Python package times a training loop's. `auto` reads those
//! waits: a loop that queues its kernels ahead waits on its thread while they run, and read off
//! the thread, that wait would call the GPU in where the GPU never waited for data.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use zarrpipe_cuda::cudarc::driver::sys::CUevent_flags;
use zarrpipe_cuda::cudarc::driver::CudaStream;
use zarrpipe_cuda::During;

use super::{Gpu, HandoverClock};
use crate::{Batch, Result};

/// A consumer's stream for GPU batches; see the module's documentation.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use futures::Stream;
/// # use zarrpipe_collate::{Batch, Gpu, Result};
/// # use zarrpipe_cuda::cudarc::driver::CudaStream;
/// # async fn train(
/// #     mut batches: impl Stream<Item = Result<Batch<Gpu>>> + Unpin,
/// #     stream: Arc<CudaStream>,
/// # ) -> Result<()> {
/// use zarrpipe_collate::ConsumerStream;
///
/// let consumer = ConsumerStream::new(stream);
/// while let Some(batch) = consumer.next(&mut batches).await {
///     let batch = batch?;
///     // Queue the step's kernels on `consumer.stream()`: they run once the batch is there.
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ConsumerStream {
    stream: Arc<CudaStream>,
    clock: HandoverClock,
}

impl ConsumerStream {
    /// Batches will be handed over to `stream`, the one the consumer queues its work on.
    pub fn new(stream: Arc<CudaStream>) -> Self {
        Self {
            stream,
            clock: HandoverClock::default(),
        }
    }

    /// The consumer's stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The next batch of `batches`, handed over: marks where the stream stands as the consumer
    /// asks for it, then makes the stream wait for it on the device.
    pub async fn next<S, E>(&self, batches: &mut S) -> Option<std::result::Result<Batch<Gpu>, E>>
    where
        S: Stream<Item = std::result::Result<Batch<Gpu>, E>> + Unpin,
        E: From<crate::Error>,
    {
        self.ask();
        let batch = batches.next().await?;
        Some(batch.and_then(|batch| {
            self.hand_over(&batch)?;
            Ok(batch)
        }))
    }

    /// The consumer asks for its next batch (as [`next`](Self::next) does before it waits): a
    /// mark that fails costs this batch's timing, not the batch.
    pub fn ask(&self) {
        // SAFETY: the stream of every hand-over is `self.stream`, alive while `self` is.
        if let Err(error) = unsafe { self.clock.asked() } {
            tracing::debug!(target: "zarrpipe", "the consumer's wait not timed: {error}");
        }
    }

    /// Hands `batch` over (as [`next`](Self::next) does once it has it): the stream waits for
    /// it on the device, and where the batch carries its consumer's pace (`auto`), the wait is
    /// timed there once the GPU has passed it.
    pub fn hand_over(&self, batch: &Batch<Gpu>) -> Result<()> {
        batch.wait_on(&self.stream)?;
        let Some(pace) = &batch.pace else {
            return Ok(());
        };
        // Complete once the batch is and the stream has reached the hand-over: the clock's
        // `ready`, timed on the consumer's stream.
        let ready = self
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .during("marking a hand-over")?;
        // SAFETY: `self.stream` is a live stream of the batch's context, and stays alive while
        // `self` is, which the next `ask` needs.
        unsafe {
            self.clock
                .handed_over(self.stream.cu_stream(), &Arc::new(ready), pace)
        }
        .during("timing a hand-over")?;
        Ok(())
    }
}
