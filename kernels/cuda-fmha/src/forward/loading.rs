//! Per-context loading of one NVRTC-compiled kernel source, shared by the forward and backward
//! launchers: compile (or fetch) once per device, load once per context, read each entry
//! point's published tile table and raise its shared-memory limit at load, not per execute.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use super::device_abi::{self, TileConfig};
use ragged_gpu_runtime::cuda::context::StreamContext;
use ragged_gpu_runtime::cuda::error::GpuError;
use ragged_gpu_runtime::cuda::module::KernelModule;
use ragged_gpu_runtime::cuda::nvrtc_cache::{ImageOrigin, KernelSource, NvrtcCache};
use ragged_gpu_runtime::cuda::runtime;

/// The kernels of one source loaded into one context, with the tile table each entry point
/// publishes.
pub(crate) struct LoadedKernels {
    pub(crate) module: KernelModule,
    configs: HashMap<&'static str, TileConfig>,
    /// Entry points whose shared memory exceeds the device's opt-in limit, with that error.
    oversized: HashMap<&'static str, GpuError>,
    /// Entry points that publish `NAME_tma`: they take the Q, K and V tensor maps as well.
    tensor_maps: HashSet<&'static str>,
    /// Entry points that publish `NAME_fl` = 1: handed a nonce they build the tile list themselves.
    fused_list: HashSet<&'static str>,
    /// The forward source's entry points all wait for the pre-pass grid before reading its
    /// workspace (`ragged_fmha_grid_dependency` = 1), and [`device_abi::PDL_ENV`] does not turn
    /// programmatic launches off: the forward may then start while its pre-pass still runs.
    grid_dependency: bool,
    /// The forward source's pre-pass writes nothing before its wait for the preceding grid and
    /// checks what it read before it (`ragged_fmha_prepass_grid_dependency` = 1), and
    /// [`device_abi::PDL_ENV`] leaves its programmatic launch on: it may then start in the tail
    /// of the stream's previous kernel.
    prepass_dependency: bool,
    source_name: &'static str,
}

impl LoadedKernels {
    /// `kernel`'s published configuration, or why it cannot run here.
    pub(crate) fn config(&self, kernel: &str) -> Result<TileConfig, GpuError> {
        if let Some(error) = self.oversized.get(kernel) {
            return Err(error.clone());
        }
        self.configs
            .get(kernel)
            .copied()
            .ok_or_else(|| GpuError::MissingKernel {
                kernel: kernel.to_owned(),
                source_name: self.source_name.to_owned(),
            })
    }

    /// Whether `kernel` takes the three TMA tensor maps after its common parameters.
    pub(crate) fn takes_tensor_maps(&self, kernel: &str) -> bool {
        self.tensor_maps.contains(kernel)
    }

    /// Whether `kernel` can build its tile list itself ([`super::fused_list`]).
    pub(crate) fn builds_fused_list(&self, kernel: &str) -> bool {
        self.fused_list.contains(kernel)
    }

    /// Whether the forward may be launched with programmatic stream serialization after its
    /// pre-pass (see the field).
    pub(crate) fn grid_dependency(&self) -> bool {
        self.grid_dependency
    }

    /// Whether the pre-pass may be launched with programmatic stream serialization after the
    /// stream's previous kernel (see the field).
    pub(crate) fn prepass_dependency(&self) -> bool {
        self.prepass_dependency
    }

    /// The loaded entry points' configurations, sorted by name.
    pub(crate) fn sorted_configs(&self) -> Vec<(&'static str, TileConfig)> {
        let mut configs: Vec<_> = self.configs.iter().map(|(k, c)| (*k, *c)).collect();
        configs.sort_by_key(|(k, _)| *k);
        configs
    }
}

/// What one [`ModuleCache::load`] found.
pub(crate) struct Load {
    pub(crate) kernels: Arc<LoadedKernels>,
    /// The NVRTC target of the stream's device.
    pub(crate) arch: String,
    /// Where the image came from; `None` when the module was already loaded in this context.
    pub(crate) origin: Option<ImageOrigin>,
}

/// Loaded modules of one source by context id (`cuCtxGetId`).
pub(crate) struct ModuleCache {
    cache: &'static NvrtcCache,
    source: &'static KernelSource,
    modules: Mutex<HashMap<u64, Arc<LoadedKernels>>>,
}

impl ModuleCache {
    pub(crate) fn new(cache: &'static NvrtcCache, source: &'static KernelSource) -> Self {
        Self {
            cache,
            source,
            modules: Mutex::new(HashMap::new()),
        }
    }

    /// The source's kernels already loaded in `ctx`: the per-execute path, which needs neither the
    /// device's target (an allocation) nor the entry list.
    pub(crate) fn loaded(&self, ctx: &StreamContext) -> Option<Arc<LoadedKernels>> {
        self.modules.lock().get(&ctx.id).map(Arc::clone)
    }

