//! [`GpuDecoder`] as the decode stage: each batch is checked, planned, staged, uploaded and
//! decoded on blocking threads of Tokio's pool (several batches at once, more when they have
//! fewer chunks; one at a time checked, and one at a time planned and staged, in order), and
//! handed on once the device is done with it, its chunks checked.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use zarrpipe_store::{EncodedChunk, ReadMemory};

use super::decoder::GpuDecoder;
use crate::batch::check_tables;
use crate::{BatchDecoder, DecodedChunks, Error, Result};

impl BatchDecoder for GpuDecoder {
    fn decode_chunks(
        self: Arc<Self>,
        chunks: Vec<EncodedChunk>,
    ) -> BoxFuture<'static, Result<DecodedChunks>> {
        // Taken now, as batches come, in order (see `Admission`).
        let ticket = self.admission_ticket();
        async move {
            let _decoding = self.reserve_decoding(&chunks).await;
            let device_memory = ticket.admit(GpuDecoder::device_bytes(&chunks)).await;
            // The batch's stored bytes sit in pinned staging memory until it is decoded.
            let stored: usize = chunks.iter().map(EncodedChunk::stored_len).sum();
            let _pinned = self.reserve_pinned(stored).await;
            // In order: batch k+1's tables are checked while batch k is planned and staged.
            let checking = self.reserve_checking().await;
            let (chunks, checks) = tokio::task::spawn_blocking(move || {
                let checks = check_tables(&chunks);
                (chunks, checks)
            })
            .await
            .map_err(|source| Error::StageTask {
                stage: "GPU decode",
                source,
            })?;
            let preparing = self.reserve_preparing().await;
            drop(checking);
            let mut decoded = tokio::task::spawn_blocking(move || {
                let count = chunks.len();
                let planned = self.plan_checked(chunks, checks);
                let pending = self.submit_planned(planned);
                drop(preparing);
                let pending = pending?;
                tracing::debug!(target: "zarrpipe::gpu", "batch of {count} chunks submitted");
                let decoded = self.complete(pending);
                if let Ok(batch) = &decoded {
                    tracing::debug!(
                        target: "zarrpipe::gpu",
                        "batch of {count} chunks decoded: plan {:?}, stage {:?}, device {:?}, GPU {:?}",
                        batch.timings.plan,
                        batch.timings.stage,
                        batch.timings.device,
                        batch.timings.gpu
                    );
                }
                decoded
            })
            .await
            .map_err(|source| Error::StageTask {
                stage: "GPU decode",
                source,
            })??;
            decoded.hold(device_memory);
            if let Some(failed) = decoded.chunks.iter().position(Result::is_err) {
                let mut chunks = decoded.chunks;
                return Err(chunks.swap_remove(failed).expect_err("a failed chunk"));
            }
            Ok(DecodedChunks::Device(decoded))
        }
        .boxed()
    }

    /// One batch per decode stream, and one more planning and uploading; batches of many
    /// chunks are held to fewer ([`GpuOptions::chunks_in_flight`](crate::GpuOptions)).
    fn batches_in_flight(&self) -> usize {
        self.options().decode_streams.max(1) + 1
    }

    fn read_memory(&self) -> Option<Arc<dyn ReadMemory>> {
        GpuDecoder::read_memory(self)
    }
}
