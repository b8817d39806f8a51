//! One peer link: a TCP connection to another node carrying requests both ways, each answered
//! by a response with the same id. A writer task batches queued frames into one write; a
//! reader task dispatches requests to the transport and responses to their waiting callers.

use super::stream::PeerStream;
use super::wire::{self, Frame, MAX_FRAME, Request, Response};
use bytes::BytesMut;
use futures::StreamExt;
use futures::future::{AbortHandle, Abortable};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio_util::codec::{FramedRead, LengthDelimitedCodec};

/// Bytes gathered into one write before the writer flushes.
const WRITE_BATCH: usize = 1 << 20;

/// Why a call over a link got no answer.
#[derive(Debug)]
pub(crate) enum CallError {
    /// There is no link; the request was not sent.
    Unreachable(String),
    /// The link broke after the request was sent; it may have been served.
    Lost(String),
    /// No answer within the time limit; the request may have been served.
    Timeout(Duration),
}

/// A live link to one peer.
pub(crate) struct Link {
    pub(crate) peer: u64,
    /// Identifies this connection among successive links to the same peer.
    pub(crate) serial: u64,
    out: mpsc::UnboundedSender<Frame>,
    pending: Mutex<HashMap<u64, oneshot::Sender<Response>>>,
    /// Forwarded requests being served for the peer, by id, so that a `Cancel` can stop one.
    serving: Mutex<HashMap<u64, AbortHandle>>,
    next_id: AtomicU64,
    closed: AtomicBool,
    /// Wakes the writer when the link closes, so it drops its half of the socket.
    closing: Notify,
}

/// What the reader does with a request that arrived on a link.
pub(crate) trait Inbound: Send + Sync + 'static {
    /// Serves `request` from `peer` and returns the answer.
    fn serve(
        self: Arc<Self>,
        peer: u64,
        request: Request,
    ) -> impl Future<Output = Response> + Send + 'static;

    /// The link to `peer` with `serial` closed.
    fn closed(&self, peer: u64, serial: u64);
}

