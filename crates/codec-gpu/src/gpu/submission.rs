//! Submitting a batch: its output allocated on its lane, then its groups pipelined, each
//! uploaded and its decoding enqueued while the next one is planned and staged.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zarrpipe_cuda::cudarc::driver::{CudaEvent, CudaStream, DevicePtr};
use zarrpipe_cuda::During;
use zarrpipe_store::EncodedChunk;

use super::completion::finish;
use super::device_batches::PendingBatch;
use super::lanes::{Lane, Lanes};
use super::launcher::Launcher;
use super::slots::{InFlight, Slot, SlotPool, SLOTS};
use super::staging::{GroupInput, Staged, Stager, Upload};
use super::BatchTimings;
use crate::batch::{output_bytes, Prepared};
use crate::Result;

/// What submitting a batch needs of its decoder.
pub(super) struct Submission<'a> {
    pub(super) lanes: &'a Lanes,
    /// Staging and device buffers of groups not in flight.
    pub(super) slots: &'a SlotPool,
    pub(super) stager: &'a Stager,
    pub(super) launcher: &'a Launcher,
}

/// A batch being submitted.
struct Batch<'a> {
    /// Dropped first on an error (waiting for its running groups), then the rest.
    pending: PendingBatch,
    /// The batch's own lane: its stream holds the output and the timing events, and waits
    /// for the groups decoding on other lanes.
    lane: &'a Lane,
    /// The device address of the batch's output.
    output_base: u64,
    /// Recorded once the output is allocated: groups on other lanes wait for it.
    output_allocated: CudaEvent,
}

/// An event that can be timed against another.
fn timed_event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    stream
        .record_event(Some(
            zarrpipe_cuda::cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT,
        ))
        .during("recording an event")
        .map_err(Into::into)
}

impl<'a> Submission<'a> {
    /// Submits the groups of a batch (`chunks`, split in groups of about
    /// `options.group_bytes`), pipelined: group k+1 is planned (unless it was planned ahead)
    /// and staged on a helper thread and uploaded on the copy stream while group k's
    /// decoding is enqueued (enqueueing nvCOMP's zstd can wait for the stream). The first
    /// group decodes on the batch's lane, later ones on free lanes when there are (the
    /// batch's lane waits for them): nvCOMP gives each chunk one thread block, so groups
    /// decoding one after the other left the GPU mostly idle (W1 in batches of 16, three
    /// groups each: 10.8 GB/s, 17.2-18.1 side by side). At most `SLOTS` groups of a batch are
    /// in flight; older ones are finished first.
    pub(super) fn submit(
        &self,
        chunks: Vec<EncodedChunk>,
        mut groups: impl Iterator<Item = GroupInput> + Send,
        plan_time: Duration,
    ) -> Result<PendingBatch> {
        // Planned ahead: the batch's time started then.
        let started = Instant::now()
            .checked_sub(plan_time)
            .unwrap_or_else(Instant::now);
        let mut batch = self.open(chunks, plan_time, started)?;
        let mut next = match groups.next() {
            Some(group) => {
                let slot = self.slots.take();
                Some(self.stager.stage_group(group, 0, slot, batch.output_base)?)
            }
            None => None,
        };
        let mut group_lane = batch.lane;
        while let Some(staged) = next.take() {
            let (following, following_lane) =
                self.enqueue_group(&mut batch, staged, group_lane, &mut groups)?;
            group_lane = following_lane;
            next = following.transpose()?;
        }
        Ok(batch.pending)
    }

