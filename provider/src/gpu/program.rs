//! [`GpuProgram`]: a fused node's `com.mxfuse` steps run by the `kernels::gpu` launchers on
//! device pointers, and [`Executor`], what a compiled fused node runs (CPU program or GPU).
//!
//! Built once in `Compile` from the same rewritten graph the CPU [`Program`] is built from.
//! Constant MX weights of `MxMatMul` are transposed to `[N, K]` + `[N, K/32]` and uploaded once
//! (the layout of the tensor-core GEMM), or, where the runtime has the fragment-packed GEMM
//! (`GpuRuntime::frag_gemm_available`), packed for it (`kernels::gpu::pack_frag_weights`, also
//! for `trans_b` weights); other constants that are not fused-node inputs are
//! uploaded as they are. Output shapes come from the CPU kernels' `output_metas`, so both
//! executors agree on them. Ops without a GPU launcher are a `Compile` error naming the node.
//!
//! [`Backend::Host`] runs the same program with the CPU kernels on host memory posing as device
//! memory (`MXFUSE_EP_TEST_DEVICE_MEMORY=host`), so everything but the launch calls themselves
//! is tested on machines without a GPU.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use graph_rewrites::view::{ConstTensor, GraphView};
use kernels::gpu::{
    f16_weight_shift, index_error, pack_frag_experts, pack_frag_weights, GpuBias, GpuEpilogue,
    GpuExperts, GpuGatherMatMul, GpuIndices, GpuMatB, GpuRuntime, NormBuffers, SwiGluBuffers,
    GATHER_ERR_BYTES,
};
use kernels::{
    AddRmsNormAttrs, DType, MxDequantAttrs, MxGatherDequantAttrs, MxGatherMatMulAttrs,
    MxMatMulAttrs, MxQuantAttrs, MxQuantLinearAttrs, ScaleMap, SwiGluAttrs,
};
use ort_sys::OrtKernelContext;

use super::device::{DevicePlacement, Placement};
use super::matmul_group::{MatMulGroup, MemberIo};
use super::memory::{DeviceBox, DeviceMemory};
use crate::error::{Error, Result};
use crate::kernel_io::{alloc_output, output_address, read_input_addresses};
use crate::ops::{
    self, dtype, transpose_bytes, transpose_mx_weight, widen_fp4_weight, Kernel, Parallelism,
};
use crate::ort_types::{element_count, onnx_dtype};
use crate::program::{prepack, Program};
use crate::program_slots::{mxfuse_attrs, Slots};
use crate::tensor::{raw_bytes, Meta, TensorMut, TensorRef};

/// The default stream: ORT's copies through our data transfer are synchronous, so kernels and
/// copies are ordered without stream handling.
const STREAM: usize = 0;

/// The parsed attributes of one step, per op.
pub(super) enum GpuOp {
    Quantize(MxQuantAttrs),
    Dequantize(MxDequantAttrs),
    QuantizeLinear(MxQuantLinearAttrs),
    Norm(AddRmsNormAttrs),
    SwiGlu(SwiGluAttrs),
    MatMul {
        attrs: MxMatMulAttrs,
        /// The constant MX weight on the device, packed at compile time.
        packed: Option<PackedWeight>,
        /// y's element type in the graph (`None` where the graph does not say).
        out: Option<DType>,
    },
    /// Fragment-packed `MxMatMul`s of one MXFP8 activation run as one launch
    /// ([`super::matmul_group`]): this step's and those of the steps it names, which then
    /// launch nothing ([`GpuOp::Grouped`]).
    MatMulGroup(super::matmul_group::MatMulGroup),
    /// An `MxMatMul` run by its group's first step.
    Grouped,
    /// ONNX `Reshape` of a constant shape (an `MxMatMul` read through torch's `view(-1, K)`):
    /// no launch, its output is its input's bytes under new dims.
    Reshape,
    /// ONNX `Shape` (of a flattened norm's input, `ops::shape`): no launch, its int64 output is
    /// the input's dims, copied from the host into the output (device memory: ORT copies it to
    /// the host for the CPU nodes that read it).
    Shape(ops::shape::Shape),
    /// `slot`: this step's error record in [`GpuProgram::gather_err`].
    GatherDequantize {
        attrs: MxGatherDequantAttrs,
        slot: usize,
    },
    GatherMatMul {
        attrs: MxGatherMatMulAttrs,
        /// Constant experts on the device as `[E, N, K]` E4M3, packed at compile time.
        packed: Option<PackedExperts>,
        slot: usize,
    },
}

/// Constant stacked experts uploaded once in the `[E, N, K]` E4M3 layout (FP4 widened,
/// weight-second experts transposed: `ops::gather_matmul::pack`, as the CPU path prepacks), and,
/// where the tensor-core kernel serves the node (`frag`), each expert then packed for it
/// (`pack_frag_weights`, the experts one after another).
pub(super) struct PackedExperts {
    q: DeviceBox,
    scales: DeviceBox,
    dims: [usize; 3],
    frag: bool,
    /// `f16_weight_shift` of the whole stack, when packed for the tensor cores (read by the MoE
    /// prefill route of f16 activations).
    f16_shift: Option<i32>,
}

impl PackedExperts {
    /// `None` when the constants are already the `[E, N, K]` E4M3 layout and no fragment packing
    /// is asked for (uploaded as they are), or malformed. `frag(k)`: pack for the tensor cores.
    fn pack(
        memory: &Arc<dyn DeviceMemory>,
        b: &ConstTensor,
        bs: &ConstTensor,
        trans_b: bool,
        frag: &dyn Fn(usize) -> bool,
    ) -> Result<Option<Self>> {
        let (bm, sm) = (
            Meta::new(b.elem_type, b.dims.clone()),
            Meta::new(bs.elem_type, bs.dims.clone()),
        );
        let packed = ops::gather_matmul::pack(
            &TensorRef {
                meta: &bm,
                data: &b.raw,
            },
            &TensorRef {
                meta: &sm,
                data: &bs.raw,
            },
            trans_b,
        );
        let (q, scales, dims) = match packed {
            Some(p) => (Cow::Owned(p.q), Cow::Owned(p.scales), p.q_dims),
            None => {
                // Already [E, N, K] E4M3 (weight first): only the fragment packing changes it,
                // else the constants are uploaded as they are (inputs of the step).
                let Ok(w) = input_experts((&bm, 0), (&sm, 0), trans_b) else {
                    return Ok(None);
                };
                let fits = w.nk
                    && !w.fp4
                    && b.raw.len() == w.e * w.n * w.k
                    && bs.raw.len() == w.e * w.n * w.k / 32;
                if !fits || !frag(w.k) {
                    return Ok(None);
                }
                (
                    Cow::Borrowed(&b.raw[..]),
                    Cow::Borrowed(&bs.raw[..]),
                    [w.e, w.n, w.k],
                )
            }
        };
        let [e, n, k] = dims;
        let frag = e > 0 && frag(k);
        // One shift for all the experts: the stack read as [E N, K] rows.
        let f16_shift = frag.then(|| f16_weight_shift(&q, &scales, k)).flatten();
        let (q, scales) = if frag {
            let (wf, wsf) = pack_frag_experts(&q, &scales, (e, n, k))?;
            (Cow::Owned(wf), Cow::Owned(wsf))
        } else {
            (q, scales)
        };
        Ok(Some(PackedExperts {
            q: DeviceBox::upload(memory, &q)?,
            scales: DeviceBox::upload(memory, &scales)?,
            dims,
            frag,
            f16_shift,
        }))
    }