impl Link {
    /// Starts the reader and writer tasks of an established (handshaken) connection.
    pub(crate) fn start<I: Inbound>(
        stream: PeerStream,
        peer: u64,
        serial: u64,
        inbound: Arc<I>,
    ) -> Arc<Link> {
        let (out, queue) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            peer,
            serial,
            out,
            pending: Mutex::new(HashMap::new()),
            serving: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            closing: Notify::new(),
        });
        match stream {
            PeerStream::Plain(tcp) => {
                let (read, write) = tcp.into_split();
                tokio::spawn(write_loop(write, queue, link.clone()));
                tokio::spawn(read_loop(read, link.clone(), inbound));
            }
            tls => {
                let (read, write) = tokio::io::split(tls);
                tokio::spawn(write_loop(write, queue, link.clone()));
                tokio::spawn(read_loop(read, link.clone(), inbound));
            }
        }
        link
    }

    /// Whether the connection has failed or been closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Sends `request` and waits up to `timeout` for its answer.
    pub(crate) async fn call(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, CallError> {
        self.call_with(request, timeout, false).await
    }

    /// Like [`Link::call`], but if the caller stops waiting (the future is dropped or times
    /// out) the peer is told to stop serving the request.
    pub(crate) async fn call_cancellable(
        &self,
        request: Request,
        timeout: Duration,
    ) -> Result<Response, CallError> {
        self.call_with(request, timeout, true).await
    }

    async fn call_with(
        &self,
        request: Request,
        timeout: Duration,
        cancellable: bool,
    ) -> Result<Response, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock_pending().insert(id, tx);
        if self.is_closed() || self.out.send(Frame::Request { id, request }).is_err() {
            self.lock_pending().remove(&id);
            return Err(CallError::Unreachable(format!(
                "the link to node {:016x} is closed",
                self.peer
            )));
        }
        // Built only when needed: a guard built and dropped at once would cancel the call.
        let mut abandon = if cancellable {
            Some(Abandon { link: self, id })
        } else {
            None
        };
        let answer = tokio::time::timeout(timeout, rx).await;
        if let (Some(guard), Ok(Ok(_))) = (&mut abandon, &answer) {
            // Answered: nothing left to cancel.
            guard.id = 0;
        }
        match answer {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(CallError::Lost(format!(
                "the link to node {:016x} closed before it answered",
                self.peer
            ))),
            Err(_) => {
                self.lock_pending().remove(&id);
                Err(CallError::Timeout(timeout))
            }
        }
    }

    fn lock_serving(&self) -> std::sync::MutexGuard<'_, HashMap<u64, AbortHandle>> {
        // As `lock_pending`.
        self.serving
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn respond(&self, id: u64, response: Response) {
        // A failed send means the link closed; the caller learns that from its own side.
        let _ = self.out.send(Frame::Response { id, response });
    }

    /// Marks the link closed and fails every call still waiting on it.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.lock_pending().clear();
        self.closing.notify_one();
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Response>>> {
        // The map holds no invariant a panicking holder could break.
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Armed while a cancellable call waits: dropped before the answer came (the caller gave up,
/// or its own caller hung up), it forgets the call and tells the peer to stop serving it.
struct Abandon<'a> {
    link: &'a Link,
    /// The request's id; 0 once answered.
    id: u64,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if self.id != 0 && !self.link.is_closed() {
            self.link.lock_pending().remove(&self.id);
            let _ = self.link.out.send(Frame::Cancel { id: self.id });
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    mut queue: mpsc::UnboundedReceiver<Frame>,
    link: Arc<Link>,
) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let frame = tokio::select! {
            frame = queue.recv() => match frame {
                Some(frame) => frame,
                None => break,
            },
            () = link.closing.notified() => break,
        };
        buf.clear();
        let mut next = Some(frame);
        while let Some(frame) = next.take() {
            if let Err(e) = wire::encode(&frame, &mut buf) {
                tracing::error!(peer = %format_args!("{:016x}", link.peer), error = %e, "cannot encode a peer frame");
            }
            if buf.len() < WRITE_BATCH {
                next = queue.try_recv().ok();
            }
        }
        // TLS holds the last records until flushed; TCP's flush does nothing.
        let written = match write.write_all(&buf).await {
            Ok(()) => write.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::debug!(peer = %format_args!("{:016x}", link.peer), error = %e, "peer link write failed");
            break;
        }
    }
    link.close();
    let _ = write.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin, I: Inbound>(read: R, link: Arc<Link>, inbound: Arc<I>) {
    let mut frames = FramedRead::new(
        read,
        LengthDelimitedCodec::builder()
            .max_frame_length(MAX_FRAME)
            .new_codec(),
    );
    let peer = link.peer;
    while let Some(next) = frames.next().await {
        let body = match next {
            Ok(body) => body,
            Err(e) => {
                tracing::warn!(peer = %format_args!("{peer:016x}"), error = %e, "peer link read failed; closing it");
                break;
            }
        };
        match wire::decode(&body) {
            Ok(Frame::Request { id, request }) => {
                let cancellable = matches!(request, Request::Forward { .. });
                let serve = inbound.clone().serve(peer, request);
                let link = link.clone();
                if cancellable {
                    // Registered before the task starts, removed when it ends either way.
                    let (abort, registration) = AbortHandle::new_pair();
                    link.lock_serving().insert(id, abort);
                    tokio::spawn(async move {
                        if let Ok(response) = Abortable::new(serve, registration).await {
                            link.respond(id, response);
                        }
                        link.lock_serving().remove(&id);
                    });
                } else {
                    tokio::spawn(async move { link.respond(id, serve.await) });
                }
            }
            Ok(Frame::Cancel { id }) => {
                if let Some(abort) = link.lock_serving().remove(&id) {
                    abort.abort();
                }
            }
            Ok(Frame::Response { id, response }) => {
                let waiter = link.lock_pending().remove(&id);
                if let Some(waiter) = waiter {
                    let _ = waiter.send(response);
                }
            }
            Ok(other) => {
                tracing::warn!(peer = %format_args!("{peer:016x}"), frame = ?other, "unexpected frame on an established peer link; closing it");
                break;
            }
            Err(e) => {
                tracing::warn!(peer = %format_args!("{peer:016x}"), error = %e, bytes = body.len(), "undecodable peer message; closing the link");
                break;
            }
        }
    }
    link.close();
    inbound.closed(peer, link.serial);
}
