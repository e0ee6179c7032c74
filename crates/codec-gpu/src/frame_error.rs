//! Why a frame cannot go to the GPU: its own module, so the frame checks and the zstd table
//! checks both use it without depending on each other.

/// A frame that cannot go to the GPU: corrupt (an error for the chunk) or valid but using a
/// format the GPU path lacks (the chunk decodes on the CPU).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    #[error("{what}: {len} bytes, too short (needs {needed})")]
    Truncated {
        what: &'static str,
        len: usize,
        needed: usize,
    },
    #[error("{what}: bad header ({detail})")]
    BadHeader { what: &'static str, detail: String },
    #[error("{what}: declares {declared} decoded bytes, the chunk holds {expected}")]
    DeclaredSize {
        what: &'static str,
        declared: u64,
        expected: u64,
    },
    #[error("{what}: checksum {stored:#010x} stored, {computed:#010x} computed")]
    Checksum {
        what: &'static str,
        stored: u32,
        computed: u32,
    },
    #[error("{what}: offset {offset} + {len} bytes is outside the {available} bytes present")]
    OutOfBounds {
        what: &'static str,
        offset: u64,
        len: u64,
        available: usize,
    },
    #[error("{0} (decoded on the CPU)")]
    NeedsCpu(String),
}

impl FrameError {
    /// True when the frame is valid but the GPU path lacks its format.
    pub fn needs_cpu(&self) -> bool {
        matches!(self, FrameError::NeedsCpu(_))
    }
}