    fn experts(&self) -> GpuExperts {
        let [e, n, k] = self.dims;
        GpuExperts {
            q: self.q.ptr(),
            scales: self.scales.ptr(),
            e,
            n,
            k,
            fp4: false,
            nk: true,
        }
    }
}

/// Device indices of an int32 or int64 tensor.
fn gpu_indices(m: &Meta, ptr: u64) -> Result<GpuIndices> {
    let wide = match m.dtype {
        onnx_dtype::INT64 => true,
        onnx_dtype::INT32 => false,
        other => {
            return Err(Error::invalid(format!(
                "indices must be int32 or int64, got element type {other}"
            )))
        }
    };
    Ok(GpuIndices {
        ptr,
        count: element_count(&m.dims)?,
        wide,
    })
}

/// The bias of an `MxMatMul` (input 4, y's type, broadcast to `[M, N]`) on the device.
pub(super) fn gpu_bias(
    c: Option<&(Meta, u64)>,
    ydt: DType,
    m: usize,
    n: usize,
) -> Result<Option<GpuBias>> {
    let Some((cm, c)) = c else {
        return Ok(None);
    };
    // C has y's type (ONNX Gemm's T) and broadcasts to [M, N].
    if dtype(cm.dtype)? != ydt {
        return Err(Error::invalid(format!(
            "MxMatMul bias of type {} with output {ydt:?}",
            cm.dtype
        )));
    }
    let (rows, cols) = kernels::epilogue::broadcast_dims(&cm.dims_usize(), m, n)?;
    Ok(Some(GpuBias {
        ptr: *c,
        rows,
        cols,
    }))
}

/// The MX weight of a weight-only `MxMatMul` given as an input (not packed at compile time):
/// b `[N, K]` / `[K, N]` (`nk`) E4M3 or FLOAT4E2M1 with its scales, checked against `(k, n)`;
/// one "expert" of the gathered GEMM's kernels.
fn input_weight(
    (bm, b): &(Meta, u64),
    (sm, bs): &(Meta, u64),
    nk: bool,
    (k, n): (usize, usize),
) -> Result<GpuExperts> {
    let lift = |m: &Meta| Meta::new(m.dtype, [&[1i64][..], &m.dims].concat());
    let w = input_experts((&lift(bm), *b), (&lift(sm), *bs), nk)?;
    if (w.k, w.n) != (k, n) {
        return Err(Error::invalid(format!(
            "b {:?} does not fit a with K = {k} and y with N = {n}",
            bm.dims
        )));
    }
    Ok(w)
}

/// Stacked experts given as inputs (not packed at compile time): b `[E, N, K]` / `[E, K, N]`
/// (`nk` = weight first) E4M3 or FLOAT4E2M1, b_scale `[E, N, K/32]` / `[E, K/32, N]`.
fn input_experts(b: (&Meta, u64), bs: (&Meta, u64), nk: bool) -> Result<GpuExperts> {
    let (bd, sd) = (b.0.dims_usize(), bs.0.dims_usize());
    let fp4 = match b.0.dtype {
        onnx_dtype::FLOAT4E2M1 => true,
        t if t == DType::E4M3.onnx_code() => false,
        other => {
            return Err(Error::invalid(format!(
                "b must be FLOAT8E4M3FN or FLOAT4E2M1, got element type {other}"
            )))
        }
    };
    let [e, d1, d2] = bd[..] else {
        return Err(Error::invalid(format!("b {bd:?} must have rank 3")));
    };
    let (n, k) = if nk { (d1, d2) } else { (d2, d1) };
    let want = if nk { [e, n, k / 32] } else { [e, k / 32, n] };
    if sd != want || bs.0.dtype != DType::E8M0.onnx_code() || !k.is_multiple_of(32) {
        return Err(Error::invalid(format!(
            "b_scale {sd:?} must be FLOAT8E8M0 {want:?} for b {bd:?} (blocks of 32 along K)"
        )));
    }
    Ok(GpuExperts {
        q: b.1,
        scales: bs.1,
        e,
        n,
        k,
        fp4,
        nk,
    })
}

/// A constant MX weight uploaded once in the layout of the GEMM that reads it.
pub(super) struct PackedWeight {
    pub(super) q: DeviceBox,
    pub(super) scales: DeviceBox,
    /// The weight's `(N, K)`.
    pub(super) nk: (usize, usize),
    /// `pack_frag_weights`' layout; else `[N, K]` + `[N, K/32]`.
    pub(super) frag: bool,
    /// `f16_weight_shift` of the weight (read by the prefill route of f16 activations).
    pub(super) f16_shift: Option<i32>,
}

impl PackedWeight {
    fn mat_b(&self) -> GpuMatB {
        let (q, scales) = (self.q.ptr(), self.scales.ptr());
        if self.frag {
            GpuMatB::MxFrag {
                q,
                scales,
                f16_shift: self.f16_shift,
            }
        } else {
            GpuMatB::Mx {
                q,
                scales,
                trans_b: true,
            }
        }
    }
}

/// A step's inputs in a run: meta and device address of each (`None`: omitted), in the run's
/// slots.
type StepInputs<'v> = Vec<Option<&'v (Meta, u64)>>;
/// A step's outputs in a run: meta and device address of each (`None`: not produced).
type StepOutputs = Vec<Option<(Meta, u64)>>;

pub(super) struct Step {
    pub(super) name: String,
    /// The CPU kernel: output types and shapes (and the computation on [`Backend::Host`]).
    pub(super) shapes: Box<dyn Kernel>,
    pub(super) op: GpuOp,
    pub(super) inputs: Vec<Option<usize>>,
    pub(super) outputs: Vec<Option<usize>>,
}

pub(super) enum Source {
    /// The fused node's input `i`.
    Input(usize),
    /// A constant uploaded at compile time.
    Const(Meta, DeviceBox),
    /// A constant only its shape is needed of (a prepacked weight).
    ConstMeta(Meta),
    /// Produced by a step.
    Step,
}

/// What executes the steps.
#[derive(Clone)]
pub enum Backend {
    /// The `kernels::gpu` launchers.
    Gpu(Arc<GpuRuntime>),
    /// Test stand-in: the CPU kernels on host addresses (see the module docs).
    Host,
}

/// Intermediates kept between runs, by size class (`memory::size_class`): a run takes what it
/// needs and gives it back, so steady-state runs allocate nothing (device allocation and free
/// are slow and `cuMemFree` synchronizes the device), also when the token count changes from
/// run to run. Bounded so varying shapes cannot hoard memory.
#[derive(Default)]
struct BufferPool {
    free: Mutex<Vec<DeviceBox>>,
}

/// The most buffers a program keeps between runs.
const POOL_LIMIT: usize = 64;

impl BufferPool {
    fn take(&self, memory: &Arc<dyn DeviceMemory>, bytes: usize) -> Result<DeviceBox> {
        let class = super::memory::size_class(bytes);
        let reused = self.free.lock().ok().and_then(|mut free| {
            let i = free.iter().rposition(|b| b.len() == class)?;
            Some(free.remove(i))
        });
        match reused {
            Some(b) => Ok(b),
            None => DeviceBox::new(memory, class),
        }
    }

    /// Returns buffers the device is done with (after the run's synchronization); past the
    /// limit the least recently returned go (freed).
    fn give_back(&self, buffers: Vec<DeviceBox>) {
        if let Ok(mut free) = self.free.lock() {
            free.extend(buffers);
            let over = free.len().saturating_sub(POOL_LIMIT);
            free.drain(..over);
        }
    }
}

