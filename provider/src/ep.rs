//! `MxFuseExecutionProvider`: claims what the rewrite rules would fuse (`GetCapability`) and
//! turns each claimed subgraph into a [`crate::program::Program`] of com.mxfuse kernels (`Compile`).
//!
//! Both run the rules, and the rules check every Quark fake-quantized weight against Quark's
//! kernel (seconds of CPU on a real model): the EP (one per session) keeps those verdicts and
//! quantized bytes in [`MxEp::weight_checks`] from `GetCapability` until `Compile`'s rewrite of
//! the subgraph that reads each weight takes them, so each weight is checked once per session
//! (`graph_rewrites::pipeline::weight_checks`).

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::{Arc, Mutex};

use graph_rewrites::ir::Graph;
use graph_rewrites::pipeline::run_pipeline_with_checks;
use graph_rewrites::pipeline::weight_checks::{CheckCounts, WeightChecks};

use crate::capability::claim_groups;
use crate::logging::{Logger, SessionRoute};
use graph_rewrites::view::{GraphView, TensorInfo, MXFUSE_DOMAIN};
use ort_sys::{
    OrtGraph, OrtKernelContext, OrtLogger, OrtLoggingLevel, OrtNode, OrtStatusPtr, OrtValueInfo,
};

use crate::error::{Error, Result};
use crate::ffi::api::{api, check, owned_str};
use crate::ffi::ep_abi::{
    OrtEp, OrtEpGraphSupportInfo, OrtNodeComputeContext, OrtNodeComputeInfo, OrtNodeFusionOptions,
    ORT_API_VERSION,
};
use crate::ffi::guard::{guard_status, guard_value};
use crate::gpu::program::Executor;
use crate::gpu::Placement;
use crate::ops::Parallelism;
use crate::options::EpOptions;
use crate::ort_graph_view::OrtGraphView;
use crate::view_to_model::model_from_view;

const NAME: &CStr = c"MxFuseExecutionProvider";

/// `OrtEp` first, so ORT's `OrtEp*` is also a `*mut MxEp`.
#[repr(C)]
pub struct MxEp {
    base: OrtEp,
    options: EpOptions,
    /// Shared by every fused node of the session (one thread pool, not one per node).
    parallelism: Parallelism,
    /// The session's logger (diagnostics follow the user's `log_severity_level`).
    logger: Logger,
    /// The same logger registered for the kernels' status lines while this EP lives
    /// (`crate::logging::Routes`).
    _log_route: SessionRoute,
    /// Where the fused nodes run (CPU kernels or GPU launchers; see `gpu::device`).
    placement: Placement,
    /// Why a group `GetCapability` claimed can run nowhere on this placement
    /// (`gpu::boundary::copyable_groups`): `Compile` fails the session with it.
    unrunnable: Mutex<Option<String>>,
    /// The Quark weight checks of `GetCapability`, with their E4M3 / E8M0 bytes, for `Compile`
    /// (each taken by the rewrite that needs it, the rest cleared at its end; ORT creates one EP
    /// per session, so no other session sees them).
    weight_checks: Arc<WeightChecks>,
    /// By value name, the types `GetCapability` refined (`crate::shapes`), for `Compile`'s
    /// rewrite of the claimed subgraphs (which no longer hold what proves them).
    shapes: Mutex<HashMap<String, TensorInfo>>,
}

