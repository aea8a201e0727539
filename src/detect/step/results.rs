//! Pairing an assistant turn's calls with their results: by call id, else
//! by tool name, else by position, in time linear in calls + results.

use std::collections::{HashMap, VecDeque};

use crate::transcript::{ToolCall, ToolResult};

/// Up to this many results a turn's results are scanned rather than indexed:
/// building the maps costs more than a short scan, and almost every turn
/// has a few calls.
const SCAN_RESULTS: usize = 16;

/// The results after an assistant turn, indexed for pairing with its calls
/// in time linear in calls + results (a turn may carry 100k parallel calls);
/// a short list is scanned instead (the same pairing, in order).
pub(super) struct Results<'a> {
    results: Vec<&'a ToolResult>,
    used: Vec<bool>,
    /// Indices of the results naming each call id, in order (when indexed).
    by_id: HashMap<&'a str, VecDeque<usize>>,
    /// Indices of the results without a call id, per tool name, in order
    /// (when indexed).
    by_name: HashMap<&'a str, VecDeque<usize>>,
    indexed: bool,
}

impl<'a> Results<'a> {
    pub(super) fn new() -> Self {
        Self {
            results: Vec::new(),
            used: Vec::new(),
            by_id: HashMap::new(),
            by_name: HashMap::new(),
            indexed: false,
        }
    }

    /// Starts over with `results` (one turn's), keeping the room of the
    /// previous turn's: a request's turns are paired one after the other
    /// with the same buffers, not two new ones each.
    pub(super) fn refill(&mut self, results: impl IntoIterator<Item = &'a ToolResult>) {
        self.results.clear();
        self.results.extend(results);
        self.used.clear();
        self.used.resize(self.results.len(), false);
        self.by_id.clear();
        self.by_name.clear();
        self.indexed = self.results.len() > SCAN_RESULTS;
        if !self.indexed {
            return;
        }
        for (i, r) in self.results.iter().enumerate() {
            match (r.call_id.as_deref(), r.name.as_deref()) {
                (Some(id), _) => self.by_id.entry(id).or_default().push_back(i),
                (None, Some(name)) => self.by_name.entry(name).or_default().push_back(i),
                (None, None) => {}
            }
        }
    }

    /// The first unused result matching `pick`, by a scan.
    fn scan(&self, pick: impl Fn(&ToolResult) -> bool) -> Option<usize> {
        self.results
            .iter()
            .enumerate()
            .find(|(i, r)| !self.used[*i] && pick(r))
            .map(|(i, _)| i)
    }

    /// The first unused result in `queue` (used ones are dropped on the way).
    fn first_unused(queue: Option<&mut VecDeque<usize>>, used: &[bool]) -> Option<usize> {
        let queue = queue?;
        while let Some(&i) = queue.front() {
            if !used[i] {
                return Some(i);
            }
            queue.pop_front();
        }
        None
    }

    /// Finds the result answering `call` (the `position`-th call of the
    /// turn) and marks it used: the first unused result with the call's id;
    /// else the first unused one without an id naming the call's tool; else
    /// the one at the call's position, when it has no id.
    pub(super) fn take(&mut self, call: &ToolCall, position: usize) -> Option<&'a ToolResult> {
        let id = call.id.as_deref();
        let name = call.name.as_str();
        let by_id = if self.indexed {
            id.and_then(|id| Self::first_unused(self.by_id.get_mut(id), &self.used))
        } else {
            id.and_then(|id| self.scan(|r| r.call_id.as_deref() == Some(id)))
        };
        let by_name = |this: &mut Self| {
            if this.indexed {
                Self::first_unused(this.by_name.get_mut(name), &this.used)
            } else {
                this.scan(|r| r.call_id.is_none() && r.name.as_deref() == Some(name))
            }
        };
        let pick = by_id.or_else(|| by_name(self)).or_else(|| {
            self.results
                .get(position)
                .filter(|r| !self.used[position] && r.call_id.is_none())
                .map(|_| position)
        })?;
        self.used[pick] = true;
        Some(self.results[pick])
    }
}
