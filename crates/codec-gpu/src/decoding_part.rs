//! A part of a batch still decoding when the batch is handed on: a split decoder's GPU part,
//! begun when the batch was shared out, beside a CPU part the collator decodes in place. The
//! collator plans the batch from the part's requests, decodes the CPU part in its turn, and
//! waits for this one only then, so the cores' work on a batch never waits behind the GPU's
//! (queued behind a model's kernels) and the batches' CPU parts decode one after another, in
//! the order the consumer takes them.

use tokio::task::JoinHandle;
use zarrpipe_store::ChunkRequest;

use crate::{DecodedChunks, Error, Result};

/// A part of a batch decoding on a task of its own; see the module's documentation.
pub struct DecodingPart {
    requests: Vec<ChunkRequest>,
    decoding: JoinHandle<Result<DecodedChunks>>,
}

impl std::fmt::Debug for DecodingPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodingPart")
            .field("chunks", &self.requests.len())
            .field("finished", &self.decoding.is_finished())
            .finish()
    }
}

impl DecodingPart {
    /// The part of `requests` (its chunks', in their order) that `decoding` decodes, already
    /// running on the runtime's tasks.
    pub(crate) fn new(
        requests: Vec<ChunkRequest>,
        decoding: JoinHandle<Result<DecodedChunks>>,
    ) -> Self {
        Self { requests, decoding }
    }

    /// The part's chunks' requests, known before they are decoded.
    pub fn requests(&self) -> &[ChunkRequest] {
        &self.requests
    }

    /// Waits, blocking the calling thread, until the part is decoded. Call it from a thread
    /// that may block (a collator's blocking task), never from an async task.
    pub fn wait(self) -> Result<DecodedChunks> {
        futures::executor::block_on(self.finished())
    }

    /// The part, once decoded.
    pub async fn finished(self) -> Result<DecodedChunks> {
        self.decoding.await.map_err(|source| Error::StageTask {
            stage: "decoding a batch's GPU part",
            source,
        })?
    }
}
