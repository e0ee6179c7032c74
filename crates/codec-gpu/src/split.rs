//! Split decoding: one batch's chunks decoded partly by the CPU cores and partly by the GPU,
//! at once, into one batch. How much each side takes follows the rates measured on earlier
//! batches, per kind of chunk (codec chain and decoded size), so both sides finish a batch
//! together ([`SplitPolicy::Balanced`], which keeps the CPU side only while it adds to what
//! the GPU decodes alone, `split_trial.rs`); or the CPU goes first and the GPU takes the share
//! that lets the CPU side keep up with the consumer, within a budget of GPU time
//! ([`SplitPolicy::Auto`], see `auto_share.rs`); or a fixed share ([`SplitPolicy::Fixed`]).
//! Under auto and a fixed share a batch's CPU part is handed on undecoded, as CPU decoding
//! alone hands a batch on, and decoded where the collator places it, in its turn; the split
//! decoder learns from it when it has decoded there (`DecodeWatch`). Its GPU part decodes
//! meanwhile on a task of its own ([`DecodingPart`]). Balanced split decodes both at once.
//!
//! A side's rate is its throughput, not one batch's latency: several batches are in flight
//! on a side at once (the GPU's decode streams, the CPU pool's queue), and each takes longer
//! for waiting on the others. A part is timed by the side's busy time since the previous
//! part finished ([`BusyTime`]). Timed by latency alone, the GPU looked three times slower than
//! it is (setup B of the training benchmark, H100, 2026-11-24; docs/training-runs.md, "What split's
//! rates need"); timed by
//! latency over the parts in flight, the first of four parts queued on the CPU looked four
//! times faster than it is, and the CPU side got a third of W1's next batches where it
//! decodes a tenth.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use zarrpipe_core::{BatchStats, Pace};
use zarrpipe_store::{EncodedChunk, ReadMemory};

use crate::auto_reads::AutoReads;
use crate::auto_share::{AutoShare, CpuSide};
use crate::backlog::{Backlog, QueuedWork};
use crate::busy_time::{BusyTime, PartStart};
use crate::placement::DecodeWatch;
use crate::split_trial::{SplitTrials, TrialBatch, Way};
use crate::{BatchDecoder, DecodedChunks, DecodingPart, Result};

/// The rates a kind's GPU share starts from, before both sides have decoded some of it:
/// nvCOMP's batched zstd on an H100 (about 20 GB/s) and one CPU thread's zstd (16 cores
/// decode about 6.7 GB/s there; the reference figures of the workloads' definitions, shared
/// BENCHMARKS.md); replaced by measurements as parts finish.
/// The CPU side's threads count: from 16 threads' rate whatever the side had, split gave its
/// 4 threads a quarter of setup B's first batches, about twice what they decode, and their
/// first parts took up to 1.8 s where later ones take 0.4 (H100, 2026-11-24; docs/training-runs.md,
/// "What split's rates need").
const PRIOR_GPU_RATE: f64 = 20e9;
const PRIOR_CPU_THREAD_RATE: f64 = 0.42e9;
/// CPU threads assumed until [`SplitDecoder::with_cpu_threads`] says otherwise.
const PRIOR_CPU_THREADS: usize = 16;
/// A rate counts what a side decoded over about its last this many seconds of busy time.
const RATE_WINDOW_SECONDS: f64 = 0.2;
/// How far the CPU side's weight moves after a batch whose CPU part finished last (down) or
/// first (up), and its bounds. At most 1: the weight takes chunks the CPU's measured rate would
/// give it away from it, never adds more. Beside a training loop the GPU's first parts take
/// longer than their share of the GPU (the model's first steps run between them), so the CPU's
/// parts finished first while the CPU was already behind, and the weight rose to 1.6 in setup
/// B's first batches (docs/training-runs.md).
const LATE_CPU: f64 = 0.85;
const EARLY_CPU: f64 = 1.1;
const CPU_WEIGHT_BOUNDS: (f64, f64) = (1.0 / 16.0, 1.0);
/// Auto sends the GPU no part under this share of a batch's chunks of one kind: a part pays
/// fixed costs (staging, an upload, an nvCOMP call, waiting for the copy engine behind the
/// batch's other uploads) that small parts pay per byte many times over, and their rate,
/// measured with those costs, shrank the next parts further. Beside a consumer at 3.2 GB/s
/// from Python, W1's batches went to the GPU one or two chunks of 172 at a time, and 185
/// chunks took 0.32 s of GPU time where a whole batch of 172 takes about 0.03
/// (docs/benchmarks.md).
const AUTO_SMALLEST_GPU_SHARE: f64 = 1.0 / 8.0;
/// How a [`SplitDecoder`] shares batches between the CPU and the GPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SplitPolicy {
    /// Every batch split so that both sides finish together: the most this host decodes.
    Balanced,
    /// The CPU first: the GPU takes the part of each batch that lets the CPU side keep up
    /// with the consumer (all of it, if the consumer still waits then), sized from the
    /// consumer's waits and the CPU side's load, and gives it back when the consumer keeps up;
    /// with `gpu_share`, only while the GPU time spent decoding stays under that fraction of
    /// the wall-clock time.
    Auto {
        /// Most of the GPU's time the decoder may use (e.g. 0.05); `None`: as much as the
        /// consumer's pace asks for.
        gpu_share: Option<f64>,
    },
    /// A fixed fraction of each batch's chunks of a kind on the GPU, the rest on the CPU, with
    /// no measurement: for a mix found by hand, or to measure what a mix gives.
    Fixed {
        /// The fraction of the chunks on the GPU, from 0 to 1.
        gpu_chunks: f64,
    },
}

/// Decodes each batch on both sides at once; see the documentation of `split.rs`.
pub struct SplitDecoder {
    cpu: Arc<dyn BatchDecoder>,
    gpu: Arc<dyn BatchDecoder>,
    policy: SplitPolicy,
    /// The sides' `(cpu, gpu)` rates before both have decoded some of a kind.
    prior: (f64, f64),
    /// The CPU side's threads.
    cpu_threads: usize,
    pace: Arc<Pace>,
    /// Under auto: whether the batches shared out now give the GPU no part (`AutoReads`).
    cpu_alone: Arc<AtomicBool>,
    state: Mutex<SplitState>,
}

impl std::fmt::Debug for SplitDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitDecoder")
            .field("cpu", &self.cpu)
            .field("gpu", &self.gpu)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// Chunks that decode alike: the same codec chain and decoded size.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Kind {
    codecs: Vec<String>,
    decoded_bytes: u64,
}

/// Decoded bytes of a kind per second of a side's busy time, per side; and per second of the
/// CPU pool's time (its threads' decoding seconds over their count), which auto reads.
#[derive(Clone, Copy, Debug, Default)]
struct Rates {
    cpu: Throughput,
    gpu: Throughput,
    cpu_pool: Throughput,
    /// The CPU side's batches decoded alone, in place (where the collator places them): each
    /// part's busy time (its pool time for the first, whose busy time is not read). What the
    /// CPU side alone would take. Its threads' decoding seconds leave out their reads: read by
    /// the lesser of the two, the CPU alone was tried beside setup A's bf16 model from every
    /// batch on the GPU (89-94 ms a step), where it took 90-108 ms a batch (H200, 2026-11-29;
    /// docs/training-runs.md).
    cpu_in_place: Throughput,
}

/// Bytes decoded and the busy seconds they took, older parts fading out as the side works
/// on: a ratio of sums, so parts that finished together (one with most of the time between
/// finishes, the others with almost none) count as the one part they were.
#[derive(Clone, Copy, Debug, Default)]
struct Throughput {
    bytes: f64,
    seconds: f64,
}

impl Throughput {
    fn add(&mut self, bytes: f64, seconds: f64) {
        let kept = (-seconds / RATE_WINDOW_SECONDS).exp();
        self.bytes = self.bytes * kept + bytes;
        self.seconds = self.seconds * kept + seconds;
    }

    /// Bytes per second; `None` until measured.
    fn rate(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.bytes / self.seconds)
    }
}

impl Rates {
    /// The measured `(cpu, gpu)` rates; `prior` until both sides are measured.
    fn or(&self, prior: (f64, f64)) -> (f64, f64) {
        match (self.cpu.rate(), self.gpu.rate()) {
            (Some(cpu), Some(gpu)) if cpu + gpu > 0.0 => (cpu, gpu),
            _ => prior,
        }
    }

