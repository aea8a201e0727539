//! Plain-HTTP upstream connections driven in the request's own task.
//!
//! A request to an `http://` upstream goes out on an HTTP/1.1 connection
//! from this pool (one pool per proxy worker). Where a pooled client
//! (reqwest over hyper-util) runs each connection as a task of its own and
//! hands requests, response heads and body chunks to it through channels,
//! here the request's task polls the connection itself: while it waits for
//! the response head ([`Pool::send`]) and then whenever the answer's body is
//! read ([`PooledBody`]). A request, its answer and the connection carrying
//! them therefore advance in one task, with no hand-off between tasks and
//! no URL re-parsing (issue #14).
//!
//! Connections are kept alive: once an answer's body has been read to its
//! end, its connection goes back to the pool for the next request to the
//! same `host:port`. An idle connection is checked before reuse (one poll:
//! an upstream that closed it shows at once) and dropped after
//! [`IDLE_TIMEOUT`]. A request that could not be written on a reused
//! connection (the upstream closed it meanwhile) is sent again on a new
//! one; a request that was written is never sent twice. An answer dropped
//! before its end closes its connection.
//!
//! TLS upstreams, and every upstream while an `HTTP_PROXY` / `ALL_PROXY`
//! variable is set, go through reqwest instead (see
//! [`crate::http_client`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use sync_wrapper::SyncWrapper;
use tokio::net::TcpStream;

/// How long an idle connection is kept (reqwest's pool keeps them 90 s too).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// At most this many idle connections are kept per `host:port` and pool.
pub const MAX_IDLE_PER_HOST: usize = 256;

type Connection = http1::Connection<TokioIo<TcpStream>, Full<Bytes>>;
type Sender = http1::SendRequest<Full<Bytes>>;

/// One HTTP/1.1 connection: the sending half and the connection future
/// that reads and writes its socket.
struct Link {
    sender: Sender,
    connection: Connection,
    /// The connection future finished (closed, or failed): never reused.
    done: bool,
}

impl Link {
    /// Polls the connection (reads and writes what it can) unless it is done.
    fn drive(&mut self, cx: &mut Context<'_>) {
        if !self.done && Pin::new(&mut self.connection).poll(cx).is_ready() {
            self.done = true;
        }
    }
}

/// Why a request got no response head.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The TCP connection could not be made.
    #[error("cannot connect to {authority}: {source}")]
    Connect {
        /// `host:port`.
        authority: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TCP connection was not made within the connect timeout.
    #[error("cannot connect to {authority}: no answer within {ms} ms")]
    ConnectTimeout {
        /// `host:port`.
        authority: String,
        /// The connect timeout, in milliseconds.
        ms: u128,
    },
    /// HTTP failed on the connection (hyper's error, with its cause).
    #[error("{0}")]
    Http(#[from] hyper::Error),
    /// The connection closed before the request could be sent.
    #[error("the upstream closed the connection before the request was sent")]
    Closed,
}

/// A pool of idle HTTP/1.1 connections by `host:port`.
#[derive(Debug)]
pub struct Pool {
    idle: Mutex<HashMap<String, Vec<Idle>>>,
    connect_timeout: Duration,
}

struct Idle {
    link: Box<Link>,
    since: Instant,
}

impl std::fmt::Debug for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idle").field("since", &self.since).finish()
    }
}

/// The response's body: reading it drives its connection, which goes back
/// to the pool once the body has ended.
pub struct PooledBody {
    body: Incoming,
    link: Option<SyncWrapper<Box<Link>>>,
    pool: Weak<Pool>,
    authority: String,
}

