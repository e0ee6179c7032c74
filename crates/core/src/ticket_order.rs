//! Places handed out in order and whose turn it is, for stages whose batches must take a
//! shared resource in the order they came (a later batch holding what an earlier one waits
//! for would wait, downstream, for that earlier one). The waiting itself is the caller's:
//! blocking or async.

use std::collections::BTreeSet;

/// Tickets in the order they were issued; a ticket given up before its turn is skipped.
#[derive(Debug, Default)]
pub struct TicketOrder {
    /// The next ticket issued.
    issued: u64,
    /// The ticket whose turn it is.
    next: u64,
    /// Tickets given up before their turn: skipped when it comes.
    abandoned: BTreeSet<u64>,
}

impl TicketOrder {
    /// The next place in the order.
    pub fn issue(&mut self) -> u64 {
        let ticket = self.issued;
        self.issued += 1;
        ticket
    }

    /// Whether it is `ticket`'s turn.
    pub fn is_turn(&self, ticket: u64) -> bool {
        self.next == ticket
    }

    /// Ends the current turn: the next ticket not given up has it.
    pub fn pass_on(&mut self) {
        self.next += 1;
        while self.abandoned.remove(&self.next) {
            self.next += 1;
        }
    }

    /// Gives `ticket` up without taking its turn: passed on now if it is its turn, else
    /// skipped when it comes.
    pub fn abandon(&mut self, ticket: u64) {
        match self.is_turn(ticket) {
            true => self.pass_on(),
            false => {
                self.abandoned.insert(ticket);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TicketOrder;

    #[test]
    fn turns_follow_the_tickets_skipping_those_given_up() {
        let mut order = TicketOrder::default();
        let [first, second, third, fourth] = [(); 4].map(|()| order.issue());
        assert!(order.is_turn(first) && !order.is_turn(second));
        order.abandon(second);
        order.pass_on();
        assert!(order.is_turn(third));
        // Given up in its own turn: passed on at once.
        order.abandon(third);
        assert!(order.is_turn(fourth));
    }
}