    /// The GPU's share of this kind's bytes that makes both sides finish together when
    /// neither has work queued; `prior`'s until both sides are measured.
    fn balanced_gpu_share(&self, prior: (f64, f64)) -> f64 {
        let (cpu, gpu) = self.or(prior);
        gpu / (cpu + gpu)
    }
}

/// The `(cpu, gpu)` rates before any measurement, with the CPU side on `cpu_threads` threads.
fn prior_rates(cpu_threads: usize) -> (f64, f64) {
    (
        PRIOR_CPU_THREAD_RATE * cpu_threads.max(1) as f64,
        PRIOR_GPU_RATE,
    )
}

#[derive(Debug)]
struct SplitState {
    rates: HashMap<Kind, Rates>,
    /// Each side's parts in flight and busy time: `[cpu, gpu]`.
    busy: [BusyTime; 2],
    /// The CPU pool's time so far: its threads' decoding seconds over their count, counted as
    /// parts finish. Auto reads the CPU side's load from it: the side's busy time (any part in
    /// flight) stays near the wall clock whatever each part holds, so with parts smaller than
    /// the pool a side decoding a tenth of what it could read as full. On 64 cores beside
    /// setup A in bf16, where CPU decoding alone trains at 201 samples/s, auto read it so and
    /// sent 88% of each batch to the GPU: 177 samples/s (H200, 2026-11-27; docs/training-runs.md,
    /// "Four GPUs").
    cpu_pool_seconds: f64,
    /// Work shared out to each side and not yet finished.
    backlog: Backlog,
    /// Auto: the GPU's share of each batch, from the consumer's pace.
    auto: AutoShare,
    /// What the measured rates miss (a GPU part's fixed costs, sides slowing each other):
    /// the CPU's rate counts this many times in the balanced share. Lowered when a batch's
    /// CPU part finishes after its GPU part, raised back towards 1 when it finishes first or
    /// gets nothing.
    cpu_weight: f64,
    started: Option<Instant>,
    gpu_time: Duration,
    /// Balanced: whether the CPU side adds to what the GPU decodes alone.
    trials: SplitTrials,
}

/// One batch's chunks, shared out, and the work each side was given: `[cpu, gpu]`.
struct Shares {
    cpu: Vec<EncodedChunk>,
    gpu: Vec<EncodedChunk>,
    work: [QueuedWork; 2],
    /// Balanced: the batch in the trials.
    trial: Option<TrialBatch>,
}

impl SplitDecoder {
    /// Splits batches between `cpu` (decoding to host memory) and `gpu` (to device memory).
    /// Give the CPU side a pool of its own (`CpuDecoder::with_pool`), so the GPU side's
    /// planning does not queue behind its chunks on rayon's global pool.
    pub fn new(
        cpu: Arc<dyn BatchDecoder>,
        gpu: Arc<dyn BatchDecoder>,
        policy: SplitPolicy,
    ) -> Self {
        Self {
            cpu,
            gpu,
            policy,
            prior: prior_rates(PRIOR_CPU_THREADS),
            cpu_threads: PRIOR_CPU_THREADS,
            pace: Arc::new(Pace::default()),
            cpu_alone: Arc::new(true.into()),
            state: Mutex::new(SplitState {
                rates: HashMap::new(),
                busy: [BusyTime::new(Instant::now()), BusyTime::new(Instant::now())],
                cpu_pool_seconds: 0.0,
                backlog: Backlog::default(),
                auto: AutoShare::new(),
                cpu_weight: 1.0,
                started: None,
                gpu_time: Duration::ZERO,
                trials: SplitTrials::new(Instant::now()),
            }),
        }
    }

    /// The CPU side decodes on `threads` threads: the share its first batches get, before
    /// its rate is measured.
    pub fn with_cpu_threads(mut self, threads: usize) -> Self {
        self.prior = prior_rates(threads);
        self.cpu_threads = threads.max(1);
        self
    }

    /// Reads the consumer's pace from `pace` instead of its own.
    pub fn with_pace(mut self, pace: Arc<Pace>) -> Self {
        self.pace = pace;
        self
    }

    /// Where [`SplitPolicy::Auto`] reads the consumer's pace: the decode stage attaches it to
    /// each batch and a pipeline's `BatchStream` records into it. The decoder keeps what it
    /// learnt (rates, auto's share) for as long as it lives: keep it across epochs.
    pub fn pace(&self) -> Arc<Pace> {
        self.pace.clone()
    }

    /// How it shares batches out.
    pub fn policy(&self) -> SplitPolicy {
        self.policy
    }

    /// The GPU's share of the decoded bytes the next batch of one kind would get, for
    /// reports; `None` before any batch.
    pub fn gpu_share_now(&self) -> Option<f64> {
        let state = self.lock();
        let shares: Vec<f64> = state
            .rates
            .values()
            .map(|rates| self.gpu_share(rates, &state))
            .collect();
        (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64)
    }

    /// The GPU's share of a kind's chunks with `rates` with nothing queued: balanced, leant
    /// by the CPU's weight; under auto, auto's share.
    fn gpu_share(&self, rates: &Rates, state: &SplitState) -> f64 {
        match self.policy {
            SplitPolicy::Balanced if state.trials.way_now() == Way::GpuAlone => 1.0,
            SplitPolicy::Balanced => lean(rates.balanced_gpu_share(self.prior), state.cpu_weight),
            SplitPolicy::Auto { .. } => state.auto.share(),
            SplitPolicy::Fixed { gpu_chunks } => gpu_chunks,
        }
    }

