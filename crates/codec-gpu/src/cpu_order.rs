//! Auto's CPU side begins batches in the order they were shared out. A batch on the CPU side
//! alone waits, undecoded, for the collator to place it; a mixed batch's CPU part decodes at
//! once. When auto calls the GPU in, the mixed batches shared out next would take the pool's
//! threads ahead of the batches still waiting for the collator, which the consumer needs
//! first: beside setup A's bf16 model, six mixed batches' CPU parts held the pool while the
//! next batch decoded in 620 ms instead of 105, and the consumer's wait called the GPU in for
//! every batch (H200, 2026-11-29; docs/training.md). So a mixed batch's CPU part begins only
//! once the batches placed later that were shared out before it have begun (or were dropped).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// Counts the batches placed later that were shared out and those begun.
#[derive(Debug)]
pub(crate) struct CpuOrder {
    shared: AtomicU64,
    begun: watch::Sender<u64>,
}

impl Default for CpuOrder {
    fn default() -> Self {
        Self {
            shared: AtomicU64::new(0),
            begun: watch::Sender::new(0),
        }
    }
}

impl CpuOrder {
    /// A batch placed later is shared out: its turn, ended when it begins or is dropped.
    pub(crate) fn placed_later(self: &Arc<Self>) -> Turn {
        self.shared.fetch_add(1, Ordering::SeqCst);
        Turn {
            order: Some(self.clone()),
        }
    }

    /// What a part decoded at once, shared out now, waits for: the batches placed later so far.
    pub(crate) fn ahead(&self) -> u64 {
        self.shared.load(Ordering::SeqCst)
    }

    /// Once `ahead` batches placed later have begun or were dropped.
    pub(crate) async fn after(&self, ahead: u64) {
        let mut begun = self.begun.subscribe();
        // The sender lives as long as `self`: the wait ends only by the count.
        let _ = begun.wait_for(|&begun| begun >= ahead).await;
    }
}

/// A batch placed later, until it begins decoding or is dropped.
#[derive(Debug)]
pub(crate) struct Turn {
    order: Option<Arc<CpuOrder>>,
}

impl Turn {
    /// The batch begins decoding.
    pub(crate) fn begun(&mut self) {
        if let Some(order) = self.order.take() {
            order.begun.send_modify(|begun| *begun += 1);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.begun();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn a_part_waits_for_the_batches_placed_later_before_it_and_no_others() {
        let order = Arc::new(CpuOrder::default());
        let mut first = order.placed_later();
        let second = order.placed_later();
        let ahead = order.ahead();
        assert_eq!(ahead, 2);
        // A batch placed later after the part is not waited for.
        let _third = order.placed_later();
        let mut waiting = Box::pin(order.after(ahead));
        assert!((&mut waiting).now_or_never().is_none());
        first.begun();
        assert!((&mut waiting).now_or_never().is_none());
        // Dropped undecoded, a batch no longer holds the part back.
        drop(second);
        assert!(waiting.now_or_never().is_some());
        // With none ahead, a part begins at once.
        assert!(Arc::new(CpuOrder::default())
            .after(0)
            .now_or_never()
            .is_some());
    }
}
