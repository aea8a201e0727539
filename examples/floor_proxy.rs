//! The cheapest reverse proxy on loopguard's HTTP stack, for
//! `benches/e2e.sh`'s `FLOOR=1` path: the same server (axum on hyper, one
//! single-worker runtime per core sharing one listener), the same upstream
//! client (loopguard's: its pool for plain HTTP, else reqwest), the body read whole and
//! forwarded, the answer streamed back, and nothing else: no parse, no
//! detection, no logging. What this adds over nginx is the stack's own
//! cost, the part of loopguard's hop its detection work cannot remove.
//!
//!   cargo run --release --example floor_proxy -- 127.0.0.1:0 http://127.0.0.1:8080
//!
//! Prints `listening on <addr>`. Every failure answers 502.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use http_body_util::BodyExt;

struct Upstream {
    base: String,
    client: reqwest::Client,
    /// `host:port` of a plain-HTTP base, and the pool its requests take.
    plain: Option<(String, Arc<loopguard::upstream_pool::Pool>)>,
}

async fn forward(State(up): State<Arc<Upstream>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return http::StatusCode::BAD_REQUEST.into_response();
    };
    parts.headers.remove(http::header::HOST);
    if let Some((authority, pool)) = &up.plain {
        let Ok(host) = http::HeaderValue::from_str(authority) else {
            return http::StatusCode::BAD_GATEWAY.into_response();
        };
        parts.headers.insert(http::header::HOST, host);
        let mut request = http::Request::new(http_body_util::Full::new(body));
        *request.method_mut() = parts.method;
        *request.uri_mut() = parts.uri;
        *request.headers_mut() = parts.headers;
        return match pool.send(authority, request).await {
            Ok(answer) => answer.map(Body::new),
            Err(_) => http::StatusCode::BAD_GATEWAY.into_response(),
        };
    }
    let url = format!("{}{}", up.base, parts.uri);
    let sent = up
        .client
        .request(parts.method, url)
        .headers(parts.headers)
        .body(body)
        .send()
        .await;
    let Ok(answer) = sent else {
        return http::StatusCode::BAD_GATEWAY.into_response();
    };
    let mut out = Response::builder().status(answer.status());
    if let Some(headers) = out.headers_mut() {
        headers.extend(answer.headers().clone());
    }
    out.body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|_| http::StatusCode::BAD_GATEWAY.into_response())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(listen), Some(base)) = (args.get(1), args.get(2)) else {
        return Err("usage: floor_proxy <listen addr> <upstream base URL>".into());
    };
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    println!("listening on {}", listener.local_addr()?);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut workers = Vec::new();
    for _ in 0..cores {
        let listener = listener.try_clone()?;
        let base = base.trim_end_matches('/').to_owned();
        workers.push(std::thread::spawn(move || -> std::io::Result<()> {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            runtime.block_on(async move {
                let client = loopguard::http_client::client(std::time::Duration::from_secs(5))
                    .map_err(std::io::Error::other)?;
                let plain = base.strip_prefix("http://").map(|authority| {
                    (
                        authority.to_owned(),
                        loopguard::upstream_pool::Pool::new(std::time::Duration::from_secs(5)),
                    )
                });
                let app = axum::Router::new()
                    .fallback(forward)
                    .with_state(Arc::new(Upstream { base, client, plain }));
                // No Nagle delay on the client's side, as loopguard and nginx.
                let listener = tokio::net::TcpListener::from_std(listener)?.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                // A task, so that it runs on the worker thread.
                loopguard::task::spawn(async move { axum::serve(listener, app).await })
                    .await
                    .map_err(std::io::Error::other)?
            })
        }));
    }
    for worker in workers {
        worker.join().map_err(|_| "a worker panicked")??;
    }
    Ok(())
}
