//! Incremental splitter for a streamed JSON array (Gemini's
//! `:streamGenerateContent` without `alt=sse`): yields each top-level element
//! as soon as it is complete, respecting strings and escapes.
//!
//! Buffer, check, parse: only the bytes of the element being read are
//! buffered; brackets are counted outside strings, and a string ends at the
//! first `"` not escaped by a backslash. The splitter checks the array's
//! punctuation (`[`, `,`, `]`, whitespace between elements) but not the
//! inside of an element: a malformed element is yielded as is and the dialect
//! parser reports it.

/// One complete top-level element of the array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayElement {
    /// Offset of the element's first byte in the stream.
    pub start: u64,
    /// Offset just past its last byte. The bytes between two elements
    /// (whitespace and the comma) and the brackets belong to no element.
    pub end: u64,
    /// The element's JSON text (invalid UTF-8 replaced by U+FFFD).
    pub text: String,
}

/// The stream is not a JSON array, or ended inside it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A byte that cannot appear at that point of an array.
    #[error("unexpected byte {byte:?} at offset {offset}")]
    Unexpected {
        /// The byte.
        byte: u8,
        /// Its offset in the stream.
        offset: u64,
    },
    /// The stream ended before the closing `]`.
    #[error("stream ended inside the array")]
    Truncated,
}

/// Where the splitter is in the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// Before the opening `[`.
    #[default]
    Start,
    /// Just after `[`: an element or `]`.
    First,
    /// After a comma: an element.
    Next,
    /// Inside an element.
    Value(Scan),
    /// After an element: `,` or `]`.
    After,
    /// After the closing `]`: only whitespace.
    Done,
}

/// How the end of the current element is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// An object or array: `depth` open brackets, maybe inside a string.
    Container {
        depth: u32,
        in_string: bool,
        escape: bool,
    },
    /// A top-level string.
    Str { escape: bool },
    /// A number or literal: ends before whitespace, `,` or `]`.
    Scalar,
}

/// Incremental splitter.
#[derive(Debug, Default)]
pub struct ArraySplitter {
    state: State,
    /// Stream offset of the next byte pushed.
    offset: u64,
    /// Offset of the current element's first byte.
    element_start: u64,
    /// Bytes of the current element received in earlier chunks.
    buf: Vec<u8>,
    /// The first error, repeated by every later call.
    error: Option<SplitError>,
}

impl ArraySplitter {
    /// A splitter at stream offset 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk, appending every element it completes to `out`.
    ///
    /// # Errors
    /// [`SplitError::Unexpected`] when the bytes are not a JSON array; the
    /// splitter yields nothing after that and returns the same error again.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<ArrayElement>) -> Result<(), SplitError> {
        if let Some(error) = &self.error {
            return Err(error.clone());
        }
        let result = self.scan(chunk, out);
        self.offset += chunk.len() as u64;
        if let Err(error) = &result {
            self.error = Some(error.clone());
            self.buf = Vec::new();
        }
        result
    }

    /// Bytes of the current, unfinished element buffered so far.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The stream ended.
    ///
    /// # Errors
    /// [`SplitError::Truncated`] when it ended before the closing `]`, or the
    /// error an earlier [`ArraySplitter::push`] returned.
    pub fn finish(&mut self) -> Result<(), SplitError> {
        match (&self.error, self.state) {
            (Some(error), _) => Err(error.clone()),
            (None, State::Done) => Ok(()),
            (None, _) => Err(SplitError::Truncated),
        }
    }

    fn scan(&mut self, chunk: &[u8], out: &mut Vec<ArrayElement>) -> Result<(), SplitError> {
        let unexpected = |i: usize| SplitError::Unexpected {
            byte: chunk[i],
            offset: self.offset + i as u64,
        };
        // Start of the current element's bytes within this chunk.
        let mut from = 0;
        let mut i = 0;
        while i < chunk.len() {
            let b = chunk[i];
            match self.state {
                State::Value(scan) => match find_end(scan, &chunk[i..]) {
                    (Some(rel), _) => {
                        let end = i + rel;
                        self.buf.extend_from_slice(&chunk[from..end]);
                        let text = match String::from_utf8(std::mem::take(&mut self.buf)) {
                            Ok(text) => text,
                            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                        };
                        out.push(ArrayElement {
                            start: self.element_start,
                            end: self.offset + end as u64,
                            text,
                        });
                        self.state = State::After;
                        i = end;
                        continue;
                    }
                    (None, scan) => {
                        self.state = State::Value(scan);
                        i = chunk.len();
                        continue;
                    }
                },
                _ if is_space(b) => {}
                State::Start if b == b'[' => self.state = State::First,
                State::First if b == b']' => self.state = State::Done,
                State::First | State::Next => {
                    let scan = match b {
                        b'{' | b'[' => Scan::Container {
                            depth: 1,
                            in_string: false,
                            escape: false,
                        },
                        b'"' => Scan::Str { escape: false },
                        b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => Scan::Scalar,
                        _ => return Err(unexpected(i)),
                    };
                    self.state = State::Value(scan);
                    self.element_start = self.offset + i as u64;
                    from = i;
                }
                State::After if b == b',' => self.state = State::Next,
                State::After if b == b']' => self.state = State::Done,
                State::Start | State::After | State::Done => return Err(unexpected(i)),
            }
            i += 1;
        }
        if matches!(self.state, State::Value(_)) {
            self.buf.extend_from_slice(&chunk[from..]);
        }
        Ok(())
    }
}

