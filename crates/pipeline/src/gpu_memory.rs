//! How much of a GPU's memory a pipeline takes, and how that is shared between decoding and
//! batch tensors. The budget is set before training code allocates its model, optimizer state
//! and activations, so the default leaves them most of the device.

/// A GPU's memory as the pipelines on it share it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuMemory {
    /// The whole: what the decoder and the tensor pool hold at most, and what the device's
    /// memory pool keeps of freed memory (the rest goes back to the driver).
    pub budget: usize,
    /// The decoder's share: decoded chunks not yet collated and the stored bytes of the batches
    /// decoding ([`GpuOptions::device_memory`](zarrpipe_codec_gpu::GpuOptions)).
    pub decoding: usize,
    /// Batch tensors handed out at once (delivered and not yet dropped, or being collated).
    pub tensors: usize,
}

impl GpuMemory {
    /// The default budget's share of the device's memory: a quarter, so a model built after
    /// the pipeline has the other three (its weights, optimizer state and activations).
    pub const DEFAULT_SHARE: f64 = 0.25;

    /// `budget` shared half and half between decoding and batch tensors.
    pub fn within(budget: usize) -> Self {
        Self {
            budget,
            decoding: budget - budget / 2,
            tensors: budget / 2,
        }
    }

    /// The default budget on a device of `total` bytes.
    pub fn default_for(total: usize) -> Self {
        Self::within((total as f64 * Self::DEFAULT_SHARE) as usize)
    }

    /// `budget` bytes of device `ordinal` shared half and half, or by default
    /// [`default_for`](Self::default_for) the device's memory.
    pub fn for_device(ordinal: usize, budget: Option<usize>) -> crate::Result<Self> {
        if let Some(bytes) = budget {
            return Ok(Self::within(bytes));
        }
        let total = zarrpipe_cuda::open_device(ordinal)
            .and_then(|context| zarrpipe_cuda::device_total_memory(&context))
            .map_err(zarrpipe_codec_gpu::Error::from)?;
        Ok(Self::default_for(total))
    }

    /// This sharing with the tensors' share set to `tensors`, the budget following.
    pub fn with_tensors(self, tensors: usize) -> Self {
        Self {
            budget: self.decoding + tensors,
            tensors,
            ..self
        }
    }
}

impl std::fmt::Display for GpuMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gib = |bytes: usize| bytes as f64 / f64::from(1 << 30);
        write!(
            f,
            "{:.1} GiB ({:.1} decoding, {:.1} batch tensors)",
            gib(self.budget),
            gib(self.decoding),
            gib(self.tensors)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::GpuMemory;

    #[test]
    fn the_default_leaves_the_model_three_quarters_of_the_device() {
        let h100 = GpuMemory::default_for(80 << 30);
        assert_eq!(h100.budget, 20 << 30);
        assert_eq!(h100.decoding + h100.tensors, h100.budget);
        assert_eq!(
            h100.to_string(),
            "20.0 GiB (10.0 decoding, 10.0 batch tensors)"
        );
        let odd = GpuMemory::within(3);
        assert_eq!((odd.decoding, odd.tensors), (2, 1));
        let more = h100.with_tensors(16 << 30);
        assert_eq!(more.budget, 26 << 30);
        assert_eq!(more.decoding, 10 << 30);
    }
}