    /// The queued work a batch is shared out by: all of it when balanced; none under auto,
    /// which keeps the CPU first. Its CPU side always has work queued (the GPU helps only while
    /// the consumer waits), so counting it sent whole batches to the GPU once throttled up
    /// (setup A in fp32 on an H100, 2026-11-25: 10.3% of the GPU's time, against 3.0-3.4% without;
    /// docs/training-runs.md).
    fn backlog_to_share_by(&self, state: &SplitState) -> Backlog {
        match self.policy {
            SplitPolicy::Balanced => state.backlog,
            SplitPolicy::Auto { .. } | SplitPolicy::Fixed { .. } => Backlog::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SplitState> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Shares out one batch: for each kind, its balanced GPU share, throttled by the policy.
    fn share(&self, chunks: Vec<EncodedChunk>) -> Shares {
        let mut state = self.lock();
        let now = Instant::now();
        let started = *state.started.get_or_insert(now);
        state.backlog.drain(now);
        let ahead = state.backlog.seconds();
        let mut by_kind: HashMap<Kind, Vec<EncodedChunk>> = HashMap::new();
        for chunk in chunks {
            by_kind.entry(kind(&chunk)).or_default().push(chunk);
        }
        let trial = (self.policy == SplitPolicy::Balanced).then(|| {
            let bytes = by_kind
                .iter()
                .map(|(kind, chunks)| kind.decoded_bytes * chunks.len() as u64);
            state.trials.start_batch(bytes.sum(), now)
        });
        let gpu_alone = trial
            .as_ref()
            .is_some_and(|trial| trial.way() == Way::GpuAlone);
        if let SplitPolicy::Auto { gpu_share } = self.policy {
            let counts = by_kind.iter().map(|(kind, chunks)| (kind, chunks.len()));
            let cpu = Self::cpu_side(&state, counts);
            tracing::debug!(
                batch_ms = cpu.batch_seconds.map(|seconds| 1e3 * seconds),
                alone_in_place_ms = cpu.alone_in_place_seconds.map(|seconds| 1e3 * seconds),
                "auto: the CPU side's batch as read"
            );
            state.auto.update(self.pace.counts(), cpu, ahead, now);
            if let Some(share) = gpu_share {
                if state.gpu_time.as_secs_f64() > share * started.elapsed().as_secs_f64() {
                    state.auto.scale_down(0.75);
                }
            }
            let cpu_alone = state.auto.share() < AUTO_SMALLEST_GPU_SHARE;
            self.cpu_alone.store(cpu_alone, Ordering::Relaxed);
        }
        let mut shares = Shares {
            cpu: Vec::new(),
            gpu: Vec::new(),
            work: [Side::Cpu, Side::Gpu].map(|side| QueuedWork {
                ahead: ahead[side as usize],
                seconds: 0.0,
                added: now,
            }),
            trial,
        };
        let (mut gpu_bytes, mut all_bytes) = (0u64, 0u64);
        for (kind, mut chunks) in by_kind {
            let rates = state.rates.get(&kind).copied().unwrap_or_default();
            let (cpu_rate, gpu_rate) = rates.or(self.prior);
            // The CPU's rate counted `cpu_weight` times, as in `lean`.
            let cpu_rate = cpu_rate * state.cpu_weight;
            let to_gpu = match self.policy {
                SplitPolicy::Balanced if gpu_alone => chunks.len(),
                SplitPolicy::Balanced => gpu_chunks(
                    chunks.len(),
                    kind.decoded_bytes,
                    (cpu_rate, gpu_rate),
                    &self.backlog_to_share_by(&state),
                ),
                // Auto's share, which goes past the balanced one when the consumer still waits
                // with it (a GPU beside a model decodes slower than the rates measured a
                // while ago say).
                SplitPolicy::Auto { .. } => {
                    let count = chunks.len();
                    let share = (count as f64 * state.auto.share()).round() as usize;
                    worth_a_gpu_part(share.min(count), count)
                }
                SplitPolicy::Fixed { gpu_chunks } => {
                    let count = chunks.len();
                    ((count as f64 * gpu_chunks).round() as usize).min(count)
                }
            };
            let to_cpu = chunks.len() - to_gpu;
            let seconds = |count: usize, rate: f64| match rate > 0.0 {
                true => (count as u64 * kind.decoded_bytes) as f64 / rate,
                false => 0.0,
            };
            let given = [seconds(to_cpu, cpu_rate), seconds(to_gpu, gpu_rate)];
            for side in [Side::Cpu, Side::Gpu] {
                state.backlog.add(side as usize, given[side as usize], now);
                shares.work[side as usize].seconds += given[side as usize];
            }
            shares.gpu.extend(chunks.drain(to_cpu..));
            shares.cpu.extend(chunks);
            gpu_bytes += to_gpu as u64 * kind.decoded_bytes;
            all_bytes += (to_cpu + to_gpu) as u64 * kind.decoded_bytes;
        }
        if matches!(self.policy, SplitPolicy::Auto { .. }) {
            let fraction = match all_bytes {
                0 => 0.0,
                all => gpu_bytes as f64 / all as f64,
            };
            state.auto.shared_out(fraction, now);
        }
        tracing::debug!(
            cpu = shares.cpu.len(),
            gpu = shares.gpu.len(),
            cpu_queued_ms = 1e3 * state.backlog.seconds()[0],
            gpu_queued_ms = 1e3 * state.backlog.seconds()[1],
            auto_share = state.auto.share(),
            wait_share = state.auto.wait_share(),
            cpu_weight = state.cpu_weight,
            "split: a batch shared out"
        );
        shares
    }

    /// What auto reads of the CPU side before sharing out `count` chunks of each kind.
    fn cpu_side<'a>(
        state: &SplitState,
        counts: impl IntoIterator<Item = (&'a Kind, usize)>,
    ) -> CpuSide {
        let counts: Vec<(&Kind, usize)> = counts.into_iter().collect();
        let seconds = |which: fn(&Rates) -> &Throughput| {
            cpu_batch_seconds(counts.iter().copied(), &state.rates, which)
        };
        let pool = seconds(|rates| &rates.cpu_pool);
        CpuSide {
            busy: state.cpu_pool_seconds,
            batch_seconds: lesser(pool, seconds(|rates| &rates.cpu)),
            alone_in_place_seconds: seconds(|rates| &rates.cpu_in_place),
        }
    }

    /// Updates the rates of the kinds a side decoded in the part begun at `start`, from what
    /// the part cost the side (`spent`: its decoding's stats).
    /// `in_place`: a CPU part decoded alone, where the collator placed it.
    fn learn(
        &self,
        side: Side,
        chunks: &[Kind],
        start: PartStart,
        spent: &BatchStats,
        in_place: bool,
    ) {
        let mut state = self.lock();
        let cost = state.busy[side as usize].finish(start, Instant::now());
        match side {
            Side::Gpu => state.gpu_time += spent.gpu_busy,
            Side::Cpu => {
                // By its threads' CPU time: niced beside the consumer and the GPU side's
                // feeding, they wait for cores, and read by their wall-clock time the side
                // looks slower the more the GPU takes. Beside setup A's bf16 model a mixed
                // batch's CPU part took its threads 25-50% more wall-clock time than CPU time,
                // a batch in place under 3% more (H200, 2026-11-29; docs/training-runs.md).
                let pool = spent.decode_cpu.as_secs_f64() / self.cpu_threads as f64;
                state.cpu_pool_seconds += pool;
                record(&mut state.rates, chunks, pool, |rates| &mut rates.cpu_pool);
                if in_place {
                    // The greater of its busy time and its threads' time: decoded beside other
                    // parts (mixed batches' CPU parts decoding at once, as a balanced split's
                    // and any off a runtime do), its busy time is shared with theirs. Beside
                    // setup B's model, batches that took the threads 295 ms read as 180-192 ms
                    // by busy time alone, and every batch on the CPU was tried where it trains
                    // at a third of the GPU's pace (H200, 2026-11-29; docs/training-runs.md).
                    let seconds = cost.map_or(pool, |cost| cost.as_secs_f64().max(pool));
                    record(&mut state.rates, chunks, seconds, |rates| {
                        &mut rates.cpu_in_place
                    });
                }
            }
        }
        tracing::debug!(
            ?side,
            chunks = chunks.len(),
            wall_ms = 1e3 * start.wall().as_secs_f64(),
            cost_ms = cost.map(|cost| 1e3 * cost.as_secs_f64()),
            threads_ms = 1e3 * spent.decode_busy.as_secs_f64(),
            threads_cpu_ms = 1e3 * spent.decode_cpu.as_secs_f64(),
            in_place,
            "split: a part decoded"
        );
        if let Some(cost) = cost {
            let seconds = cost.as_secs_f64();
            match side {
                Side::Cpu => record(&mut state.rates, chunks, seconds, |rates| &mut rates.cpu),
                Side::Gpu => record(&mut state.rates, chunks, seconds, |rates| &mut rates.gpu),
            }
        }
    }

    /// Moves the CPU's weight after a batch, from when each side finished its part (`None`:
    /// it had no chunks).
    fn weigh(&self, cpu_done: Option<Instant>, gpu_done: Option<Instant>) {
        let factor = match (cpu_done, gpu_done) {
            (Some(cpu), Some(gpu)) if cpu > gpu => LATE_CPU,
            (Some(_), Some(_)) => EARLY_CPU,
            // The CPU sat idle beside the GPU's part: let it try some chunks.
            (None, Some(_)) if self.policy == SplitPolicy::Balanced => EARLY_CPU,
            _ => return,
        };
        let mut state = self.lock();
        let (low, high) = CPU_WEIGHT_BOUNDS;
        state.cpu_weight = (state.cpu_weight * factor).clamp(low, high);
    }

    /// Hands one side its chunks (none: nothing to do); returns their kinds and the decoding.
    fn start_side(&self, side: Side, chunks: Vec<EncodedChunk>) -> Option<SidePart> {
        if chunks.is_empty() {
            return None;
        }
        let kinds: Vec<Kind> = chunks.iter().map(kind).collect();
        let decoding = match side {
            Side::Cpu => self.cpu.clone().decode_chunks(chunks),
            Side::Gpu if chunks.iter().any(EncodedChunk::is_read_at_decode) => {
                let gpu = self.gpu.clone();
                let memory = gpu.read_memory();
                async move { gpu.decode_chunks(read_now(chunks, memory).await?).await }.boxed()
            }
            Side::Gpu => self.gpu.clone().decode_chunks(chunks),
        };
        Some((kinds, decoding))
    }

    /// Finishes one side's part; returns what it decoded and when it finished (`None`: it
    /// decodes later, where the collator places it, as `placed_later` asks of a pending part).
    async fn decode_side(
        self: &Arc<Self>,
        side: Side,
        part: Option<SidePart>,
        queued: Queued,
        placed_later: bool,
    ) -> Result<Option<(DecodedChunks, Option<Instant>)>> {
        let Some((kinds, decoding)) = part else {
            return Ok(None);
        };
        let part = PartInFlight::start(self.clone(), side);
        let decoded = match decoding.await? {
            DecodedChunks::Pending(pending) if placed_later => {
                part.forget();
                let watch = PendingPart {
                    split: self.clone(),
                    kinds,
                    part: None,
                    _queued: queued,
                };
                return Ok(Some((
                    DecodedChunks::Pending(pending.watched(Box::new(watch))),
                    None,
                )));
            }
            // The side's rate is learnt from when it finishes: decode now.
            DecodedChunks::Pending(pending) => DecodedChunks::Host(pending.decode().await?),
            decoded => decoded,
        };
        self.learn(side, &kinds, part.into_start(), &decoded.stats(), false);
        drop(queued);
        Ok(Some((decoded, Some(Instant::now()))))
    }
}

/// `chunks` with the files of those handed on unread read now, on rayon's pool, into the GPU
/// side's `memory` where it has room (there they upload without a staging copy): a GPU part
/// of a batch fetched while auto kept every batch on the CPU (`auto_reads.rs`). Read into
/// ordinary memory, the first such parts beside setup B's model were staged through pinned
/// buffers that grew by `cudaHostAlloc`, 0.3-0.75 s each (H200, 2026-11-29; docs/training-runs.md).
async fn read_now(
    chunks: Vec<EncodedChunk>,
    memory: Option<Arc<dyn ReadMemory>>,
) -> Result<Vec<EncodedChunk>> {
    use rayon::prelude::*;
    let read = tokio::task::spawn_blocking(move || {
        chunks
            .into_par_iter()
            .map(|chunk| chunk.read_now_into(memory.as_deref()))
            .collect::<std::result::Result<Vec<_>, _>>()
    });
    let read = read.await.map_err(|source| crate::Error::StageTask {
        stage: "reading a GPU part's chunks",
        source,
    })?;
    Ok(read?)
}

/// A part counted in its side's busy time until it is learnt from, or, failed or cancelled
/// (a stream dropped mid-epoch), until it is dropped.
struct PartInFlight {
    split: Arc<SplitDecoder>,
    side: Side,
    start: Option<PartStart>,
}

impl PartInFlight {
    fn start(split: Arc<SplitDecoder>, side: Side) -> Self {
        let start = split.lock().busy[side as usize].start(Instant::now());
        Self {
            split,
            side,
            start: Some(start),
        }
    }

    /// Hands the part's start to [`SplitDecoder::learn`], which ends it.
    fn into_start(mut self) -> PartStart {
        self.start.take().expect("started")
    }

    /// Takes the part out of its side's busy time unfinished: its work happens elsewhere.
    fn forget(mut self) {
        if self.start.take().is_some() {
            self.split.lock().busy[self.side as usize].forget(Instant::now());
        }
    }
}

impl Drop for PartInFlight {
    fn drop(&mut self) {
        if let Some(start) = self.start.take() {
            self.split.lock().busy[self.side as usize].finish(start, Instant::now());
        }
    }
}

/// Auto's batch on the CPU side alone, decoded where the collator places it: counted in the CPU
/// side's queued work until then, in its busy time while it decodes, and learnt from once
/// decoded. Dropped undecoded (failed, or its stream dropped), it is counted no more.
struct PendingPart {
    split: Arc<SplitDecoder>,
    kinds: Vec<Kind>,
    part: Option<PartInFlight>,
    _queued: Queued,
}

impl DecodeWatch for PendingPart {
    fn begun(&mut self) {
        self.part = Some(PartInFlight::start(self.split.clone(), Side::Cpu));
    }

    fn ended(mut self: Box<Self>, spent: &BatchStats) {
        if let Some(part) = self.part.take() {
            self.split
                .learn(Side::Cpu, &self.kinds, part.into_start(), spent, true);
        }
    }
}

/// A side's share of one batch, counted in its backlog until decoded, failed or dropped.
struct Queued {
    split: Arc<SplitDecoder>,
    side: Side,
    work: QueuedWork,
}

impl Drop for Queued {
    fn drop(&mut self) {
        let mut state = self.split.lock();
        state
            .backlog
            .finish(self.side as usize, &self.work, Instant::now());
    }
}

/// A batch in balanced split's trials, ended when decoded, failed or dropped.
struct InTrial {
    split: Arc<SplitDecoder>,
    batch: Option<TrialBatch>,
}

impl InTrial {
    fn decoded(mut self) {
        self.end(true);
    }

    fn end(&mut self, decoded: bool) {
        if let Some(batch) = self.batch.take() {
            let mut state = self.split.lock();
            state.trials.finish_batch(batch, decoded, Instant::now());
        }
    }
}

impl Drop for InTrial {
    fn drop(&mut self) {
        self.end(false);
    }
}

/// How many of `count` chunks of `decoded_bytes` each go to the GPU, with the sides'
/// `(cpu, gpu)` rates and their queued work: both sides finish together
/// ([`Backlog::cpu_bytes`]), in whole chunks, rounded to the count that finishes the batch
/// first. Rounded to the nearest count instead, a batch of 7 shards of 170 MB (W1 in shards
/// of 4 steps) gave the CPU side one or more whole shards that it decoded in 130-200 ms
/// while the GPU decoded the rest in about 60, and split delivered 20.47 GB/s where the GPU
/// alone delivered 33.00 (H100, 2026-11-27; docs/benchmarks.md, "Split against the GPU alone").
fn gpu_chunks(
    count: usize,
    decoded_bytes: u64,
    (cpu_rate, gpu_rate): (f64, f64),
    backlog: &Backlog,
) -> usize {
    let chunk = decoded_bytes as f64;
    if count == 0 || chunk <= 0.0 {
        let gpu_share = gpu_rate / (cpu_rate + gpu_rate).max(f64::MIN_POSITIVE);
        return ((count as f64 * gpu_share).round() as usize).min(count);
    }
    let cpu_exact = backlog.cpu_bytes(count as f64 * chunk, cpu_rate, gpu_rate) / chunk;
    let fewer = (cpu_exact.floor() as usize).min(count);
    let more = (cpu_exact.ceil() as usize).min(count);
    let finished = |to_cpu: usize| {
        backlog.finished_after(
            to_cpu as f64 * chunk,
            (count - to_cpu) as f64 * chunk,
            (cpu_rate, gpu_rate),
        )
    };
    let to_cpu = match more > fewer && finished(more) < finished(fewer) {
        true => more,
        false => fewer,
    };
    count - to_cpu
}

/// The seconds the CPU side would take for `count` chunks of each kind at its rates `which`
/// reads; `None` until it has decoded each kind so.
fn cpu_batch_seconds<'a>(
    counts: impl IntoIterator<Item = (&'a Kind, usize)>,
    rates: &HashMap<Kind, Rates>,
    which: fn(&Rates) -> &Throughput,
) -> Option<f64> {
    let mut seconds = 0.0;
    for (kind, count) in counts {
        let rate = which(rates.get(kind)?).rate().filter(|&rate| rate > 0.0)?;
        seconds += (count as u64 * kind.decoded_bytes) as f64 / rate;
    }
    Some(seconds)
}

/// The lesser of two reads of a time, either of which may be missing.
fn lesser(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `to_gpu` of a kind's `count` chunks, or none when they make a part too small to pay its
/// fixed costs on the GPU ([`AUTO_SMALLEST_GPU_SHARE`]).
fn worth_a_gpu_part(to_gpu: usize, count: usize) -> usize {
    match (to_gpu as f64) < AUTO_SMALLEST_GPU_SHARE * count as f64 {
        true => 0,
        false => to_gpu,
    }
}

/// Records a part that cost `seconds` in the rates of the kinds its chunks had (the
/// throughput `which` picks), the seconds shared out by their bytes.
fn record(
    rates: &mut HashMap<Kind, Rates>,
    chunks: &[Kind],
    seconds: f64,
    which: fn(&mut Rates) -> &mut Throughput,
) {
    let total: u64 = chunks.iter().map(|kind| kind.decoded_bytes).sum();
    if total == 0 {
        return;
    }
    let mut bytes: HashMap<&Kind, u64> = HashMap::new();
    for kind in chunks {
        *bytes.entry(kind).or_default() += kind.decoded_bytes;
    }
    for (kind, bytes) in bytes {
        let throughput = which(rates.entry(kind.clone()).or_default());
        throughput.add(bytes as f64, seconds * bytes as f64 / total as f64);
    }
}

/// The GPU's share `gpu_share` (balanced by the measured rates) with the CPU's rate counted
/// `cpu_weight` times.
fn lean(gpu_share: f64, cpu_weight: f64) -> f64 {
    let cpu_share = cpu_weight * (1.0 - gpu_share);
    if gpu_share + cpu_share > 0.0 {
        gpu_share / (gpu_share + cpu_share)
    } else {
        gpu_share
    }
}

/// One side's part of a batch: its chunks' kinds and their decoding, started.
type SidePart = (Vec<Kind>, BoxFuture<'static, Result<DecodedChunks>>);

/// A side of the split; its number indexes `SplitState::busy`.
#[derive(Clone, Copy, Debug)]
enum Side {
    Cpu = 0,
    Gpu = 1,
}

fn kind(chunk: &EncodedChunk) -> Kind {
    let variable = &chunk.request.variable;
    Kind {
        codecs: variable.codec_names(),
        decoded_bytes: variable.decoded_chunk_bytes(),
    }
}

impl BatchDecoder for SplitDecoder {
    fn decode_chunks(
        self: Arc<Self>,
        chunks: Vec<EncodedChunk>,
    ) -> BoxFuture<'static, Result<DecodedChunks>> {
        let mut shares = self.share(chunks);
        let gpu_alone = (shares.trial.as_ref()).is_some_and(|trial| trial.way() == Way::GpuAlone);
        let in_trial = InTrial {
            split: self.clone(),
            batch: shares.trial.take(),
        };
        let queued = |side: Side| Queued {
            split: self.clone(),
            side,
            work: shares.work[side as usize],
        };
        let (cpu_queued, gpu_queued) = (queued(Side::Cpu), queued(Side::Gpu));
        // Under auto and a fixed split, a batch's CPU part is handed on undecoded, to be
        // decoded straight into the collator's memory in the collator's turn, as CPU decoding
        // alone does: a batch on the CPU side alone, and a mixed batch's CPU part, whose GPU part
        // then decodes on a task of its own that the collator waits for after the CPU part
        // ([`DecodingPart`]). So the cores take the batches' CPU work one batch after another,
        // in the consumer's order, and the CPU part never waits behind the GPU part, queued
        // behind a model's kernels. Decoded at once into memory of its own, a mixed batch's CPU
        // part cost its threads 8-15 ms a chunk against 6-8.5 in place, and when auto first
        // called the GPU in, the CPU parts of the seven batches shared out then took the
        // threads before the batches on the CPU alone ahead of them, which the consumer waited
        // for (up to 725 ms where one takes 105; setup A bf16, H200, 2026-11-29;
        // docs/training-runs.md). Balanced split decodes both parts at once: its trials time a
        // batch from when both are done.
        let hands_cpu_parts_on = self.policy != SplitPolicy::Balanced;
        let gpu_beside = match tokio::runtime::Handle::try_current() {
            Ok(runtime)
                if hands_cpu_parts_on && !shares.cpu.is_empty() && !shares.gpu.is_empty() =>
            {
                let requests = shares.gpu.iter().map(|chunk| chunk.request.clone());
                Some((runtime, requests.collect::<Vec<_>>()))
            }
            _ => None,
        };
        // Both sides are called now, as batches come, in order: the GPU side admits batches
        // to its memory budget in the order it was called.
        let (cpu_part, gpu_part) = (
            self.start_side(Side::Cpu, shares.cpu),
            self.start_side(Side::Gpu, shares.gpu),
        );
        if let Some((runtime, requests)) = gpu_beside {
            // Not in a balanced split's trials: nothing to end.
            drop(in_trial);
            let split = self.clone();
            let gpu = runtime.spawn(async move {
                let decoded = split.decode_side(Side::Gpu, gpu_part, gpu_queued, false);
                Ok(decoded
                    .await?
                    .map_or_else(|| DecodedChunks::Host(Vec::new()), |(decoded, _)| decoded))
            });
            return async move {
                let cpu = self.decode_side(Side::Cpu, cpu_part, cpu_queued, true);
                let mut parts: Vec<DecodedChunks> =
                    cpu.await?.into_iter().map(|(p, _)| p).collect();
                parts.push(DecodedChunks::Decoding(DecodingPart::new(requests, gpu)));
                Ok(DecodedChunks::Split(parts))
            }
            .boxed();
        }
        // Off a runtime a mixed batch's parts decode at once; a batch on the CPU alone is
        // still handed on.
        let cpu_placed_later = hands_cpu_parts_on && gpu_part.is_none();
        async move {
            let (cpu, gpu) = futures::try_join!(
                self.decode_side(Side::Cpu, cpu_part, cpu_queued, cpu_placed_later),
                self.decode_side(Side::Gpu, gpu_part, gpu_queued, false)
            )?;
            in_trial.decoded();
            if !gpu_alone {
                self.weigh(
                    cpu.as_ref().and_then(|(_, done)| *done),
                    gpu.as_ref().and_then(|(_, done)| *done),
                );
            }
            let parts = cpu.into_iter().chain(gpu).map(|(decoded, _)| decoded);
            let mut parts: Vec<DecodedChunks> = parts.collect();
            Ok(match parts.len() {
                0 => DecodedChunks::Host(Vec::new()),
                1 => parts.pop().expect("one part"),
                _ => DecodedChunks::Split(parts),
            })
        }
        .boxed()
    }

    /// The GPU side's: the CPU side decodes from pinned memory as well as from any. Auto
    /// needs it as much as split does where it sends the GPU most chunks: without it, auto
    /// with every chunk on the GPU delivered W1 of 64 steps at 22.5 / 26.6 GB/s where GPU
    /// decoding delivered 35.9 / 32.4 (H100, 2026-11-27; docs/benchmarks.md).
    /// Under auto, none while it keeps every batch on the CPU (`auto_reads.rs`).
    fn read_memory(&self) -> Option<Arc<dyn ReadMemory>> {
        match self.policy {
            SplitPolicy::Balanced | SplitPolicy::Fixed { .. } => self.gpu.read_memory(),
            SplitPolicy::Auto { .. } => Some(Arc::new(AutoReads::new(
                self.gpu.read_memory(),
                self.cpu_alone.clone(),
            ))),
        }
    }

    /// Auto's: it shares batches out by the consumer's waits.
    fn consumer_pace(&self) -> Option<Arc<Pace>> {
        match self.policy {
            SplitPolicy::Balanced | SplitPolicy::Fixed { .. } => None,
            SplitPolicy::Auto { .. } => Some(self.pace.clone()),
        }
    }

    fn batches_in_flight(&self) -> usize {
        self.cpu
            .batches_in_flight()
            .max(self.gpu.batches_in_flight())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture_chunks;
    use crate::CpuDecoder;

    fn split(policy: SplitPolicy) -> SplitDecoder {
        let cpu: Arc<dyn BatchDecoder> = Arc::new(CpuDecoder::default());
        SplitDecoder::new(cpu.clone(), cpu, policy)
    }

    /// Auto's fetch stage hands local chunk files on unread while every batch stays on the
    /// CPU, and reads into the GPU side's memory once the GPU takes a part; a GPU part of a
    /// batch handed on unread is read before the GPU side takes it, the same bytes.
    #[test]
    fn auto_reads_at_decode_while_the_cpu_decodes_alone() {
        use zarrpipe_store::{fetch_chunk_into, Dataset};
        let dir = tempfile::tempdir().unwrap();
        crate::testing::write_cases(dir.path(), &crate::testing::cases(), 3);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let split = split(SplitPolicy::Auto { gpu_share: None });
            let memory = split.read_memory().expect("auto's read memory");
            assert!(memory.reads_at_decode());
            let dataset = Dataset::open(dir.path().to_str().unwrap()).await.unwrap();
            let read = crate::testing::fetch_all(&dataset).await;
            let mut handed_on = Vec::new();
            for chunk in &read {
                let fetched = fetch_chunk_into(chunk.request.clone(), Some(memory.clone()));
                handed_on.push(fetched.await.unwrap());
            }
            let unread = handed_on.iter().filter(|c| c.is_read_at_decode()).count();
            assert!(unread > read.len() / 2, "{unread} of {}", read.len());
            // Read for the GPU side into its memory: every unread chunk takes a buffer there.
            let gpu_memory = Arc::new(CountingMemory::default());
            let read_for_the_gpu = read_now(handed_on.clone(), Some(gpu_memory.clone()))
                .await
                .unwrap();
            assert_eq!(gpu_memory.buffers.load(Ordering::Relaxed), unread);
            // And without memory of its own, into ordinary memory: the same bytes either way.
            let read_plainly = read_now(handed_on, None).await.unwrap();
            for ((chunk, plainly), expected) in
                read_for_the_gpu.iter().zip(&read_plainly).zip(&read)
            {
                assert!(!chunk.is_read_at_decode());
                assert_eq!(chunk.bytes, expected.bytes, "{}", chunk.request.key());
                assert_eq!(plainly.bytes, expected.bytes, "{}", chunk.request.key());
            }
            split.cpu_alone.store(false, Ordering::Relaxed);
            assert!(!memory.reads_at_decode());
        });
    }

    /// Read memory that hands out ordinary buffers and counts them.
    #[derive(Debug, Default)]
    struct CountingMemory {
        buffers: std::sync::atomic::AtomicUsize,
    }

    struct Owned(Vec<u8>);

    impl AsRef<[u8]> for Owned {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }

    impl AsMut<[u8]> for Owned {
        fn as_mut(&mut self) -> &mut [u8] {
            &mut self.0
        }
    }

    impl zarrpipe_store::ReadBuffer for Owned {}

    impl ReadMemory for CountingMemory {
        fn buffer(&self, len: usize) -> Option<Box<dyn zarrpipe_store::ReadBuffer>> {
            self.buffers.fetch_add(1, Ordering::Relaxed);
            Some(Box::new(Owned(vec![0; len])))
        }
    }

    #[test]
    fn lean_counts_the_cpu_rate_weight_times() {
        assert!((lean(0.5, 1.0) - 0.5).abs() < 1e-12);
        assert!((lean(0.5, 0.5) - 2.0 / 3.0).abs() < 1e-12);
        assert!((lean(0.75, 3.0) - 0.5).abs() < 1e-12);
        assert_eq!(lean(1.0, 16.0), 1.0);
        assert_eq!(lean(0.0, 1.0 / 16.0), 0.0);
    }

    #[test]
    fn a_late_cpu_part_moves_chunks_to_the_gpu_and_an_early_one_back() {
        let split = split(SplitPolicy::Balanced);
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(5);
        split.weigh(Some(later), Some(t0));
        assert!((split.lock().cpu_weight - LATE_CPU).abs() < 1e-12);
        split.weigh(Some(t0), Some(later));
        assert!((split.lock().cpu_weight - LATE_CPU * EARLY_CPU).abs() < 1e-12);
        for _ in 0..100 {
            split.weigh(Some(later), Some(t0));
        }
        assert_eq!(split.lock().cpu_weight, CPU_WEIGHT_BOUNDS.0);
        // An idle CPU side beside a GPU part is given chunks to try again, up to what its
        // measured rate gives it and no more, however often it finishes first.
        for _ in 0..100 {
            split.weigh(None, Some(t0));
        }
        assert_eq!(split.lock().cpu_weight, 1.0);
        for _ in 0..100 {
            split.weigh(Some(t0), Some(later));
        }
        assert_eq!(split.lock().cpu_weight, 1.0);
    }

    #[test]
    fn the_first_batches_follow_the_cpu_sides_threads() {
        assert!(
            (Rates::default().balanced_gpu_share(prior_rates(16)) - 0.748).abs() < 0.001,
            "{:?}",
            prior_rates(16)
        );
        let four = split(SplitPolicy::Balanced).with_cpu_threads(4);
        assert!((Rates::default().balanced_gpu_share(four.prior) - 0.922).abs() < 0.001);
        assert_eq!(prior_rates(0), prior_rates(1));
        // Measured rates replace the prior.
        let measured = Rates {
            cpu: Throughput {
                bytes: 1e9,
                seconds: 1.0,
            },
            gpu: Throughput {
                bytes: 3e9,
                seconds: 1.0,
            },
            ..Rates::default()
        };
        assert_eq!(measured.balanced_gpu_share(four.prior), 0.75);
    }

    #[test]
    fn a_kinds_rate_is_its_bytes_over_its_share_of_the_sides_time() {
        let kind = |bytes| Kind {
            codecs: vec!["zstd".into()],
            decoded_bytes: bytes,
        };
        let rate = |rates: &HashMap<Kind, Rates>, bytes| rates[&kind(bytes)].gpu.rate().unwrap();
        let gpu: fn(&mut Rates) -> &mut Throughput = |rates| &mut rates.gpu;
        let mut rates = HashMap::new();
        // Three parts of 1000 chunks of 1 MB that finished together cost 0.3 s between them.
        for seconds in [0.3, 0.0, 0.0] {
            record(&mut rates, &vec![kind(1_000_000); 1000], seconds, gpu);
        }
        assert!((rate(&rates, 1_000_000) - 10e9).abs() < 1e3);
        // A slow part counts by its seconds (the older ones keep e^-0.5 of theirs), and fades
        // as the side works on.
        record(&mut rates, &[kind(1_000_000)], 0.1, gpu);
        let kept = (-0.5f64).exp();
        let expected = (3e9 * kept + 1e6) / (0.3 * kept + 0.1);
        assert!((rate(&rates, 1_000_000) - expected).abs() < 1e3);
        record(&mut rates, &vec![kind(1_000_000); 4000], 0.4, gpu);
        assert!(rate(&rates, 1_000_000) > 9e9);
        // A part of two kinds shares its time out by their bytes.
        record(&mut rates, &[kind(3), kind(1), kind(3)], 7.0, |rates| {
            &mut rates.cpu
        });
        assert_eq!(rates[&kind(1)].cpu.rate(), Some(1.0 / 1.0));
        assert_eq!(rates[&kind(3)].cpu.rate(), Some(6.0 / 6.0));
        assert_eq!(rates[&kind(1)].gpu.rate(), None);
    }

    #[test]
    fn auto_keeps_the_weight_while_the_gpu_sits_out() {
        let split = split(SplitPolicy::Auto { gpu_share: None });
        let t0 = Instant::now();
        split.weigh(Some(t0), None);
        split.weigh(None, Some(t0));
        assert_eq!(split.lock().cpu_weight, 1.0);
    }

    #[test]
    fn a_batch_gives_a_side_less_while_it_has_work_queued() {
        let rates = (1e9, 3e9);
        let idle = Backlog::default();
        // 100 chunks of 1 MB: the balanced quarter to the CPU.
        assert_eq!(gpu_chunks(100, 1 << 20, rates, &idle), 75);
        // The CPU still has 50 ms queued: fewer for it.
        let cpu_behind = Backlog::of([0.05, 0.0]);
        assert!(gpu_chunks(100, 1 << 20, rates, &cpu_behind) > 75);
        // Queued past the GPU's time for the whole batch: none for it.
        let far_behind = Backlog::of([1.0, 0.0]);
        assert_eq!(gpu_chunks(100, 1 << 20, rates, &far_behind), 100);
        assert_eq!(gpu_chunks(0, 1 << 20, rates, &idle), 0);
    }

    #[test]
    fn a_side_gets_a_whole_chunk_only_where_the_batch_finishes_sooner() {
        // 7 shards of 170 MB, the CPU side at 1.7 GB/s and the GPU at 20: balanced, the CPU
        // would take 0.55 of a shard; a whole one takes it 100 ms where the GPU decodes all
        // seven in 60.
        let shard = 170_000_000;
        let idle = Backlog::default();
        assert_eq!(gpu_chunks(7, shard, (1.7e9, 20e9), &idle), 7);
        // With the CPU at 6 GB/s, one shard (28 ms) beside six on the GPU (51 ms) is sooner.
        assert_eq!(gpu_chunks(7, shard, (6e9, 20e9), &idle), 6);
        // The GPU's queued work counts: with 20 ms queued there, the CPU takes two.
        assert_eq!(
            gpu_chunks(7, shard, (6e9, 20e9), &Backlog::of([0.0, 0.02])),
            5
        );
        // A side without a rate gets nothing.
        assert_eq!(gpu_chunks(7, shard, (0.0, 20e9), &idle), 7);
        assert_eq!(gpu_chunks(7, shard, (6e9, 0.0), &idle), 0);
    }

    #[test]
    fn auto_sends_the_gpu_no_part_too_small_to_pay_its_fixed_costs() {
        // W1's batches: 172 chunks.
        assert_eq!(worth_a_gpu_part(1, 172), 0);
        assert_eq!(worth_a_gpu_part(21, 172), 0);
        assert_eq!(worth_a_gpu_part(22, 172), 22);
        assert_eq!(worth_a_gpu_part(172, 172), 172);
        assert_eq!(worth_a_gpu_part(0, 172), 0);
        // A batch of a few chunks: one is worth it.
        assert_eq!(worth_a_gpu_part(1, 4), 1);
    }

    #[test]
    fn auto_sends_the_gpu_what_a_waiting_consumer_asks_for() {
        let split = split(SplitPolicy::Auto { gpu_share: None });
        let pace = split.pace();
        let ms = Duration::from_millis;
        // Keeping up: the GPU stays out.
        for _ in 0..10 {
            pace.record(Duration::ZERO, ms(175));
            split.share(Vec::new());
        }
        assert_eq!(split.lock().auto.share(), 0.0);
        // Waiting a third of each step while every CPU thread decodes: the GPU comes in at
        // once.
        cpu_part_decoded(&split, ms(300) * 16);
        pace.record(ms(100), ms(300));
        split.share(Vec::new());
        assert!(split.lock().auto.share() > 0.3, "{:?}", split.lock().auto);
    }

    /// The job's waits, as its ranks record them.
    #[derive(Debug, Clone, Default)]
    struct OtherRank(Arc<std::sync::atomic::AtomicU64>);

    impl zarrpipe_core::PeerWaits for OtherRank {
        fn add(&self, _: Duration) {}
        fn waited(&self) -> Duration {
            Duration::from_nanos(self.0.load(std::sync::atomic::Ordering::Relaxed))
        }
    }

    #[test]
    fn auto_calls_the_gpu_in_when_another_rank_waits() {
        // Data-parallel ranks: this one's consumer never waits for its batch; it waits at the
        // all-reduce for a rank that waits for its own, and counts that as its model's work.
        let ms = Duration::from_millis;
        let share_after = |shared: bool| {
            let split = split(SplitPolicy::Auto { gpu_share: None });
            let pace = split.pace();
            let other = OtherRank::default();
            if shared {
                assert!(pace.share_waits(Box::new(other.clone())));
            }
            for _ in 0..10 {
                pace.record(Duration::ZERO, ms(175));
                split.share(Vec::new());
            }
            cpu_part_decoded(&split, ms(300) * 16);
            // The other rank waited 100 ms of this 300 ms step.
            other
                .0
                .fetch_add(100_000_000, std::sync::atomic::Ordering::Relaxed);
            pace.record(Duration::ZERO, ms(300));
            split.share(Vec::new());
            let share = split.lock().auto.share();
            share
        };
        assert_eq!(share_after(false), 0.0);
        assert!(share_after(true) > 0.3, "{}", share_after(true));
    }

    /// A CPU part of `split` (on 16 threads) decoded, its threads busy for `threads_busy`.
    fn cpu_part_decoded(split: &SplitDecoder, threads_busy: Duration) {
        cpu_part_learnt(split, &[], Duration::ZERO, threads_busy, false);
    }

    /// A CPU part of `split` of `kinds` learnt from (`in_place`: decoded alone where the
    /// collator placed it), in flight for `in_flight`, its threads busy for `threads_busy`.
    fn cpu_part_learnt(
        split: &SplitDecoder,
        kinds: &[Kind],
        in_flight: Duration,
        threads_busy: Duration,
        in_place: bool,
    ) {
        let threads = (threads_busy, threads_busy);
        cpu_part_learnt_waiting(split, kinds, in_flight, threads, in_place);
    }

    /// `cpu_part_learnt`, its threads busy for `threads.0` of which they ran `threads.1`.
    fn cpu_part_learnt_waiting(
        split: &SplitDecoder,
        kinds: &[Kind],
        in_flight: Duration,
        (threads_busy, threads_ran): (Duration, Duration),
        in_place: bool,
    ) {
        let start = split.lock().busy[Side::Cpu as usize].start(Instant::now());
        std::thread::sleep(in_flight);
        let spent = BatchStats {
            decode_busy: threads_busy,
            decode_cpu: threads_ran,
            ..BatchStats::default()
        };
        split.learn(Side::Cpu, kinds, start, &spent, in_place);
    }

    fn megabyte_zstd() -> Kind {
        Kind {
            codecs: vec!["zstd".into()],
            decoded_bytes: 1_000_000,
        }
    }

    #[test]
    fn auto_reads_the_cpu_side_by_its_threads_cpu_time_not_by_parts_in_flight_or_core_waits() {
        let ms = Duration::from_millis;
        for (in_flight, threads) in [
            // On many cores, parts smaller than the pool: a part is in flight all the time
            // while the threads decode a tenth of what they could.
            (ms(50), (ms(5) * 16, ms(5) * 16)),
            // Threads on cores shared with others: 20 ms each on the wall clock, 5 ms running.
            (ms(0), (ms(20) * 16, ms(5) * 16)),
        ] {
            let split = split(SplitPolicy::Auto { gpu_share: None });
            let megabyte = megabyte_zstd();
            let kinds = vec![megabyte.clone(); 10];
            cpu_part_learnt_waiting(&split, &kinds, in_flight, threads, false);
            let state = split.lock();
            // 10 MB in 5 ms of the pool's time: a batch of 100 such chunks takes 50 ms.
            let cpu = SplitDecoder::cpu_side(&state, [(&megabyte, 100)]);
            assert!((cpu.busy - 0.005).abs() < 1e-9, "{cpu:?}");
            let batch = cpu.batch_seconds.unwrap();
            assert!((batch - 0.05).abs() < 1e-9, "{batch}");
        }
    }

    #[test]
    fn auto_reads_a_mixed_batch_by_the_lesser_of_pool_and_busy_time_and_alone_by_the_greater() {
        // Threads slowed by others on their cores (the consumer's, the GPU side's): their
        // decoding seconds over their count read 100 ms where the side was busy about 20.
        let split = split(SplitPolicy::Auto { gpu_share: None });
        let megabyte = megabyte_zstd();
        let kinds = vec![megabyte.clone(); 10];
        let part = |in_place: bool| {
            let (in_flight, threads_busy) =
                (Duration::from_millis(20), Duration::from_millis(100) * 16);
            cpu_part_learnt(&split, &kinds, in_flight, threads_busy, in_place);
            let state = split.lock();
            SplitDecoder::cpu_side(&state, [(&megabyte, 100)])
        };
        // The first part pays the side's setup: its busy time is not read.
        part(false);
        let mixed = part(false);
        // 100 chunks: ten parts' worth, 1 s by the pool's time, about 0.2 s by the busy time.
        let batch = mixed.batch_seconds.unwrap();
        assert!((0.2..0.9).contains(&batch), "{mixed:?}");
        assert_eq!(mixed.alone_in_place_seconds, None, "{mixed:?}");
        // Alone in place, its threads' time counts: 1 s for 100 chunks.
        let alone = part(true).alone_in_place_seconds.unwrap();
        assert!((0.95..1.05).contains(&alone), "{alone}");
        // And its busy time, where that is the greater: 10 chunks in flight for 300 ms.
        let split = self::split(SplitPolicy::Auto { gpu_share: None });
        for _ in 0..2 {
            cpu_part_learnt(
                &split,
                &kinds,
                Duration::from_millis(300),
                Duration::ZERO,
                true,
            );
        }
        let alone = (SplitDecoder::cpu_side(&split.lock(), [(&megabyte, 100)]))
            .alone_in_place_seconds
            .unwrap();
        assert!((2.0..4.0).contains(&alone), "{alone}");
    }

    #[test]
    fn auto_shares_out_as_if_nothing_were_queued() {
        for (policy, counted) in [
            (SplitPolicy::Balanced, true),
            (SplitPolicy::Auto { gpu_share: None }, false),
        ] {
            let split = split(policy);
            split
                .lock()
                .backlog
                .add(Side::Cpu as usize, 0.5, Instant::now());
            let state = split.lock();
            let shared_by = split.backlog_to_share_by(&state);
            assert_eq!(shared_by != Backlog::default(), counted, "{policy:?}");
        }
    }

    #[test]
    fn balanced_split_decodes_on_the_gpu_alone_once_a_batch_has_decoded() {
        let (_dir, runtime, chunks) = fixture_chunks(7);
        let split = Arc::new(split(SplitPolicy::Balanced));
        // Before any batch has decoded, both sides take part (the prior gives the CPU side a
        // quarter).
        let decoded = runtime.block_on(split.clone().decode_chunks(chunks.clone()));
        let decoded = decoded.unwrap();
        assert_eq!(decoded.len(), chunks.len());
        assert!(matches!(decoded, DecodedChunks::Split(_)));
        // Then the GPU alone, until the first trial: every chunk to the GPU side, and the
        // reports say so.
        let alone = split.share(chunks.clone());
        assert!(alone.cpu.is_empty(), "{} to the CPU", alone.cpu.len());
        assert_eq!(alone.gpu.len(), chunks.len());
        assert_eq!(split.gpu_share_now(), Some(1.0));
    }

    #[test]
    fn a_fixed_split_gives_the_gpu_its_fraction_of_each_kind_whatever_was_measured() {
        let (_dir, runtime, chunks) = fixture_chunks(5);
        let mut kinds: HashMap<Kind, usize> = HashMap::new();
        for chunk in &chunks {
            *kinds.entry(kind(chunk)).or_default() += 1;
        }
        let expected_gpu: usize = (kinds.values())
            .map(|&count| (count as f64 * 0.25).round() as usize)
            .sum();
        assert!(expected_gpu > 0 && expected_gpu < chunks.len(), "{kinds:?}");
        let fixed = Arc::new(split(SplitPolicy::Fixed { gpu_chunks: 0.25 }));
        for _ in 0..3 {
            let shares = fixed.share(chunks.clone());
            assert_eq!(shares.gpu.len(), expected_gpu);
            assert_eq!(shares.cpu.len(), chunks.len() - expected_gpu);
            assert!(shares.trial.is_none());
            // Decoded, a part on each side (both CPU decoders here); what the sides learn
            // moves nothing.
            let decoded = runtime.block_on(fixed.clone().decode_chunks(chunks.clone()));
            assert!(matches!(decoded.unwrap(), DecodedChunks::Split(_)));
        }
        assert_eq!(fixed.gpu_share_now(), Some(0.25));
        let none = Arc::new(split(SplitPolicy::Fixed { gpu_chunks: 0.0 }));
        assert!(none.share(chunks.clone()).gpu.is_empty());
        let all = Arc::new(split(SplitPolicy::Fixed { gpu_chunks: 1.0 }));
        assert!(all.share(chunks.clone()).cpu.is_empty());
    }

    #[test]
    fn auto_has_its_cpu_part_decoded_where_the_collator_places_it_and_learns_from_it() {
        let (_dir, runtime, chunks) = fixture_chunks(11);
        let split = Arc::new(split(SplitPolicy::Auto { gpu_share: None }));
        // Auto starts on the CPU alone: the whole batch is handed on undecoded, and nothing is
        // learnt before it decodes.
        let pending = |split: &Arc<SplitDecoder>| match runtime
            .block_on(split.clone().decode_chunks(chunks.clone()))
        {
            Ok(DecodedChunks::Pending(pending)) => pending,
            other => panic!("not pending: {other:?}"),
        };
        let first = pending(&split);
        assert_eq!(split.lock().cpu_pool_seconds, 0.0);
        // Dropped undecoded (a stream dropped mid-epoch), it is counted no more.
        drop(first);
        assert_eq!(split.lock().cpu_pool_seconds, 0.0);
        assert_eq!(split.lock().busy[Side::Cpu as usize].in_flight(), 0);
        // Decoded into the collator's memory: every chunk as decoded alone, and the CPU side's
        // time learnt.
        let second = pending(&split);
        // In the order the part holds them (shared out kind by kind).
        let expected: Vec<Vec<u8>> = (second.chunks().iter())
            .map(|chunk| crate::decode_on_cpu(chunk.clone()).unwrap().bytes)
            .collect();
        let (memory, stats) = crate::testing::decode_into_own_buffers(second);
        assert_eq!(stats.cpu_decoded_chunks, chunks.len() as u64);
        assert!(memory == expected);
        let learnt = split.lock().cpu_pool_seconds;
        assert!(learnt > 0.0, "{learnt}");
        assert_eq!(split.lock().busy[Side::Cpu as usize].in_flight(), 0);
        // Decoded into memory of its own (a host collator), the same.
        let third = pending(&split);
        assert_eq!(third.into_host().unwrap().len(), chunks.len());
        assert!(split.lock().cpu_pool_seconds > learnt);
    }

    #[test]
    fn a_gpu_part_that_fails_fails_its_batch_naming_a_chunk_of_it() {
        let (_dir, runtime, mut chunks) = fixture_chunks(13);
        for chunk in &mut chunks {
            if chunk.bytes.is_some() {
                chunk.bytes = Some(bytes::Bytes::from_static(b"not a stored chunk"));
            }
        }
        let split = Arc::new(split(SplitPolicy::Fixed { gpu_chunks: 0.5 }));
        let decoding = runtime.block_on(async { split.clone().decode_chunks(chunks).await });
        let Ok(DecodedChunks::Split(mut parts)) = decoding else {
            panic!("not split: {decoding:?}");
        };
        let Some(DecodedChunks::Decoding(gpu)) = parts.pop() else {
            panic!("no GPU part still decoding: {parts:?}");
        };
        let keys: Vec<String> = gpu.requests().iter().map(|request| request.key()).collect();
        let error = runtime.block_on(gpu.finished()).unwrap_err().to_string();
        assert!(keys.iter().any(|key| error.contains(key)), "{error}");
    }

    #[test]
    fn a_mixed_batchs_cpu_part_is_handed_on_to_be_placed_and_its_gpu_part_decodes_beside() {
        let (_dir, runtime, chunks) = fixture_chunks(12);
        let split = Arc::new(split(SplitPolicy::Auto { gpu_share: None }));
        // A consumer that kept up, then waits a third of each step, calls the GPU in for part
        // of each batch.
        let ms = Duration::from_millis;
        for _ in 0..10 {
            split.pace().record(Duration::ZERO, ms(175));
            split.share(Vec::new());
        }
        cpu_part_decoded(&split, ms(300) * 16);
        split.pace().record(ms(100), ms(300));
        split.share(Vec::new());
        let share = split.lock().auto.share();
        assert!(share > 0.3 && share < 1.0, "{share}");
        let key = |chunk: &crate::DecodedChunk| format!("{:?}", chunk.request);
        let mut expected: Vec<(String, Vec<u8>)> = (chunks.iter().cloned())
            .map(|chunk| crate::decode_on_cpu(chunk).unwrap())
            .map(|chunk| (key(&chunk), chunk.bytes))
            .collect();
        expected.sort();
        let decoded_parts = |parts: Vec<DecodedChunks>| {
            let mut decoded: Vec<(String, Vec<u8>)> = Vec::new();
            for part in parts {
                let part = runtime.block_on(part.finished()).unwrap();
                let part = part.into_host().unwrap();
                decoded.extend(part.into_iter().map(|chunk| (key(&chunk), chunk.bytes)));
            }
            decoded.sort();
            decoded
        };
        // On the runtime, as the decode stage calls it: the CPU part comes pending, to be
        // decoded where the collator places it, and the GPU part still decoding, its chunks'
        // requests known; every chunk once, as decoded alone.
        let learnt = split.lock().cpu_pool_seconds;
        let decoding =
            runtime.block_on(async { split.clone().decode_chunks(chunks.clone()).await });
        let Ok(DecodedChunks::Split(parts)) = decoding else {
            panic!("not split: {decoding:?}");
        };
        let [DecodedChunks::Pending(cpu), DecodedChunks::Decoding(gpu)] = &parts[..] else {
            panic!("not a pending CPU part and a GPU part decoding: {parts:?}");
        };
        assert_eq!(cpu.chunks().len() + gpu.requests().len(), chunks.len());
        assert!(decoded_parts(parts) == expected);
        // The CPU part is learnt from once decoded there.
        assert!(split.lock().cpu_pool_seconds > learnt);
        // Called off any runtime, both parts decode at once, into memory of their own.
        let parts = match runtime.block_on(split.clone().decode_chunks(chunks.clone())) {
            Ok(DecodedChunks::Split(parts)) => parts,
            other => panic!("not split: {other:?}"),
        };
        assert!(parts
            .iter()
            .all(|part| matches!(part, DecodedChunks::Host(_))));
        assert!(decoded_parts(parts) == expected);
    }
}
