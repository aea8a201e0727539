//! Shared by the fuzz targets: the dialect a byte selects and a
//! deterministic chunking of the input (as a socket would deliver it).

#![allow(dead_code, reason = "each target uses part of it")]

use loopguard::dialect::Dialect;

/// The dialect byte `b` selects.
pub fn dialect(b: u8) -> Dialect {
    [
        Dialect::OpenaiChat,
        Dialect::OpenaiResponses,
        Dialect::Anthropic,
        Dialect::Gemini,
    ][usize::from(b % 4)]
}

/// `data` cut into chunks of 1..=64 bytes, their sizes drawn from `seed`.
pub fn chunks(data: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = 1 + (state >> 16) as usize % 64;
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        out.push(chunk);
        rest = tail;
    }
    out
}
