//! The batches: zarrpipe's stream epoch after epoch, or synthetic tensors, as candle tensors
//! on the training device.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use candle_core::{Device, Tensor};
use zarrpipe::batcher::Shuffle;
use zarrpipe::collate::CollateOptions;
use zarrpipe::pipeline::{PipelineBuilder, Place};
use zarrpipe::prelude::*;

/// What every loader's pipeline shares.
pub(super) struct DataConfig {
    pub(super) dataset: Arc<Dataset>,
    pub(super) variables: Vec<String>,
    pub(super) patch: Option<u64>,
    pub(super) batch_size: usize,
    pub(super) prefetch: usize,
    pub(super) seed: u64,
    pub(super) stats_json: String,
}

impl DataConfig {
    /// One epoch's pipeline: inputs at t, targets at t+1, shuffled, normalised, NaN as 0.
    pub(super) fn builder(&self, epoch: u64) -> PipelineBuilder {
        let mut builder = Pipeline::from_dataset(self.dataset.clone())
            .variables(self.variables.clone())
            .forecast(1, [1])
            .batch_size(self.batch_size)
            .drop_last(true)
            .shuffle(Shuffle::Full)
            .seed(self.seed)
            .epoch(epoch)
            .prefetch(self.prefetch)
            .collate_options(CollateOptions {
                nan_fill: Some(0.0),
                ..Default::default()
            })
            .normalize_with_stats(self.stats_json.clone());
        if let Some(patch) = self.patch {
            builder = builder
                .window("latitude", patch, patch)
                .window("longitude", patch, patch);
        }
        builder
    }
}

/// One loader's stream of `(inputs, targets)` candle tensors on the training device, epoch
/// after epoch (each epoch's pipeline is built when the last one ends).
// One value per run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub(super) enum Batches {
    Synthetic {
        inputs: Tensor,
        targets: Tensor,
    },
    Host {
        config: DataConfig,
        epoch: u64,
        stream: BatchStream<Host>,
        /// GPU time of the epochs done.
        past_gpu: Duration,
    },
    #[cfg(feature = "candle")]
    Gpu {
        config: DataConfig,
        gpu: Arc<GpuDevice>,
        decode_on: DecodeOn,
        epoch: u64,
        stream: BatchStream<Gpu>,
        past_gpu: Duration,
    },
}

impl Batches {
    pub(super) async fn next(&mut self, device: &Device) -> anyhow::Result<(Tensor, Tensor)> {
        match self {
            Self::Synthetic { inputs, targets } => Ok((inputs.clone(), targets.clone())),
            Self::Host {
                config,
                epoch,
                stream,
                past_gpu,
            } => {
                let batch = next_over_epochs(stream, epoch, past_gpu, |epoch| async move {
                    Ok(config.builder(epoch).build().await?)
                })
                .await?;
                let targets = batch.targets.context("forecasting batches have targets")?;
                Ok((
                    host_tensor(batch.inputs, device)?,
                    host_tensor(targets, device)?,
                ))
            }
            #[cfg(feature = "candle")]
            Self::Gpu {
                config,
                gpu,
                decode_on,
                epoch,
                stream,
                past_gpu,
            } => {
                let decode_on = *decode_on;
                let batch = next_over_epochs(stream, epoch, past_gpu, |epoch| {
                    gpu_stream(config, gpu, decode_on, epoch)
                })
                .await?;
                // The same device memory, now candle's; candle's stream waits for the batch.
                let batch = batch.into_candle(device)?;
                let targets = batch.targets.context("forecasting batches have targets")?;
                Ok((batch.inputs, targets))
            }
        }
    }

    /// The GPU time the loader's delivered batches took so far.
    pub(super) fn gpu_busy(&self) -> Duration {
        match self {
            Self::Synthetic { .. } => Duration::ZERO,
            Self::Host {
                stream, past_gpu, ..
            } => *past_gpu + stream.metrics().gpu_busy,
            #[cfg(feature = "candle")]
            Self::Gpu {
                stream, past_gpu, ..
            } => *past_gpu + stream.metrics().gpu_busy,
        }
    }
}

/// The next batch of an epoch's `stream`; at its end, the first of the next epoch's stream,
/// which `next_epoch` builds (the epoch done adds its GPU time to `past_gpu`).
async fn next_over_epochs<P: Place, F>(
    stream: &mut BatchStream<P>,
    epoch: &mut u64,
    past_gpu: &mut Duration,
    next_epoch: impl FnOnce(u64) -> F,
) -> anyhow::Result<Batch<P>>
where
    F: Future<Output = anyhow::Result<BatchStream<P>>>,
{
    if let Some(batch) = stream.try_next().await? {
        return Ok(batch);
    }
    *past_gpu += stream.metrics().gpu_busy;
    *epoch += 1;
    *stream = next_epoch(*epoch).await?;
    stream.try_next().await?.context("an epoch with no batches")
}

/// A host batch tensor as a candle tensor on `device` (a copy; an upload on a GPU).
fn host_tensor(array: ndarray::ArrayD<f32>, device: &Device) -> anyhow::Result<Tensor> {
    let shape = array.shape().to_vec();
    let values: Vec<f32> = match array.as_slice() {
        Some(values) => values.to_vec(),
        None => array.iter().copied().collect(),
    };
    Ok(Tensor::from_vec(values, shape, device)?)
}

#[cfg(feature = "candle")]
pub(super) async fn gpu_stream(
    config: &DataConfig,
    gpu: &Arc<GpuDevice>,
    decode_on: DecodeOn,
    epoch: u64,
) -> anyhow::Result<BatchStream<Gpu>> {
    Ok(config
        .builder(epoch)
        .gpu(gpu.clone())
        .decode_on(decode_on)
        .collate_on_gpu()
        .build()
        .await?)
}

/// The statistics for normalisation: the `--normalize` file, or computed now.
pub(super) async fn statistics(
    dataset: &Arc<Dataset>,
    variables: &[String],
    file: Option<&PathBuf>,
) -> anyhow::Result<String> {
    if let Some(file) = file {
        return std::fs::read_to_string(file)
            .with_context(|| format!("cannot read --normalize {}", file.display()));
    }
    println!(
        "computing each variable's mean and std over every chunk (--normalize FILE skips this)"
    );
    let mut stats = Vec::new();
    for name in variables {
        let variable = dataset.variable(name)?;
        let decoder = Arc::new(CpuDecoder::new());
        let variable_stats = zarrpipe::stats::variable_stats(variable, decoder, 64)
            .await
            .with_context(|| format!("computing the statistics of {name}"))?;
        stats.push(variable_stats);
    }
    Ok(serde_json::to_string(&stats)?)
}
