//! Verdicts per detector per minute over the last hour, for the live page's
//! chart: one process-wide, bounded tally (at most 60 minutes × the detector
//! kinds), fed by every verdict loopguard logs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// Minutes kept.
pub const MINUTES: usize = 60;

/// Counts per minute, newest last.
#[derive(Debug, Default)]
pub struct Activity {
    minutes: VecDeque<(u64, BTreeMap<&'static str, u32>)>,
}

/// The chart's data: one value per minute per detector.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Series {
    /// The start of each of the last [`MINUTES`] minutes, Unix seconds, oldest first.
    pub minutes: Vec<u64>,
    /// Detector name → verdicts in each of those minutes (only detectors with
    /// at least one verdict in the hour).
    pub detectors: BTreeMap<&'static str, Vec<u32>>,
    /// All verdicts in the hour.
    pub total: u64,
}

impl Activity {
    /// Counts one verdict of `detector` in the minute `minute` (Unix minutes).
    pub fn note_at(&mut self, minute: u64, detector: &'static str) {
        match self.minutes.back_mut() {
            Some((m, counts)) if *m == minute => *counts.entry(detector).or_default() += 1,
            Some((m, _)) if *m > minute => {
                // The wall clock stepped back: count it in the newest minute.
                if let Some((_, counts)) = self.minutes.back_mut() {
                    *counts.entry(detector).or_default() += 1;
                }
            }
            _ => {
                self.minutes.push_back((minute, BTreeMap::from([(detector, 1)])));
            }
        }
        self.prune(minute);
    }

    /// The last hour as of minute `now` (Unix minutes).
    pub fn series_at(&mut self, now: u64) -> Series {
        self.prune(now);
        let first = now + 1 - MINUTES as u64;
        let mut detectors: BTreeMap<&'static str, Vec<u32>> = BTreeMap::new();
        let mut total = 0;
        for (minute, counts) in &self.minutes {
            let Some(slot) = minute.checked_sub(first).and_then(|i| usize::try_from(i).ok()) else {
                continue;
            };
            if slot >= MINUTES {
                continue;
            }
            for (name, n) in counts {
                detectors.entry(name).or_insert_with(|| vec![0; MINUTES])[slot] += n;
                total += u64::from(*n);
            }
        }
        Series {
            minutes: (first..=now).map(|m| m * 60).collect(),
            detectors,
            total,
        }
    }

    fn prune(&mut self, now: u64) {
        while self
            .minutes
            .front()
            .is_some_and(|(m, _)| *m + MINUTES as u64 <= now)
        {
            self.minutes.pop_front();
        }
    }
}

static ACTIVITY: LazyLock<Mutex<Activity>> = LazyLock::new(Mutex::default);

fn minute_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

/// Counts one verdict of `detector` now (called where every verdict is logged).
pub fn note(detector: &'static str) {
    ACTIVITY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .note_at(minute_now(), detector);
}

/// The last hour of verdicts, per detector per minute.
pub fn series() -> Series {
    ACTIVITY
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .series_at(minute_now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_their_minute_and_age_out_after_an_hour() {
        let mut a = Activity::default();
        a.note_at(1_000, "cycle");
        a.note_at(1_000, "cycle");
        a.note_at(1_030, "identical_call");
        let s = a.series_at(1_030);
        assert_eq!(s.minutes.len(), MINUTES);
        assert_eq!(s.minutes[MINUTES - 1], 1_030 * 60);
        assert_eq!(s.detectors["cycle"][MINUTES - 31], 2);
        assert_eq!(s.detectors["identical_call"][MINUTES - 1], 1);
        assert_eq!(s.total, 3);
        let later = a.series_at(1_060);
        assert!(!later.detectors.contains_key("cycle"), "{later:?}");
        assert_eq!(later.total, 1);
    }

    #[test]
    fn memory_stays_within_an_hour_of_minutes() {
        let mut a = Activity::default();
        for m in 0..10_000 {
            a.note_at(m, "cycle");
        }
        assert!(a.minutes.len() <= MINUTES);
    }
}
