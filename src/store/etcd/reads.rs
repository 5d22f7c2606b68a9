//! Linearizable reads of highests, many to one etcd transaction, batched as
//! claims are (SPEC, "Chained writes", rule (b): in `etcd` state a version
//! observed before such a read may be used by a write whose token is at
//! least what the read found).
//!
//! Why a batch keeps each read linearizable: a read is queued after its
//! caller's observation, and the transaction that answers it is sent only
//! after the read was taken off the queue, so etcd serves it (a range at the
//! leader's confirmed index) after the observation, as one read of its own
//! would be.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::common::{unavailable, Counters};
use super::layout::Layout;
use crate::etcd_http::{b64, text, Client};
use crate::store::{HighestsFuture, StoreError};

/// Ranges in one transaction at most (etcd's `--max-txn-ops` is 128). A
/// read of more keys than this goes alone, and etcd refuses it.
const MAX_RANGES: usize = 120;

/// Read transactions sent at once, at most: below it a read is sent as soon
/// as it comes; at it, reads queue and leave together in the next one.
const IN_FLIGHT: usize = 4;

/// What one caller asked for, and where its answer goes.
pub(super) struct Read {
    keys: Vec<String>,
    reply: oneshot::Sender<Result<Vec<Option<u64>>, StoreError>>,
}

/// The sending half: [`HighestReads::read`] queues a read for
/// [`serve_reads`].
pub(super) struct HighestReads {
    queue: mpsc::UnboundedSender<Read>,
    counters: Arc<Counters>,
}

impl HighestReads {
    /// A reader, and the queue [`serve_reads`] takes its reads from.
    pub(super) fn new(counters: Arc<Counters>) -> (Self, mpsc::UnboundedReceiver<Read>) {
        let (queue, reads) = mpsc::unbounded_channel();
        (HighestReads { queue, counters }, reads)
    }