impl MxEp {
    pub fn new(options: EpOptions, logger: *const OrtLogger) -> Result<Box<Self>> {
        Ok(Box::new(MxEp {
            base: OrtEp {
                ort_version_supported: ORT_API_VERSION,
                GetName: Some(get_name),
                GetCapability: Some(get_capability),
                Compile: Some(compile),
                ReleaseNodeComputeInfos: Some(release_node_compute_infos),
                GetPreferredDataLayout: None,
                ShouldConvertDataLayoutForOp: None,
                SetDynamicOptions: Some(set_dynamic_options),
                OnRunStart: None,
                OnRunEnd: Some(on_run_end),
                CreateAllocator: None,
                CreateSyncStreamForDevice: None,
                GetCompiledModelCompatibilityInfo: None,
                GetKernelRegistry: None,
                IsConcurrentRunSupported: None,
                Sync: None,
                CreateProfiler: None,
                IsGraphCaptureEnabled: None,
                IsGraphCaptured: None,
                ReplayGraph: None,
                GetGraphCaptureNodeAssignmentPolicy: None,
                GetAvailableResource: None,
                OnSessionInitializationEnd: None,
                GetDefaultMemoryDevice: None,
                ReleaseCapturedGraph: None,
                GetWeightlessSupport: None,
                _padding: [None; 8],
            },
            parallelism: Parallelism::from_threads(options.threads)?,
            logger: Logger::new(logger),
            _log_route: SessionRoute::new(logger),
            placement: Placement::Cpu,
            unrunnable: Mutex::new(None),
            weight_checks: Arc::new(WeightChecks::for_session()),
            shapes: Mutex::new(HashMap::new()),
            options,
        }))
    }

    /// Sets where the fused nodes run. Sessions whose tensors live in device memory also get
    /// the Memcpy kernels ORT needs between our nodes and the CPU EP's.
    pub fn with_placement(mut self: Box<Self>, placement: Placement) -> Result<Box<Self>> {
        if let Some(memory) = placement.device_memory() {
            crate::gpu::memcpy_kernels::registry(memory)?;
            self.base.GetKernelRegistry = Some(crate::gpu::memcpy_kernels::get_kernel_registry);
        }
        self.placement = placement;
        Ok(self)
    }

    pub fn into_raw(self: Box<Self>) -> *mut OrtEp {
        Box::into_raw(self) as *mut OrtEp
    }

    /// # Safety
    /// `ep` must come from [`MxEp::into_raw`] and not be used afterwards.
    pub unsafe fn release(ep: *mut OrtEp) {
        drop(Box::from_raw(ep as *mut MxEp));
    }

    unsafe fn from_raw<'a>(ep: *const OrtEp) -> &'a MxEp {
        &*(ep as *const MxEp)
    }
}

unsafe extern "system" fn get_name(_ep: *const OrtEp) -> *const c_char {
    NAME.as_ptr()
}

/// `session.set_ep_dynamic_options(...)`: ORT hands every EP of the session the same keys. Ours
/// are fixed at session creation (they decide what `GetCapability` claims and how `Compile`
/// builds the kernels), so a provider option key here is an error instead of being silently
/// ignored; other keys (`ep.dynamic.workload_type`, other EPs' options) are not ours and pass.
unsafe extern "system" fn set_dynamic_options(
    _this: *mut OrtEp,
    keys: *const *const c_char,
    _values: *const *const c_char,
    count: usize,
) -> OrtStatusPtr {
    guard_status("SetDynamicOptions", || {
        for i in 0..count {
            let key = owned_str(*keys.add(i));
            if crate::options::is_option_key(&key) {
                return Err(Error::invalid(format!(
                    "provider option {key:?} cannot be changed on a live session (mxfuse has no dynamic options): pass it with the EP when creating the session"
                )));
            }
        }
        Ok(())
    })
}

/// The end of a `Run`: on the GPU placement, wait for the device (unless ORT's run option
/// `disable_synchronize_execution_providers` says not to), so that `Run` returns with its device
/// outputs written, as ORT's own GPU EPs do. The fused nodes themselves return once their
/// kernels are queued (`gpu::program`), so a step's nodes are not each a round trip.
unsafe extern "system" fn on_run_end(
    ep: *mut OrtEp,
    _run_options: *const c_void,
    sync_stream: bool,
) -> OrtStatusPtr {
    guard_status("OnRunEnd", || {
        let ep = MxEp::from_raw(ep);
        if let (true, Placement::Device(d)) = (sync_stream, &ep.placement) {
            if let crate::gpu::program::Backend::Gpu(rt) = &d.backend {
                rt.synchronize()
                    .map_err(|e| Error::Ort(format!("GPU: {e}")))?;
            }
        }
        Ok(())
    })
}

