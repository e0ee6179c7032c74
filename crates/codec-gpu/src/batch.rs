//! Preparing a batch for the GPU on the CPU: each chunk's chain and frames are read and
//! planned; chunks the GPU cannot decode are decoded here with zarrs (in parallel) and only
//! copied up, unless the decoder is strict.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rayon::prelude::*;
use zarrpipe_store::{ChunkRequest, EncodedChunk};

use crate::chain::GpuChain;
use crate::chunk_decode::decode_on_cpu;
use crate::frames::{self, FrameError};
use crate::plan::{BatchPlan, ChunkInput, Region, ALIGN};
use crate::{DecodePath, Error, Result};

/// One chunk of a prepared batch.
#[derive(Debug)]
pub(crate) struct PreparedChunk {
    pub request: ChunkRequest,
    pub stored_len: usize,
    pub fetch_time: Duration,
    /// Where its decoded bytes will be, and how they got there; or why not.
    pub outcome: Result<(Region, DecodePath)>,
}

#[derive(Debug, Default)]
pub(crate) struct Prepared {
    pub plan: BatchPlan,
    pub chunks: Vec<PreparedChunk>,
}

/// What the costly check of each chunk found (its zstd entropy tables, planned once on every
/// core into a plan thrown away): `None` where it passed or was not checked.
#[derive(Debug, Default)]
pub(crate) struct TableChecks {
    errors: Vec<Option<FrameError>>,
    /// How long the checks took.
    pub took: Duration,
}

impl TableChecks {
    /// The checks of the chunks from `at` on, leaving those before it here.
    pub(crate) fn split_off(&mut self, at: usize) -> TableChecks {
        TableChecks {
            errors: self.errors.split_off(at),
            took: Duration::ZERO,
        }
    }
}

/// Each chunk's codec chain on the GPU (or why it has none), by the variable's address: a plain
/// number, so the map is shared across threads.
struct Chains(HashMap<usize, std::result::Result<GpuChain, String>>);

impl Chains {
    fn of(chunks: &[EncodedChunk]) -> Self {
        let mut chains = HashMap::new();
        for chunk in chunks {
            let variable = &chunk.request.variable;
            chains
                .entry(Self::address(chunk))
                .or_insert_with(|| GpuChain::of(variable).map_err(|unsupported| unsupported.0));
        }
        Self(chains)
    }

    fn address(chunk: &EncodedChunk) -> usize {
        Arc::as_ptr(&chunk.request.variable) as usize
    }

    fn get(&self, chunk: &EncodedChunk) -> &std::result::Result<GpuChain, String> {
        &self.0[&Self::address(chunk)]
    }
}

/// Checks the zstd entropy tables of `chunks` on every core (when checks are on), the costly
/// part of planning: a pipeline checks one batch while it plans and stages the one before.
pub(crate) fn check_tables(chunks: &[EncodedChunk]) -> TableChecks {
    let started = Instant::now();
    if !frames::zstd_table_checks() {
        return TableChecks {
            errors: chunks.iter().map(|_| None).collect(),
            took: started.elapsed(),
        };
    }
    let chains = Chains::of(chunks);
    let errors = chunks
        .par_iter()
        .enumerate()
        .map(|(index, chunk)| {
            let Ok(chain) = chains.get(chunk) else {
                return None;
            };
            frames::with_table_checks(true, || {
                plan_chunk(&mut BatchPlan::default(), index, chunk, chain).err()
            })
        })
        .collect();
    TableChecks {
        errors,
        took: started.elapsed(),
    }
}

/// Plans `chunks` for the GPU, their outputs from byte `output_start` of the batch output on.
/// With `strict`, a chunk the GPU cannot decode is an error instead of a CPU fallback.
pub(crate) fn prepare(chunks: Vec<EncodedChunk>, strict: bool, output_start: usize) -> Prepared {
    let checks = check_tables(&chunks);
    prepare_checked(chunks, checks, strict, output_start)
}