    /// The highest of each key, read after this call (see the module docs).
    pub(super) fn read(&self, keys: Vec<String>) -> HighestsFuture {
        self.counters.highest_reads.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        let queued = self.queue.send(Read { keys, reply });
        Box::pin(async move {
            if queued.is_err() {
                return Err(StoreError::Closed);
            }
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }
}

/// The etcd side of [`serve_reads`]: every key's highest in one
/// transaction of ranges (etcd's default, linearizable, range).
pub(super) fn etcd_reader(
    client: Client,
    layout: Arc<Layout>,
    counters: Arc<Counters>,
) -> impl Fn(Vec<String>) -> HighestsFuture + Send + 'static {
    move |keys| {
        let client = client.clone();
        let layout = Arc::clone(&layout);
        counters
            .highest_read_transactions
            .fetch_add(1, Ordering::Relaxed);
        Box::pin(async move { read_highests(&client, &layout, &keys).await })
    }
}

/// The highest of each key, in one linearizable read (etcd's default
/// range: served after the leader confirmed it still leads).
async fn read_highests(
    client: &Client,
    layout: &Layout,
    keys: &[String],
) -> Result<Vec<Option<u64>>, StoreError> {
    let reads: Vec<Value> = keys
        .iter()
        .map(|key| json!({ "request_range": { "key": b64(&layout.highest(key)) } }))
        .collect();
    let answer = client
        .call("/v3/kv/txn", &json!({ "success": reads }))
        .await
        .map_err(unavailable)?;
    Ok((0..keys.len())
        .map(|index| {
            let kv = &answer["responses"][index]["response_range"]["kvs"][0];
            text(&kv["value"]).and_then(|value| value.parse().ok())
        })
        .collect())
}

/// Answers queued reads until every [`HighestReads`] is gone: whatever is
/// queued when a transaction may leave goes in it (up to [`MAX_RANGES`]
/// ranges), with up to [`IN_FLIGHT`] transactions out at once.
pub(super) async fn serve_reads<R, F>(mut reads: mpsc::UnboundedReceiver<Read>, reader: R)
where
    R: Fn(Vec<String>) -> F,
    F: Future<Output = Result<Vec<Option<u64>>, StoreError>> + Send + 'static,
{
    let mut in_flight: JoinSet<()> = JoinSet::new();
    // A read taken off the queue that did not fit in the last batch.
    let mut held: Option<Read> = None;
    loop {
        if in_flight.len() >= IN_FLIGHT {
            in_flight.join_next().await;
            continue;
        }
        let first = match held.take() {
            Some(read) => read,
            None => {
                tokio::select! {
                    read = reads.recv() => match read {
                        Some(read) => read,
                        None => break,
                    },
                    Some(_) = in_flight.join_next(), if !in_flight.is_empty() => continue,
                }
            }
        };
        let mut ranges = first.keys.len();
        let mut batch = vec![first];
        while let Ok(read) = reads.try_recv() {
            if ranges + read.keys.len() > MAX_RANGES {
                held = Some(read);
                break;
            }
            ranges += read.keys.len();
            batch.push(read);
        }
        let keys: Vec<String> = batch.iter().flat_map(|read| read.keys.clone()).collect();
        let answer = reader(keys);
        in_flight.spawn(async move { answer_batch(batch, answer.await) });
    }
    while in_flight.join_next().await.is_some() {}
}

/// Hands each read of a batch its slice of the transaction's answer.
fn answer_batch(batch: Vec<Read>, answer: Result<Vec<Option<u64>>, StoreError>) {
    match answer {
        Ok(highests) => {
            let mut highests = highests.into_iter();
            for read in batch {
                let mine: Vec<Option<u64>> = highests.by_ref().take(read.keys.len()).collect();
                let _ = read.reply.send(Ok(mine));
            }
        }
        Err(error) => {
            for read in batch {
                let _ = read.reply.send(Err(error.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A store of highests that records each transaction's keys and holds
    /// every answer until `open` is sent: reads queued meanwhile must leave
    /// together, and each must get its own keys' highests.
    #[tokio::test]
    async fn reads_queued_behind_full_transactions_leave_together_each_with_its_own_answer() {
        let counters = Arc::new(Counters::default());
        let (reader, queue) = HighestReads::new(Arc::clone(&counters));
        let sent: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
        let (open, gate) = tokio::sync::watch::channel(false);
        let log = Arc::clone(&sent);
        tokio::spawn(serve_reads(queue, move |keys: Vec<String>| {
            log.lock().unwrap().push(keys.clone());
            let mut gate = gate.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Ok(keys
                    .iter()
                    .map(|key| key.strip_prefix('k').and_then(|n| n.parse().ok()))
                    .collect())
            }
        }));
        let mut answers = Vec::new();
        for n in 0..10u64 {
            let keys = vec![format!("k{n}"), format!("k{}", n + 100), "none".to_owned()];
            answers.push((n, reader.read(keys)));
            // Let the server take it before the next one comes.
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        open.send_replace(true);
        for (n, answer) in answers {
            assert_eq!(answer.await.unwrap(), vec![Some(n), Some(n + 100), None]);
        }
        let sent = sent.lock().unwrap();
        // IN_FLIGHT transactions left one read each; the rest waited and
        // left as one.
        assert_eq!(sent.len(), IN_FLIGHT + 1, "{sent:?}");
        assert_eq!(sent[IN_FLIGHT].len(), 3 * (10 - IN_FLIGHT));
        assert_eq!(counters.highest_reads.load(Ordering::Relaxed), 10);
    }

    /// A failed transaction fails every read in it, and the server goes on.
    #[tokio::test]
    async fn a_failed_transaction_fails_its_reads_and_the_next_ones_are_served() {
        let counters = Arc::new(Counters::default());
        let (reader, queue) = HighestReads::new(counters);
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        tokio::spawn(serve_reads(queue, move |keys: Vec<String>| {
            let first = seen.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    Err(StoreError::Unavailable("etcd down".into()))
                } else {
                    Ok(vec![Some(7); keys.len()])
                }
            }
        }));
        assert!(reader.read(vec!["a".into()]).await.is_err());
        assert_eq!(
            reader.read(vec!["a".into(), "b".into()]).await.unwrap(),
            vec![Some(7); 2]
        );
    }

    /// More ranges than a transaction may hold are split over several.
    #[tokio::test]
    async fn no_transaction_holds_more_than_max_ranges() {
        let counters = Arc::new(Counters::default());
        let (reader, queue) = HighestReads::new(counters);
        let sent: Arc<Mutex<Vec<usize>>> = Arc::default();
        let log = Arc::clone(&sent);
        let (open, gate) = tokio::sync::watch::channel(false);
        tokio::spawn(serve_reads(queue, move |keys: Vec<String>| {
            log.lock().unwrap().push(keys.len());
            let mut gate = gate.clone();
            async move {
                let _ = gate.wait_for(|open| *open).await;
                Ok(vec![None; keys.len()])
            }
        }));
        let answers: Vec<_> = (0..IN_FLIGHT + 30)
            .map(|_| reader.read(vec!["x".to_owned(); 10]))
            .collect();
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        open.send_replace(true);
        for answer in answers {
            assert_eq!(answer.await.unwrap().len(), 10);
        }
        let sent = sent.lock().unwrap();
        assert!(sent.iter().all(|&ranges| ranges <= MAX_RANGES), "{sent:?}");
        assert_eq!(sent.iter().sum::<usize>(), 10 * (IN_FLIGHT + 30));
    }
}
