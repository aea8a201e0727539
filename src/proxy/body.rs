//! Request bodies: read whole under a size cap, and decoded (gzip, deflate,
//! zstd) for parsing only — the upstream always gets the bytes as received.

use std::io::Read;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http::header::CONTENT_ENCODING;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ProxyError;
use crate::budget::Reservation;

/// Reads the whole request body, refusing more than `limit` bytes (at once
/// when its declared `Content-Length` is over, before reading any of it, so
/// an `Expect: 100-continue` client never sends it) and a body not complete
/// within `timeout`. What it holds is reserved in `held` as it arrives
/// (what was received, not what was declared: a client that declares a
/// large body and sends nothing holds nothing), which the caller keeps
/// until the request is done: all requests' bodies together stay within
/// the reservation's total, `server.max_request_bytes_in_flight`.
///
/// # Errors
/// [`ProxyError::BodyTooLarge`] past the limit, [`ProxyError::BodiesInFlight`]
/// when the body does not fit beside the bodies held by other requests,
/// [`ProxyError::BodyTimeout`] when the client is too slow,
/// [`ProxyError::BodyRead`] when the client's body broke off.
pub async fn read_limited(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
    held: &Reservation,
) -> Result<Bytes, ProxyError> {
    let declared = axum::body::HttpBody::size_hint(&body).lower();
    if declared > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(ProxyError::BodyTooLarge { limit });
    }
    let in_flight = || ProxyError::BodiesInFlight { limit: held.total() };
    let read = async {
        let mut body = Limited::new(body, limit);
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut received = 0_usize;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    ProxyError::BodyTooLarge { limit }
                } else {
                    ProxyError::BodyRead(e.to_string())
                }
            })?;
            let Ok(data) = frame.into_data() else { continue };
            received += data.len();
            if received > held.held() && !held.grow(received - held.held()) {
                return Err(in_flight());
            }
            chunks.push(data);
        }
        Ok(match chunks.len() {
            0 => Bytes::new(),
            1 => chunks.swap_remove(0),
            _ => {
                let mut whole = BytesMut::with_capacity(received);
                chunks.iter().for_each(|c| whole.extend_from_slice(c));
                whole.freeze()
            }
        })
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(result) => result,
        Err(_) => Err(ProxyError::BodyTimeout {
            secs: timeout.as_secs(),
        }),
    }
}

/// Why a request body could not be decoded for parsing.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// An encoding loopguard does not decode.
    #[error("unsupported content-encoding {0:?}")]
    Unsupported(String),
    /// The decoded body would pass the cap.
    #[error("decoded body exceeds {limit} bytes")]
    TooLarge {
        /// The cap, bytes.
        limit: usize,
    },
    /// The bytes are not valid for their encoding.
    #[error("could not decode {encoding} body: {detail}")]
    Invalid {
        /// The encoding.
        encoding: String,
        /// What went wrong.
        detail: String,
    },
}

/// The body as the parser should see it: decoded per `Content-Encoding`
/// (gzip, x-gzip, deflate, zstd, identity; several codings are undone in
/// reverse order), capped at `limit` decoded bytes.
///
/// # Errors
/// [`DecodeError`] for an unknown coding, corrupt data, or a decoded body
/// past `limit` ([`DecodeError::TooLarge`]); the caller forwards the body
/// unchanged without detection.
pub fn decoded_for_parsing(headers: &HeaderMap, body: &Bytes, limit: usize) -> Result<Bytes, DecodeError> {
    let codings = codings(headers);
    let mut data = body.clone();
    for coding in codings.iter().rev() {
        let invalid = |detail: String| DecodeError::Invalid {
            encoding: coding.clone(),
            detail,
        };
        let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
        let mut out = Vec::new();
        let read = match coding.as_str() {
            "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(&data[..])
                .take(cap)
                .read_to_end(&mut out),
            "deflate" => flate2::read::ZlibDecoder::new(&data[..])
                .take(cap)
                .read_to_end(&mut out),
            "zstd" => {
                zstd::stream::read::Decoder::new(&data[..]).and_then(|d| d.take(cap).read_to_end(&mut out))
            }
            other => return Err(DecodeError::Unsupported(other.to_owned())),
        };
        read.map_err(|e| invalid(e.to_string()))?;
        if out.len() > limit {
            return Err(DecodeError::TooLarge { limit });
        }
        data = Bytes::from(out);
    }
    Ok(data)
}