unsafe extern "system" fn get_capability(
    ep: *mut OrtEp,
    graph: *const OrtGraph,
    info: *mut OrtEpGraphSupportInfo,
) -> OrtStatusPtr {
    guard_status("GetCapability", || {
        let ep = MxEp::from_raw(ep);
        let api = api()?;
        let mut view = OrtGraphView::new(graph)?;
        // Constant initializers stay inputs of the fused node (ORT keeps them alive and hands
        // them to Compute); only prepacked MX weights are copied (ops::matmul).
        let fusion = OrtNodeFusionOptions {
            ort_version_supported: ORT_API_VERSION,
            drop_constant_initializers: false,
        };
        let verbose = ep
            .logger
            .enabled(OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE);
        let explain = |line: &str| {
            ep.logger
                .log(OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE, line)
        };
        // The offline inference's dims where ORT's left some unknown (the rules then decide
        // as offline). Without them the rules still run, on ORT's types.
        match crate::shapes::refinements(&view) {
            Ok(refined) => {
                if !refined.is_empty() {
                    explain(&format!(
                        "mxfuse: {} value type(s) that ORT's shape inference left partly unknown \
                         taken from the offline rewrite's inference",
                        refined.len()
                    ));
                }
                view.refine(&refined);
                ep.shapes
                    .lock()
                    .map_err(|_| Error::invalid("poisoned lock"))?
                    .extend(refined);
            }
            Err(e) => explain(&format!(
                "mxfuse: shape inference failed, the rules read ORT's types as they are: {e}"
            )),
        }
        // One WARNING line for the E8M0 Q/DQ nodes nothing claims (the session then fails in
        // ORT with NOT_IMPLEMENTED and no reason); VERBOSE names each.
        let unrunnable = std::cell::RefCell::new(Vec::new());
        let mut groups = claim_groups(
            &view,
            &ep.options.pipeline,
            &ep.weight_checks,
            verbose.then_some(&explain as &dyn Fn(&str)),
            &|line: &str| unrunnable.borrow_mut().push(line.to_string()),
        )?;
        let unrunnable = unrunnable.into_inner();
        if let Some(first) = unrunnable.first() {
            ep.logger.log(
                OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
                &format!(
                    "mxfuse: {} E8M0 QuantizeLinear / DequantizeLinear node(s) left to ORT's CPU \
                     EP, which cannot run them (VERBOSE names each), the first: {}",
                    unrunnable.len(),
                    first.trim_start_matches("mxfuse: ")
                ),
            );
            for line in &unrunnable {
                explain(line);
            }
        }
        // ORT inserts Memcpy nodes around our nodes only where it allocates their tensors in
        // device memory (not on the host-staged `device=gpu` placement of a CPU device).
        if ep.placement.device_memory().is_some() {
            let left = std::cell::RefCell::new(Vec::new());
            let leave = |line: &str| left.borrow_mut().push(line.to_string());
            let (copyable, fatal) = crate::gpu::boundary::copyable_groups(&view, groups, &leave);
            groups = copyable;
            // One WARNING line, however many nodes; VERBOSE names each.
            let left = left.into_inner();
            if let Some(first) = left.first() {
                ep.logger.log(
                    OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
                    &format!(
                        "mxfuse: {} fused subgraph(s) left to ORT's CPU EP on the device placement \
                         (VERBOSE names each), the first: {}",
                        left.len(),
                        first.trim_start_matches("mxfuse: ")
                    ),
                );
            }
            for line in &left {
                explain(line);
            }
            // Kept once found: ORT asks again for each subgraph (If / Loop bodies) and may ask
            // twice for one graph; any of them makes the session fail.
            if fatal.is_some() {
                *ep.unrunnable
                    .lock()
                    .map_err(|_| Error::invalid("poisoned lock"))? = fatal;
            }
        }
        ep.logger.log(
            OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO,
            &format!(
                "mxfuse: claiming {} node(s) of the graph's {} in {} fused subgraph(s), run on \
                 the {} placement",
                groups.iter().map(Vec::len).sum::<usize>(),
                view.nodes().len(),
                groups.len(),
                ep.placement.name(),
            ),
        );
        for group in groups {
            let nodes: Vec<*const OrtNode> = group.iter().map(|&n| view.ort_node(n)).collect();
            check((api.ep.EpGraphSupportInfo_AddNodesToFuse)(
                info,
                nodes.as_ptr(),
                nodes.len(),
                &fusion,
            ))?;
        }
        Ok(())
    })
}

