//! One client connection: read requests, run them in order, write the replies.
//!
//! Everything already received is decoded and run before the replies go out in one write,
//! so a pipelining client gets its answers batched; consecutive commands on different single
//! keys run together, so their writes are proposed together and share commits. Replies keep
//! the order of the requests. A protocol error is answered with
//! `-ERR Protocol error: ...` and closes this connection only.

use crate::cmd::{self, Flow};
use crate::state::{ClientState, Shared, Subscriptions};
use crate::{Reply, RespCodec};
use bytes::{Bytes, BytesMut};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::Decoder;

/// Most requests decoded from the input before they run: a deep pipeline is taken in
/// pieces, so its replies and its memory stay bounded.
const MAX_DECODED: usize = 1024;
/// Most requests sent to the cluster together.
const MAX_WAVE: usize = 128;
/// Replies queued past this many bytes are written out before the next command runs.
const FLUSH_BYTES: usize = 64 * 1024;

/// A client connection over `S`: TCP, or TLS over TCP.
pub(crate) struct Connection<S> {
    socket: S,
    shared: Arc<Shared>,
    codec: RespCodec,
    input: BytesMut,
    output: BytesMut,
    client: ClientState,
    /// Messages for this connection's subscriptions.
    inbox: tokio::sync::mpsc::Receiver<crate::pubsub::Delivery>,
    /// Tells a blocking command that its client hung up.
    hang_up: tokio::sync::watch::Sender<bool>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    pub(crate) fn new(socket: S, shared: Arc<Shared>) -> Self {
        let id = shared.client_id();
        let (sender, inbox) = tokio::sync::mpsc::channel(crate::pubsub::QUEUE_MESSAGES);
        let (hang_up, hung_up) = tokio::sync::watch::channel(false);
        Self {
            inbox,
            hang_up,
            socket,
            shared,
            codec: RespCodec::default(),
            input: BytesMut::with_capacity(16 * 1024),
            output: BytesMut::with_capacity(16 * 1024),
            client: ClientState {
                id,
                name: None,
                protocol: crate::Protocol::Resp2,
                multi: None,
                watches: Vec::new(),
                read_mode: trireme_cluster::ReadMode::Default,
                hung_up,
                token: None,
                auth_failures: 0,
                subscriptions: Subscriptions {
                    channels: Default::default(),
                    patterns: Default::default(),
                    inbox: crate::pubsub::Inbox {
                        sender,
                        queued_bytes: Arc::default(),
                        kicked: Arc::default(),
                    },
                },
            },
        }
    }

    pub(crate) async fn run(mut self) -> std::io::Result<()> {
        let result = self.serve().await;
        self.shared.subscribers.forget(self.client.id);
        result
    }

    async fn serve(&mut self) -> std::io::Result<()> {
        let mut requests = Vec::new();
        loop {
            let mut broken = None;
            while requests.len() < MAX_DECODED {
                match self.codec.decode(&mut self.input) {
                    Ok(Some(request)) => requests.push(request),
                    Ok(None) => break,
                    Err(e) => {
                        broken = Some(e);
                        break;
                    }
                }
            }
            if requests.is_empty() && broken.is_none() {
                self.flush().await?;
                tokio::select! {
                    read = self.socket.read_buf(&mut self.input) => {
                        if read? == 0 {
                            return Ok(());
                        }
                    }
                    () = self.client.subscriptions.inbox.kicked.notified() => {
                        return Ok(());
                    }
                    Some(delivery) = self.inbox.recv() => {
                        self.push_message(delivery);
                        // Take what else is queued, up to a write's worth.
                        while self.output.len() < FLUSH_BYTES {
                            let Ok(delivery) = self.inbox.try_recv() else { break };
                            self.push_message(delivery);
                        }
                    }
                }
                continue;
            }
            if self.run_pipeline(&mut requests).await? == Next::Close {
                self.flush().await?;
                return Ok(());
            }
            if let Some(e) = broken {
                self.shared
                    .metrics
                    .protocol_errors
                    .fetch_add(1, Ordering::Relaxed);
                self.push(&Reply::from(&e));
                self.flush().await?;
                return Ok(());
            }
        }
    }

