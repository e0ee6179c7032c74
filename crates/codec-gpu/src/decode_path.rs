//! How a chunk of a GPU batch was decoded: the GPU decoder's batches and the batch decoders'
//! statistics both say it, with or without the `cuda` feature.

/// How a chunk of a GPU batch was decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodePath {
    /// Decompressed and decoded on the GPU.
    Gpu,
    /// Missing from the store: filled with the fill value on the GPU.
    Fill,
    /// Decoded on the CPU with zarrs, then copied to the GPU.
    CpuFallback {
        /// Why the GPU path could not decode it.
        reason: String,
    },
}