/// Names of a node's inputs or outputs ("" for omitted ones).
unsafe fn io_names(node: *const OrtNode, outputs: bool) -> Result<Vec<String>> {
    let ort = api()?.ort;
    let mut n = 0usize;
    if outputs {
        check((ort.Node_GetNumOutputs)(node, &mut n))?;
    } else {
        check((ort.Node_GetNumInputs)(node, &mut n))?;
    }
    let mut vis = vec![ptr::null::<OrtValueInfo>(); n];
    if outputs {
        check((ort.Node_GetOutputs)(node, vis.as_mut_ptr(), n))?;
    } else {
        check((ort.Node_GetInputs)(node, vis.as_mut_ptr(), n))?;
    }
    vis.into_iter()
        .map(|vi| {
            if vi.is_null() {
                return Ok(String::new());
            }
            let mut s = ptr::null();
            check((ort.GetValueInfoName)(vi, &mut s))?;
            Ok(owned_str(s))
        })
        .collect()
}

/// Builds the program of one fused node from its subgraph, adding the Quark weight checks its
/// rewrite ran and reused to `checked`.
unsafe fn compile_one(
    ep: &MxEp,
    graph: *const OrtGraph,
    fused: *const OrtNode,
    checked: &mut CheckCounts,
) -> Result<Executor> {
    let mut view = OrtGraphView::new(graph)?;
    view.refine(
        &*ep.shapes
            .lock()
            .map_err(|_| Error::invalid("poisoned lock"))?,
    );
    let inputs = io_names(fused, false)?;
    let outputs = io_names(fused, true)?;
    let all_ours = view
        .nodes()
        .iter()
        .all(|&n| view.domain(n) == MXFUSE_DOMAIN);
    let parallelism = ep.parallelism.clone();
    // Constants by name from ORT's graph (the program keeps only what kernels prepack).
    let constant = |name: &str| match view.value_by_name(name) {
        Some(v) => view.const_value_unbounded(v),
        None => Ok(None),
    };
    if all_ours {
        return Executor::build(
            &ep.placement,
            &view,
            &inputs,
            &outputs,
            parallelism,
            &constant,
        );
    }
    // Rewrite the claimed subgraph with the very pipeline the offline CLI runs.
    let model = model_from_view(&view)?;
    let mut ir = Graph::from_model(model, None).map_err(|e| Error::invalid(e.to_string()))?;
    // With GetCapability's Quark weight checks, taken out of the session's cache (the bytes are
    // dropped with `checks` once the program holds them prepacked).
    let checks = Arc::new(WeightChecks::taking_from(ep.weight_checks.clone()));
    run_pipeline_with_checks(&mut ir, &ep.options.pipeline, &checks)
        .map_err(|e| Error::invalid(e.to_string()))?;
    *checked += checks.counts();
    // Initializers the rewrite created (a Quark weight quantized at rewrite time) are not in
    // ORT's graph: read them from the rewritten subgraph, so the kernels prepack them as the
    // custom-op library does for the offline rewrite (unpacked, a `[K, N]` weight's GEMM sums in
    // another order: other bits than the offline path).
    let constant = |name: &str| match view.value_by_name(name) {
        Some(v) => view.const_value_unbounded(v),
        None => Ok(ir.value_by_name(name).and_then(|v| ir.const_value(v))),
    };
    Executor::build(
        &ep.placement,
        &ir,
        &inputs,
        &outputs,
        parallelism,
        &constant,
    )
}

