//! A peer connection: plain TCP, or mutual TLS when the cluster has `[peer_tls]`. A plain
//! link keeps splitting into TCP's owned halves (no lock between its reader and writer
//! tasks); only a TLS link pays for the shared split its record layer needs.

use std::time::Duration;
use tokio::net::TcpStream;

/// How long data sent on a peer link may stay unacknowledged before the kernel gives the
/// connection up (`TCP_USER_TIMEOUT`). Without it, a connection cut by a partition waits for
/// TCP's retransmissions, whose interval doubles each time: after a cut of 20 s the next try
/// can come 20 s after the network is back. Given up, the link is redialled at once.
const STALL_TIMEOUT: Duration = Duration::from_secs(5);
/// An idle link is probed after this long without traffic, then every
/// [`KEEPALIVE_INTERVAL`], and given up after [`KEEPALIVE_PROBES`] unanswered probes.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_PROBES: u32 = 3;

/// Sets what every peer connection needs: no Nagle delay, and a stalled or silently dead
/// connection given up in seconds rather than minutes.
fn tune(stream: &TcpStream) {
    use rustix::net::sockopt;
    let set: [std::io::Result<()>; 6] = [
        stream.set_nodelay(true),
        sockopt::set_tcp_user_timeout(stream, STALL_TIMEOUT.as_millis() as u32).map_err(Into::into),
        sockopt::set_socket_keepalive(stream, true).map_err(Into::into),
        sockopt::set_tcp_keepidle(stream, KEEPALIVE_IDLE).map_err(Into::into),
        sockopt::set_tcp_keepintvl(stream, KEEPALIVE_INTERVAL).map_err(Into::into),
        sockopt::set_tcp_keepcnt(stream, KEEPALIVE_PROBES).map_err(Into::into),
    ];
    if let Some(e) = set.into_iter().find_map(Result::err) {
        tracing::debug!(error = %e, "cannot set a peer socket option");
    }
}

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
    tune(&stream);
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
    tune(&stream);
    match tls {
        None => Ok(PeerStream::Plain(stream)),
        Some(tls) => tls
            .accept(stream)
            .await
            .map(|s| PeerStream::Accepted(Box::new(s)))
            .map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn both_ends_of_a_peer_connection_give_up_a_stalled_link_in_seconds() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let (dialed, accepted) = tokio::join!(dial(&addr, None), async {
            let (stream, _) = listener.accept().await.expect("accept");
            accepted(stream, None).await
        });
        for end in [dialed.expect("dial"), accepted.expect("accept")] {
            let PeerStream::Plain(tcp) = end else {
                panic!("a plain connection")
            };
            use rustix::net::sockopt;
            assert_eq!(sockopt::tcp_user_timeout(&tcp).expect("user timeout"), 5000);
            assert!(sockopt::socket_keepalive(&tcp).expect("keepalive"));
            assert_eq!(sockopt::tcp_keepidle(&tcp).expect("idle"), KEEPALIVE_IDLE);
            assert!(tcp.nodelay().expect("nodelay"));
        }
    }
}