pub struct GpuProgram {
    backend: Backend,
    /// The gathered steps' error records (`GATHER_ERR_BYTES` each, zero), read after each run
    /// (kernels::gpu::gather); `None` without such steps.
    gather_err: Option<DeviceBox>,
    /// Held for a whole run when there are gathered steps: their error records are shared.
    run_lock: Mutex<()>,
    memory: Arc<dyn DeviceMemory>,
    pool: BufferPool,
    steps: Vec<Step>,
    sources: Vec<Source>,
    outputs: Vec<usize>,
    /// Per slot: the Reshape step that reads it, when a step produces it — that step writes
    /// straight into the Reshape's fused output, so the Reshape costs nothing.
    forward: Vec<Option<usize>>,
}

/// `MXFUSE_GPU_RUN_SYNC=1`: wait for the device after every fused node's run (read once).
fn run_sync() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MXFUSE_GPU_RUN_SYNC").is_ok_and(|v| v == "1" || v == "on"))
}

pub(super) fn gpu(e: kernels::gpu::GpuError) -> Error {
    match e {
        kernels::gpu::GpuError::Kernel(k) => k.into(),
        other => Error::Ort(format!("GPU: {other}")),
    }
}

fn last_dim(m: &Meta, what: &str) -> Result<usize> {
    m.dims
        .last()
        .and_then(|&d| usize::try_from(d).ok())
        .ok_or_else(|| Error::invalid(format!("{what} has no last dimension")))
}

/// The constant MX weight of an `MxMatMul` (`b [K, N]` E4M3 + `b_scale [K/32, N]` E8M0, or
/// `[N, K]` + `[N, K/32]` when `trans_b`), uploaded in the layout of the GEMM that will read it:
/// fragment-packed when `frag(k)` (the runtime has that GEMM for this K), else `[N, K]` +
/// `[N, K/32]` (a `trans_b` weight then stays an ordinary input, as it already has that layout).
/// `None` when it is not such a constant.
fn pack_weight(
    memory: &Arc<dyn DeviceMemory>,
    b: &ConstTensor,
    bs: &ConstTensor,
    trans_b: bool,
    frag: &dyn Fn(usize) -> bool,
) -> Result<Option<PackedWeight>> {
    let (b_meta, bs_meta) = (
        Meta::new(b.elem_type, b.dims.clone()),
        Meta::new(bs.elem_type, bs.dims.clone()),
    );
    // An MXFP4 weight is uploaded as the MXFP8 weight of the same values (the GEMMs decode
    // E4M3), so it is always packed here: no kernel reads FLOAT4E2M1 values directly.
    let widened = widen_fp4_weight(&TensorRef {
        meta: &b_meta,
        data: &b.raw,
    });
    let (b_meta, b_raw) = match &widened {
        Some(w) => (w.meta.clone(), &w.data),
        None => (b_meta, &b.raw),
    };
    let (q_nk, scales_nk, n, k) = if trans_b {
        // Already [N, K]; packed only for the fragment GEMM (or when widened from FP4).
        match nk_weight_dims(&b_meta, &bs_meta, b_raw.len(), bs.raw.len()) {
            Some((n, k)) if frag(k) || widened.is_some() => (b_raw.clone(), bs.raw.clone(), n, k),
            _ => return Ok(None),
        }
    } else {
        let packed = transpose_mx_weight(
            &TensorRef {
                meta: &b_meta,
                data: b_raw,
            },
            &TensorRef {
                meta: &bs_meta,
                data: &bs.raw,
            },
            transpose_bytes,
        );
        // Not such a constant, or malformed: the launch's own checks report it.
        let Some(packed) = packed else {
            return Ok(None);
        };
        let [n, k] = packed.q_dims;
        (packed.q, packed.scales, n, k)
    };
    let frag = frag(k);
    let f16_shift = f16_weight_shift(&q_nk, &scales_nk, k);
    let (q, scales) = if frag {
        pack_frag_weights(&q_nk, &scales_nk, n, k)?
    } else {
        (q_nk, scales_nk)
    };
    Ok(Some(PackedWeight {
        q: DeviceBox::upload(memory, &q)?,
        scales: DeviceBox::upload(memory, &scales)?,
        nk: (n, k),
        frag,
        f16_shift,
    }))
}

/// `(n, k)` of a well-formed `[N, K]` E4M3 weight with `[N, K/32]` scales of these byte lengths.
fn nk_weight_dims(b: &Meta, bs: &Meta, b_len: usize, bs_len: usize) -> Option<(usize, usize)> {
    let dims = |m: &Meta| -> Option<(usize, usize)> {
        match m.dims[..] {
            [r, c] => Some((usize::try_from(r).ok()?, usize::try_from(c).ok()?)),
            _ => None,
        }
    };
    let ((n, k), (sn, kb)) = (dims(b)?, dims(bs)?);
    let well_formed = b.dtype == DType::E4M3.onnx_code()
        && sn == n
        && k.is_multiple_of(32)
        && kb == k / 32
        && b_len == n * k
        && bs_len == n * kb;
    well_formed.then_some((n, k))
}

