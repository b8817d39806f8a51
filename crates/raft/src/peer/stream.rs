//! A peer connection: plain TCP, or mutual TLS when the cluster has `[peer_tls]`. A plain
//! link keeps splitting into TCP's owned halves (no lock between its reader and writer
//! tasks); only a TLS link pays for the shared split its record layer needs.

use tokio::net::TcpStream;

/// One end of a peer connection.
pub(crate) type PeerStream = trireme_tls::MaybeTls;

/// Opens a connection to `addr` and, with `tls`, completes the dialing side of the
/// handshake (the peer must show a certificate signed by the cluster CA).
pub(crate) async fn dial(
    addr: &str,
    tls: Option<&trireme_tls::PeerTls>,
) -> Result<PeerStream, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot reach {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    match tls {
        None => Ok(PeerStream::Plain(stream)),
        Some(tls) => tls
            .connect(addr, stream)
            .await
            .map(|s| PeerStream::Dialed(Box::new(s)))
            .map_err(|e| format!("{addr}: {e}")),
    }
}

/// Completes the accepting side: with `tls`, the dialer must show a certificate signed by
/// the cluster CA.
pub(crate) async fn accepted(
    stream: TcpStream,
    tls: Option<&trireme_tls::PeerTls>,
) -> Result<PeerStream, String> {
    let _ = stream.set_nodelay(true);
    match tls {
        None => Ok(PeerStream::Plain(stream)),
        Some(tls) => tls
            .accept(stream)
            .await
            .map(|s| PeerStream::Accepted(Box::new(s)))
            .map_err(|e| e.to_string()),
    }
}
