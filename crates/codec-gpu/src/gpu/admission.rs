//! Device memory for batches, admitted in the order the batches came: a decoded batch keeps
//! its memory until the collator lets go of it, and the collator takes batches in order, so a
//! later batch admitted before an earlier one could hold the memory the earlier one waits for
//! while itself waiting, downstream, for that earlier one.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use zarrpipe_core::TicketOrder;

/// Admits batches to a device-memory budget, one after the other in ticket order.
#[derive(Debug)]
pub(super) struct Admission {
    budget: usize,
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// The order of admission.
    order: TicketOrder,
    /// Bytes admitted and not yet given back.
    used: usize,
}

/// A batch's place in the order of admission; dropped before it is admitted, it gives its
/// turn to the next.
#[derive(Debug)]
pub(super) struct Ticket {
    admission: Arc<Admission>,
    number: u64,
    admitted: bool,
}

/// Device memory admitted to a batch, given back when dropped.
#[derive(Debug)]
pub(crate) struct AdmittedMemory {
    admission: Arc<Admission>,
    bytes: usize,
}

impl Admission {
    pub(super) fn new(budget: usize) -> Arc<Self> {
        Arc::new(Self {
            budget,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The next place in the order: take it when the batch comes, before anything awaits.
    pub(super) fn ticket(self: &Arc<Self>) -> Ticket {
        let number = self.lock().order.issue();
        Ticket {
            admission: self.clone(),
            number,
            admitted: false,
        }
    }
}

impl Ticket {
    /// Waits for this ticket's turn and for `bytes` to fit the budget (at once when nothing
    /// else is admitted, however large), then admits them.
    pub(super) async fn admit(mut self, bytes: usize) -> AdmittedMemory {
        let admission = self.admission.clone();
        loop {
            let notified = admission.changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the state is read, so a change in between still wakes it.
            notified.as_mut().enable();
            {
                let mut state = admission.lock();
                let fits = state.used == 0 || state.used + bytes <= admission.budget;
                if state.order.is_turn(self.number) && fits {
                    state.order.pass_on();
                    state.used += bytes;
                    self.admitted = true;
                    drop(state);
                    admission.changed.notify_waiters();
                    return AdmittedMemory {
                        admission: admission.clone(),
                        bytes,
                    };
                }
            }
            notified.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.admitted {
            return;
        }
        self.admission.lock().order.abandon(self.number);
        self.admission.changed.notify_waiters();
    }
}

impl Drop for AdmittedMemory {
    fn drop(&mut self) {
        self.admission.lock().used -= self.bytes;
        self.admission.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Admission;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn batches_are_admitted_in_ticket_order_even_when_a_later_one_asks_first() {
        runtime().block_on(async {
            let admission = Admission::new(100);
            let (first, second) = (admission.ticket(), admission.ticket());
            // The second asks first: it waits for the first's turn.
            let second = tokio::spawn(second.admit(10));
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!second.is_finished());
            let first = first.admit(10).await;
            let second = second.await.unwrap();
            assert_eq!(admission.lock().used, 20);
            drop((first, second));
            assert_eq!(admission.lock().used, 0);
        });
    }

    #[test]
    fn a_batch_over_budget_waits_for_the_others_and_then_goes_alone() {
        runtime().block_on(async {
            let admission = Admission::new(100);
            let held = admission.ticket().admit(60).await;
            let large = tokio::spawn(admission.ticket().admit(500));
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(
                !large.is_finished(),
                "waits while another batch holds memory"
            );
            drop(held);
            let large = large.await.unwrap();
            assert_eq!(admission.lock().used, 500);
            drop(large);
        });
    }

    #[test]
    fn a_ticket_dropped_before_its_turn_gives_the_turn_on() {
        runtime().block_on(async {
            let admission = Admission::new(100);
            let (first, second, third) =
                (admission.ticket(), admission.ticket(), admission.ticket());
            drop(second);
            let first = first.admit(10).await;
            // The second's turn is skipped: the third is admitted next.
            let third = third.admit(10).await;
            drop((first, third));
            drop(admission.ticket()); // its own turn: passed on at once
            let next = tokio::time::timeout(Duration::from_secs(1), admission.ticket().admit(1));
            assert!(next.await.is_ok());
        });
    }
}