/// `OrtNodeComputeInfo` first, so ORT's pointer is also a `*mut ComputeInfo`.
#[repr(C)]
struct ComputeInfo {
    base: OrtNodeComputeInfo,
    program: Executor,
}

unsafe extern "system" fn compile(
    ep: *mut OrtEp,
    graphs: *const *const OrtGraph,
    fused_nodes: *const *const OrtNode,
    count: usize,
    infos: *mut *mut OrtNodeComputeInfo,
    _ep_context_nodes: *mut *mut OrtNode,
) -> OrtStatusPtr {
    guard_status("Compile", || {
        let ep = MxEp::from_raw(ep);
        if ep.options.ep_context {
            return Err(Error::Unsupported(
                crate::options::EP_CONTEXT_UNSUPPORTED.into(),
            ));
        }
        if let Some(why) = ep
            .unrunnable
            .lock()
            .map_err(|_| Error::invalid("poisoned lock"))?
            .clone()
        {
            return Err(Error::Unsupported(why));
        }
        // Build everything first so a failure leaves no half-filled output array behind.
        let mut built = Vec::with_capacity(count);
        let mut checked = CheckCounts::default();
        let result = (0..count).try_for_each(|i| {
            built.push(compile_one(
                ep,
                *graphs.add(i),
                *fused_nodes.add(i),
                &mut checked,
            )?);
            Ok::<_, Error>(())
        });
        // What no rewrite took (a site GetCapability accepted but did not claim) is not needed
        // either. A later GetCapability (another graph of the session) fills the cache again.
        ep.weight_checks.clear();
        result?;
        ep.logger.log(
            OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE,
            &format!(
                "mxfuse: Compile ran {} Quark weight check(s) and reused {} (GetCapability's, or an earlier scan's)",
                checked.run, checked.reused
            ),
        );
        for (i, program) in built.into_iter().enumerate() {
            let info = Box::new(ComputeInfo {
                base: OrtNodeComputeInfo {
                    ort_version_supported: ORT_API_VERSION,
                    CreateState: Some(create_state),
                    Compute: Some(compute),
                    ReleaseState: Some(release_state),
                },
                program,
            });
            *infos.add(i) = Box::into_raw(info) as *mut OrtNodeComputeInfo;
        }
        Ok(())
    })
}

unsafe extern "system" fn release_node_compute_infos(
    _ep: *mut OrtEp,
    infos: *mut *mut OrtNodeComputeInfo,
    count: usize,
) {
    guard_value((), || {
        for i in 0..count {
            let p = *infos.add(i);
            if !p.is_null() {
                drop(Box::from_raw(p as *mut ComputeInfo));
            }
        }
    })
}

/// The program is immutable and all per-run buffers are local to `Compute`, so the state is
/// just the info itself and concurrent runs need no locking.
unsafe extern "system" fn create_state(
    this: *mut OrtNodeComputeInfo,
    _ctx: *mut OrtNodeComputeContext,
    state: *mut *mut c_void,
) -> OrtStatusPtr {
    guard_status("CreateState", || {
        *state = this as *mut c_void;
        Ok(())
    })
}

unsafe extern "system" fn compute(
    this: *mut OrtNodeComputeInfo,
    _state: *mut c_void,
    ctx: *mut OrtKernelContext,
) -> OrtStatusPtr {
    guard_status("Compute", || {
        let info = &*(this as *const ComputeInfo);
        info.program.run(ctx)
    })
}

unsafe extern "system" fn release_state(_this: *mut OrtNodeComputeInfo, _state: *mut c_void) {}