impl GpuProgram {
    /// Builds the program from `g` (every node a `com.mxfuse` op, an ONNX `Reshape` of a
    /// constant shape or an ONNX `Shape`), binding values by name to the
    /// fused node's inputs and outputs, as [`Program::build`] does.
    pub fn build(
        g: &dyn GraphView,
        input_names: &[String],
        output_names: &[String],
        constant: &dyn Fn(&str) -> Result<Option<ConstTensor>>,
        backend: Backend,
        memory: Arc<dyn DeviceMemory>,
    ) -> Result<Self> {
        let mut slots = Slots::for_inputs(input_names, Source::Input);
        let mut steps = Vec::new();
        // Gathered steps so far (each gets the next error record).
        let mut gathers = 0usize;
        for &n in g.nodes().iter() {
            let name = g.node_label(n);
            let op_type = g.op_type(n);
            if let Some(r) = ops::reshape::Reshape::of_node(g, n)? {
                let inputs = slots.bind_inputs(g, n, |_, meta, raw| {
                    Ok(Source::Const(meta, DeviceBox::upload(&memory, &raw)?))
                })?;
                let outputs = slots.bind_outputs(g, n, || Source::Step);
                steps.push(Step {
                    name,
                    shapes: Box::new(r),
                    op: GpuOp::Reshape,
                    inputs,
                    outputs,
                });
                continue;
            }
            if let Some(shape) = ops::shape::Shape::of_node(g, n)? {
                let inputs = slots.bind_inputs(g, n, |_, meta, _| Ok(Source::ConstMeta(meta)))?;
                let outputs = slots.bind_outputs(g, n, || Source::Step);
                steps.push(Step {
                    name,
                    shapes: Box::new(shape.clone()),
                    op: GpuOp::Shape(shape),
                    inputs,
                    outputs,
                });
                continue;
            }
            let attrs = mxfuse_attrs(g, n)?;
            let mut shapes =
                ops::create(&attrs).map_err(|e| Error::invalid(format!("node {name}: {e}")))?;
            if matches!(backend, Backend::Host) {
                // The host stand-in computes with these CPU kernels: prepack as the CPU path does.
                prepack(shapes.as_mut(), g, n, constant)?;
            }
            let pairs = attrs.as_pairs();
            let pairs = || pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            let node_inputs = g.inputs(n);
            let const_input = |i: usize| -> Result<Option<ConstTensor>> {
                match node_inputs.get(i).copied().flatten() {
                    Some(v) if g.is_constant(v) => constant(g.value_name(v)),
                    _ => Ok(None),
                }
            };
            // A value's element type from the graph (the float-`a` GEMMs' kernel choice).
            let elem = |v: Option<graph_rewrites::view::ValueId>| {
                v.and_then(|v| g.tensor_info(v))
                    .and_then(|t| DType::from_onnx_code(t.elem_type as i64))
            };
            let op = match op_type {
                "MxQuantize" => GpuOp::Quantize(MxQuantAttrs::from_pairs(pairs())?),
                "MxDequantize" => GpuOp::Dequantize(MxDequantAttrs::from_pairs(pairs())?),
                "MxQuantizeLinear" => {
                    GpuOp::QuantizeLinear(MxQuantLinearAttrs::from_pairs(pairs())?)
                }
                "AddRmsNormMxQuant" => GpuOp::Norm(AddRmsNormAttrs::from_pairs(pairs())?),
                "SwiGluMxQuant" => GpuOp::SwiGlu(SwiGluAttrs::from_pairs(pairs())?),
                "MxMatMul" => {
                    let attrs = MxMatMulAttrs::from_pairs(pairs())?;
                    // No a_scale: a float `a` (weight-only MX). Its weight is packed for the
                    // tensor-core kernel where that serves a's and y's types
                    // (kernels::gpu::weight_only), else kept as `[N, K]` E4M3 rows for the GEMV
                    // (kernels/gpu/mx_gather.hip).
                    let float_a = node_inputs.get(1).copied().flatten().is_none();
                    let a_dtype = elem(node_inputs.first().copied().flatten());
                    let y_dtype = elem(g.outputs(n).first().copied());
                    let packed = match (&backend, const_input(2)?, const_input(3)?) {
                        (Backend::Gpu(rt), Some(b), Some(bs)) => {
                            let frag = |k: usize| match (float_a, a_dtype, y_dtype) {
                                (false, _, _) => rt.frag_gemm_available(k),
                                (true, Some(a), Some(y)) => rt.weight_only_frag_available(k, a, y),
                                _ => false,
                            };
                            pack_weight(&memory, &b, &bs, attrs.trans_b, &frag)?
                        }
                        _ => None,
                    };
                    GpuOp::MatMul {
                        attrs,
                        packed,
                        out: y_dtype,
                    }
                }
                "MxGatherDequantize" => GpuOp::GatherDequantize {
                    attrs: MxGatherDequantAttrs::from_pairs(pairs())?,
                    slot: gathers,
                },
                "MxGatherMatMul" => {
                    let attrs = MxGatherMatMulAttrs::from_pairs(pairs())?;
                    let (a_dtype, y_dtype) = (
                        elem(node_inputs.first().copied().flatten()),
                        elem(g.outputs(n).first().copied()),
                    );
                    let packed = match (&backend, const_input(1)?, const_input(2)?) {
                        (Backend::Gpu(rt), Some(b), Some(bs)) => {
                            let frag = |k: usize| match (a_dtype, y_dtype) {
                                (Some(a), Some(y)) => rt.weight_only_frag_available(k, a, y),
                                _ => false,
                            };
                            PackedExperts::pack(&memory, &b, &bs, attrs.trans_b, &frag)?
                        }
                        _ => None,
                    };
                    GpuOp::GatherMatMul {
                        attrs,
                        packed,
                        slot: gathers,
                    }
                }
                // Quark's `MXQuantizeDequantize` / `MXFixNeuron` (any element type) lands here too.
                other => {
                    let domain = g.domain(n);
                    return Err(Error::Unsupported(format!(
                        "node {name}: {domain}::{other} has no GPU kernel; run this model on the CPU device"
                    )));
                }
            };
            let prepacked: &[usize] = match &op {
                GpuOp::MatMul {
                    packed: Some(_), ..
                } => &[2, 3],
                GpuOp::GatherMatMul {
                    packed: Some(_), ..
                } => &[1, 2],
                _ => &[],
            };
            if matches!(
                op,
                GpuOp::GatherDequantize { .. } | GpuOp::GatherMatMul { .. }
            ) {
                gathers += 1;
            }
            let inputs = slots.bind_inputs(g, n, |i, meta, raw| {
                // A prepacked weight is read from `op`: only its shape is kept here.
                Ok(if prepacked.contains(&i) {
                    Source::ConstMeta(meta)
                } else {
                    Source::Const(meta, DeviceBox::upload(&memory, &raw)?)
                })
            })?;
            let outputs = slots.bind_outputs(g, n, || Source::Step);
            steps.push(Step {
                name,
                shapes,
                op,
                inputs,
                outputs,
            });
        }
        let (outputs, sources) = slots.finish(output_names)?;
        if matches!(backend, Backend::Gpu(_)) {
            super::matmul_group::group_matmuls(&mut steps, &sources, &memory)?;
        }
        let mut forward = vec![None; sources.len()];
        for (i, step) in steps.iter().enumerate() {
            if let (GpuOp::Reshape, Some(Some(s))) = (&step.op, step.inputs.first()) {
                if matches!(sources[*s], Source::Step) && forward[*s].is_none() {
                    forward[*s] = Some(i);
                }
            }
        }
        let gather_err = match gathers {
            0 => None,
            n => Some(DeviceBox::upload(
                &memory,
                &vec![0u8; n * GATHER_ERR_BYTES],
            )?),
        };
        Ok(GpuProgram {
            backend,
            gather_err,
            run_lock: Mutex::new(()),
            memory,
            pool: BufferPool::default(),
            steps,
            sources,
            outputs,
            forward,
        })
    }

