//! Every error of the driver as a gRPC status: the one place codes are chosen.

use std::sync::Arc;

use tonic::Status;

use crate::volume::VolumeError;

/// The CSI code for a failed volume call.
pub fn from_volume(e: VolumeError) -> Status {
    match e {
        VolumeError::Invalid(m) => Status::invalid_argument(m),
        VolumeError::Exists(m) => Status::already_exists(m),
        VolumeError::NotFound(v) => Status::not_found(format!("volume {v} not found")),
        VolumeError::SourceNotFound(m) => Status::not_found(m),
        VolumeError::OutOfRange(m) => Status::out_of_range(m),
        VolumeError::NoSpace(m) => Status::resource_exhausted(m),
        VolumeError::Refused(m) => Status::failed_precondition(m),
        VolumeError::Pending(m) => Status::unavailable(m),
        VolumeError::Lvmeta(e) => from_lvmeta(e),
    }
}

impl From<VolumeError> for Status {
    fn from(e: VolumeError) -> Self {
        from_volume(e)
    }
}

/// The CSI code for a failed activation on this node: a lease held elsewhere (the volume is
/// in use on another node) or a layout this node cannot build is FAILED_PRECONDITION.
pub fn from_activation(e: lvmeta::Error) -> Status {
    use lvmeta::activate::ActivateError;
    use lvmeta::lease::LeaseError;
    match e {
        lvmeta::Error::Lease(LeaseError::Busy { name }) => Status::failed_precondition(format!(
            "the volume's lease {name} is held by another node (it is in use there): it is \
             free once that node unstages it, or once sanlock counts that node dead (8 x \
             io_timeout + the watchdog fire timeout after its last renewal)"
        )),
        lvmeta::Error::Activate(e @ ActivateError::Unsupported { .. }) => {
            Status::failed_precondition(e.to_string())
        }
        lvmeta::Error::Activate(e) => Status::internal(e.to_string()),
        e => from_lvmeta(e),
    }
}

/// The CSI code for a failed lvmeta call.
pub fn from_lvmeta(e: lvmeta::Error) -> Status {
    Status::new(code_of(&e), e.to_string())
}

fn code_of(e: &lvmeta::Error) -> tonic::Code {
    use lvmeta::lease::LeaseError;
    use lvmeta::Error as E;
    use tonic::Code;
    match e {
        E::VgNotFound(_) | E::LvNotFound { .. } => Code::NotFound,
        // In use on a node: waiting does not help until it is unstaged there. A host that
        // cannot be fenced: not until the operator sets up its watchdog.
        E::Lease(
            LeaseError::InUse { .. } | LeaseError::Orphan { .. } | LeaseError::Unfenced { .. },
        )
        | E::Activate(lvmeta::activate::ActivateError::InUse { .. }) => Code::FailedPrecondition,
        // Leases and lock files are contended or the lockspace is not started yet: retry.
        E::Lease(_) | E::Lock { .. } | E::SharedWithoutLeases(_) | E::MissingPvs { .. } => {
            Code::Unavailable
        }
        // No room for the text: not until volumes are deleted or the areas are larger.
        E::MetadataFull { .. } => Code::ResourceExhausted,
        // Every board slot is taken: not until other nodes unstage the pool's volumes.
        E::Board(lvmeta::lease::board_io::BoardIoError::Board {
            source: lvmeta::lease::board::BoardError::Full,
            ..
        }) => Code::ResourceExhausted,
        // A lease geometry without spare sectors: never.
        E::Board(lvmeta::lease::board_io::BoardIoError::Board { .. }) => Code::FailedPrecondition,
        E::Board(lvmeta::lease::board_io::BoardIoError::Io { .. }) => Code::Unavailable,
        // The group commit this change joined failed: as its cause.
        E::Group(cause) => code_of(cause),
        _ => Code::Internal,
    }
}

/// A blocking task that did not finish (panicked or was cancelled).
pub fn from_join(e: tokio::task::JoinError) -> Status {
    Status::internal(format!("volume task failed: {e}"))
}

/// Runs `f` on `shared` on a blocking thread: lvmeta does synchronous disk I/O, waits on
/// leases and runs mkfs, none of which may hold up the async runtime.
pub async fn blocking<S: Send + Sync + 'static, T: Send + 'static>(
    shared: &Arc<S>,
    f: impl FnOnce(&S) -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    let s = shared.clone();
    tokio::task::spawn_blocking(move || f(&s))
        .await
        .map_err(from_join)?
}
