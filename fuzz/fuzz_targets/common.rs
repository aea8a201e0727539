//! Shared by the fuzz targets: the dialect a byte selects and a
//! deterministic chunking of the input (as a socket would deliver it).

#![allow(dead_code, reason = "each target uses part of it")]

use loopguard::dialect::Dialect;

/// The dialect byte `b` selects: `b % 4` of the first four dialects, and
/// from `0xF8` the later ones (`0xF8` Ollama chat, `0xF9` Ollama generate,
/// `0xFA` Bedrock, `0xFB` Bedrock Converse), so that the corpora written
/// before them keep their meaning below `0xF8`.
pub fn dialect(b: u8) -> Dialect {
    let list = if b >= 0xF8 {
        [
            Dialect::OllamaChat,
            Dialect::OllamaGenerate,
            Dialect::Bedrock,
            Dialect::BedrockConverse,
        ]
    } else {
        [
            Dialect::OpenaiChat,
            Dialect::OpenaiResponses,
            Dialect::Anthropic,
            Dialect::Gemini,
        ]
    };
    list[usize::from(b % 4)]
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
