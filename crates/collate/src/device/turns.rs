//! The collator's one-batch-at-a-time steps, taken in the order the batches came: queuing a
//! batch's pending chunks to decode on the CPU, and reserving its tensors' room. Batches
//! collate side by side on blocking threads and are handed on in order; a later batch that
//! took the room first would hold it while it waits, downstream, for the earlier one, which
//! waits for the room. A batch takes its tickets when it comes (`collate_batch`), before
//! anything waits.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use zarrpipe_core::TicketOrder;

/// Turns handed out in ticket order.
#[derive(Debug, Default)]
pub(super) struct Turns {
    order: Mutex<TicketOrder>,
    changed: Condvar,
}

/// A batch's place in the order; dropped before its turn, it gives the turn to the next.
#[derive(Debug)]
pub(super) struct Ticket {
    turns: Arc<Turns>,
    number: u64,
    taken: bool,
}

/// A batch's turn, passed on when dropped.
#[derive(Debug)]
pub(super) struct Turn {
    turns: Arc<Turns>,
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, TicketOrder> {
        self.order.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next place in the order.
    pub(super) fn ticket(self: &Arc<Self>) -> Ticket {
        Ticket {
            turns: self.clone(),
            number: self.lock().issue(),
            taken: false,
        }
    }
}

impl Ticket {
    /// Blocks until this ticket's turn.
    pub(super) fn wait(mut self) -> Turn {
        let order = self.turns.lock();
        let order = self
            .turns
            .changed
            .wait_while(order, |order| !order.is_turn(self.number))
            .unwrap_or_else(PoisonError::into_inner);
        drop(order);
        self.taken = true;
        Turn {
            turns: self.turns.clone(),
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        self.turns.lock().abandon(self.number);
        self.turns.changed.notify_all();
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.turns.lock().pass_on();
        self.turns.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    #[test]
    fn turns_come_in_ticket_order_whoever_waits_first() {
        let turns = Arc::new(Turns::default());
        let tickets: Vec<Ticket> = (0..4).map(|_| turns.ticket()).collect();
        let order = Arc::new(Mutex::new(Vec::new()));
        // The later tickets wait first.
        let threads: Vec<_> = tickets
            .into_iter()
            .enumerate()
            .rev()
            .map(|(i, ticket)| {
                let order = order.clone();
                let thread = std::thread::spawn(move || {
                    let _turn = ticket.wait();
                    order.lock().unwrap().push(i);
                });
                std::thread::sleep(Duration::from_millis(20));
                thread
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_ticket_dropped_before_its_turn_gives_it_to_the_next() {
        let turns = Arc::new(Turns::default());
        let first = turns.ticket();
        let second = turns.ticket();
        let third = turns.ticket();
        drop(second);
        drop(first.wait());
        // The second was dropped: the third's turn comes at once.
        drop(third.wait());
        // A ticket dropped in its turn passes it on too.
        let fourth = turns.ticket();
        let fifth = turns.ticket();
        drop(fourth);
        drop(fifth.wait());
    }
}
