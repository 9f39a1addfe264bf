//! The baseline: plain TCP between the outer addresses, no encryption.

use futures::future::BoxFuture;
use model::RunPlan;
use netns::Topology;

use super::{ActiveBackend, DataPath};
use crate::error::LabResult;

pub struct Plain {
    path: DataPath,
}

impl Plain {
    pub fn new(plan: &RunPlan, topology: &Topology) -> Plain {
        Plain {
            path: DataPath {
                target: (topology.addressing.outer_b, plan.port).into(),
            },
        }
    }
}

impl ActiveBackend for Plain {
    fn data_path(&self) -> DataPath {
        self.path
    }

    fn details(&mut self) -> BoxFuture<'_, LabResult<serde_json::Value>> {
        Box::pin(async { Ok(serde_json::Value::Null) })
    }
}
