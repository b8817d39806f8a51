//! [`MaybeTls`]: a connection that may or may not be TLS, as one type.
//!
//! An enum rather than a boxed stream, so a plain connection stays a plain `TcpStream` that
//! its owner can still split into TCP's owned halves.

use crate::{ClientStream, ServerStream};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A TCP connection, with or without TLS: one type for code that serves or dials both.
pub enum MaybeTls {
    /// No TLS.
    Plain(TcpStream),
    /// This end accepted the connection.
    Accepted(Box<ServerStream>),
    /// This end dialed it.
    Dialed(Box<ClientStream>),
}

impl AsyncRead for MaybeTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Accepted(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            MaybeTls::Dialed(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MaybeTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Accepted(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            MaybeTls::Dialed(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Accepted(s) => Pin::new(s.as_mut()).poll_flush(cx),
            MaybeTls::Dialed(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Accepted(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            MaybeTls::Dialed(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl MaybeTls {
    /// What the other end proved about itself: its certificate, on a TLS connection.
    pub fn peer_identity(&self) -> PeerIdentity {
        let certificates = match self {
            MaybeTls::Plain(_) => return PeerIdentity::Plain,
            MaybeTls::Accepted(s) => s.get_ref().1.peer_certificates(),
            MaybeTls::Dialed(s) => s.get_ref().1.peer_certificates(),
        };
        PeerIdentity::Certified(
            certificates
                .and_then(|c| c.first())
                .map(|c| c.clone().into_owned()),
        )
    }
}

/// What the other end of a connection proved about itself, kept after the connection moves
/// on.
#[derive(Debug, Clone)]
pub enum PeerIdentity {
    /// A plain connection: nothing to check.
    Plain,
    /// A TLS connection and the certificate the peer showed (none: it showed none).
    Certified(Option<rustls_pki_types::CertificateDer<'static>>),
}

impl PeerIdentity {
    /// Whether the peer is node `name`: its certificate names it (see
    /// [`crate::node_dns_name`]). A plain connection passes: there is nothing to check.
    pub fn check_is_node(&self, name: &str) -> Result<(), String> {
        match self {
            PeerIdentity::Plain => Ok(()),
            PeerIdentity::Certified(None) => Err("the peer showed no certificate".into()),
            PeerIdentity::Certified(Some(certificate)) => {
                crate::check_names_node(certificate, name)
            }
        }
    }
}
