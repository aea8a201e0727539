//! AWS event-stream framing (`application/vnd.amazon.eventstream`, the body
//! of Bedrock's `InvokeModelWithResponseStream` and `ConverseStream`): an
//! incremental decoder, CRCs checked and memory bounded, and the encoder
//! loopguard's own Bedrock events (and the mock's) are written with.
//!
//! One message on the wire (all integers big-endian):
//!
//! ```text
//! total length u32 | headers length u32 | prelude CRC32 (of the 8 bytes before)
//! headers … | payload … | message CRC32 (of everything before it)
//! ```
//!
//! A header is a name (u8 length + bytes), a value type (u8) and the value:
//! 0/1 bool true/false (no bytes), 2 byte, 3 short, 4 int, 5 long, 6 bytes
//! and 7 string (u16 length + bytes), 8 timestamp (8 bytes), 9 UUID (16).
//! Buffer, check, parse: a message is decoded only once all its bytes are
//! there; a length past [`MAX_MESSAGE`] (or the decoder's own cap) is an
//! error before anything of it is kept.

/// AWS's largest event-stream message: 16 MiB.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// Prelude (two lengths and the prelude CRC) plus the message CRC.
const OVERHEAD: usize = 16;

/// One decoded message: its string headers (`:event-type`, `:message-type`,
/// `:content-type`, `:exception-type`, …; other header types are checked and
/// skipped) and its payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// Stream offset just past the message's last byte.
    pub end: u64,
    /// The string-valued headers, in wire order.
    pub headers: Vec<(String, String)>,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

impl Message {
    /// The value of string header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a stream is not a valid event stream (the tap then gives up: the
/// bytes pass unjudged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A total length below the minimum, or headers longer than the message.
    #[error("event stream: bad lengths (total {total}, headers {headers})")]
    Length {
        /// The prelude's total length.
        total: u32,
        /// The prelude's headers length.
        headers: u32,
    },
    /// A total length past the decoder's cap (refused before buffering).
    #[error("event stream: message of {total} bytes over the cap of {max}")]
    TooLarge {
        /// The prelude's total length.
        total: u32,
        /// The decoder's cap.
        max: usize,
    },
    /// The prelude CRC does not match.
    #[error("event stream: prelude CRC mismatch")]
    PreludeCrc,
    /// The message CRC does not match.
    #[error("event stream: message CRC mismatch")]
    MessageCrc,
    /// A header runs past its block, or has an unknown type.
    #[error("event stream: malformed header")]
    Header,
    /// The stream ended inside a message.
    #[error("event stream: ended inside a message ({0} bytes left over)")]
    Truncated(usize),
}

/// An incremental event-stream decoder: feed it the body as it arrives.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
    offset: u64,
    max: usize,
    failed: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new(MAX_MESSAGE)
    }
}

impl Decoder {
    /// A decoder refusing messages longer than `max` bytes (at most
    /// [`MAX_MESSAGE`]).
    pub fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            offset: 0,
            max: max.min(MAX_MESSAGE),
            failed: false,
        }
    }

    /// Bytes of an unfinished message kept.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Feeds the next chunk, appending every message it completes to `out`.
    ///
    /// # Errors
    /// [`DecodeError`] on the first invalid message; the decoder then
    /// frees its buffer and yields nothing more.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<Message>) -> Result<(), DecodeError> {
        if self.failed {
            return Ok(());
        }
        self.buf.extend_from_slice(chunk);
        let mut at = 0;
        let result = loop {
            match decode_one(&self.buf[at..], self.max) {
                Ok(Some((len, mut message))) => {
                    at += len;
                    message.end = self.offset + at as u64;
                    out.push(message);
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        if result.is_err() {
            self.failed = true;
            self.buf = Vec::new();
            return result;
        }
        self.buf.drain(..at);
        self.offset += at as u64;
        Ok(())
    }

    /// The body ended: an error when it ended inside a message.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] with the bytes left over.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() || self.failed {
            Ok(())
        } else {
            Err(DecodeError::Truncated(self.buf.len()))
        }
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    let mut n = [0u8; 4];
    n.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(n)
}

/// One message from the front of `b`: `None` while incomplete.
fn decode_one(b: &[u8], max: usize) -> Result<Option<(usize, Message)>, DecodeError> {
    if b.len() < 12 {
        return Ok(None);
    }
    let total = be32(b, 0);
    let headers_len = be32(b, 4);
    if crc32fast::hash(&b[..8]) != be32(b, 8) {
        return Err(DecodeError::PreludeCrc);
    }
    let (t, h) = (total as usize, headers_len as usize);
    if t > max {
        return Err(DecodeError::TooLarge { total, max });
    }
    if t < OVERHEAD || h > t - OVERHEAD {
        return Err(DecodeError::Length {
            total,
            headers: headers_len,
        });
    }
    if b.len() < t {
        return Ok(None);
    }
    if crc32fast::hash(&b[..t - 4]) != be32(b, t - 4) {
        return Err(DecodeError::MessageCrc);
    }
    let headers = parse_headers(&b[12..12 + h])?;
    let payload = b[12 + h..t - 4].to_vec();
    Ok(Some((
        t,
        Message {
            end: 0,
            headers,
            payload,
        },
    )))
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if b.len() < n {
        return Err(DecodeError::Header);
    }
    let (head, rest) = b.split_at(n);
    *b = rest;
    Ok(head)
}

