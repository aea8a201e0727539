//! Placeholder: the detectors (issue "Detection engine").
