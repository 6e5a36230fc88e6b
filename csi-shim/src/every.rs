//! A rate limit for log lines and periodic checks, shared by threads.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When something was last done; [`Every::due`] says whether it is due again.
#[derive(Debug, Default)]
pub struct Every(Mutex<Option<Instant>>);

impl Every {
    /// Due at the first call, then once `period` has passed since the last time it was:
    /// a `true` marks it done now.
    pub fn due(&self, period: Duration) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.is_none_or(|t| t.elapsed() >= period);
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_first_then_once_per_period() {
        let e = Every::default();
        assert!(e.due(Duration::from_secs(60)));
        assert!(!e.due(Duration::from_secs(60)));
        assert!(e.due(Duration::ZERO));
    }
}