/// JSON insignificant whitespace.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Scans `bytes`, which continue an element in state `scan`; returns the
/// length up to and including the element's last byte when it ends here, and
/// the state to resume from otherwise.
fn find_end(mut scan: Scan, bytes: &[u8]) -> (Option<usize>, Scan) {
    let mut i = 0;
    // The element's first byte was already consumed when the state was entered.
    while i < bytes.len() {
        let b = bytes[i];
        match &mut scan {
            Scan::Container {
                depth,
                in_string,
                escape,
            } => {
                if *in_string {
                    if *escape {
                        *escape = false;
                    } else if let Some(rel) = bytes[i..].iter().position(|&c| c == b'"' || c == b'\\') {
                        i += rel;
                        if bytes[i] == b'\\' {
                            *escape = true;
                        } else {
                            *in_string = false;
                        }
                    } else {
                        return (None, scan);
                    }
                } else {
                    match b {
                        b'"' => *in_string = true,
                        b'{' | b'[' => *depth += 1,
                        b'}' | b']' => {
                            *depth -= 1;
                            if *depth == 0 {
                                return (Some(i + 1), scan);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Scan::Str { escape } => {
                if *escape {
                    *escape = false;
                } else if b == b'\\' {
                    *escape = true;
                } else if b == b'"' {
                    return (Some(i + 1), scan);
                }
            }
            Scan::Scalar => {
                if is_space(b) || b == b',' || b == b']' {
                    return (Some(i), scan);
                }
            }
        }
        i += 1;
    }
    (None, scan)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    /// Splits `input` pushed in the given chunk sizes (cycled); returns the elements and the final result.
    fn split_chunked(input: &[u8], sizes: &[usize]) -> (Vec<ArrayElement>, Result<(), SplitError>) {
        let mut splitter = ArraySplitter::new();
        let mut out = Vec::new();
        let mut rest = input;
        let mut k = 0;
        while !rest.is_empty() {
            let n = sizes
                .get(k % sizes.len().max(1))
                .copied()
                .unwrap_or(rest.len())
                .clamp(1, rest.len());
            if let Err(e) = splitter.push(&rest[..n], &mut out) {
                return (out, Err(e));
            }
            rest = &rest[n..];
            k += 1;
        }
        (out, splitter.finish())
    }

    fn texts(elements: &[ArrayElement]) -> Vec<&str> {
        elements.iter().map(|e| e.text.as_str()).collect()
    }

    /// Gemini's framing: `[{…}` then `,\r\n{…}` chunks, then `]`.
    #[test]
    fn gemini_framing() {
        let input = "[{\"a\":1}\r\n,\r\n{\"b\":[2,{\"c\":3}]}\r\n]";
        let (elements, result) = split_chunked(input.as_bytes(), &[]);
        assert_eq!(result, Ok(()));
        assert_eq!(texts(&elements), ["{\"a\":1}", "{\"b\":[2,{\"c\":3}]}"]);
        for e in &elements {
            assert_eq!(&input[e.start as usize..e.end as usize], e.text);
        }
    }

    /// Brackets, braces and quotes inside strings do not end an element; escapes are honoured.
    #[test]
    fn strings_hide_brackets_and_escapes() {
        let tricky = r#"{"t":"] } { [ \" \\","u":"\\"}"#;
        let input = format!("[{tricky}, \"]\\\"\" ]");
        for sizes in [vec![], vec![1], vec![2, 3]] {
            let (elements, result) = split_chunked(input.as_bytes(), &sizes);
            assert_eq!(result, Ok(()));
            assert_eq!(texts(&elements), [tricky, "\"]\\\"\""], "chunks {sizes:?}");
        }
    }

    /// Scalars, nested arrays and the empty array.
    #[test]
    fn scalars_and_empty_array() {
        let (elements, result) = split_chunked(b" [ 1 ,-2.5e3,true,null, [[]] ] \n", &[1]);
        assert_eq!(result, Ok(()));
        assert_eq!(texts(&elements), ["1", "-2.5e3", "true", "null", "[[]]"]);
        assert_eq!(split_chunked(b"[]", &[]), (vec![], Ok(())));
    }

    /// An element is yielded as soon as its last byte arrives, before the next comma.
    #[test]
    fn element_is_yielded_at_its_last_byte() {
        let mut splitter = ArraySplitter::new();
        let mut out = Vec::new();
        assert_eq!(splitter.push(b"[{\"a\":\"}", &mut out), Ok(()));
        assert!(out.is_empty());
        assert_eq!(splitter.push(b"\"}", &mut out), Ok(()));
        assert_eq!(texts(&out), ["{\"a\":\"}\"}"]);
        assert_eq!((out[0].start, out[0].end), (1, 10));
    }

    /// Input that is not an array is an error at the offending byte, and the splitter stays failed.
    #[test]
    fn non_array_input_is_an_error() {
        let cases: [(&[u8], u8, u64); 6] = [
            (b"{\"a\":1}", b'{', 0),
            (b"data: {}", b'd', 0),
            (b"[1 2]", b'2', 3),
            (b"[,1]", b',', 1),
            (b"[1,]", b']', 3),
            (b"[1] x", b'x', 4),
        ];
        for (input, byte, offset) in cases {
            let (_, result) = split_chunked(input, &[1]);
            assert_eq!(result, Err(SplitError::Unexpected { byte, offset }), "{input:?}");
        }
        let mut splitter = ArraySplitter::new();
        let mut out = Vec::new();
        assert!(splitter.push(b"x", &mut out).is_err());
        assert!(splitter.push(b"[1]", &mut out).is_err());
        assert!(out.is_empty());
        assert!(splitter.finish().is_err());
    }

    /// A stream that stops before `]` is truncated, even after whole elements.
    #[test]
    fn missing_closing_bracket_is_truncated() {
        for input in [&b""[..], b"[", b"[{\"a\":1},", b"[{\"a\":1}", b"[{\"a\":"] {
            assert_eq!(
                split_chunked(input, &[]).1,
                Err(SplitError::Truncated),
                "{input:?}"
            );
        }
        let (elements, _) = split_chunked(b"[{\"a\":1},{", &[]);
        assert_eq!(elements.len(), 1);
    }

    /// Multi-byte text split anywhere decodes whole.
    #[test]
    fn utf8_split_inside_a_character() {
        let input = "[\"h\u{e9}\u{1f600}\"]";
        let (elements, result) = split_chunked(input.as_bytes(), &[1]);
        assert_eq!(result, Ok(()));
        assert_eq!(texts(&elements), ["\"h\u{e9}\u{1f600}\""]);
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z\\[\\]{}\"\\\\,:é😀 ]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"\\]]{1,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any array, with any whitespace, split in any chunks: the same elements, each the exact
        /// bytes of its range, each parsing back to the value written.
        #[test]
        fn chunking_never_changes_elements(
            values in proptest::collection::vec(value(), 0..6),
            spaces in proptest::collection::vec(prop_oneof![Just(""), Just(" "), Just("\r\n"), Just("\t\n")], 8),
            sizes in proptest::collection::vec(1usize..16, 1..6),
        ) {
            let mut input = format!("{}[", spaces[0]);
            for (k, v) in values.iter().enumerate() {
                if k > 0 {
                    input.push_str(spaces[(k + 1) % 8]);
                    input.push(',');
                }
                input.push_str(spaces[(k + 2) % 8]);
                input.push_str(&v.to_string());
            }
            input.push_str(spaces[3]);
            input.push(']');
            input.push_str(spaces[4]);
            let bytes = input.as_bytes();
            let whole = split_chunked(bytes, &[]);
            prop_assert_eq!(&whole.1, &Ok(()));
            prop_assert_eq!(&split_chunked(bytes, &sizes), &whole);
            prop_assert_eq!(&split_chunked(bytes, &[1]), &whole);
            prop_assert_eq!(whole.0.len(), values.len());
            let mut previous_end = 0;
            for (element, v) in whole.0.iter().zip(&values) {
                prop_assert!(element.start >= previous_end);
                previous_end = element.end;
                let range = usize::try_from(element.start).unwrap_or(0)..usize::try_from(element.end).unwrap_or(0);
                prop_assert_eq!(&input[range], element.text.as_str());
                let parsed: Value = serde_json::from_str(&element.text).unwrap_or(Value::Null);
                prop_assert_eq!(&parsed, v);
            }
        }
    }
}