    /// Runs the steps on device tensors: `inputs[i]` is fused input `i` (meta, device address);
    /// `output(j, meta)` gives the device address for fused output `j` (`None`: not produced).
    /// Returns after the device finished (intermediates are freed on return).
    pub fn run_device(
        &self,
        inputs: &[Option<(Meta, u64)>],
        output: &mut dyn FnMut(usize, &Meta) -> Result<Option<u64>>,
    ) -> Result<()> {
        let _run = match self.gather_err {
            Some(_) => Some(
                self.run_lock
                    .lock()
                    .map_err(|_| Error::invalid("poisoned lock"))?,
            ),
            None => None,
        };
        // Per gathered step that ran: its name and index range (for the error record).
        let mut gathered: Vec<(usize, &str, usize)> = Vec::new();
        // Per slot: meta and device address; `owned` keeps intermediates alive.
        let mut values: Vec<Option<(Meta, u64)>> = Vec::with_capacity(self.sources.len());
        for s in &self.sources {
            values.push(match s {
                Source::Input(i) => inputs.get(*i).cloned().flatten(),
                Source::Const(meta, buf) => Some((meta.clone(), buf.ptr())),
                Source::ConstMeta(meta) => Some((meta.clone(), 0)),
                Source::Step => None,
            });
        }
        let mut owned: Vec<DeviceBox> = Vec::new();
        let mut written = vec![false; self.outputs.len()];
        // A step's outputs: written in place into the fused outputs where they are those (or
        // through a Reshape that is), else pooled intermediates.
        let mut alloc = |step: &Step, metas: Vec<Meta>| -> Result<StepOutputs> {
            let mut outs: StepOutputs = Vec::with_capacity(step.outputs.len());
            for (slot, meta) in step.outputs.iter().zip(metas) {
                let Some(slot) = *slot else {
                    outs.push(None);
                    continue;
                };
                // A fused output is written in place, once; everything else is an intermediate.
                let direct = self
                    .outputs
                    .iter()
                    .position(|&o| o == slot)
                    .filter(|&j| !written[j]);
                let mut addr = match direct {
                    Some(j) => match output(j, &meta)? {
                        Some(p) => {
                            written[j] = true;
                            p
                        }
                        None => 0,
                    },
                    None => 0,
                };
                // Read by a Reshape whose output is a fused output: write it there directly.
                if let (0, Some(r)) = (addr, self.forward[slot]) {
                    let reshape = &self.steps[r];
                    let target = reshape.outputs.first().copied().flatten();
                    let j = target.and_then(|t| {
                        self.outputs
                            .iter()
                            .position(|&o| o == t)
                            .filter(|&j| !written[j])
                    });
                    if let Some(j) = j {
                        let rmeta = reshape
                            .shapes
                            .output_metas(&[Some(&meta)])
                            .map_err(|e| Error::invalid(format!("{}: {e}", reshape.name)))?;
                        if let Some(p) = output(j, &rmeta[0])? {
                            written[j] = true;
                            addr = p;
                        }
                    }
                }
                let addr = if addr != 0 {
                    addr
                } else {
                    let b = self.pool.take(&self.memory, meta.byte_len()?)?;
                    let p = b.ptr();
                    owned.push(b);
                    p
                };
                outs.push(Some((meta, addr)));
            }
            Ok(outs)
        };
        for step in &self.steps {
            if matches!(step.op, GpuOp::Grouped) {
                continue; // written by its group's first step
            }
            let (ins, metas) = step_io(step, &values)?;
            if matches!(step.op, GpuOp::Reshape) {
                // Same bytes, new dims: the output aliases the input (written into the fused
                // output already when the producing step was forwarded, else copied at the end).
                let (_, addr) = ins
                    .first()
                    .copied()
                    .flatten()
                    .ok_or_else(|| Error::invalid(format!("{}: missing input", step.name)))?;
                if let (Some(Some(slot)), Some(meta)) = (step.outputs.first(), metas.first()) {
                    values[*slot] = Some((meta.clone(), *addr));
                }
                continue;
            }
            let outs = alloc(step, metas)?;
            if let GpuOp::MatMulGroup(group) = &step.op {
                // The other members' outputs now: one launch writes them all.
                let mut produced = vec![(step, outs)];
                for member in &group.members[1..] {
                    let other = &self.steps[member.step];
                    let (_, metas) = step_io(other, &values)?;
                    produced.push((other, alloc(other, metas)?));
                }
                self.launch_group(group, &ins, &produced, &values)
                    .map_err(|e| Error::invalid(format!("{}: {e}", step.name)))?;
                for (member, outs) in produced {
                    for (slot, v) in member.outputs.iter().zip(outs) {
                        if let (Some(slot), Some(v)) = (slot, v) {
                            values[*slot] = Some(v);
                        }
                    }
                }
                continue;
            }
            if let Some(range) = gather_range(step, &ins) {
                gathered.push((gather_slot(&step.op), &step.name, range));
            }
            self.launch(step, &ins, &outs)
                .map_err(|e| Error::invalid(format!("{}: {e}", step.name)))?;
            for (slot, v) in step.outputs.iter().zip(outs) {
                if let (Some(slot), Some(v)) = (slot, v) {
                    values[*slot] = Some(v);
                }
            }
        }
        // Outputs not written in place (a fused input passed through, a value output twice).
        for (j, &slot) in self.outputs.iter().enumerate() {
            if written[j] {
                continue;
            }
            let (meta, src) = values[slot]
                .clone()
                .ok_or_else(|| Error::invalid(format!("fused output {j} was not produced")))?;
            if let Some(dst) = output(j, &meta)? {
                self.memory.device_to_device(dst, src, meta.byte_len()?)?;
            }
        }
        // No wait for the device here (ORT's `OnRunEnd` waits at the end of the `Run`): the
        // intermediates go back to the pool while the kernels that use them may still run, which
        // is safe because every kernel runs on the one stream in launch order, so a later run's
        // kernels that reuse a buffer run after this run's. Gathered steps are the exception:
        // their error records are read on the host now. `MXFUSE_GPU_RUN_SYNC=1` waits after
        // every run (as before session 23).
        if let Backend::Gpu(rt) = &self.backend {
            if !gathered.is_empty() || run_sync() {
                rt.synchronize().map_err(gpu)?;
            }
        }
        self.pool.give_back(owned);
        self.check_gathered(&gathered)
    }

    /// Fails the run when a gathered step's kernel met an index out of range (its error
    /// record, kernels::gpu::gather), and clears the records for the next run.
    fn check_gathered(&self, gathered: &[(usize, &str, usize)]) -> Result<()> {
        let Some(err) = &self.gather_err else {
            return Ok(());
        };
        if gathered.is_empty() {
            return Ok(());
        }
        let mut bytes = vec![0u8; err.len()];
        self.memory.device_to_host(&mut bytes, err.ptr())?;
        let word =
            |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
        for &(slot, name, range) in gathered {
            let record = [word(2 * slot), word(2 * slot + 1)];
            if let Some(e) = index_error(record, range) {
                self.memory
                    .host_to_device(err.ptr(), &vec![0u8; bytes.len()])?;
                return Err(Error::invalid(format!("{name}: {e}")));
            }
        }
        Ok(())
    }

