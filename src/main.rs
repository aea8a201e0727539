//! The `loopguard` binary: wiring only (see the library's crate map).

fn main() {}