fn parse_headers(mut b: &[u8]) -> Result<Vec<(String, String)>, DecodeError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let name_len = take(&mut b, 1)?[0] as usize;
        let name = String::from_utf8_lossy(take(&mut b, name_len)?).into_owned();
        let kind = take(&mut b, 1)?[0];
        let fixed = match kind {
            0 | 1 => 0,
            2 => 1,
            3 => 2,
            4 => 4,
            5 | 8 => 8,
            9 => 16,
            6 | 7 => {
                let len = take(&mut b, 2)?;
                let len = u16::from_be_bytes([len[0], len[1]]) as usize;
                let value = take(&mut b, len)?;
                if kind == 7 {
                    out.push((name, String::from_utf8_lossy(value).into_owned()));
                }
                continue;
            }
            _ => return Err(DecodeError::Header),
        };
        take(&mut b, fixed)?;
    }
    Ok(out)
}

/// Encodes one message with string `headers` and `payload`.
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        let name = &name.as_bytes()[..name.len().min(255)];
        let value = &value.as_bytes()[..value.len().min(u16::MAX as usize)];
        block.push(name.len() as u8);
        block.extend_from_slice(name);
        block.push(7);
        block.extend_from_slice(&(value.len() as u16).to_be_bytes());
        block.extend_from_slice(value);
    }
    let total = (OVERHEAD + block.len() + payload.len()) as u32;
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&(block.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&block);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// Every message of `body`, decoded at once: a helper of the Bedrock
/// dialects' tests (panics on a malformed message).
#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test helper")]
pub(crate) fn decode(body: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    Decoder::default().push(body, &mut out).unwrap();
    out
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut body = encode(
            &[(":event-type", "chunk"), (":message-type", "event")],
            br#"{"bytes":"e30="}"#,
        );
        body.extend(encode(&[(":message-type", "exception")], b"{}"));
        body
    }

    /// Every split of a two-message stream decodes to the same messages,
    /// with stream offsets at each message's end.
    #[test]
    fn decodes_across_any_split() {
        let body = sample();
        let first_len = be32(&body, 0) as usize;
        for cut in 0..body.len() {
            let mut d = Decoder::default();
            let mut out = Vec::new();
            d.push(&body[..cut], &mut out).unwrap();
            d.push(&body[cut..], &mut out).unwrap();
            d.finish().unwrap();
            assert_eq!(out.len(), 2);
            assert_eq!(out[0].header(":event-type"), Some("chunk"));
            assert_eq!(out[0].payload, br#"{"bytes":"e30="}"#);
            assert_eq!(out[0].end, first_len as u64);
            assert_eq!(out[1].end, body.len() as u64);
            assert_eq!(out[1].header(":message-type"), Some("exception"));
        }
    }

    /// A flipped bit anywhere is caught by one of the two CRCs.
    #[test]
    fn a_flipped_bit_fails_a_crc() {
        let body = sample();
        for i in 0..body.len() {
            let mut bad = body.clone();
            bad[i] ^= 0x10;
            let mut out = Vec::new();
            assert!(Decoder::default().push(&bad, &mut out).is_err(), "byte {i}");
        }
    }

    /// A hostile length is refused from the prelude alone, before its
    /// bytes are buffered; a stream cut inside a message says so.
    #[test]
    fn hostile_lengths_and_truncation() {
        let mut prelude = Vec::new();
        prelude.extend_from_slice(&u32::MAX.to_be_bytes());
        prelude.extend_from_slice(&0u32.to_be_bytes());
        let crc = crc32fast::hash(&prelude);
        prelude.extend_from_slice(&crc.to_be_bytes());
        let mut d = Decoder::new(1024);
        assert!(matches!(
            d.push(&prelude, &mut Vec::new()),
            Err(DecodeError::TooLarge { .. })
        ));
        assert_eq!(d.buffered(), 0);
        let body = sample();
        let mut d = Decoder::default();
        d.push(&body[..20], &mut Vec::new()).unwrap();
        assert_eq!(d.finish(), Err(DecodeError::Truncated(20)));
    }

    /// Other header types are skipped, string headers kept.
    #[test]
    fn non_string_headers_are_skipped() {
        let mut block = vec![2, b'a', b'b', 4, 0, 0, 0, 7];
        block.extend([1, b'x', 7, 0, 1, b'y']);
        let total = (OVERHEAD + block.len()) as u32;
        let mut m = Vec::new();
        m.extend_from_slice(&total.to_be_bytes());
        m.extend_from_slice(&(block.len() as u32).to_be_bytes());
        let crc = crc32fast::hash(&m);
        m.extend_from_slice(&crc.to_be_bytes());
        m.extend_from_slice(&block);
        let crc = crc32fast::hash(&m);
        m.extend_from_slice(&crc.to_be_bytes());
        let mut out = Vec::new();
        Decoder::default().push(&m, &mut out).unwrap();
        assert_eq!(out[0].headers, vec![("x".to_owned(), "y".to_owned())]);
    }
}
