//! Whole-array statistics through the library's own read path: every chunk fetched and decoded
//! by the store and codec stages, missing chunks read as their fill value (as zarr-python
//! reads them), edge chunks clipped to the array.

use std::sync::Arc;

use futures::TryStreamExt;
use serde::Serialize;
use zarrpipe_codec_gpu::{decode_every_chunk, ChunkDecoder, DecodedChunk};
use zarrpipe_core::{values_f64, DType};
use zarrpipe_store::Variable;

/// Statistics of one variable. `min`, `max` and `mean` are over the non-NaN values and are
/// `None` when there are none.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariableStats {
    pub variable: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// Elements, NaNs included.
    pub count: u64,
    pub nan_count: u64,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    /// Population standard deviation of the non-NaN values (for `--normalize`).
    pub std: Option<f64>,
}

#[derive(Default)]
struct Accumulator {
    count: u64,
    nan_count: u64,
    min: f64,
    max: f64,
    sum: f64,
    sum_of_squares: f64,
}

impl Accumulator {
    fn add(&mut self, value: f64) {
        self.count += 1;
        if value.is_nan() {
            self.nan_count += 1;
            return;
        }
        let first = self.count == self.nan_count + 1;
        self.min = if first { value } else { self.min.min(value) };
        self.max = if first { value } else { self.max.max(value) };
        self.sum += value;
        self.sum_of_squares += value * value;
    }

    fn finish(self, variable: &Variable) -> VariableStats {
        let valid = self.count - self.nan_count;
        let some = |value: f64| (valid > 0).then_some(value);
        VariableStats {
            variable: variable.name().to_string(),
            dtype: variable.dtype(),
            shape: variable.shape().to_vec(),
            count: self.count,
            nan_count: self.nan_count,
            min: some(self.min),
            max: some(self.max),
            mean: some(self.sum / valid.max(1) as f64),
            std: some({
                let n = valid.max(1) as f64;
                let mean = self.sum / n;
                (self.sum_of_squares / n - mean * mean).max(0.0).sqrt()
            }),
        }
    }
}

/// Reads every chunk of `variable` and computes its statistics.
pub async fn variable_stats(
    variable: &Arc<Variable>,
    decoder: Arc<dyn ChunkDecoder>,
    concurrency: usize,
) -> Result<VariableStats, zarrpipe_codec_gpu::Error> {
    let mut chunks = Box::pin(decode_every_chunk(variable, decoder, concurrency));
    let mut accumulator = Accumulator::default();
    while let Some(chunk) = chunks.try_next().await? {
        accumulate_chunk(&chunk, &mut accumulator)?;
    }
    Ok(accumulator.finish(variable))
}

/// Adds the elements of `chunk` that lie inside the array.
fn accumulate_chunk(
    chunk: &DecodedChunk,
    accumulator: &mut Accumulator,
) -> zarrpipe_store::Result<()> {
    let variable = &chunk.request.variable;
    let (start, shape) = variable.chunk_region(&chunk.request.indices)?;
    let rank = shape.len();
    let inside: Vec<u64> = (0..rank)
        .map(|a| shape[a].min(variable.shape()[a].saturating_sub(start[a])))
        .collect();
    if inside.contains(&0) {
        return Ok(());
    }
    let dtype = chunk.dtype();
    if rank == 0 {
        values_f64(dtype, &chunk.bytes)
            .into_iter()
            .for_each(|value| accumulator.add(value));
        return Ok(());
    }
    let row = inside[rank - 1] as usize * dtype.size();
    let mut coord = vec![0u64; rank];
    loop {
        let offset = (0..rank).fold(0u64, |offset, a| offset * shape[a] + coord[a]) as usize;
        let start = offset * dtype.size();
        let values = values_f64(dtype, &chunk.bytes[start..start + row]);
        values.into_iter().for_each(|value| accumulator.add(value));
        // Advance over every axis but the last.
        let mut axis = rank - 1;
        loop {
            if axis == 0 {
                return Ok(());
            }
            axis -= 1;
            coord[axis] += 1;
            if coord[axis] < inside[axis] {
                break;
            }
            coord[axis] = 0;
        }
    }
}