    /// Runs the decoded `requests` in order and queues their replies. Consecutive commands
    /// that each touch one key go to the cluster together: runs on different keys side by
    /// side, so their writes share commits, and a run of consecutive commands on one key, in
    /// order, as one log command (see [`cmd::run_together`]). Anything else runs alone. Says [`Next::Close`]
    /// if a command closed the connection (the requests after it are dropped, as Redis
    /// does).
    async fn run_pipeline(&mut self, requests: &mut Vec<Vec<Bytes>>) -> std::io::Result<Next> {
        let mut queue = requests.drain(..).peekable();
        while let Some(first) = queue.next() {
            // Inside MULTI every command is queued in order, one at a time.
            let gathers = self.client.multi.is_none() && cmd::single_key(&first).is_some();
            if !gathers {
                match self.run_alone(first).await? {
                    Some(flow) => {
                        if self.take(flow).await? == Next::Close {
                            return Ok(Next::Close);
                        }
                    }
                    None => return Ok(Next::Close),
                }
                continue;
            }
            // The wave: runs of consecutive commands on one key (with their places), each
            // key once. A key that comes back after another key's commands ends the wave, so
            // its later commands never take effect before the other key's earlier ones.
            let mut runs: Vec<Vec<(usize, Vec<Bytes>)>> = Vec::new();
            let mut keys: HashSet<Bytes> = HashSet::new();
            let mut last: Option<Bytes> = None;
            let mut place = 0;
            let mut next = Some(first);
            while let Some(request) = next.take() {
                let key = cmd::single_key(&request).unwrap_or_default();
                if let Some(run) = runs.last_mut().filter(|_| last.as_ref() == Some(&key)) {
                    run.push((place, request));
                } else {
                    keys.insert(key.clone());
                    runs.push(vec![(place, request)]);
                    last = Some(key);
                }
                place += 1;
                if place >= MAX_WAVE {
                    break;
                }
                let Some(key) = queue.peek().and_then(|r| cmd::single_key(r)) else {
                    break;
                };
                if last.as_ref() != Some(&key) && keys.contains(&key) {
                    break;
                }
                next = queue.next();
            }
            let shared = &self.shared;
            let client = &self.client;
            let alone = place == 1;
            let done = futures::future::join_all(runs.into_iter().map(|run| async move {
                // These commands only read the connection's state: each run gets a copy.
                run_of_one_key(shared, client.clone(), run, alone).await
            }))
            .await;
            let mut outcomes: Vec<(usize, Outcome)> = done.into_iter().flatten().collect();
            outcomes.sort_by_key(|(place, _)| *place);
            for (_, outcome) in outcomes {
                let flow = match outcome {
                    Outcome::Done(flow) => flow,
                    // Its turn: nothing before it is still to be written.
                    Outcome::Again(request) => {
                        cmd::execute(&self.shared, &mut self.client, request).await
                    }
                };
                if self.take(flow).await? == Next::Close {
                    return Ok(Next::Close);
                }
            }
            if self.output.len() > FLUSH_BYTES {
                self.flush().await?;
            }
        }
        Ok(Next::Read)
    }

    /// Queues a command's reply (a streamed one is written out as it comes); whether the
    /// connection goes on.
    async fn take(&mut self, flow: Flow) -> std::io::Result<Next> {
        match flow {
            Flow::Reply(reply) => {
                self.push(&reply);
                Ok(Next::Read)
            }
            Flow::Quit(reply) => {
                self.push(&reply);
                Ok(Next::Close)
            }
            Flow::Stream(streamed) => {
                self.stream(*streamed).await?;
                Ok(Next::Read)
            }
        }
    }

    /// Writes a reply page by page, flushing as the output fills. A read that fails or
    /// comes up short after its header is out leaves nothing to answer with: the
    /// connection is closed (an error, which ends it).
    async fn stream(&mut self, mut streamed: crate::cmd::Streamed) -> std::io::Result<()> {
        // The replies before it go out first: should this one fail half way, they are not
        // lost with the connection.
        self.flush().await?;
        let protocol = self.client.protocol;
        let total = streamed.encode_header(&mut self.output, protocol);
        let mut left = total;
        loop {
            match streamed
                .encode_next_page(&mut left, &mut self.output, protocol)
                .await
            {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "a streamed reply failed; closing the connection");
                    return Err(std::io::Error::other(format!("streamed reply failed: {e}")));
                }
            }
            if self.output.len() > FLUSH_BYTES {
                self.flush().await?;
            }
        }
        if left > 0 {
            tracing::warn!(
                total,
                left,
                "a streamed reply ended short; closing the connection"
            );
            return Err(std::io::Error::other("streamed reply ended short"));
        }
        Ok(())
    }

    /// Runs one request that runs beside no other; `None` if its client hung up while it
    /// blocked.
    async fn run_alone(&mut self, request: Vec<Bytes>) -> std::io::Result<Option<Flow>> {
        if !cmd::is_blocking(&request) {
            let flow = execute(&self.shared, &mut self.client, request).await;
            if self.output.len() > FLUSH_BYTES {
                self.flush().await?;
            }
            return Ok(Some(flow));
        }
        // The replies before it go out first: it may wait for a long time.
        self.flush().await?;
        // A client that hangs up while blocked stops the wait, as in Redis; a pop already on
        // its way finishes (a log write is never cut short).
        let run = execute(&self.shared, &mut self.client, request);
        tokio::pin!(run);
        let mut gone = false;
        let flow = loop {
            tokio::select! {
                flow = &mut run => break flow,
                read = self.socket.read_buf(&mut self.input), if !gone => {
                    if read? == 0 {
                        gone = true;
                        let _ = self.hang_up.send(true);
                    }
                }
            }
        };
        Ok((!gone).then_some(flow))
    }

    fn push_message(&mut self, delivery: crate::pubsub::Delivery) {
        self.client
            .subscriptions
            .inbox
            .queued_bytes
            .fetch_sub(delivery.size(), Ordering::SeqCst);
        if !cmd::may_receive(&self.shared, &self.client, &delivery.channel) {
            return;
        }
        let reply = cmd::pubsub_message(delivery);
        self.push(&reply);
    }

    fn push(&mut self, reply: &Reply) {
        reply.encode_for(&mut self.output, self.client.protocol);
    }

    /// Writes the queued replies. A subscriber that fell behind is cut off here too, even
    /// while this write waits on a client that does not read.
    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.output.is_empty() {
            let kicked = self.client.subscriptions.inbox.kicked.clone();
            tokio::select! {
                // TLS holds the last records until flushed; TCP's flush does nothing.
                written = async {
                    self.socket.write_all(&self.output).await?;
                    self.socket.flush().await
                } => written?,
                () = kicked.notified() => {
                    return Err(std::io::Error::other("a subscriber fell behind its messages"));
                }
            }
            self.output.clear();
        }
        Ok(())
    }
}

