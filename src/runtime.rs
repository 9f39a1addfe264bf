//! The tokio runtime a command's one lab call runs on; a leaf, so any command may use it.

use lab::{LabError, LabResult};

pub fn runtime() -> LabResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(LabError::failed)
}
