//! Tools around the product, not on its request path: the `loopguard demo`
//! run, the scripted mock upstream (tests, benchmarks, the demo) and the
//! `loopguard replay` (with its `--summary`) and `loopguard tune` commands.

pub mod demo;
pub mod mock;
pub mod recorded;
pub mod replay;
pub mod replay_summary;
pub mod tune;
