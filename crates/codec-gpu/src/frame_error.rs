//! Why a frame cannot go to the GPU: its own module, so the frame checks and the zstd table
//! checks both use it without depending on each other.

/// A frame that cannot go to the GPU: corrupt (an error for the chunk) or valid but using a
/// format the GPU path lacks (the chunk decodes on the CPU).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Fewer bytes than a header or block needs.
    #[error("{what}: {len} bytes, too short (needs {needed})")]
    Truncated {
        /// The frame or block checked.
        what: &'static str,
        /// The bytes present.
        len: usize,
        /// The bytes needed.
        needed: usize,
    },
    /// A header with an invalid or unsupported field.
    #[error("{what}: bad header ({detail})")]
    BadHeader {
        /// The frame or block checked.
        what: &'static str,
        /// What is wrong with the header.
        detail: String,
    },
    /// A decoded size that differs from the chunk's.
    #[error("{what}: declares {declared} decoded bytes, the chunk holds {expected}")]
    DeclaredSize {
        /// The frame or block checked.
        what: &'static str,
        /// The decoded bytes the header declares.
        declared: u64,
        /// The decoded bytes the chunk holds.
        expected: u64,
    },
    /// A checksum that does not match the bytes.
    #[error("{what}: checksum {stored:#010x} stored, {computed:#010x} computed")]
    Checksum {
        /// The frame or block checked.
        what: &'static str,
        /// The checksum stored.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// A range (a block, a shard's inner chunk) that lies outside the bytes present.
    #[error("{what}: offset {offset} + {len} bytes is outside the {available} bytes present")]
    OutOfBounds {
        /// The frame or block checked.
        what: &'static str,
        /// The range's start.
        offset: u64,
        /// The range's length.
        len: u64,
        /// The bytes present.
        available: usize,
    },
    /// A valid frame in a format the GPU path lacks; the string says which.
    #[error("{0} (decoded on the CPU)")]
    NeedsCpu(String),
}

impl FrameError {
    /// True when the frame is valid but the GPU path lacks its format.
    pub fn needs_cpu(&self) -> bool {
        matches!(self, FrameError::NeedsCpu(_))
    }
}
