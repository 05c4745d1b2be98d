//! Harness runs through the optional entry points: one execute of a context compiled for another
//! graph, with the shape overrides that turn its shapes into this harness's graph (the backend's
//! rule in [`crate::execute`]), and the engine bundle's output bytes, for runs that must agree bit
//! for bit (a context and its serialized copy).

use ragged_schema::model::Graph;

use super::{Harness, HostWorkspace, check_alignment, host_bytes};
use crate::execute::{self, ShapeOverride};
use crate::host_error::HostError;
use crate::manager::LoadedPlugin;
use crate::plugin::ExecutionContext;

/// The overrides that give `compiled`'s tensors the dims and strides they have in `target`:
/// every tensor of `target` whose shape differs from the same uid in `compiled`.
pub fn overrides_between(
    compiled: &Graph,
    target: &Graph,
) -> Result<Vec<ShapeOverride>, HostError> {
    let mut out = Vec::new();
    for t in &target.tensors {
        let Some(c) = compiled.tensor(t.uid) else {
            return Err(HostError::Harness(format!(
                "tensor uid {} of the target graph is not in the compiled graph",
                t.uid
            )));
        };
        if c.dims != t.dims || c.strides != t.strides {
            out.push(ShapeOverride {
                uid: t.uid,
                dims: t.dims.clone(),
                strides: t.strides.clone(),
            });
        }
    }
    Ok(out)
}

impl Harness {
    /// Executes `context` (created by `plugin` for `compiled`) once on the engine bundle, through
    /// the backend's execute rule with the overrides from `compiled` to this harness's graph.
    pub fn execute_overridden(
        &mut self,
        plugin: &LoadedPlugin,
        compiled: &Graph,
        context: &ExecutionContext<'_, '_>,
    ) -> Result<Vec<ShapeOverride>, HostError> {
        let overrides = overrides_between(compiled, &self.graph)?;
        let mut workspace = HostWorkspace::for_context(context)?;
        let workspace_ptr = workspace.ptr();
        let pack = self.engine.host_pack();
        check_alignment(&self.graph, &pack)?;
        // SAFETY: every pointer in `pack` addresses a host buffer of this harness, allocated
        // from this harness's graph, which is what the overrides turn the compiled shapes into;
        // the workspace has the size the context reported.
        unsafe { execute::execute(plugin, compiled, context, workspace_ptr, &pack, &overrides) }?;
        Ok(overrides)
    }

    /// The engine bundle's output tensors as bytes, by uid.
    pub fn engine_output_bytes(&self) -> Result<Vec<(i64, Vec<u8>)>, HostError> {
        self.roles
            .outputs
            .iter()
            .map(|&uid| Ok((uid, host_bytes(self.engine.get(uid)?).to_vec())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graphs::RaggedSdpaSpec;

    #[test]
    fn overrides_list_exactly_the_tensors_whose_shapes_change() {
        let compiled = RaggedSdpaSpec::packed("a", &[2, 3], &[4, 1]).graph();
        let same = overrides_between(&compiled, &compiled).expect("same graph");
        assert!(same.is_empty(), "{same:?}");
        let target = RaggedSdpaSpec::packed("b", &[5, 1, 4], &[2, 6, 3]).graph();
        let list = overrides_between(&compiled, &target).expect("same uids");
        for o in &list {
            let t = target.tensor(o.uid).expect("a target tensor");
            assert_eq!((&o.dims, &o.strides), (&t.dims, &t.strides));
        }
        let changed = target
            .tensors
            .iter()
            .filter(|t| {
                compiled
                    .tensor(t.uid)
                    .is_some_and(|c| c.dims != t.dims || c.strides != t.strides)
            })
            .count();
        assert_eq!(list.len(), changed);
        assert!(changed > 0);
    }
}
