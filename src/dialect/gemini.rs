//! Placeholder: the `gemini` dialect (request → transcript, response → events).

use super::{DialectError, ParsedRequest, StreamEvent};

/// Parses a request body.
///
/// # Errors
/// Always, until implemented.
pub fn parse_request(_body: &[u8]) -> Result<ParsedRequest, DialectError> {
    Err(DialectError::Shape("not implemented yet".to_owned()))
}

/// Incremental response parser.
#[derive(Debug, Default)]
pub struct ResponseParser {}

impl ResponseParser {
    /// Parses one payload.
    ///
    /// # Errors
    /// Never yet.
    pub fn payload(&mut self, _payload: &str, _out: &mut Vec<StreamEvent>) -> Result<(), DialectError> {
        Ok(())
    }

    /// Ends the response.
    pub fn end(&mut self, _out: &mut Vec<StreamEvent>) {}
}
