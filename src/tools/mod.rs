//! Tools around the product, not on its request path: the `loopguard demo`
//! run, the scripted mock upstream (tests, benchmarks, the demo) and the
//! `loopguard replay` command.

pub mod demo;
pub mod mock;
pub mod replay;
