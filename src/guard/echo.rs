//! What a request-time run tells the world once its decision goes out:
//! each verdict's log line and counter, the request's recording, the
//! escalation's log line and counter, the outcome counters. A run's state
//! changes and its telling are kept apart so that a run whose decision may
//! not go out (a write tried before the verdict, see
//! [`super::shared`]) tells nothing until its state is the one written.

/// Which request-time run this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Echo {
    /// Its decision goes out: it tells at once.
    Told,
    /// A re-run after a shared-state conflict, for the state changes only:
    /// the decision already went out, so it tells nothing.
    Quiet,
    /// A speculative run over the shared state: it collects what it would
    /// tell in [`Echoes`], told only if its decision goes out.
    Deferred,
}

impl Echo {
    /// The run's decision may go out: its effects are collected.
    pub(super) fn tells(self) -> bool {
        self != Self::Quiet
    }
}

/// A run's collected telling (see the module), in the order it happened,
/// and the semantic checks it scheduled. Told ([`Echoes::tell`]) when the
/// run's decision goes out; discarded ([`Echoes::discard`]) when the run's
/// state was replaced; dropped otherwise (a cancelled request), which
/// tells nothing and frees the lanes of the checks it held.
#[derive(Default)]
#[must_use = "a run's telling is lost unless told"]
pub struct Echoes {
    effects: Vec<Box<dyn FnOnce() + Send>>,
    checks: Vec<crate::semantic::Prepared>,
}

impl std::fmt::Debug for Echoes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Echoes")
            .field("effects", &self.effects.len())
            .field("checks", &self.checks.len())
            .finish()
    }
}

impl Echoes {
    /// Adds one effect.
    pub(super) fn push(&mut self, effect: impl FnOnce() + Send + 'static) {
        self.effects.push(Box::new(effect));
    }

    /// Adds a semantic check to start when told.
    pub(super) fn push_check(&mut self, check: crate::semantic::Prepared) {
        self.checks.push(check);
    }

    /// Tells everything collected, in order, then starts the checks.
    pub fn tell(self) {
        for effect in self.effects {
            effect();
        }
        for check in self.checks {
            check.start();
        }
    }

    /// Tells nothing, and leaves the checks' lanes alone: the run's state
    /// (their in-flight marks included) was replaced.
    pub fn discard(self) {
        for check in self.checks {
            check.discard();
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn effects_run_in_order_only_when_told() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut echoes = Echoes::default();
        for i in 0..3 {
            let seen = Arc::clone(&seen);
            echoes.push(move || seen.lock().unwrap().push(i));
        }
        assert!(seen.lock().unwrap().is_empty(), "nothing runs before `tell`");
        echoes.tell();
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2]);

        let mut dropped = Echoes::default();
        let untold = Arc::clone(&seen);
        dropped.push(move || untold.lock().unwrap().push(9));
        drop(dropped);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![0, 1, 2],
            "a dropped run tells nothing"
        );
    }

    #[test]
    fn only_a_re_run_collects_nothing() {
        assert!(Echo::Told.tells());
        assert!(Echo::Deferred.tells());
        assert!(!Echo::Quiet.tells());
    }
}