    /// Launches a group of `MxMatMul`s ([`super::matmul_group`]): `ins` are its first step's
    /// inputs, `produced` each member's step and outputs, `values` the run's slots (biases).
    fn launch_group(
        &self,
        group: &MatMulGroup,
        ins: &[Option<&(Meta, u64)>],
        produced: &[(&Step, StepOutputs)],
        values: &[Option<(Meta, u64)>],
    ) -> Result<()> {
        let Backend::Gpu(rt) = &self.backend else {
            return Err(Error::invalid("internal: a grouped MxMatMul off the GPU"));
        };
        let a = ins
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| Error::invalid("missing input a_q"))?;
        let (_, a_scale) = ins
            .get(1)
            .copied()
            .flatten()
            .ok_or_else(|| Error::invalid("missing input a_scale"))?;
        let io = produced
            .iter()
            .map(|(member, outs)| {
                let bias = member.inputs.get(4).copied().flatten();
                Ok(MemberIo {
                    bias: bias.and_then(|s| values[s].clone()),
                    y: outs.first().cloned().flatten().ok_or_else(|| {
                        Error::invalid(format!("{}: missing output y", member.name))
                    })?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        group.launch(rt, a, *a_scale, &io, STREAM)
    }

    fn launch(
        &self,
        step: &Step,
        ins: &[Option<&(Meta, u64)>],
        outs: &[Option<(Meta, u64)>],
    ) -> Result<()> {
        let input = |i: usize, what: &str| {
            ins.get(i)
                .copied()
                .flatten()
                .ok_or_else(|| Error::invalid(format!("missing input {what}")))
        };
        let opt_in = |i: usize| ins.get(i).copied().flatten().map(|(_, p)| *p);
        let output = |i: usize, what: &str| {
            outs.get(i)
                .and_then(Option::as_ref)
                .ok_or_else(|| Error::invalid(format!("missing output {what}")))
        };
        let opt_out = |i: usize| outs.get(i).and_then(Option::as_ref).map(|(_, p)| *p);
        if let GpuOp::Shape(shape) = &step.op {
            // Both backends: the dims come from the input's meta, not from a kernel.
            let (xm, _) = input(0, "data")?;
            return self
                .memory
                .host_to_device(output(0, "shape")?.1, &shape.bytes(&xm.dims));
        }
        if matches!(step.op, GpuOp::MatMulGroup(_) | GpuOp::Grouped) {
            // `run_device` launches a group for all its members.
            return Err(Error::invalid(
                "internal: a grouped MxMatMul launched as a single step",
            ));
        }
        let rt = match &self.backend {
            Backend::Gpu(rt) => rt,
            // SAFETY: host backend: every address is a host allocation of its meta's size.
            Backend::Host => return unsafe { host_launch(step, ins, outs) },
        };
        let err_record = |slot: usize| -> Result<u64> {
            let err = self
                .gather_err
                .as_ref()
                .ok_or_else(|| Error::invalid("no error record for a gathered step"))?;
            Ok(err.ptr() + (slot * GATHER_ERR_BYTES) as u64)
        };
        match &step.op {
            // Handled in `run_device` (no launch), and above.
            GpuOp::Reshape | GpuOp::Shape(_) => Ok(()),
            // Refused above.
            GpuOp::MatMulGroup(_) | GpuOp::Grouped => Ok(()),
            GpuOp::GatherDequantize { attrs, slot } => {
                let (xm, x) = input(0, "x")?;
                let (sm, s) = input(1, "scale")?;
                let (im, i) = input(2, "indices")?;
                let dq = &attrs.dequant;
                rt.mx_gather_dequantize(
                    dtype(xm.dtype)?,
                    dq.output_dtype,
                    &xm.dims_usize(),
                    &sm.dims_usize(),
                    dq.axis,
                    dq.block_size,
                    attrs.gather_axis,
                    gpu_indices(im, *i)?,
                    (*x, *s, output(0, "y")?.1, err_record(*slot)?),
                    STREAM,
                )
            }
            GpuOp::GatherMatMul {
                attrs,
                packed,
                slot,
            } => {
                let (am, a) = input(0, "a")?;
                let (im, i) = input(3, "indices")?;
                let (ym, y) = output(0, "y")?;
                let mm = GpuGatherMatMul {
                    a: *a,
                    a_dtype: dtype(am.dtype)?,
                    a_samples: 0,
                    p: 0,
                    samples: ym.dims_usize().first().copied().unwrap_or(0),
                    y: *y,
                    y_dtype: dtype(ym.dtype)?,
                };
                let w = match packed {
                    Some(p) if p.frag => {
                        let ad = am.dims_usize();
                        let (a_samples, rows) = match (attrs.trans_b, &ad[..]) {
                            (true, &[s, _, 1]) => (s, 1),
                            (false, &[s, p, _]) => (s, p),
                            _ => {
                                return Err(Error::invalid(format!(
                                    "a {ad:?} must be [S, K, 1] (weight first) or [S, P, K]"
                                )))
                            }
                        };
                        let [e, n, k] = p.dims;
                        let mm = GpuGatherMatMul {
                            a_samples,
                            p: rows,
                            ..mm
                        };
                        return rt
                            .mx_gather_matmul_frag(
                                &mm,
                                (p.q.ptr(), p.scales.ptr(), e, n, k),
                                p.f16_shift,
                                gpu_indices(im, *i)?,
                                err_record(*slot)?,
                                STREAM,
                            )
                            .map_err(gpu);
                    }
                    Some(p) => p.experts(),
                    None => input_experts(
                        {
                            let (m, p) = input(1, "b")?;
                            (m, *p)
                        },
                        {
                            let (m, p) = input(2, "b_scale")?;
                            (m, *p)
                        },
                        attrs.trans_b,
                    )?,
                };
                let (ad, yd) = (am.dims_usize(), ym.dims_usize());
                let (a_samples, p, k) = match (attrs.trans_b, &ad[..]) {
                    (true, &[s, k, 1]) => (s, 1, k),
                    (false, &[s, p, k]) => (s, p, k),
                    _ => {
                        return Err(Error::invalid(format!(
                            "a {ad:?} must be [S, K, 1] (weight first) or [S, P, K]"
                        )))
                    }
                };
                if k != w.k {
                    return Err(Error::invalid(format!(
                        "a {ad:?} and the experts disagree on K ({k} against {})",
                        w.k
                    )));
                }
                let mm = GpuGatherMatMul {
                    a_samples,
                    p,
                    samples: yd.first().copied().unwrap_or(0),
                    ..mm
                };
                rt.mx_gather_matmul(&mm, &w, gpu_indices(im, *i)?, err_record(*slot)?, STREAM)
            }
            GpuOp::Quantize(a) => {
                let (xm, x) = input(0, "x")?;
                let k = last_dim(xm, "x")?;
                let (q, s) = (output(0, "q")?.1, output(1, "scale")?.1);
                rt.mx_quantize(
                    dtype(xm.dtype)?,
                    element_count(&xm.dims)?,
                    k,
                    *x,
                    q,
                    s,
                    &a.quant,
                    STREAM,
                )
            }
            GpuOp::Dequantize(a) => {
                let (xm, x) = input(0, "x")?;
                let (sm, s) = input(1, "scale")?;
                let map = ScaleMap::new(&xm.dims_usize(), &sm.dims_usize(), a.axis, a.block_size)?;
                rt.mx_dequantize(
                    dtype(xm.dtype)?,
                    a.output_dtype,
                    &map,
                    *x,
                    *s,
                    output(0, "y")?.1,
                    STREAM,
                )
            }
            GpuOp::QuantizeLinear(a) => {
                let (xm, x) = input(0, "x")?;
                let (sm, s) = input(1, "scale")?;
                let map = ScaleMap::new(&xm.dims_usize(), &sm.dims_usize(), a.axis, a.block_size)?;
                rt.mx_quantize_linear(
                    dtype(xm.dtype)?,
                    a.output_dtype,
                    a.saturate,
                    &map,
                    *x,
                    *s,
                    output(0, "y")?.1,
                    STREAM,
                )
            }
            GpuOp::Norm(a) => {
                let (xm, x) = input(0, "x")?;
                let (gm, gamma) = input(2, "gamma")?;
                let h = last_dim(xm, "x")?;
                let rows = element_count(&xm.dims)? / h.max(1);
                let bufs = NormBuffers {
                    x: *x,
                    residual: opt_in(1),
                    gamma: *gamma,
                    q: output(0, "q")?.1,
                    scales: output(1, "scale")?.1,
                    residual_out: opt_out(2),
                    normed: opt_out(3),
                };
                // World size 1: multi-rank runs are refused when the options are read.
                rt.add_rmsnorm_mxquant(
                    dtype(xm.dtype)?,
                    dtype(gm.dtype)?,
                    rows,
                    h,
                    &bufs,
                    a,
                    1,
                    STREAM,
                )
            }
            GpuOp::SwiGlu(a) => {
                let (gm, gate) = input(0, "gate")?;
                let (qm, q) = output(0, "q")?;
                let i = last_dim(qm, "q")?;
                let rows = element_count(&qm.dims)? / i.max(1);
                let bufs = match opt_in(1) {
                    Some(up) => SwiGluBuffers::Separate { gate: *gate, up },
                    None => SwiGluBuffers::Fused { gate_up: *gate },
                };
                rt.swiglu_mxquant(
                    dtype(gm.dtype)?,
                    rows,
                    i,
                    bufs,
                    *q,
                    output(1, "scale")?.1,
                    a,
                    STREAM,
                )
            }
            GpuOp::MatMul { attrs, packed, .. } => {
                let (am, a_q) = input(0, "a_q")?;
                let (ym, y) = output(0, "y")?;
                let k = last_dim(am, "a_q")?;
                let m = element_count(&am.dims)? / k.max(1);
                let n = last_dim(ym, "y")?;
                let ydt = dtype(ym.dtype)?;
                let ep = GpuEpilogue {
                    alpha: attrs.alpha,
                    beta: attrs.beta,
                    bias: gpu_bias(ins.get(4).copied().flatten(), ydt, m, n)?,
                };
                let Some(a_s) = opt_in(1) else {
                    // A float `a` (weight-only MX): one weight of the gathered GEMM's kernels.
                    let w = match packed {
                        Some(p) if p.frag => {
                            return rt
                                .mx_matmul_float_a_frag(
                                    (m, *a_q, dtype(am.dtype)?),
                                    (p.q.ptr(), p.scales.ptr(), p.f16_shift),
                                    (n, k),
                                    *y,
                                    ydt,
                                    &ep,
                                    STREAM,
                                )
                                .map_err(gpu)
                        }
                        Some(p) => GpuExperts {
                            q: p.q.ptr(),
                            scales: p.scales.ptr(),
                            e: 1,
                            n,
                            k,
                            fp4: false,
                            nk: true,
                        },
                        None => input_weight(
                            input(2, "b")?,
                            input(3, "b_scale")?,
                            attrs.trans_b,
                            (k, n),
                        )?,
                    };
                    return rt
                        .mx_matmul_float_a((m, *a_q, dtype(am.dtype)?), &w, *y, ydt, &ep, STREAM)
                        .map_err(gpu);
                };
                let b = match packed {
                    Some(w) => w.mat_b(),
                    None => {
                        let (bm, b) = input(2, "b")?;
                        if bm.dtype == DType::E2M1.onnx_code() {
                            // Constant FP4 weights are widened and packed at build time.
                            return Err(Error::Unsupported(
                                "MxMatMul on the GPU reads a FLOAT4E2M1 (MXFP4) weight only as a session constant (initializer)".into(),
                            ));
                        }
                        if bm.dtype == DType::E4M3.onnx_code() {
                            GpuMatB::Mx {
                                q: *b,
                                scales: input(3, "b_scale")?.1,
                                trans_b: attrs.trans_b,
                            }
                        } else {
                            GpuMatB::Float {
                                data: *b,
                                dtype: dtype(bm.dtype)?,
                                trans_b: attrs.trans_b,
                            }
                        }
                    }
                };
                rt.mx_matmul(m, k, n, *a_q, a_s, &b, *y, ydt, &ep, STREAM)
            }
        }
        .map_err(gpu)
    }

    /// Runs on ORT's device tensors (the GPU device: inputs and outputs in our memory).
    ///
    /// # Safety
    /// `ctx` must be the live context of the current `Compute` call.
    pub unsafe fn run_on_device_tensors(&self, ctx: *mut OrtKernelContext) -> Result<()> {
        let inputs = read_input_addresses(ctx)?;
        self.run_device(&inputs, &mut |j, meta| output_address(ctx, j, meta))
    }

    /// Runs on ORT's host tensors: uploads the inputs, runs, downloads the outputs (the CPU
    /// device with `device=gpu`).
    ///
    /// # Safety
    /// `ctx` must be the live context of the current `Compute` call.
    pub unsafe fn run_staged(&self, ctx: *mut OrtKernelContext) -> Result<()> {
        let host = read_input_addresses(ctx)?;
        let mut uploads = Vec::new();
        let mut inputs = Vec::with_capacity(host.len());
        for v in host {
            inputs.push(match v {
                None => None,
                Some((meta, p)) => {
                    // SAFETY: ORT's host tensor of this meta, valid during Compute.
                    let data = raw_bytes(p as *const u8, meta.byte_len()?);
                    let b = DeviceBox::upload(&self.memory, data)?;
                    let addr = b.ptr();
                    uploads.push(b);
                    Some((meta, addr))
                }
            });
        }
        let mut results: Vec<(usize, Meta, DeviceBox)> = Vec::new();
        self.run_device(&inputs, &mut |j, meta| {
            let b = DeviceBox::new(&self.memory, meta.byte_len()?)?;
            let p = b.ptr();
            results.push((j, meta.clone(), b));
            Ok(Some(p))
        })?;
        for (j, meta, b) in results {
            if let Some(dst) = alloc_output(ctx, j, &meta)? {
                self.memory.device_to_host(dst, b.ptr())?;
            }
        }
        Ok(())
    }
}

/// A step's inputs in a run (meta and device address of each, from the run's slots) and its
/// outputs' metas (from its CPU kernel).
fn step_io<'v>(
    step: &Step,
    values: &'v [Option<(Meta, u64)>],
) -> Result<(StepInputs<'v>, Vec<Meta>)> {
    let ins: StepInputs = step
        .inputs
        .iter()
        .map(|s| s.and_then(|s| values[s].as_ref()))
        .collect();
    let in_metas: Vec<Option<&Meta>> = ins.iter().map(|v| v.map(|(m, _)| m)).collect();
    let metas = step
        .shapes
        .output_metas(&in_metas)
        .map_err(|e| Error::invalid(format!("{}: {e}", step.name)))?;
    Ok((ins, metas))
}

/// A gathered step's error-record slot.
fn gather_slot(op: &GpuOp) -> usize {
    match op {
        GpuOp::GatherDequantize { slot, .. } | GpuOp::GatherMatMul { slot, .. } => *slot,
        _ => 0,
    }
}

/// The index range `D` (indices in `[-D, D)`) of a gathered step, `None` for other steps:
/// x's gathered dim, or the number of experts.
fn gather_range(step: &Step, ins: &[Option<&(Meta, u64)>]) -> Option<usize> {
    let dims = |i: usize| ins.get(i).copied().flatten().map(|(m, _)| m.dims_usize());
    match &step.op {
        GpuOp::GatherDequantize { attrs, .. } => dims(0).and_then(|d| {
            let r = d.len() as i64;
            (-r..r)
                .contains(&attrs.gather_axis)
                .then(|| d[attrs.gather_axis.rem_euclid(r) as usize])
        }),
        GpuOp::GatherMatMul { packed, .. } => match packed {
            Some(p) => Some(p.dims[0]),
            None => dims(1).and_then(|d| d.first().copied()),
        },
        _ => None,
    }
}

/// The step's CPU kernel on host addresses (the [`Backend::Host`] stand-in).
///
/// # Safety
/// Every address must be a host allocation of at least its meta's byte size.
unsafe fn host_launch(
    step: &Step,
    ins: &[Option<&(Meta, u64)>],
    outs: &[Option<(Meta, u64)>],
) -> Result<()> {
    let mut in_views = Vec::with_capacity(ins.len());
    for v in ins {
        in_views.push(match v {
            None => None,
            Some((meta, p)) => Some(TensorRef::from_raw(meta, *p as *const u8)?),
        });
    }
    let mut out_views = Vec::with_capacity(outs.len());
    for v in outs {
        out_views.push(match v {
            None => None,
            Some((meta, p)) => Some(TensorMut::from_raw(meta, *p as *mut u8)?),
        });
    }
    step.shapes
        .compute(&in_views, &mut out_views, &kernels::Serial)
}

/// What a compiled fused node runs.
pub enum Executor {
    /// The CPU kernels on ORT's host tensors (the CPU device).
    Cpu(Program),
    /// The device program on ORT's device tensors.
    Device(GpuProgram),
    /// The device program on ORT's host tensors, staged per run.
    Staged(GpuProgram),
}

impl Executor {
    /// Builds the executor of one fused node for the session's placement.
    pub fn build(
        placement: &Placement,
        g: &dyn GraphView,
        input_names: &[String],
        output_names: &[String],
        parallelism: Parallelism,
        constant: &dyn Fn(&str) -> Result<Option<ConstTensor>>,
    ) -> Result<Self> {
        let DevicePlacement {
            backend,
            memory,
            staged,
            ..
        } = match placement {
            Placement::Cpu => {
                return Ok(Executor::Cpu(Program::build(
                    g,
                    input_names,
                    output_names,
                    parallelism,
                    constant,
                )?))
            }
            Placement::Device(d) => d,
        };
        let program = GpuProgram::build(
            g,
            input_names,
            output_names,
            constant,
            backend.clone(),
            memory.clone(),
        )?;
        Ok(if *staged {
            Executor::Staged(program)
        } else {
            Executor::Device(program)
        })
    }

    /// Runs one `Compute` call.
    ///
    /// # Safety
    /// `ctx` must be the live context of the current `Compute` call.
    pub unsafe fn run(&self, ctx: *mut OrtKernelContext) -> Result<()> {
        match self {
            Executor::Cpu(p) => p.run(ctx),
            Executor::Device(p) => p.run_on_device_tensors(ctx),
            Executor::Staged(p) => p.run_staged(ctx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::memory::HostMemory;

    /// The bytes of a host-memory [`DeviceBox`].
    fn host_bytes(b: &DeviceBox) -> Vec<u8> {
        // SAFETY: HostMemory hands out host allocations of `len()` bytes.
        unsafe { std::slice::from_raw_parts(b.ptr() as *const u8, b.len()) }.to_vec()
    }

    /// A constant MXFP4 weight is uploaded as the packed MXFP8 weight of the same values, in
    /// both layouts and whether or not the fragment GEMM takes it (an FP4 weight is never left
    /// as an ordinary input: no GPU kernel reads FLOAT4E2M1 values).
    #[test]
    fn fp4_weights_are_widened_then_packed() {
        let memory: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
        let (n, k) = (20usize, 128usize);
        let codes: Vec<u8> = (0..n * k).map(|i| (i * 5 % 16) as u8).collect();
        let pack4 = |c: &[u8]| -> Vec<u8> { c.chunks(2).map(|p| p[0] | (p[1] << 4)).collect() };
        let wide =
            |c: &[u8]| -> Vec<u8> { c.iter().map(|&x| kernels::codec::e2m1_to_e4m3(x)).collect() };
        let s_nk: Vec<u8> = (0..n * k / 32).map(|i| 110 + (i % 30) as u8).collect();
        let konst = |ty: DType, dims: [usize; 2], raw: Vec<u8>| ConstTensor {
            elem_type: ty.onnx_code(),
            dims: dims.iter().map(|&d| d as i64).collect(),
            raw,
        };
        let t = |v: &[u8], rows: usize, cols: usize| -> Vec<u8> {
            (0..rows * cols)
                .map(|i| v[(i % rows) * cols + i / rows])
                .collect()
        };
        let (codes_kn, s_kn) = (t(&codes, n, k), t(&s_nk, n, k / 32));
        for frag in [true, false] {
            for trans_b in [false, true] {
                let (c, s, dims, sdims) = if trans_b {
                    (&codes, &s_nk, [n, k], [n, k / 32])
                } else {
                    (&codes_kn, &s_kn, [k, n], [k / 32, n])
                };
                let bs = konst(DType::E8M0, sdims, s.clone());
                let b4 = konst(DType::E2M1, dims, pack4(c));
                let b8 = konst(DType::E4M3, dims, wide(c));
                let w4 = pack_weight(&memory, &b4, &bs, trans_b, &|_| frag)
                    .unwrap()
                    .expect("an FP4 weight is always packed");
                assert_eq!(w4.frag, frag);
                let w8 = pack_weight(&memory, &b8, &bs, trans_b, &|_| frag).unwrap();
                let want_q = match &w8 {
                    Some(w) => host_bytes(&w.q),
                    None => wide(c), // an unpacked [N, K] FP8 weight is read as it is
                };
                assert_eq!(host_bytes(&w4.q), want_q, "frag {frag} trans_b {trans_b}");
            }
        }
    }

    #[test]
    fn weights_are_fragment_packed_where_the_runtime_has_that_gemm() {
        let memory: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
        let (n, k) = (20usize, 128usize);
        let e4m3 = DType::E4M3.onnx_code();
        let e8m0 = DType::E8M0.onnx_code();
        let q_nk: Vec<u8> = (0..n * k).map(|i| (i % 251) as u8).collect();
        let s_nk: Vec<u8> = (0..n * k / 32).map(|i| 100 + i as u8).collect();
        let t = |v: &[u8], rows: usize, cols: usize| -> Vec<u8> {
            (0..rows * cols)
                .map(|i| v[(i % rows) * cols + i / rows])
                .collect()
        };
        let konst = |ty, dims: [usize; 2], raw: Vec<u8>| ConstTensor {
            elem_type: ty,
            dims: dims.iter().map(|&d| d as i64).collect(),
            raw,
        };
        let (want_q, want_s) = pack_frag_weights(&q_nk, &s_nk, n, k).unwrap();
        // [K, N] weights: transposed, then packed.
        let b_kn = konst(e4m3, [k, n], t(&q_nk, n, k));
        let bs_kn = konst(e8m0, [k / 32, n], t(&s_nk, n, k / 32));
        let w = pack_weight(&memory, &b_kn, &bs_kn, false, &|_| true)
            .unwrap()
            .unwrap();
        assert!(w.frag && matches!(w.mat_b(), GpuMatB::MxFrag { .. }));
        assert_eq!(host_bytes(&w.q), want_q);
        assert_eq!(host_bytes(&w.scales), want_s);
        let w = pack_weight(&memory, &b_kn, &bs_kn, false, &|_| false)
            .unwrap()
            .unwrap();
        assert!(!w.frag && matches!(w.mat_b(), GpuMatB::Mx { trans_b: true, .. }));
        assert_eq!(host_bytes(&w.q), q_nk);
        // [N, K] weights: packed for the fragment GEMM, else left as an ordinary input.
        let b_nk = konst(e4m3, [n, k], q_nk.clone());
        let bs_nk = konst(e8m0, [n, k / 32], s_nk.clone());
        let w = pack_weight(&memory, &b_nk, &bs_nk, true, &|_| true)
            .unwrap()
            .unwrap();
        assert_eq!(host_bytes(&w.q), want_q);
        assert!(pack_weight(&memory, &b_nk, &bs_nk, true, &|_| false)
            .unwrap()
            .is_none());
        // Malformed scales: not packed (the launch reports it).
        let bad = konst(e8m0, [n, 3], vec![0; n * 3]);
        assert!(pack_weight(&memory, &b_nk, &bad, true, &|_| true)
            .unwrap()
            .is_none());
    }

    #[test]
    fn pool_reuses_buffers_of_a_size_class_and_is_bounded() {
        let host = Arc::new(HostMemory::default());
        let memory: Arc<dyn DeviceMemory> = host.clone();
        let pool = BufferPool::default();
        let a = pool.take(&memory, 1000).unwrap();
        let pa = a.ptr();
        assert_eq!(a.len(), 1024, "1000 bytes take the 1024 class");
        pool.give_back(vec![a]);
        // A nearby size (another token count) shares the class.
        assert_eq!(
            pool.take(&memory, 900).unwrap().ptr(),
            pa,
            "same class reused"
        );
        // (dropped above: freed) Another class allocates.
        let b = pool.take(&memory, 2000).unwrap();
        assert_eq!(b.len(), 2048);
        let many: Vec<DeviceBox> = (0..POOL_LIMIT + 5)
            .map(|_| pool.take(&memory, 8).unwrap())
            .collect();
        pool.give_back(many);
        assert_eq!(
            host.live_allocations(),
            POOL_LIMIT + 1,
            "pool kept at most its limit"
        );
    }
}
