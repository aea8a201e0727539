//! The escalation state over a lane's requests.

use super::*;
use crate::detect::settings::EscalateSettings;

fn req(model: &str, wants: bool, person_spoke: bool, signed: usize) -> Request<'_> {
    Request {
        lane: 7,
        model,
        wants,
        person_spoke,
        signed,
    }
}

const SETTINGS: EscalateSettings = EscalateSettings {
    requests: 2,
    max_per_session: 1,
};

#[test]
fn an_escalation_lasts_its_requests_then_goes_back() {
    let mut s = EscalationState::default();
    assert_eq!(
        s.step(&req("weak", false, false, 0), Some("strong"), &SETTINGS),
        Step::Stay
    );
    assert_eq!(
        s.step(&req("weak", true, false, 2), Some("strong"), &SETTINGS),
        Step::Began
    );
    assert_eq!(
        s.step(&req("weak", true, false, 3), Some("strong"), &SETTINGS),
        Step::Continued
    );
    assert_eq!(
        s.step(&req("weak", false, false, 4), Some("strong"), &SETTINGS),
        Step::Ended
    );
    // Parts 0–1 by weak, 2–3 by strong, 4 on by weak again.
    assert_eq!(s.producer(1), Some("weak"));
    assert_eq!(s.producer(2), Some("strong"));
    assert_eq!(s.producer(3), Some("strong"));
    assert_eq!(s.producer(4), Some("weak"));
    assert!(s.foreign(2, "weak") && !s.foreign(2, "strong") && s.foreign(0, "strong"));
    // max_escalations_per_session = 1: a later warning does not escalate.
    assert_eq!(
        s.step(&req("weak", true, false, 5), Some("strong"), &SETTINGS),
        Step::Stay
    );
}

#[test]
fn the_person_speaking_ends_an_escalation() {
    let mut s = EscalationState::default();
    assert_eq!(
        s.step(&req("weak", true, false, 0), Some("strong"), &SETTINGS),
        Step::Began
    );
    assert_eq!(
        s.step(&req("weak", false, true, 1), Some("strong"), &SETTINGS),
        Step::Ended
    );
    assert_eq!(s.spans[0].to, Some(1));
}

#[test]
fn no_target_or_the_same_model_never_escalates() {
    let mut s = EscalationState::default();
    assert_eq!(s.step(&req("weak", true, false, 0), None, &SETTINGS), Step::Stay);
    assert_eq!(
        s.step(&req("strong", true, false, 0), Some("strong"), &SETTINGS),
        Step::Stay
    );
    assert_eq!(s.started, 0);
    assert_eq!(s.producer(0), None, "a lane that never escalated strips nothing");
}

#[test]
fn another_lane_is_not_escalated() {
    let mut s = EscalationState::default();
    assert_eq!(
        s.step(&req("weak", true, false, 0), Some("strong"), &SETTINGS),
        Step::Began
    );
    let other = Request {
        lane: 8,
        ..req("weak", false, false, 0)
    };
    assert_eq!(s.step(&other, Some("strong"), &SETTINGS), Step::Stay);
}

#[test]
fn the_state_round_trips_through_serde() {
    let mut s = EscalationState::default();
    let _ = s.step(&req("weak", true, false, 3), Some("strong"), &SETTINGS);
    let text = serde_json::to_string(&s).unwrap_or_default();
    let back: EscalationState = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(back, s);
}
