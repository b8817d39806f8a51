//! The order in which a node serves its Redis blocking pops (`BLPOP`, `BRPOP`, `BLMOVE`,
//! `BZPOPMIN`, `BZPOPMAX`): per key, the clients waiting on this node form a queue, longest
//! waiting first, and only the first of each queue tries to pop. One push then wakes one
//! waiter, whose pop is one log write, instead of every waiter racing with a write of its own;
//! and a key's elements go to its waiters in the order they came.
//!
//! A waiter holds a [`Ticket`] in the queue of each key it waits on. It may pop from the keys
//! whose queue it heads; when the one before it leaves a queue (served, timed out, or its
//! client hung up: the ticket is dropped), the next is told. Queues are per node: waiters on
//! different nodes still race through the log, which decides who gets the element.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// Every key's queue of waiters on this node.
#[derive(Default)]
pub(crate) struct PopQueues {
    inner: Arc<Mutex<Queues>>,
}

#[derive(Default)]
struct Queues {
    next_id: u64,
    /// Per key, the waiters' ids, longest waiting first.
    by_key: HashMap<Bytes, VecDeque<u64>>,
    /// Per waiter, how to tell it that it heads a queue now.
    turns: HashMap<u64, Arc<Notify>>,
}

impl PopQueues {
    /// Puts a new waiter at the end of the queue of each of `keys`.
    pub(crate) fn join(&self, keys: &[Bytes]) -> Ticket {
        let mut queues = lock(&self.inner);
        let id = queues.next_id;
        queues.next_id += 1;
        let turn = Arc::new(Notify::new());
        queues.turns.insert(id, turn.clone());
        for key in keys {
            let queue = queues.by_key.entry(key.clone()).or_default();
            if !queue.contains(&id) {
                queue.push_back(id);
            }
        }
        Ticket {
            id,
            keys: keys.to_vec(),
            turn,
            queues: self.inner.clone(),
        }
    }

    /// Waiters queued on this node, each counted once.
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.inner).turns.len()
    }

    /// Waiters that head no queue: they wait for their turn, not on a key (those that head
    /// one wait on its key, as a blocking query the storage counts).
    pub(crate) fn waiting_for_a_turn(&self) -> usize {
        let queues = lock(&self.inner);
        let heads: std::collections::HashSet<u64> = queues
            .by_key
            .values()
            .filter_map(|q| q.front().copied())
            .collect();
        queues.turns.keys().filter(|id| !heads.contains(id)).count()
    }
}

/// One waiter's place in its keys' queues; leaving is dropping it.
pub(crate) struct Ticket {
    id: u64,
    keys: Vec<Bytes>,
    turn: Arc<Notify>,
    queues: Arc<Mutex<Queues>>,
}

impl Ticket {
    /// The keys whose queue this waiter heads, in the order it named them: the ones it may
    /// pop from now.
    pub(crate) fn first_in(&self) -> Vec<Bytes> {
        let queues = lock(&self.queues);
        self.keys
            .iter()
            .filter(|key| {
                queues
                    .by_key
                    .get(*key)
                    .is_some_and(|q| q.front() == Some(&self.id))
            })
            .cloned()
            .collect()
    }

    /// Resolves once this waiter may head a queue it did not (the one before it left). A
    /// turn given while nobody awaited it is kept, so none is lost between a look at
    /// [`Ticket::first_in`] and this wait.
    pub(crate) async fn next_turn(&self) {
        self.turn.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut queues = lock(&self.queues);
        queues.turns.remove(&self.id);
        let mut heads = Vec::new();
        for key in &self.keys {
            let Some(queue) = queues.by_key.get_mut(key) else {
                continue;
            };
            let was_first = queue.front() == Some(&self.id);
            queue.retain(|id| *id != self.id);
            match queue.front() {
                None => {
                    queues.by_key.remove(key);
                }
                Some(next) if was_first => heads.push(*next),
                Some(_) => {}
            }
        }
        for id in heads {
            if let Some(turn) = queues.turns.get(&id) {
                turn.notify_one();
            }
        }
    }
}

fn lock(queues: &Mutex<Queues>) -> MutexGuard<'_, Queues> {
    queues.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn keys(names: &[&'static str]) -> Vec<Bytes> {
        names
            .iter()
            .map(|n| Bytes::from_static(n.as_bytes()))
            .collect()
    }

    #[test]
    fn waiters_head_each_queue_in_the_order_they_came() {
        let queues = PopQueues::default();
        let first = queues.join(&keys(&["a"]));
        let second = queues.join(&keys(&["a", "b"]));
        let third = queues.join(&keys(&["b"]));
        assert_eq!(first.first_in(), keys(&["a"]));
        // `second` heads b's queue but not a's: it may pop from b only.
        assert_eq!(second.first_in(), keys(&["b"]));
        assert!(third.first_in().is_empty());
        assert_eq!(queues.waiting(), 3);
        assert_eq!(
            queues.waiting_for_a_turn(),
            1,
            "only the third heads no queue"
        );

        drop(first);
        assert_eq!(second.first_in(), keys(&["a", "b"]));
        drop(second);
        assert_eq!(third.first_in(), keys(&["b"]));
        drop(third);
        assert_eq!(queues.waiting(), 0);
        assert!(
            lock(&queues.inner).by_key.is_empty(),
            "no empty queue is kept"
        );
    }

    #[tokio::test]
    async fn the_next_waiter_is_told_when_the_first_leaves_even_before_it_waits() {
        let queues = PopQueues::default();
        let first = queues.join(&keys(&["a"]));
        let second = queues.join(&keys(&["a"]));
        let third = queues.join(&keys(&["a"]));
        // The turn is given before `second` awaits it: it must not be lost.
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), second.next_turn())
            .await
            .expect("the second waiter is told");
        // The third is not told: it does not head the queue yet.
        let early = tokio::time::timeout(Duration::from_millis(50), third.next_turn()).await;
        assert!(early.is_err(), "only the new head is told");
        // A waiter that leaves from the middle tells nobody.
        let fourth = queues.join(&keys(&["a"]));
        drop(third);
        let early = tokio::time::timeout(Duration::from_millis(50), fourth.next_turn()).await;
        assert!(early.is_err(), "leaving from the middle changes no head");
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), fourth.next_turn())
            .await
            .expect("the fourth waiter heads the queue now");
    }
}
