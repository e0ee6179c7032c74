//! The decoder's decode streams ("lanes") and which batch decodes on which: consecutive
//! batches go to different lanes so they overlap on the device.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use zarrpipe_cuda::cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use zarrpipe_cuda::During;

use crate::Result;

/// A decode stream and nvCOMP's temporary memory for it: the decompressions of a stream run
/// in its order, so one buffer serves them all.
pub(super) struct Lane {
    pub(super) stream: Arc<CudaStream>,
    pub(super) temp: Mutex<Option<CudaSlice<u8>>>,
    /// Set while a submitted batch decodes here (see [`LaneHold`]).
    busy: Arc<AtomicBool>,
}

/// A lane taken by a batch from its submission until it is completed (or dropped): later
/// batches go to lanes without one, so only as many lanes as batches decode at once get
/// nvCOMP scratch memory.
pub(super) struct LaneHold(Option<Arc<AtomicBool>>);

impl Drop for LaneHold {
    fn drop(&mut self) {
        if let Some(busy) = self.0.take() {
            busy.store(false, Ordering::Release);
        }
    }
}

/// The decoder's lanes (at least one).
pub(super) struct Lanes {
    lanes: Vec<Lane>,
    next: AtomicUsize,
}

impl Lanes {
    /// `count` lanes (at least one), each a new stream on `context`.
    pub(super) fn new(context: &Arc<CudaContext>, count: usize) -> Result<Self> {
        let lanes = (0..count.max(1))
            .map(|_| {
                Ok(Lane {
                    stream: context.new_stream().during("creating a stream")?,
                    temp: Mutex::new(None),
                    busy: Arc::new(AtomicBool::new(false)),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            lanes,
            next: AtomicUsize::new(0),
        })
    }

    /// The first lane.
    pub(super) fn first(&self) -> &Lane {
        &self.lanes[0]
    }

    /// Every lane.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Lane> {
        self.lanes.iter()
    }

    /// A lane no batch decodes on (the first such, so the same few are reused), or the next in
    /// turn when every lane is taken (the batch then queues behind another on its stream).
    pub(super) fn take(&self) -> (&Lane, LaneHold) {
        self.take_free().unwrap_or_else(|| {
            let next = self.next.fetch_add(1, Ordering::Relaxed) % self.lanes.len();
            (&self.lanes[next], LaneHold(None))
        })
    }

    /// The first lane no batch decodes on, taken.
    pub(super) fn take_free(&self) -> Option<(&Lane, LaneHold)> {
        self.lanes.iter().find_map(|lane| {
            lane.busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
                .then(|| (lane, LaneHold(Some(lane.busy.clone()))))
        })
    }

    /// The stream [`Self::take`] would hand out now.
    pub(super) fn next_stream(&self) -> &Arc<CudaStream> {
        let free = self
            .lanes
            .iter()
            .find(|lane| !lane.busy.load(Ordering::Relaxed));
        let next = &self.lanes[self.next.load(Ordering::Relaxed) % self.lanes.len()];
        &free.unwrap_or(next).stream
    }
}
