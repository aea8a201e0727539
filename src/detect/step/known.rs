//! The items a lane's previous request read from its stable messages, kept
//! so that the next request with the same turns does not read them again
//! (issue #37: a turn of a long conversation cost a pass over every item,
//! about 560 instructions each).
//!
//! Which messages are stable: those before the last assistant turn (a turn
//! after it may still bring results for its calls) and before the last
//! message (a part may still join it). Their items depend on nothing else
//! but the user-text patterns they were read under, so a request whose
//! turns carry the same [`Lineage`] (a kept hash chain's, which only grow)
//! and whose patterns are the same takes them as they were. Other settings
//! (exempt tools, outcome rules) changed by a reload apply to what is new:
//! the kept items were read under the ones of their request, as the
//! session's steps were.

use crate::transcript::{Lineage, Transcript, UserText};

/// What an item is, as merging reads the items before the alignment point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A user text, read as this.
    User(UserText),
    /// An assistant text turn without calls.
    Said,
    /// A tool cycle.
    Cycle,
}

/// The items of a lane's previous request's stable messages (see the
/// module doc): their merge keys, call-id hashes, shapes and kinds, in
/// order. Not part of the session's stored form (a replica that loads the
/// session reads every item once). About 33 bytes an item.
#[derive(Debug, Clone, Default)]
pub(crate) struct Known {
    pub(super) lineage: Lineage,
    /// The user-text patterns' fingerprint they were read under.
    pub(super) patterns: u64,
    /// They are the items of the messages before this index.
    pub(super) messages: usize,
    pub(super) keys: Vec<u64>,
    pub(super) idents: Vec<Option<u64>>,
    pub(super) shapes: Vec<u64>,
    pub(super) kinds: Vec<Kind>,
}

impl Known {
    /// Most items kept (2 MiB a lane at most).
    pub(super) const MAX_ITEMS: usize = 1 << 16;

    /// Nothing known, the room of the vectors kept.
    pub(super) fn clear(&mut self) {
        self.lineage = Lineage::NONE;
        self.messages = 0;
        self.keys.clear();
        self.idents.clear();
        self.shapes.clear();
        self.kinds.clear();
    }

    /// Whether `transcript`, read under `patterns`, begins with the
    /// messages these items were read from.
    pub(super) fn reusable(&self, transcript: &Transcript, patterns: u64) -> bool {
        self.lineage.same(transcript.lineage)
            && self.patterns == patterns
            && transcript.messages.len() >= self.messages
    }
}