    /// Takes the batch's lane and allocates the batch's output on its stream.
    fn open(
        &self,
        chunks: Vec<EncodedChunk>,
        plan_time: Duration,
        started: Instant,
    ) -> Result<Batch<'a>> {
        let count = chunks.len();
        let (lane, hold) = self.lanes.take();
        let stream = &lane.stream;
        let output_len: usize = chunks.iter().map(output_bytes).sum();
        // SAFETY: every byte of the output a chunk owns is written by its ops before use.
        let output = unsafe { stream.alloc::<u8>(output_len.max(1)) }
            .during("allocating the batch output")?;
        let output_base = output.device_ptr(stream).0;
        // Groups on other lanes write the output once its allocation is done.
        let output_allocated = stream
            .record_event(None)
            .during("recording an allocation event")?;
        let pending = PendingBatch {
            sources: chunks,
            stream: stream.clone(),
            planned: Vec::with_capacity(count),
            running: VecDeque::new(),
            finished: Vec::with_capacity(count),
            output,
            timings: BatchTimings {
                plan: plan_time,
                ..Default::default()
            },
            started,
            pool: self.slots.clone(),
            begun: None,
            ended: None,
            lanes: vec![hold],
        };
        Ok(Batch {
            pending,
            lane,
            output_base,
            output_allocated,
        })
    }

    /// Uploads a staged group and enqueues its decoding on `group_lane` while the following
    /// group of `groups`, if any, is staged; returns that group staged, and its lane.
    fn enqueue_group(
        &self,
        batch: &mut Batch<'a>,
        staged: Staged,
        group_lane: &'a Lane,
        groups: &mut impl Iterator<Item = GroupInput>,
    ) -> Result<(Option<Result<Staged>>, &'a Lane)> {
        let (prepared, upload, mut slot) = batch.account(staged);
        let group_stream = &group_lane.stream;
        self.stager.send(&upload, group_stream)?;
        let stream = &batch.lane.stream;
        if batch.pending.begun.is_none() {
            batch.pending.begun = Some(timed_event(stream)?);
        }
        self.make_room(&mut batch.pending)?;
        let output_start = prepared.plan.output_len;
        let following = groups.next();
        let following_lane = self.following_lane(following.as_ref(), batch)?;
        let (following, done) = self.decode_while_staging(
            following,
            output_start,
            batch.output_base,
            &upload,
            &mut slot,
            group_lane,
        );
        let done = done?;
        if !Arc::ptr_eq(group_stream, stream) {
            stream.wait(&done).during("waiting for a group")?;
        }
        batch.pending.ended = Some(timed_event(stream)?);
        batch.pending.running.push_back(InFlight {
            prepared,
            tables: upload.tables,
            done,
            slot,
        });
        Ok((following, following_lane))
    }

    /// Finishes the batch's oldest groups until fewer than `SLOTS - 1` are running.
    fn make_room(&self, pending: &mut PendingBatch) -> Result<()> {
        while pending.running.len() >= SLOTS - 1 {
            let oldest = pending.running.pop_front().expect("a running group");
            let chunks = finish(oldest, self.slots)?;
            pending.finished.extend(chunks);
        }
        Ok(())
    }

    /// The lane the `following` group decodes on: a free one, once the batch's output is
    /// allocated, or else the batch's own.
    fn following_lane(
        &self,
        following: Option<&GroupInput>,
        batch: &mut Batch<'a>,
    ) -> Result<&'a Lane> {
        let free_lane = following.and_then(|_| self.lanes.take_free());
        Ok(match free_lane {
            Some((free, hold)) => {
                free.stream
                    .wait(&batch.output_allocated)
                    .during("waiting for the batch's output")?;
                batch.pending.lanes.push(hold);
                free
            }
            None => batch.lane,
        })
    }

    /// Enqueues a group's decoding on `lane` while the `following` group is planned and
    /// staged on a helper thread to write from `output_start` of the output at
    /// `output_base`; returns that group staged, and the event that ends the group's work.
    fn decode_while_staging(
        &self,
        following: Option<GroupInput>,
        output_start: usize,
        output_base: u64,
        upload: &Upload,
        slot: &mut Slot,
        lane: &Lane,
    ) -> (Option<Result<Staged>>, Result<CudaEvent>) {
        std::thread::scope(|scope| {
            let staging = following.map(|group| {
                scope.spawn(|| {
                    let slot = self.slots.take();
                    self.stager
                        .stage_group(group, output_start, slot, output_base)
                })
            });
            let done = self
                .launcher
                .execute(upload, lane)
                .and_then(|()| self.launcher.read_results(upload, slot, &lane.stream));
            let following = staging.map(|thread| thread.join().expect("staging thread"));
            (following, done)
        })
    }
}

impl Batch<'_> {
    /// Counts a staged group's planning and staging time and notes where its chunks will be.
    fn account(&mut self, staged: Staged) -> (Prepared, Upload, Slot) {
        self.pending.timings.plan += staged.plan_time;
        self.pending.timings.stage += staged.stage_time;
        let Staged {
            prepared,
            upload,
            slot,
            ..
        } = staged;
        self.pending
            .planned
            .extend(prepared.chunks.iter().map(|chunk| {
                let (region, _) = chunk.outcome.as_ref().ok()?;
                Some((chunk.request.clone(), region.offset))
            }));
        (prepared, upload, slot)
    }
}