    /// The source's kernels in `ctx`, compiled and loaded on first use. `entries` are the entry
    /// points whose tile tables `parse` checks (with the entry's tag).
    pub(crate) fn load<P>(
        &self,
        ctx: &StreamContext,
        entries: impl IntoIterator<Item = (&'static str, P)>,
        parse: impl Fn(&'static str, P, [i32; 4]) -> Result<TileConfig, GpuError>,
    ) -> Result<Load, GpuError> {
        let runtime = runtime::probe()?;
        let device = runtime
            .device(ctx.device)
            .ok_or_else(|| GpuError::Unavailable {
                reason: format!(
                    "the stream's device {} is not usable by this engine",
                    ctx.device
                ),
            })?;
        let arch = device.target.arch().to_owned();
        // Held across compile and load: concurrent first executes wait for one compilation.
        let mut modules = self.modules.lock();
        if let Some(loaded) = modules.get(&ctx.id) {
            return Ok(Load {
                kernels: Arc::clone(loaded),
                arch,
                origin: None,
            });
        }
        let image =
            self.cache
                .get_or_compile(self.source, &device.target, &[], runtime.nvrtc_version)?;
        let _current = ctx.make_current()?;
        // SAFETY: the stream's context is current (guard) and outlives the module for as long as
        // the caller's stream is valid, which is hipDNN's contract for SetStream.
        let module = unsafe { KernelModule::load(&image.bytes, self.source.name) }?;
        let mut configs = HashMap::new();
        let mut oversized = HashMap::new();
        let mut tensor_maps = HashSet::new();
        let mut fused_list = HashSet::new();
        let mut forward_source = false;
        let available = u32::try_from(device.max_shared_per_block_optin).unwrap_or(0);
        // Whether the module has the FP8 entry points (sm_90a): read at the first one asked for,
        // and those entries skipped without (their problems then fail naming the kernel).
        let mut fp8_module = None;
        for (kernel, tag) in entries {
            let fp8_entry = device_abi::FP8_FORWARD_KERNELS
                .iter()
                .any(|(_, name)| *name == kernel);
            if fp8_entry {
                let present = match fp8_module {
                    Some(present) => present,
                    None => {
                        let [flag] = module.read_i32_global::<1>(device_abi::FP8_SYMBOL)?;
                        *fp8_module.insert(flag != 0)
                    }
                };
                if !present {
                    continue;
                }
            }
            let raw = module.read_i32_global::<4>(&device_abi::config_symbol(kernel))?;
            let config = parse(kernel, tag, raw)?;
            // A kernel that needs more shared memory than this device has is left out
            // (its problems fail with the reason), so the other kernels still load.
            if config.shared_mem_bytes > available {
                oversized.insert(
                    kernel,
                    GpuError::SharedMemory {
                        kernel: kernel.to_owned(),
                        required: config.shared_mem_bytes,
                        available,
                        device: ctx.device,
                    },
                );
                continue;
            }
            // Raise the shared-memory limit once, at load, not per execute.
            module.function(kernel, config.shared_mem_bytes)?;
            configs.insert(kernel, config);
            // Every forward entry point publishes NAME_tma (0 or 1); other sources' kernels are
            // not asked, so no lookup fails (compute-sanitizer reports failed API calls).
            if fp8_entry || device_abi::FORWARD_KERNELS.contains(&kernel) {
                forward_source = true;
                let [flag] = module.read_i32_global::<1>(&device_abi::tensor_map_symbol(kernel))?;
                if flag != 0 {
                    tensor_maps.insert(kernel);
                    // Published by every entry point with tensor maps (and only by those).
                    let [fl] =
                        module.read_i32_global::<1>(&device_abi::fused_list_symbol(kernel))?;
                    if fl != 0 {
                        fused_list.insert(kernel);
                    }
                }
            }
        }
        let launches = device_abi::programmatic_launches();
        let grid_dependency = forward_source
            && launches.forward
            && module.read_i32_global::<1>(device_abi::GRID_DEPENDENCY_SYMBOL)?[0] != 0;
        let prepass_dependency = forward_source
            && launches.prepass
            && module.read_i32_global::<1>(device_abi::PREPASS_DEPENDENCY_SYMBOL)?[0] != 0;
        let loaded = Arc::new(LoadedKernels {
            module,
            configs,
            oversized,
            tensor_maps,
            fused_list,
            grid_dependency,
            prepass_dependency,
            source_name: self.source.name,
        });
        modules.insert(ctx.id, Arc::clone(&loaded));
        Ok(Load {
            kernels: loaded,
            arch,
            origin: Some(image.origin),
        })
    }
}
