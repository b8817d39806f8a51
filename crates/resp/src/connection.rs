//! One client connection: read requests, run them in order, write the replies.
//!
//! Everything already received is decoded and executed before the replies go out in one
//! write, so a pipelining client gets its answers batched. A protocol error is answered with
//! `-ERR Protocol error: ...` and closes this connection only.

use crate::cmd::{self, Flow};
use crate::server::Shared;
use crate::{Args, Reply, RespCodec};
use bytes::BytesMut;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;

/// Per-connection state that commands can read and change.
pub(crate) struct ClientState {
    pub(crate) id: u64,
    pub(crate) name: Option<bytes::Bytes>,
    /// RESP2 until the client sends `HELLO 3`.
    pub(crate) protocol: crate::Protocol,
}

pub(crate) struct Connection {
    socket: TcpStream,
    shared: Arc<Shared>,
    codec: RespCodec,
    input: BytesMut,
    output: BytesMut,
    client: ClientState,
}

impl Connection {
    pub(crate) fn new(socket: TcpStream, shared: Arc<Shared>) -> Self {
        let id = shared.client_id();
        Self {
            socket,
            shared,
            codec: RespCodec::default(),
            input: BytesMut::with_capacity(16 * 1024),
            output: BytesMut::with_capacity(16 * 1024),
            client: ClientState {
                id,
                name: None,
                protocol: crate::Protocol::Resp2,
            },
        }
    }

    pub(crate) async fn run(mut self) -> std::io::Result<()> {
        loop {
            let mut quit = false;
            loop {
                match self.codec.decode(&mut self.input) {
                    Ok(Some(request)) => {
                        let reply = self.execute(request).await;
                        match reply {
                            Flow::Reply(reply) => {
                                self.push(&reply);
                                if self.output.len() > 64 * 1024 {
                                    self.flush().await?;
                                }
                            }
                            Flow::Quit(reply) => {
                                self.push(&reply);
                                quit = true;
                                break;
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
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
            self.flush().await?;
            if quit {
                return Ok(());
            }
            if self.socket.read_buf(&mut self.input).await? == 0 {
                return Ok(());
            }
        }
    }

    async fn execute(&mut self, request: Vec<bytes::Bytes>) -> Flow {
        self.shared.metrics.commands.fetch_add(1, Ordering::Relaxed);
        let slot = crate::server::command_slot(request.first().map_or(&[][..], |name| name));
        let start = std::time::Instant::now();
        let flow = cmd::execute(&self.shared, &mut self.client, Args::new(request)).await;
        self.shared.metrics.record(slot, start.elapsed());
        let (Flow::Reply(reply) | Flow::Quit(reply)) = &flow;
        if reply.is_error() {
            self.shared.metrics.errors.fetch_add(1, Ordering::Relaxed);
        }
        flow
    }

    fn push(&mut self, reply: &Reply) {
        reply.encode_for(&mut self.output, self.client.protocol);
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.output.is_empty() {
            self.socket.write_all(&self.output).await?;
            self.output.clear();
        }
        Ok(())
    }
}
