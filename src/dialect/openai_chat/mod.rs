//! The `openai-chat` dialect, whole: request parsing and splitting and stream
//! parsing ([`parse`]), what loopguard writes in it ([`mod@write`]: warning
//! injection, block answers, abort bodies, in-stream errors) and how it ends
//! a response it withholds part of (`ending`); a sample
//! conversation for the demo ([`sample`]).

mod chunk;
pub(crate) mod ending;
mod item;
pub mod model;
pub mod parse;
pub mod sample;
mod stream;
pub mod write;

pub use parse::*;
pub use stream::ResponseParser;