impl Pool {
    /// An empty pool whose new connections wait at most `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            idle: Mutex::new(HashMap::new()),
            connect_timeout,
        })
    }

    /// Sends `request` (origin-form URI, `Host` set) to `authority`
    /// (`host:port`) and returns the response once its head has arrived;
    /// its body drives the connection from then on.
    ///
    /// # Errors
    /// [`PoolError`]: no connection could be made, or HTTP failed on it
    /// before a response head came.
    pub async fn send(
        self: &Arc<Self>,
        authority: &str,
        request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<PooledBody>, PoolError> {
        let mut request = request;
        loop {
            let (link, reused) = match self.checkout(authority) {
                Some(link) => (link, true),
                // Boxed: a new connection is the rare case, and its
                // future (connect and handshake) would make every
                // request's future larger.
                None => (Box::pin(self.connect(authority)).await?, false),
            };
            match exchange(link, request).await {
                Ok((response, link)) => {
                    return Ok(response.map(|body| PooledBody {
                        body,
                        link: Some(SyncWrapper::new(link)),
                        pool: Arc::downgrade(self),
                        authority: authority.to_owned(),
                    }));
                }
                // Never written: the upstream had closed a reused connection.
                Err((_, Some(unsent))) if reused => request = unsent,
                Err((error, _)) => return Err(error),
            }
        }
    }

    /// How many idle connections the pool holds (all hosts).
    pub fn idle_count(&self) -> usize {
        self.idle
            .lock()
            .map(|idle| idle.values().map(Vec::len).sum())
            .unwrap_or(0)
    }

    /// The most recently used idle connection to `authority` that is still open.
    fn checkout(&self, authority: &str) -> Option<Box<Link>> {
        let mut idle = self.idle.lock().ok()?;
        let list = idle.get_mut(authority)?;
        let mut cx = Context::from_waker(Waker::noop());
        while let Some(Idle { mut link, since }) = list.pop() {
            if since.elapsed() > IDLE_TIMEOUT || link.sender.is_closed() {
                continue;
            }
            // An upstream that closed the connection: its end shows on a poll.
            link.drive(&mut cx);
            if !link.done {
                return Some(link);
            }
        }
        None
    }

    fn give_back(&self, authority: &str, link: Box<Link>) {
        if link.done || link.sender.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock() {
            let list = idle.entry(authority.to_owned()).or_default();
            list.retain(|i| i.since.elapsed() <= IDLE_TIMEOUT);
            if list.len() < MAX_IDLE_PER_HOST {
                list.push(Idle {
                    link,
                    since: Instant::now(),
                });
            }
        }
    }

    async fn connect(&self, authority: &str) -> Result<Box<Link>, PoolError> {
        let stream = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(authority)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => {
                return Err(PoolError::Connect {
                    authority: authority.to_owned(),
                    source,
                });
            }
            Err(_) => {
                return Err(PoolError::ConnectTimeout {
                    authority: authority.to_owned(),
                    ms: self.connect_timeout.as_millis(),
                });
            }
        };
        // Small writes (a request head, an SSE event) go out at once.
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::Builder::new().handshake(TokioIo::new(stream)).await?;
        // Boxed: a request's future moves its connection through several
        // stages, a pointer rather than the connection's buffers and state.
        Ok(Box::new(Link {
            sender,
            connection,
            done: false,
        }))
    }
}

type Exchanged =
    Result<(http::Response<Incoming>, Box<Link>), (PoolError, Option<http::Request<Full<Bytes>>>)>;
type Answer = Pin<
    Box<
        dyn Future<
                Output = Result<
                    http::Response<Incoming>,
                    hyper::client::conn::TrySendError<http::Request<Full<Bytes>>>,
                >,
            > + Send,
    >,
>;

/// Writes `request` on `link` and reads the response head, polling the
/// connection in this task. On failure, the request comes back when it was
/// never written.
async fn exchange(mut link: Box<Link>, request: http::Request<Full<Bytes>>) -> Exchanged {
    let mut request = Some(request);
    let mut answer: Option<Answer> = None;
    let result = std::future::poll_fn(|cx| {
        loop {
            link.drive(cx);
            let Some(pending) = answer.as_mut() else {
                if link.done {
                    return Poll::Ready(Err((PoolError::Closed, request.take())));
                }
                match link.sender.poll_ready(cx) {
                    Poll::Ready(Ok(())) => {
                        let Some(r) = request.take() else {
                            return Poll::Ready(Err((PoolError::Closed, None)));
                        };
                        answer = Some(Box::pin(link.sender.try_send_request(r)));
                        // Poll the connection again: it writes the request.
                        continue;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err((PoolError::Http(e), request.take()))),
                    Poll::Pending => return Poll::Pending,
                }
            };
            return match pending.as_mut().poll(cx) {
                Poll::Ready(Ok(response)) => Poll::Ready(Ok(response)),
                Poll::Ready(Err(mut e)) => {
                    let unsent = e.take_message();
                    Poll::Ready(Err((PoolError::Http(e.into_error()), unsent)))
                }
                // A connection that ended resolves the answer with its error.
                Poll::Pending => Poll::Pending,
            };
        }
    })
    .await;
    result.map(|response| (response, link))
}