/// Whether the body carries a `Content-Encoding` other than `identity`
/// (its parse then works on a decoded copy of its own).
pub fn is_encoded(headers: &HeaderMap) -> bool {
    !codings(headers).is_empty()
}

/// The body's content codings in the order they were applied, lower-cased,
/// `identity` left out.
fn codings(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect()
}

/// The side copy with every lone UTF-16 surrogate escape (`\ud83d` without
/// its pair, a tool result cut in the middle of an emoji) replaced by
/// `\ufffd`, which JSON parsers accept; `None` when there is none. Strict
/// parsers (serde_json among them) reject the whole body for one such
/// escape, which would switch detection off for the rest of a conversation
/// that carries it in its history. Only the parsing copy changes.
pub fn replace_lone_surrogates(body: &[u8]) -> Option<Vec<u8>> {
    fn escape_at(body: &[u8], i: usize) -> Option<u32> {
        let hex = body.get(i + 2..i + 6)?;
        if body.get(i) != Some(&b'\\') || body.get(i + 1) != Some(&b'u') {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    }
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < body.len() {
        if body[i] != b'\\' {
            if let Some(out) = out.as_mut() {
                out.push(body[i]);
            }
            i += 1;
            continue;
        }
        let (len, lone) = match escape_at(body, i) {
            Some(0xD800..=0xDBFF) => match escape_at(body, i + 6) {
                Some(0xDC00..=0xDFFF) => (12, false),
                _ => (6, true),
            },
            Some(0xDC00..=0xDFFF) => (6, true),
            Some(_) => (6, false),
            // Any other escape is two bytes (`\"`, `\\`, `\n`, …).
            None => (2, false),
        };
        let end = (i + len).min(body.len());
        if lone {
            out.get_or_insert_with(|| body[..i].to_vec())
                .extend_from_slice(b"\\ufffd");
        } else if let Some(out) = out.as_mut() {
            out.extend_from_slice(&body[i..end]);
        }
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lone_surrogates_are_replaced_and_pairs_and_other_escapes_kept() {
        let fixed =
            |s: &str| replace_lone_surrogates(s.as_bytes()).map(|v| String::from_utf8(v).unwrap_or_default());
        assert_eq!(
            fixed(r#"{"a":"ok \ud83d\ude00 \n \\ud83d"}"#),
            None,
            "a pair, a newline, an escaped backslash"
        );
        assert_eq!(
            fixed(r#"{"a":"cut \ud83d","b":"\ude00 x","c":"\uD83D\u0041"}"#).as_deref(),
            Some(r#"{"a":"cut \ufffd","b":"\ufffd x","c":"\ufffd\u0041"}"#)
        );
        let body = r#"{"messages":[{"role":"tool","tool_call_id":"c","content":"out \ud83d"}]}"#;
        assert!(serde_json::from_str::<serde_json::Value>(body).is_err());
        let fixed = replace_lone_surrogates(body.as_bytes()).unwrap_or_default();
        assert!(serde_json::from_slice::<serde_json::Value>(&fixed).is_ok());
        assert_eq!(replace_lone_surrogates(br#"trailing \"#), None);
    }

    fn headers(encoding: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_ENCODING,
            encoding.parse().unwrap_or_else(|e| panic!("{e}")),
        );
        h
    }

    #[test]
    fn gzip_and_zstd_bodies_are_decoded() {
        let plain = br#"{"messages":[]}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(plain).unwrap_or_else(|e| panic!("{e}"));
        let gz = gz.finish().unwrap_or_else(|e| panic!("{e}"));
        let out =
            decoded_for_parsing(&headers("gzip"), &Bytes::from(gz), 1024).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&out[..], plain);
        let zs = zstd::encode_all(&plain[..], 3).unwrap_or_else(|e| panic!("{e}"));
        let out =
            decoded_for_parsing(&headers("zstd"), &Bytes::from(zs), 1024).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&out[..], plain);
    }

    #[test]
    fn decompression_bombs_stop_at_the_cap() {
        let big = vec![b'a'; 10_000];
        let zs = zstd::encode_all(&big[..], 3).unwrap_or_else(|e| panic!("{e}"));
        let err = decoded_for_parsing(&headers("zstd"), &Bytes::from(zs), 1000);
        assert!(
            matches!(err, Err(DecodeError::TooLarge { limit: 1000 })),
            "{err:?}"
        );
    }

    #[test]
    fn unknown_codings_are_refused() {
        let err = decoded_for_parsing(&headers("br"), &Bytes::from_static(b"x"), 10);
        assert!(matches!(err, Err(DecodeError::Unsupported(_))));
    }
}
