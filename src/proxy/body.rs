//! Request bodies: read whole under a size cap, and decoded (gzip, deflate,
//! zstd) for parsing only — the upstream always gets the bytes as received.

use std::io::Read;

use axum::body::Body;
use bytes::Bytes;
use http::HeaderMap;
use http::header::CONTENT_ENCODING;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::error::ProxyError;

/// Reads the whole request body, refusing more than `limit` bytes.
///
/// # Errors
/// [`ProxyError::BodyTooLarge`] past the limit, [`ProxyError::BodyRead`]
/// when the client's body broke off.
pub async fn read_limited(body: Body, limit: usize) -> Result<Bytes, ProxyError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ProxyError::BodyTooLarge { limit }),
        Err(e) => Err(ProxyError::BodyRead(e.to_string())),
    }
}

/// Why a request body could not be decoded for parsing.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// An encoding loopguard does not decode.
    #[error("unsupported content-encoding {0:?}")]
    Unsupported(String),
    /// The bytes are not valid for their encoding, or decode past the cap.
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
/// past `limit`; the caller forwards the body unchanged without detection.
pub fn decoded_for_parsing(headers: &HeaderMap, body: &Bytes, limit: usize) -> Result<Bytes, DecodeError> {
    let codings: Vec<String> = headers
        .get_all(CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
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
            return Err(invalid(format!("decoded body exceeds {limit} bytes")));
        }
        data = Bytes::from(out);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

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
        assert!(matches!(err, Err(DecodeError::Invalid { .. })), "{err:?}");
    }

    #[test]
    fn unknown_codings_are_refused() {
        let err = decoded_for_parsing(&headers("br"), &Bytes::from_static(b"x"), 10);
        assert!(matches!(err, Err(DecodeError::Unsupported(_))));
    }
}