/// What the connection does once a pipeline has run.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Read more requests.
    Read,
    /// Send what is queued and close (`QUIT`).
    Close,
}

/// What running a command of a pipeline wave came to.
enum Outcome {
    Done(Flow),
    /// A reply to be streamed, in a wave of several commands: the read was closed at once
    /// and the command runs again when its reply's turn comes. Holding it open until then
    /// would keep a page of every such read of the wave in memory, and each open read
    /// counts against its serving node's limit and could idle out while the replies before
    /// it are written; this way a connection streams one reply at a time, at the price of
    /// reading one page twice.
    Again(Vec<Bytes>),
}

/// Runs `request` as part of a wave; `alone` when the wave is this one command.
async fn execute_in_wave(
    shared: &Shared,
    client: &mut ClientState,
    request: Vec<Bytes>,
    alone: bool,
) -> Outcome {
    // Bytes are shared, not copied: keeping the request costs a few counts.
    let again = (!alone).then(|| request.clone());
    match (execute(shared, client, request).await, again) {
        (Flow::Stream(_), Some(request)) => Outcome::Again(request),
        (flow, _) => Outcome::Done(flow),
    }
}

/// Runs the commands of one pipeline wave on one key, in order: alone, side by side if they
/// only read, or together as one log command if they write (one by one when they cannot).
/// `alone`: the wave is one command.
async fn run_of_one_key(
    shared: &Shared,
    mut client: ClientState,
    run: Vec<(usize, Vec<Bytes>)>,
    alone: bool,
) -> Vec<(usize, Outcome)> {
    let (places, requests): (Vec<usize>, Vec<Vec<Bytes>>) = run.into_iter().unzip();
    let flows = if requests.len() == 1 {
        let request = requests.into_iter().next().unwrap_or_default();
        vec![execute_in_wave(shared, &mut client, request, alone).await]
    } else if requests.iter().all(|r| cmd::reads_only(r)) {
        let kept = requests.clone();
        let mut outcomes = futures::future::join_all(requests.into_iter().map(|request| {
            let mut client = client.clone();
            async move { execute_in_wave(shared, &mut client, request, false).await }
        }))
        .await;
        // Once a read of the key runs again at its turn, so do the reads after it: none may
        // answer from an older state than a read before it.
        if let Some(first) = outcomes.iter().position(|o| matches!(o, Outcome::Again(_))) {
            for (outcome, request) in outcomes.iter_mut().zip(kept).skip(first + 1) {
                *outcome = Outcome::Again(request);
            }
        }
        outcomes
    } else {
        let slots: Vec<usize> = requests
            .iter()
            .map(|r| crate::metrics::command_slot(r.first().map_or(&[][..], |name| name)))
            .collect();
        let start = std::time::Instant::now();
        match cmd::run_together(shared, &mut client, requests.clone()).await {
            Some(replies) => {
                let elapsed = start.elapsed();
                shared
                    .metrics
                    .commands
                    .fetch_add(replies.len() as u64, Ordering::Relaxed);
                for (slot, reply) in slots.into_iter().zip(&replies) {
                    shared.metrics.record(slot, elapsed);
                    if reply.is_error() {
                        shared.metrics.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                replies
                    .into_iter()
                    .map(|reply| Outcome::Done(Flow::Reply(reply)))
                    .collect()
            }
            None => {
                // A whole read kept open here: run again at its turn, it would see the
                // writes that follow it.
                let mut flows = Vec::with_capacity(requests.len());
                for request in requests {
                    flows.push(Outcome::Done(execute(shared, &mut client, request).await));
                }
                flows
            }
        }
    };
    places.into_iter().zip(flows).collect()
}

/// Runs one request, counting and timing it.
async fn execute(shared: &Shared, client: &mut ClientState, request: Vec<Bytes>) -> Flow {
    shared.metrics.commands.fetch_add(1, Ordering::Relaxed);
    let slot = crate::metrics::command_slot(request.first().map_or(&[][..], |name| name));
    let start = std::time::Instant::now();
    let flow = cmd::execute(shared, client, request).await;
    shared.metrics.record(slot, start.elapsed());
    if let Flow::Reply(reply) | Flow::Quit(reply) = &flow
        && reply.is_error()
    {
        shared.metrics.errors.fetch_add(1, Ordering::Relaxed);
    }
    flow
}
