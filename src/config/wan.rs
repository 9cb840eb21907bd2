//! Timing over a WAN: the rules a role's timing must follow for a given round trip between
//! an instance and the bucket's servers (a site behind a leaf node, docs/operations.md).
//! Broken rules are warnings, not errors: the election stays safe (deadlines count from the
//! *send* of a write), but writes time out with unknown outcomes or one lost renewal demotes
//! the holder.

use std::time::Duration;

use crate::core::{Timing, fmt_duration};

/// The rules `timing` breaks for a round trip of `rtt`: (the field to change, why).
#[must_use]
pub(crate) fn round_trip_issues(timing: &Timing, rtt: Duration) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    if timing.operation_timeout < rtt * 2 {
        found.push((
            "operation_timeout",
            format!(
                "{} is shorter than twice the round trip {} to the bucket: writes would time \
                 out with unknown outcomes; use at least {}",
                fmt_duration(timing.operation_timeout),
                fmt_duration(rtt),
                fmt_duration(rtt * 2)
            ),
        ));
    }
    let valid = timing.ttl.mul_f64(1.0 - timing.deadline_margin);
    let one_retry = timing.heartbeat + timing.operation_timeout + rtt;
    if one_retry >= valid {
        found.push((
            "ttl",
            format!(
                "heartbeat {} + operation_timeout {} + round trip {} = {} does not fit in \
                 ttl × (1 − deadline_margin) = {}: one lost renewal would demote the holder; \
                 raise ttl or lower heartbeat / operation_timeout",
                fmt_duration(timing.heartbeat),
                fmt_duration(timing.operation_timeout),
                fmt_duration(rtt),
                fmt_duration(one_retry),
                fmt_duration(valid)
            ),
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_work_up_to_half_a_second_and_fail_beyond() {
        let t = Timing::default(); // ttl 3s, heartbeat 750ms, operation_timeout 1s, margin 0.1
        assert!(round_trip_issues(&t, Duration::from_millis(150)).is_empty());
        assert!(round_trip_issues(&t, Duration::from_millis(500)).is_empty());
        let slow = round_trip_issues(&t, Duration::from_millis(600));
        assert_eq!(
            slow.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
            ["operation_timeout"]
        );
        let far = round_trip_issues(&t, Duration::from_millis(1000));
        assert_eq!(
            far.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
            ["operation_timeout", "ttl"]
        );
        assert!(far[1].1.contains("one lost renewal"), "{}", far[1].1);
    }
}
