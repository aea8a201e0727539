//! The `openai-responses` dialect, whole: request parsing and splitting
//! ([`parse`]), stream parsing ([`stream`]), what loopguard writes in it ([`mod@write`]: warning
//! injection, block answers, abort bodies, in-stream errors) and how it ends
//! a response it withholds part of (`ending`); a sample
//! conversation for the demo ([`sample`]).

pub(crate) mod ending;
pub mod model;
pub mod parse;
pub mod sample;
pub mod stream;
pub mod write;

pub use parse::*;
pub use stream::*;