impl PooledBody {
    /// Puts the connection back in its pool (once the body has ended).
    fn give_back(&mut self) {
        if let (Some(link), Some(pool)) = (self.link.take(), self.pool.upgrade()) {
            pool.give_back(&self.authority, link.into_inner());
        }
    }
}

impl hyper::body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(link) = this.link.as_mut() {
            link.get_mut().drive(cx);
        }
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            this.give_back();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // A body with nothing to read (HEAD, 204) may never be polled.
        if self.body.is_end_stream() {
            self.give_back();
        }
    }
}

impl std::fmt::Debug for PooledBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBody")
            .field("authority", &self.authority)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// How the test upstream treats a connection after each answer.
    #[derive(Clone, Copy)]
    enum After {
        /// Keeps it open for the next request.
        KeepAlive,
        /// Closes it without saying so (no `Connection: close`).
        Close,
        /// Says `Connection: close`, then closes it.
        SayClose,
    }

    /// A listener on a loopback ephemeral port, and its `host:port`.
    async fn listener() -> (TcpListener, String) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let authority = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"))
            .to_string();
        (listener, authority)
    }

    /// A real HTTP/1.1 upstream on a loopback port that answers every
    /// request with `hello` and counts the connections it accepted.
    async fn upstream(after: After) -> (String, Arc<AtomicUsize>) {
        let (listener, authority) = listener().await;
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        crate::task::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                crate::task::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        // One request: a head without a body (the tests send none).
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.clear();
                        let close = if matches!(after, After::SayClose) {
                            "connection: close\r\n"
                        } else {
                            ""
                        };
                        let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n{close}\r\nhello");
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                        if !matches!(after, After::KeepAlive) {
                            return;
                        }
                    }
                });
            }
        });
        (authority, accepted)
    }

    fn get(authority: &str) -> http::Request<Full<Bytes>> {
        http::Request::builder()
            .uri("/v1/models")
            .header(http::header::HOST, authority)
            .body(Full::new(Bytes::new()))
            .unwrap_or_else(|e| panic!("request: {e}"))
    }

    async fn read(pool: &Arc<Pool>, authority: &str) -> String {
        let response = pool
            .send(authority, get(authority))
            .await
            .unwrap_or_else(|e| panic!("response: {e}"));
        let body = response
            .into_body()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("body: {e}"))
            .to_bytes();
        String::from_utf8_lossy(&body).into_owned()
    }

    #[tokio::test]
    async fn a_connection_read_to_its_end_carries_the_next_request() {
        let (authority, accepted) = upstream(After::KeepAlive).await;
        let pool = Pool::new(Duration::from_secs(2));
        for _ in 0..3 {
            assert_eq!(read(&pool, &authority).await, "hello");
            assert_eq!(pool.idle_count(), 1);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_is_replaced() {
        let (authority, accepted) = upstream(After::Close).await;
        let pool = Pool::new(Duration::from_secs(2));
        for round in 1..=3 {
            assert_eq!(read(&pool, &authority).await, "hello");
            // Let the upstream's close reach this side before the next request.
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(accepted.load(Ordering::SeqCst), round);
        }
    }

    #[tokio::test]
    async fn connection_close_is_not_kept() {
        let (authority, accepted) = upstream(After::SayClose).await;
        let pool = Pool::new(Duration::from_secs(2));
        assert_eq!(read(&pool, &authority).await, "hello");
        assert_eq!(pool.idle_count(), 0);
        assert_eq!(read(&pool, &authority).await, "hello");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_body_dropped_before_its_end_closes_its_connection() {
        let (authority, accepted) = upstream(After::KeepAlive).await;
        let pool = Pool::new(Duration::from_secs(2));
        let response = pool
            .send(&authority, get(&authority))
            .await
            .unwrap_or_else(|e| panic!("response: {e}"));
        drop(response);
        assert_eq!(pool.idle_count(), 0);
        assert_eq!(read(&pool, &authority).await, "hello");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_upstream_that_is_not_listening_says_so() {
        // A port bound then released: nothing listens there.
        let (listener, authority) = listener().await;
        drop(listener);
        let pool = Pool::new(Duration::from_secs(2));
        let error = pool
            .send(&authority, get(&authority))
            .await
            .err()
            .unwrap_or_else(|| panic!("refused"));
        let text = error.to_string();
        assert!(
            text.starts_with(&format!("cannot connect to {authority}: ")),
            "{text}"
        );
    }
}
