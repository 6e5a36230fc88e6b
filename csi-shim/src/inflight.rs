//! One call at a time per volume: a second call for a volume that is being worked on gets
//! ABORTED, as the CSI spec asks, instead of racing the first.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tonic::Status;

/// The volumes (or snapshot names) with a call in progress.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    busy: Arc<Mutex<HashSet<String>>>,
}

/// Held while a call works on one volume; dropping it frees the volume.
#[derive(Debug)]
pub struct Guard {
    busy: Arc<Mutex<HashSet<String>>>,
    key: String,
}

impl InFlight {
    /// Marks `key` busy, or ABORTED when another call holds it.
    pub fn enter(&self, key: &str) -> Result<Guard, Status> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        if !busy.insert(key.to_owned()) {
            return Err(Status::aborted(format!(
                "an operation on {key} is already in progress"
            )));
        }
        Ok(Guard {
            busy: self.busy.clone(),
            key: key.to_owned(),
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}