/// [`prepare`] for chunks whose tables [`check_tables`] checked: they are planned in order,
/// without the checks.
pub(crate) fn prepare_checked(
    chunks: Vec<EncodedChunk>,
    checks: TableChecks,
    strict: bool,
    output_start: usize,
) -> Prepared {
    debug_assert_eq!(checks.errors.len(), chunks.len());
    let chains = Chains::of(&chunks);
    let mut table_errors = checks.errors;
    let mut prepared = Prepared::default();
    prepared.plan.output_len = output_start;
    let mut fallbacks = Vec::new();
    let mut outcomes = Vec::with_capacity(chunks.len());
    for (index, chunk) in chunks.iter().enumerate() {
        let planned = match (chains.get(chunk), table_errors[index].take()) {
            (_, Some(error)) => Err(error),
            (Ok(chain), None) => frames::with_table_checks(false, || {
                plan_chunk(&mut prepared.plan, index, chunk, chain)
            }),
            (Err(reason), None) => Err(FrameError::NeedsCpu(format!("codec chain: {reason}"))),
        };
        outcomes.push(match planned {
            Ok(planned) => Some(Ok(planned)),
            Err(FrameError::NeedsCpu(reason)) if !strict => {
                fallbacks.push((index, chunk.clone(), reason));
                None
            }
            Err(source) => Some(Err(frame_error(&chunk.request, source, strict))),
        });
    }
    // The fallbacks decode on every core, then join the plan as plain uploads.
    let decoded: Vec<_> = fallbacks
        .into_par_iter()
        .map(|(index, chunk, reason)| (index, decode_on_cpu(chunk), reason))
        .collect();
    for (index, decoded, reason) in decoded {
        outcomes[index] = Some(decoded.and_then(|decoded| {
            let bytes = Bytes::from(decoded.bytes);
            let input = ChunkInput {
                bytes: Some(&bytes),
                chain: &GpuChain::default(),
                shape: &chunk_shape(&decoded.request),
                element_size: decoded.request.variable.dtype().size(),
                fill: &[],
            };
            let region = prepared
                .plan
                .add(index, &input)
                .map_err(|source| frame_error(&decoded.request, source, strict))?;
            Ok((region, DecodePath::CpuFallback { reason }))
        }));
    }
    prepared.chunks = chunks
        .into_iter()
        .zip(outcomes)
        .map(|(chunk, outcome)| PreparedChunk {
            stored_len: chunk.stored_len(),
            fetch_time: chunk.fetch_time,
            request: chunk.request,
            outcome: outcome.expect("every chunk planned or decoded on the CPU"),
        })
        .collect();
    prepared
}

pub(crate) fn plan_chunk(
    plan: &mut BatchPlan,
    index: usize,
    chunk: &EncodedChunk,
    chain: &GpuChain,
) -> std::result::Result<(Region, DecodePath), FrameError> {
    let variable = &chunk.request.variable;
    let array = variable.array();
    let shape = chunk_shape(&chunk.request);
    let input = ChunkInput {
        bytes: chunk.bytes.as_ref(),
        chain,
        shape: &shape,
        element_size: variable.dtype().size(),
        fill: array.fill_value().as_ne_bytes(),
    };
    let region = plan.add(index, &input)?;
    let path = if chunk.bytes.is_some() {
        DecodePath::Gpu
    } else {
        DecodePath::Fill
    };
    Ok((region, path))
}

/// Output bytes a chunk takes in a batch: its decoded size, aligned as plans align it.
pub(crate) fn output_bytes(chunk: &EncodedChunk) -> usize {
    let shape = chunk_shape(&chunk.request);
    let len = shape.iter().product::<u64>() as usize * chunk.request.variable.dtype().size();
    len.next_multiple_of(ALIGN)
}

/// Splits a batch into consecutive groups of at most `group_bytes` output (at least one
/// chunk each).
pub(crate) fn groups(chunks: Vec<EncodedChunk>, group_bytes: usize) -> Vec<Vec<EncodedChunk>> {
    let mut groups: Vec<Vec<EncodedChunk>> = Vec::new();
    let mut bytes = 0;
    for chunk in chunks {
        let len = output_bytes(&chunk);
        match groups.last_mut() {
            Some(group) if bytes + len <= group_bytes => group.push(chunk),
            _ => {
                bytes = 0;
                groups.push(vec![chunk]);
            }
        }
        bytes += len;
    }
    groups
}

/// The full (unclipped) shape of a chunk.
fn chunk_shape(request: &ChunkRequest) -> Vec<u64> {
    request
        .variable
        .chunk_region(&request.indices)
        .map(|(_, shape)| shape)
        .unwrap_or_else(|_| request.variable.chunk_shape())
}

pub(crate) fn frame_error(request: &ChunkRequest, source: FrameError, strict: bool) -> Error {
    if strict && source.needs_cpu() {
        return Error::GpuUnsupported {
            variable: request.variable.name().to_string(),
            key: request.key(),
            source,
        };
    }
    Error::Frame {
        variable: request.variable.name().to_string(),
        key: request.key(),
        source,
    }
}

/// Marks the chunks whose GPU ops failed (the first failure of each is kept).
pub(crate) fn record_failures(chunks: &mut [PreparedChunk], failures: Vec<(usize, String)>) {
    for (index, detail) in failures {
        let chunk = &mut chunks[index];
        if chunk.outcome.is_ok() {
            chunk.outcome = Err(Error::GpuDecode {
                variable: chunk.request.variable.name().to_string(),
                key: chunk.request.key(),
                detail,
            });
        }
    }
}
