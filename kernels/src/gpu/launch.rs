//! The op launchers: attribute validation, kernel choice and grid shape for each `com.mxfuse`
//! op, on device pointers owned by the caller (the provider's allocator or [`DeviceBuffer`]s).
//! The choices mirror bench/gpu/mxgpu.py, where they were measured.
//!
//! [`DeviceBuffer`]: super::runtime::DeviceBuffer

use std::ffi::c_void;

use super::driver::Backend;
use super::error::GpuResult;
use super::runtime::GpuRuntime;
use super::shapes::{
    fit_cluster_split, frag_kernel, norm_split, pipe_shape, splitk_shape, FragKernel, FragSwitches,
};
use super::swiglu_table_kernel;
use super::thresholds::{
    FragGemmTable, InGemmQuantThresholds, NormLaunchTable, PipeGemmTable, SwiGluLaunchTable,
};
use crate::attrs::{Activation, AddRmsNormAttrs, InvForm, SwiGluAttrs, SwiGluLayout, SwishForm};
use crate::codec::{NanPolicy, QuantConfig, ScaleRule, BLOCK};
use crate::element::DType;
use crate::error::KernelError;
use crate::scale_map::ScaleMap;

// Flag bits of kernels/gpu/mx_common.h.
const F_RCEIL: u32 = 1;
const F_NAN_IGNORE: u32 = 2;
const F_GEMMA: u32 = 4;
const F_GAMMA_F32: u32 = 8;
const F_INV_DIV: u32 = 16;
const F_OAI: u32 = 32;
const F_FP32_ACT: u32 = 64;
const F_NO_ROUND_SUM: u32 = 128;
const F_SWISH_SINGLE: u32 = 256;
const F_SIGMA_PINNED: u32 = 512;
const F_SCALE_F16: u32 = 1024;

/// Below this many elements `MxQuantize` takes 2 elements per lane instead of 8:
/// shorter per-lane chains win when the grid cannot fill the device (measured on the H200).
const SMALL_ELEMENTS: usize = 1 << 21;

/// Largest block of the one-block-per-row `AddRmsNormMxQuant` kernels `_c<nch>` (their
/// `__launch_bounds__`), by chunks per lane.
fn norm_max_block(nch: usize) -> usize {
    if nch == 3 {
        512
    } else {
        1024
    }
}

/// A raw stream handle (`CUstream` / `hipStream_t`); 0 is the default stream.
pub type StreamHandle = usize;

/// Device pointers of one `AddRmsNormMxQuant` call (rows × h elements each, row-major).
#[derive(Debug, Clone, Copy)]
pub struct NormBuffers {
    pub x: u64,
    pub residual: Option<u64>,
    pub gamma: u64,
    pub q: u64,
    pub scales: u64,
    pub residual_out: Option<u64>,
    pub normed: Option<u64>,
}

/// Inputs of one `SwiGluMxQuant` call: `gate_up` for the fused layouts, `gate` + `up` for
/// `separate`.
#[derive(Debug, Clone, Copy)]
pub enum SwiGluBuffers {
    Separate { gate: u64, up: u64 },
    Fused { gate_up: u64 },
}

/// The B operand of `MxMatMul` on the device.
#[derive(Debug, Clone, Copy)]
pub enum GpuMatB {
    /// E4M3 values + E8M0 scales: `[N, K]` + `[N, K/32]` when `trans_b`, else `[K, N]` + `[K/32, N]`.
    Mx { q: u64, scales: u64, trans_b: bool },
    /// bf16 / f16 / f32 `[K, N]` (or `[N, K]` when `trans_b`).
    Float {
        data: u64,
        dtype: DType,
        trans_b: bool,
    },
    /// Constant E4M3 weights `[N, K]` + scales packed by [`super::pack::pack_frag_weights`] for
    /// the fragment-packed decode GEMM (CUDA sm_90+, `K % 128 == 0`: pack only when
    /// [`GpuRuntime::frag_gemm_available`] says so). Constants: under a programmatic dependent
    /// launch the kernel reads its first weights before the stream's previous kernel has finished.
    /// `f16_shift`: the weights' [`super::pack::f16_weight_shift`] when the caller computed one;
    /// with it the prefill route writes an f16 output of MXFP8 activations from one f16 GEMM
    /// (both operands dequantized to f16) instead of f32 rows.
    MxFrag {
        q: u64,
        scales: u64,
        f16_shift: Option<i32>,
    },
}

/// The `MxMatMul` epilogue on the device (docs/ops.md, [`crate::Epilogue`]):
/// `y = round_T(fl(alpha · acc) + fl(beta · c))`, applied by every GEMM kernel where it stores.
#[derive(Debug, Clone, Copy)]
pub struct GpuEpilogue {
    pub alpha: f32,
    pub beta: f32,
    /// The bias in device memory, of y's dtype: `ptr` to `rows × cols` row-major values, rows 1
    /// or M, cols 1 or N ([`crate::epilogue::broadcast_dims`] of its shape).
    pub bias: Option<GpuBias>,
}

/// A device bias of [`GpuEpilogue`].
#[derive(Debug, Clone, Copy)]
pub struct GpuBias {
    pub ptr: u64,
    pub rows: usize,
    pub cols: usize,
}

impl GpuEpilogue {
    /// A plain product.
    pub const NONE: GpuEpilogue = GpuEpilogue {
        alpha: 1.0,
        beta: 1.0,
        bias: None,
    };

    /// The kernels' `MxEpi` (mx_common.h) for an `m × n` output of `out`, checking the bias.
    pub(super) fn params(&self, m: usize, n: usize, out: DType) -> GpuResult<EpilogueParams> {
        let (bias, ld, cs) = match self.bias {
            None => (0, 0, 0),
            Some(b) => {
                if !(b.rows == 1 || b.rows == m) || !(b.cols == 1 || b.cols == n) {
                    return Err(KernelError::Shape(format!(
                        "bias of {} x {} does not broadcast to [{m}, {n}]",
                        b.rows, b.cols
                    ))
                    .into());
                }
                check_aligned("bias", b.ptr, out.size() as u64)?;
                let ld = if b.rows == 1 { 0 } else { b.cols };
                (
                    b.ptr,
                    dim_i32("bias row stride", ld)?,
                    i32::from(b.cols != 1),
                )
            }
        };
        Ok(EpilogueParams {
            bias,
            ld,
            cs,
            alpha: self.alpha,
            beta: self.beta,
        })
    }
}

/// `struct MxEpi` of mx_common.h, passed by value (same C layout: 8 + 4 · 4 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct EpilogueParams {
    bias: u64,
    ld: i32,
    cs: i32,
    alpha: f32,
    beta: f32,
}

/// Whether kernel `name` may take a programmatic dependent launch (when the device has them,
/// [`GpuRuntime::pdl`]). Every kernel waits for its predecessor in MX_PDL_ENTRY / MX_PDL_WAIT
/// (mx_portability.h), so PDL never changes results; it is left off where it measured slower on
/// the H200 (bench/gpu/bench_frag_pdl.py, BENCHMARKS.md): the pipeline GEMM (`mx_matmul_pipe_*`,
/// 6.5 -> 7.1 us at 1536 x 6144, M = 1), which serves only non-constant weights on sm_90.
fn pdl_kernel(name: &str) -> bool {
    !name.starts_with("mx_matmul_pipe_")
}

/// `params` followed by a [`ScaleMap`]'s `elements, axis_len, inner, block, so, sb, si` as
/// `long long`s (the element → scale walk of mx_dequantize.hip and mx_quantize_linear.hip).
fn scale_map_params(params: Params, map: &ScaleMap) -> GpuResult<Params> {
    let i64_of = |what: &str, v: usize| {
        i64::try_from(v)
            .map_err(|_| KernelError::Shape(format!("{what} = {v} exceeds the kernel's range")))
    };
    Ok(params
        .push(i64_of("elements", map.len())?)
        .push(i64_of("axis length", map.axis_len)?)
        .push(i64_of("inner", map.inner)?)
        .push(i64_of("block", map.block)?)
        .push(i64_of("outer stride", map.stride_outer)?)
        .push(i64_of("block stride", map.stride_block)?)
        .push(i64_of("inner stride", map.stride_inner)?))
}

/// The leading kernel arguments of the GEMMs: `a_q, a_scales, [a,] b, b_scales, y, M, N, K`.
/// `a` (the float activation) only for the tensor-core and split-K kernels, which can quantize
/// it themselves; the pre-quantized GEMMs (generic, pipeline, fragment) take `None`.
#[allow(clippy::too_many_arguments)]
fn gemm_params(
    a_q: u64,
    a_scales: u64,
    a: Option<u64>,
    b: u64,
    b_scales: u64,
    y: u64,
    m: usize,
    n: usize,
    k: usize,
) -> GpuResult<Params> {
    let mut params = Params::new().push(a_q).push(a_scales);
    if let Some(a) = a {
        params = params.push(a);
    }
    Ok(params
        .push(b)
        .push(b_scales)
        .push(y)
        .push(dim_i32("M", m)?)
        .push(dim_i32("N", n)?)
        .push(dim_i32("K", k)?))
}

/// The fragment GEMM's operands: one 16-byte load per lane of weights, one 4-byte word per scale
/// group; activations by 8-byte fragment loads (16-byte copies in `_fsa`), 4-byte scale words.
pub(super) fn check_frag_operands(
    (a_q, a_scales): (u64, u64),
    (wf, wsf): (u64, u64),
) -> GpuResult<()> {
    check_aligned("b (fragment-packed)", wf, 16)?;
    check_aligned("b_scales (fragment-packed)", wsf, 4)?;
    check_aligned("a (fragment GEMM)", a_q, 8)?;
    check_aligned("a_scales (fragment GEMM)", a_scales, 4)
}

/// The fragment GEMM's grid: x = activation-row tiles x splits, y = 16-column tiles, or pairs of
/// them for `_t2` / `_g1`, or both for `_t2h` (FragLoop::blocks_y; mx_matmul_frag.hip MxFragBlock: the row tiles of one weight tile run together
/// and share it through L2).
pub(super) fn frag_grid(m: usize, n: usize, fk: &FragKernel) -> GpuResult<[u32; 3]> {
    if n.div_ceil(16) > 65535 {
        return Err(KernelError::Shape(format!(
            "MxMatMul N = {n}: the fragment GEMM takes at most 65535 16-column tiles"
        ))
        .into());
    }
    Ok([
        dim_u32("grid", m.div_ceil(fk.rows) * fk.s)?,
        dim_u32("grid", fk.lp.blocks_y(n.div_ceil(16)))?,
        1,
    ])
}

/// The fragment GEMM kernel `fk` with `out` elements in the family named by `prefix`
/// (`mx_matmul_frag_`, or `mx_matmul_fragg_` for grouped launches):
/// `<prefix>m<rows>_<out>_w<w>_s<s><loop suffix>`.
pub(super) fn frag_kernel_name(prefix: &str, out: &str, fk: &FragKernel) -> String {
    format!(
        "{prefix}m{}_{out}_w{}_s{}{}",
        fk.rows,
        fk.w,
        fk.s,
        fk.lp.suffix()
    )
}

fn quant_flags(q: &QuantConfig) -> u32 {
    (match q.scale_rule {
        ScaleRule::Floor => 0,
        ScaleRule::Rceil => F_RCEIL,
        ScaleRule::FloorF16 => F_SCALE_F16,
    }) | (if q.nan_policy == NanPolicy::Ignore {
        F_NAN_IGNORE
    } else {
        0
    })
}

/// The kernel-name suffix of MX values read by a dequantizing kernel (`op` names the op).
pub(super) fn mx_values_suffix(op: &str, dt: DType) -> GpuResult<&'static str> {
    match dt {
        DType::E4M3 => Ok("e4m3"),
        DType::E5M2 => Ok("e5m2"),
        DType::E2M1 => Ok("e2m1"),
        other => Err(KernelError::DType(format!(
            "{op} reads E4M3, E5M2 or E2M1 values, got {other:?}"
        ))
        .into()),
    }
}

pub(super) fn dtype_suffix(dt: DType) -> GpuResult<&'static str> {
    match dt {
        DType::BF16 => Ok("bf16"),
        DType::F16 => Ok("f16"),
        DType::F32 => Ok("f32"),
        other => Err(KernelError::DType(format!(
            "GPU kernels take bf16, f16 or f32, got {other:?}"
        ))
        .into()),
    }
}

pub(super) fn check_k(what: &str, k: usize) -> GpuResult<()> {
    if k == 0 || !k.is_multiple_of(BLOCK) {
        return Err(
            KernelError::Shape(format!("{what} = {k} must be a positive multiple of 32")).into(),
        );
    }
    Ok(())
}

/// The vector loads need 16-byte aligned bases (allocators give 256).
pub(super) fn check_aligned(what: &str, ptr: u64, align: u64) -> GpuResult<()> {
    if ptr == 0 || !ptr.is_multiple_of(align) {
        return Err(KernelError::Buffer(format!(
            "{what} pointer {ptr:#x} is null or not {align}-byte aligned"
        ))
        .into());
    }
    Ok(())
}

pub(super) fn dim_u32(what: &str, v: usize) -> GpuResult<u32> {
    u32::try_from(v)
        .map_err(|_| KernelError::Shape(format!("{what} = {v} exceeds the launch limits")).into())
}

pub(super) fn dim_i32(what: &str, v: usize) -> GpuResult<i32> {
    i32::try_from(v).map_err(|_| {
        KernelError::Shape(format!("{what} = {v} exceeds the kernel's int range")).into()
    })
}

/// The most parameters a kernel takes, and the 8-byte words their values may fill.
const MAX_PARAMS: usize = 24;
const PARAM_WORDS: usize = 64;

/// Kernel parameters as the launch API wants them: one pointer per value. The values live in an
/// inline buffer, each at an 8-byte-aligned offset, not in a heap allocation each: a decode
/// step's launches are host-bound (the driver's own launch took 2.2-3.4 µs on the H200 hosts),
/// and the GEMM's ten values cost 317 ns boxed against 135 ns here (BENCHMARKS.md, session 27).
pub(super) struct Params {
    words: [u64; PARAM_WORDS],
    at: [usize; MAX_PARAMS],
    n: usize,
    used: usize,
    /// Set when a launcher passed more than the buffer holds; `run` refuses the launch.
    overflow: bool,
}

impl Params {
    pub(super) fn new() -> Self {
        Params {
            words: [0; PARAM_WORDS],
            at: [0; MAX_PARAMS],
            n: 0,
            used: 0,
            overflow: false,
        }
    }
    /// Appends one value: a plain C value of at most 8-byte alignment (pointers as `u64`,
    /// integers, floats, `#[repr(C)]` structs of them).
    pub(super) fn push<T: Copy + 'static>(mut self, v: T) -> Self {
        const { assert!(std::mem::align_of::<T>() <= 8) };
        let words = std::mem::size_of::<T>().div_ceil(8);
        if self.n == MAX_PARAMS || self.used + words > PARAM_WORDS {
            self.overflow = true;
            return self;
        }
        // SAFETY: words[used .. used + words] lies inside the buffer (checked above) and is
        // 8-byte aligned, enough for T.
        unsafe { self.words.as_mut_ptr().add(self.used).cast::<T>().write(v) };
        self.at[self.n] = self.used;
        self.n += 1;
        self.used += words;
        self
    }
    /// One pointer per value, into this buffer (valid while `self` is neither moved nor
    /// dropped).
    fn pointers(&mut self) -> [*mut c_void; MAX_PARAMS] {
        let base = self.words.as_mut_ptr();
        let mut p = [std::ptr::null_mut(); MAX_PARAMS];
        for (slot, &at) in p.iter_mut().zip(&self.at[..self.n]) {
            // SAFETY: `at` is an offset inside the buffer (push).
            *slot = unsafe { base.add(at) }.cast::<c_void>();
        }
        p
    }
}

impl GpuRuntime {
    pub(super) fn run(
        &self,
        name: &str,
        grid: [u32; 3],
        block: u32,
        mut params: Params,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let (f, arity) = self.function_and_arity(name)?;
        if params.overflow {
            return Err(KernelError::Unsupported(format!(
                "internal error: the launcher of kernel {name} passed more than {MAX_PARAMS} parameters or {} bytes",
                8 * PARAM_WORDS
            ))
            .into());
        }
        let count = params.n;
        let mut ptrs = params.pointers();
        // The launch reads one argument pointer per kernel parameter from `ptrs`: a count that
        // does not match the kernel would read past the ones set (a crash of the host process),
        // so it is an error here instead (where the driver reports the count: CUDA 12.4+).
        if let Some(n) = arity.filter(|&n| n != count) {
            return Err(KernelError::Unsupported(format!(
                "internal error: kernel {name} takes {n} arguments, its launcher passed {count}"
            ))
            .into());
        }
        let pdl = self.pdl() && pdl_kernel(name);
        // SAFETY: every launcher below builds `params` in the order and with the exact C types
        // of the kernel it names (kernels/gpu/*.hip) and validates the extents first; every
        // kernel waits for its predecessor before touching memory (MX_PDL_ENTRY).
        let pdl_ok = unsafe {
            self.driver()
                .launch(f, grid, [block, 1, 1], stream, &mut ptrs[..count], pdl)?
        };
        if !pdl_ok {
            self.pdl_refused();
        }
        Ok(())
    }

    /// Whether launches may be programmatic dependent launches: CUDA sm_90+ with
    /// `cuLaunchKernelEx`, unless `MXFUSE_GPU_PDL=0` (or `off`) or the driver refused one.
    /// Which kernels take them: [`pdl_kernel`].
    fn pdl(&self) -> bool {
        self.clusters()
            && self.driver().has_launch_ex()
            && self.pdl_allowed()
            && env_switch!("MXFUSE_GPU_PDL")
    }

    fn round_to_warps(&self, threads: usize) -> usize {
        let w = self.device().warp_size.max(32) as usize;
        threads.div_ceil(w) * w
    }

    /// Whether the split-K cluster GEMM (kernels/gpu/mx_matmul_splitk.hip) is the GEMM: NVIDIA
    /// sm_90+ with `MXFUSE_GPU_V2=1`. Off by default: on the H200 it won only at N = 6144,
    /// K = 768, M <= 8 (by <= 9 %) and lost at the other decode shapes (BENCHMARKS.md).
    fn v2(&self) -> bool {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        self.clusters()
            && *ON
                .get_or_init(|| std::env::var("MXFUSE_GPU_V2").is_ok_and(|v| v == "1" || v == "on"))
    }

    /// Whether the cp.async pipeline GEMM (kernels/gpu/mx_matmul_pipe.hip) may serve pre-quantized
    /// activations: NVIDIA sm_90+, unless `MXFUSE_GPU_PIPE=0` (or `off`) selects the first
    /// tensor-core kernel (mx_matmul.hip) instead.
    fn pipe(&self) -> bool {
        self.clusters() && env_switch!("MXFUSE_GPU_PIPE")
    }

    /// Whether a constant MX weight with reduction length `k` should be packed for the
    /// fragment-packed decode GEMM ([`super::pack::pack_frag_weights`], [`GpuMatB::MxFrag`]):
    /// CUDA sm_90+ and `k % 128 == 0`, unless `MXFUSE_GPU_FRAG=0` (or `off`) keeps the `[N, K]`
    /// layout (the pipeline / first tensor-core GEMM) for comparisons.
    pub fn frag_gemm_available(&self, k: usize) -> bool {
        self.frag_gemm_runs(k) && env_switch!("MXFUSE_GPU_FRAG")
    }

    /// Whether the fragment-packed GEMM can run this `k` on this device (its kernels exist only
    /// for sm_90+: fp8 mma and clusters).
    pub(super) fn frag_gemm_runs(&self, k: usize) -> bool {
        self.clusters() && k > 0 && k.is_multiple_of(super::pack::FRAG_K_MULTIPLE)
    }

    /// Whether thread-block cluster kernels can run (NVIDIA sm_90+).
    fn clusters(&self) -> bool {
        self.backend() == Backend::Cuda && self.device().compute_capability >= 90
    }

    /// The device's multiprocessor count (128 where the driver does not say), as the kernel
    /// rules take it.
    pub fn multiprocessors(&self) -> usize {
        match self.device().multiprocessors {
            0 => 128, // unknown (HIP): a typical large part
            n => n as usize,
        }
    }

    /// `AddRmsNormMxQuant` over `rows` rows of `h`. `world_size` is the tensor-parallel group
    /// size of an absorbed AllReduce: 1 (identity) is supported, more is an error for now.
    #[allow(clippy::too_many_arguments)]
    pub fn add_rmsnorm_mxquant(
        &self,
        dtype: DType,
        gamma_dtype: DType,
        rows: usize,
        h: usize,
        bufs: &NormBuffers,
        attrs: &AddRmsNormAttrs,
        world_size: usize,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        if attrs.allreduce && world_size > 1 {
            return Err(KernelError::Unsupported(format!(
                "AddRmsNormMxQuant with an absorbed AllReduce over {world_size} ranks: multi-rank AllReduce is not implemented yet (world size 1 only)"
            ))
            .into());
        }
        check_k("hidden size", h)?;
        let t = dtype_suffix(dtype)?;
        let gf32 = match (gamma_dtype == dtype, gamma_dtype) {
            (true, _) => "",
            (false, DType::F32) => "_gf32",
            _ => {
                return Err(KernelError::DType(format!(
                    "gamma must be {dtype:?} or f32, got {gamma_dtype:?}"
                ))
                .into())
            }
        };
        for (what, p) in [
            ("x", Some(bufs.x)),
            ("residual", bufs.residual),
            ("gamma", Some(bufs.gamma)),
            ("q", Some(bufs.q)),
            ("residual_out", bufs.residual_out),
            ("normed", bufs.normed),
        ] {
            if let Some(p) = p {
                check_aligned(what, p, 16)?;
            }
        }
        check_aligned("scales", bufs.scales, 1)?;
        if rows == 0 {
            return Ok(());
        }
        let chunks = h / 8;
        // The device's measured table (thresholds.rs): few rows split over a cluster, many rows
        // with the measured chunks per lane, else as many lanes per row as a block holds (short
        // per-lane chains).
        let table = self.norm_launch_table();
        let split = if self.clusters() && table.split_rows(rows) {
            norm_split(rows, h, self.multiprocessors())
        } else {
            1
        };
        let holds = |c: usize| chunks <= c * norm_max_block(c);
        let nch = if split > 1 {
            1
        } else {
            let fit = [1usize, 2, 4]
                .into_iter()
                .find(|&c| holds(c))
                .ok_or_else(|| {
                    KernelError::Shape(format!("hidden size {h} exceeds the GPU kernel's 32768"))
                })?;
            table.chunks_per_lane(rows, self.multiprocessors(), fit, holds)
        };
        let block = self.round_to_warps(chunks.div_ceil(nch * split));
        let flags = quant_flags(&attrs.quant)
            | (if attrs.gemma { F_GEMMA } else { 0 })
            | (if attrs.gamma_in_f32 { F_GAMMA_F32 } else { 0 })
            | (if attrs.inv_form == InvForm::Div {
                F_INV_DIV
            } else {
                0
            })
            | (if attrs.round_sum { 0 } else { F_NO_ROUND_SUM });
        let params = Params::new()
            .push(bufs.x)
            .push(bufs.residual.unwrap_or(0))
            .push(bufs.gamma)
            .push(bufs.q)
            .push(bufs.scales)
            .push(bufs.residual_out.unwrap_or(0))
            .push(bufs.normed.unwrap_or(0))
            .push(dim_i32("hidden size", h)?)
            .push(attrs.epsilon)
            .push(flags);
        // The lean split-8 kernel (add_rmsnorm_mxquant.hip MX_NORM_LEAN_FLAGS; BENCHMARKS.md issue
        // 6 follow-up 10: M = 8 1.44 vs 2.09 us on the H200, bit-identical): its shape, flags and
        // outputs are compile-time constants, so it serves exactly that case.
        let lean = split == 8
            && t == "bf16"
            && gf32.is_empty()
            && h == 6144
            && block == 96
            && flags == F_GEMMA | F_GAMMA_F32
            && bufs.residual.is_some()
            && bufs.residual_out.is_some()
            && bufs.normed.is_some()
            && rows * h < 1 << 31
            && env_switch!("MXFUSE_GPU_NORM_LEAN");
        let name = if lean {
            format!("mx_add_rmsnorm_quant_{t}_c1_s8_lean")
        } else if split > 1 {
            format!("mx_add_rmsnorm_quant_{t}{gf32}_c1_s{split}")
        } else {
            format!("mx_add_rmsnorm_quant_{t}{gf32}_c{nch}")
        };
        self.run(
            &name,
            [dim_u32("rows", rows * split)?, 1, 1],
            dim_u32("block", block)?,
            params,
            stream,
        )
    }

    /// `SwiGluMxQuant` producing `rows` rows of `i` activations.
    #[allow(clippy::too_many_arguments)]
    pub fn swiglu_mxquant(
        &self,
        dtype: DType,
        rows: usize,
        i: usize,
        input: SwiGluBuffers,
        q: u64,
        scales: u64,
        attrs: &SwiGluAttrs,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        check_k("intermediate size", i)?;
        let t = dtype_suffix(dtype)?;
        let (gate, up, layout) = match (input, attrs.layout) {
            (SwiGluBuffers::Separate { gate, up }, SwiGluLayout::Separate) => (gate, up, 0i32),
            (SwiGluBuffers::Fused { gate_up }, SwiGluLayout::SplitHalves) => (gate_up, 0, 1),
            (SwiGluBuffers::Fused { gate_up }, SwiGluLayout::Interleaved) => (gate_up, 0, 2),
            _ => return Err(crate::reference::layout_mismatch(attrs.layout).into()),
        };
        let table = SwiGluLaunchTable::for_arch(&self.device().arch);
        let outputs = rows * i;
        let use_table = self.swiglu_takes_table_kernel(dtype, rows, i, attrs);
        let (e, block) = if use_table {
            (8, swiglu_table_kernel::BLOCK)
        } else {
            table.shape(outputs)
        };
        let align = (e * dtype.size()).min(16) as u64;
        check_aligned("gate", gate, align)?;
        if layout == 0 {
            check_aligned("up", up, align)?;
        }
        check_aligned("q", q, e as u64)?;
        check_aligned("scales", scales, 1)?;
        let lanes = outputs / e;
        if lanes == 0 {
            return Ok(());
        }
        let oai = attrs.activation == Activation::Oai;
        let act = usize::from(oai) + 2 * usize::from(attrs.fp32_activation);
        let flags = quant_flags(&attrs.quant)
            | (if oai { F_OAI } else { 0 })
            | (if attrs.fp32_activation { F_FP32_ACT } else { 0 })
            | (if attrs.swish_form == SwishForm::SingleOp {
                F_SWISH_SINGLE
            } else {
                0
            })
            | (if !use_table && table.pinned(outputs, attrs.fp32_activation) {
                F_SIGMA_PINNED
            } else {
                0
            });
        let params = Params::new()
            .push(gate)
            .push(up)
            .push(q)
            .push(scales)
            .push(rows as i64)
            .push(dim_i32("intermediate size", i)?)
            .push(layout)
            .push(attrs.alpha)
            .push(attrs.limit)
            .push(attrs.beta)
            .push(flags);
        let blocks = lanes.div_ceil(block);
        let (name, grid) = if use_table {
            let name = format!("mx_swiglu_quant_{t}_e8_a{act}_table");
            let resident = self.resident_blocks(&name, dim_u32("block", block)?)?;
            let grid = swiglu_table_kernel::grid(blocks, self.multiprocessors(), resident);
            (name, grid)
        } else {
            (format!("mx_swiglu_quant_{t}_e{e}_a{act}"), blocks)
        };
        self.run(
            &name,
            [dim_u32("grid", grid)?, 1, 1],
            dim_u32("block", block)?,
            params,
            stream,
        )
    }

    /// Whether `SwiGluMxQuant` of `rows` × `i` outputs takes the table kernel
    /// ([`swiglu_table_kernel`]): CUDA sm_80+ (where the kernels exist), from the device's
    /// measured `table_from` outputs on, and only where the kernel's preconditions hold (so its
    /// trap is unreachable from the runtime); `MXFUSE_GPU_SWIGLU_TABLE=0` (or `off`) keeps the
    /// default kernels for comparisons.
    pub fn swiglu_takes_table_kernel(
        &self,
        dtype: DType,
        rows: usize,
        i: usize,
        attrs: &SwiGluAttrs,
    ) -> bool {
        env_switch!("MXFUSE_GPU_SWIGLU_TABLE")
            && self.backend() == Backend::Cuda
            && self.device().compute_capability >= 80
            && SwiGluLaunchTable::for_arch(&self.device().arch).table(rows * i)
            && swiglu_table_kernel::refusal(dtype, attrs).is_none()
    }

    /// `MxQuantize` of `elements` values in rows of `k`.
    #[allow(clippy::too_many_arguments)]
    pub fn mx_quantize(
        &self,
        dtype: DType,
        elements: usize,
        k: usize,
        x: u64,
        q: u64,
        scales: u64,
        quant: &QuantConfig,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        check_k("K", k)?;
        if !elements.is_multiple_of(k) {
            return Err(
                KernelError::Shape(format!("{elements} elements are not rows of {k}")).into(),
            );
        }
        let t = dtype_suffix(dtype)?;
        let e = if elements < SMALL_ELEMENTS { 2 } else { 8 };
        check_aligned("x", x, if e == 8 { 16 } else { dtype.size() as u64 * 2 })?;
        check_aligned("q", q, e as u64)?;
        check_aligned("scales", scales, 1)?;
        let lanes = elements / e;
        if lanes == 0 {
            return Ok(());
        }
        let params = Params::new()
            .push(x)
            .push(q)
            .push(scales)
            .push(elements as i64)
            .push(quant_flags(quant));
        let name = format!("mx_quantize_{t}_e{e}");
        self.run(
            &name,
            [dim_u32("grid", lanes.div_ceil(256))?, 1, 1],
            256,
            params,
            stream,
        )
    }

    /// `MxDequantize`: `y = decode(x) · 2^(s − 127)` with x's element → scale index `map`
    /// (x E4M3 or E5M2 bytes or E2M1 packed two per byte, scale E8M0 bytes, y of `y_dtype`;
    /// sizes from `map`).
    #[allow(clippy::too_many_arguments)]
    pub fn mx_dequantize(
        &self,
        x_dtype: DType,
        y_dtype: DType,
        map: &ScaleMap,
        x: u64,
        scale: u64,
        y: u64,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let xt = mx_values_suffix("MxDequantize", x_dtype)?;
        let t = dtype_suffix(y_dtype)?;
        check_aligned("x", x, 1)?;
        check_aligned("scale", scale, 1)?;
        check_aligned("y", y, y_dtype.size() as u64)?;
        let params = scale_map_params(Params::new().push(x).push(scale).push(y), map)?;
        self.run_over_scale_map(
            "MxDequantize",
            &format!("mx_dequantize_{xt}_{t}"),
            map,
            params,
            stream,
        )
    }

    /// Launches a grid-stride element-wise kernel (mx_dequantize.hip, mx_quantize_linear.hip)
    /// over `map`'s elements with its arguments `params`: nothing for no elements, an error for a
    /// degenerate map (`op` names the op).
    fn run_over_scale_map(
        &self,
        op: &str,
        name: &str,
        map: &ScaleMap,
        params: Params,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let elements = map.len();
        if elements == 0 {
            return Ok(());
        }
        if map.block == 0 || map.inner == 0 || map.axis_len == 0 {
            return Err(KernelError::Shape(format!("{op} scale map {map:?}")).into());
        }
        // Grid-stride: enough blocks to fill any device, never more than the elements need.
        let blocks = elements.div_ceil(256).min(1 << 16);
        self.run(name, [dim_u32("grid", blocks)?, 1, 1], 256, params, stream)
    }

    /// `MxQuantizeLinear`: `y = fp8(x / 2^(s − 127))` with x's element → scale index `map`
    /// (x of `x_dtype`, scale E8M0 bytes, y E4M3 or E5M2 bytes; sizes from `map`).
    #[allow(clippy::too_many_arguments)]
    pub fn mx_quantize_linear(
        &self,
        x_dtype: DType,
        y_dtype: DType,
        saturate: bool,
        map: &ScaleMap,
        x: u64,
        scale: u64,
        y: u64,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let yt = match y_dtype {
            DType::E4M3 => "e4m3",
            DType::E5M2 => "e5m2",
            other => {
                return Err(KernelError::DType(format!(
                    "MxQuantizeLinear writes E4M3 or E5M2 values, got {other:?}"
                ))
                .into())
            }
        };
        let t = dtype_suffix(x_dtype)?;
        check_aligned("x", x, x_dtype.size() as u64)?;
        check_aligned("scale", scale, 1)?;
        check_aligned("y", y, 1)?;
        let params = scale_map_params(Params::new().push(x).push(scale).push(y), map)?
            .push(i32::from(saturate));
        let name = format!("mx_quantize_linear_{t}_{yt}");
        self.run_over_scale_map("MxQuantizeLinear", &name, map, params, stream)
    }

    /// Whether the tensor-core decode GEMM serves this B (NVIDIA sm_89+, E4M3 `[N, K]` weights).
    fn tensor_core_gemm(&self, b: &GpuMatB) -> bool {
        self.backend() == Backend::Cuda
            && self.device().compute_capability >= 89
            && matches!(b, GpuMatB::Mx { trans_b: true, .. })
    }

    /// `MxMatMul`: `y[m, n] = Σ_k deq(a_q)[m, k] · deq(b)[k, n]` with E4M3 activations.
    #[allow(clippy::too_many_arguments)]
    pub fn mx_matmul(
        &self,
        m: usize,
        k: usize,
        n: usize,
        a_q: u64,
        a_scales: u64,
        b: &GpuMatB,
        y: u64,
        out_dtype: DType,
        ep: &GpuEpilogue,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        check_k("K", k)?;
        let o = dtype_suffix(out_dtype)?;
        check_aligned("a_q", a_q, 8)?;
        check_aligned("a_scales", a_scales, 4)?;
        check_aligned("y", y, out_dtype.size() as u64)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        if self.prefill_takes((m, k, n), DType::E4M3, b, out_dtype, ep) {
            return self.mx_matmul_prefill((m, k, n), a_q, a_scales, b, y, out_dtype, ep, stream);
        }
        let epi = ep.params(m, n, out_dtype)?;
        if self.tensor_core_gemm(b) {
            return self.matmul_tc("e4m3", m, k, n, a_q, a_scales, 0, b, (y, o), 0, epi, stream);
        }
        let (bptr, bscales, bmode) = match *b {
            GpuMatB::Mx { q, scales, trans_b } => (q, scales, i32::from(trans_b)),
            GpuMatB::MxFrag { q, scales, .. } => {
                return self.matmul_frag(m, k, n, a_q, a_scales, (q, scales), (y, o), epi, stream)
            }
            GpuMatB::Float {
                data,
                dtype,
                trans_b,
            } => {
                let mode = match dtype {
                    DType::BF16 => 2,
                    DType::F16 => 3,
                    DType::F32 => 4,
                    other => {
                        return Err(
                            KernelError::DType(format!("MxMatMul b of type {other:?}")).into()
                        )
                    }
                };
                (data, 0, mode | if trans_b { 8 } else { 0 })
            }
        };
        check_aligned("b", bptr, 4)?;
        let params = gemm_params(a_q, a_scales, None, bptr, bscales, y, m, n, k)?
            .push(bmode)
            .push(epi);
        let name = format!("mx_matmul_generic_{o}");
        self.run(
            &name,
            [dim_u32("grid", n.div_ceil(128))?, dim_u32("M", m)?, 1],
            128,
            params,
            stream,
        )
    }

    /// A GEMM whose activations arrive unquantized (`a` bf16/f16 `[m, k]`): quantized inside the
    /// GEMM when the device's [`InGemmQuantThresholds`] say it pays, else by a separate
    /// [`GpuRuntime::mx_quantize`] into `a_q` / `a_scales` (caller-provided workspace of m·k and
    /// m·k/32 bytes) followed by [`GpuRuntime::mx_matmul`].
    #[allow(clippy::too_many_arguments)]
    pub fn mx_matmul_quantizing_a(
        &self,
        a_dtype: DType,
        m: usize,
        k: usize,
        n: usize,
        a: u64,
        quant: &QuantConfig,
        workspace: (u64, u64),
        b: &GpuMatB,
        y: u64,
        out_dtype: DType,
        ep: &GpuEpilogue,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        check_k("K", k)?;
        let in_gemm = self.tensor_core_gemm(b)
            && matches!(a_dtype, DType::BF16 | DType::F16)
            && self.in_gemm_quant_thresholds().use_in_gemm(m, k);
        if !in_gemm {
            self.mx_quantize(
                a_dtype,
                m * k,
                k,
                a,
                workspace.0,
                workspace.1,
                quant,
                stream,
            )?;
            return self.mx_matmul(
                m,
                k,
                n,
                workspace.0,
                workspace.1,
                b,
                y,
                out_dtype,
                ep,
                stream,
            );
        }
        let o = dtype_suffix(out_dtype)?;
        check_aligned("a", a, 16)?;
        check_aligned("y", y, out_dtype.size() as u64)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let epi = ep.params(m, n, out_dtype)?;
        let amode = if a_dtype == DType::BF16 {
            "qbf16"
        } else {
            "qf16"
        };
        let flags = quant_flags(quant);
        self.matmul_tc(amode, m, k, n, 0, 0, a, b, (y, o), flags, epi, stream)
    }

    /// The fragment-packed decode GEMM (kernels/gpu/mx_matmul_frag.hip) on `(wf, wsf)` from
    /// [`super::pack::pack_frag_weights`]; `a_q` / `a_scales` / `y` and `m, n > 0` are checked by
    /// the caller.
    #[allow(clippy::too_many_arguments)]
    fn matmul_frag(
        &self,
        m: usize,
        k: usize,
        n: usize,
        a_q: u64,
        a_scales: u64,
        (wf, wsf): (u64, u64),
        (y, out): (u64, &str),
        epi: EpilogueParams,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        if !self.frag_gemm_runs(k) {
            return Err(KernelError::Unsupported(format!(
                "fragment-packed weights (GpuMatB::MxFrag) need CUDA compute capability >= 9.0 and K a multiple of 128; this is {:?} {} with K = {k}",
                self.backend(),
                self.device().arch
            ))
            .into());
        }
        check_frag_operands((a_q, a_scales), (wf, wsf))?;
        let fk = self.fit_clusters(
            "mx_matmul_frag_",
            out,
            m,
            n,
            self.frag_kernel_for(m, k, n, a_q, out),
        )?;
        let params = gemm_params(a_q, a_scales, None, wf, wsf, y, m, n, k)?
            .push(fk.pre())
            .push(epi);
        let name = frag_kernel_name("mx_matmul_frag_", out, &fk);
        let grid = frag_grid(m, n, &fk)?;
        self.run(&name, grid, 32 * fk.w as u32, params, stream)
    }

    /// `fk` (kernel [`frag_kernel_name`]`(prefix, out, fk)` on `m` rows of `n` columns) with its
    /// cluster split reduced until the device holds all of its clusters at once
    /// (shapes::fit_cluster_split; the driver's answer is asked once per kernel).
    pub(super) fn fit_clusters(
        &self,
        prefix: &str,
        out: &str,
        m: usize,
        n: usize,
        fk: FragKernel,
    ) -> GpuResult<FragKernel> {
        let grid = |f: &FragKernel| frag_grid(m, n, f);
        fit_cluster_split(
            fk,
            |f| grid(f).map_or(0, |g| (g[0] as usize / f.s) * g[1] as usize),
            |f| {
                let name = frag_kernel_name(prefix, out, f);
                self.active_clusters(&name, grid(f)?, 32 * f.w as u32)
            },
        )
    }

    /// The fragment GEMM kernel for `m` rows of `n x k` with `out` elements (shapes::frag_kernel
    /// with this device's table and the runtime's switches).
    pub(super) fn frag_kernel_for(
        &self,
        m: usize,
        k: usize,
        n: usize,
        a_q: u64,
        out: &str,
    ) -> FragKernel {
        let table = FragGemmTable::for_arch(&self.device().arch);
        // MXFUSE_GPU_FRAG_FS=0 keeps the m8 / m16 kernels (no `_fs` loop); MXFUSE_GPU_FRAG_L2PF=0
        // turns the L2 prefetch off, MXFUSE_GPU_FRAG_FSA=0 the staged `_fsa` form of `_fs`,
        // MXFUSE_GPU_FRAG_W3=0 the m8 kernel on 3 warps, MXFUSE_GPU_FRAG_T2=0 the two-tile loop,
        // MXFUSE_GPU_FRAG_G1=0 the one-group loop, MXFUSE_GPU_FRAG_T2H=0 the two-tile loop's mixed
        // grid, MXFUSE_GPU_FRAG_G1C=0 the 16-row one-group loop (shapes::frag_kernel says where
        // each is taken).
        let switches = FragSwitches {
            fs: env_switch!("MXFUSE_GPU_FRAG_FS"),
            l2_prefetch: env_switch!("MXFUSE_GPU_FRAG_L2PF"),
            staged_a: env_switch!("MXFUSE_GPU_FRAG_FSA") && a_q.is_multiple_of(16),
            trim_idle_warp: env_switch!("MXFUSE_GPU_FRAG_W3"),
            two_tiles: env_switch!("MXFUSE_GPU_FRAG_T2"),
            one_group: env_switch!("MXFUSE_GPU_FRAG_G1"),
            mixed_grid: env_switch!("MXFUSE_GPU_FRAG_T2H"),
            one_group_16: env_switch!("MXFUSE_GPU_FRAG_G1C"),
        };
        frag_kernel(
            n,
            k,
            m,
            self.multiprocessors(),
            &table,
            out == "bf16",
            switches,
        )
    }

    /// This device's `AddRmsNormMxQuant` kernel table.
    pub fn norm_launch_table(&self) -> NormLaunchTable {
        NormLaunchTable::for_arch(&self.device().arch)
    }

    /// This device's in-GEMM quantization crossover.
    pub fn in_gemm_quant_thresholds(&self) -> InGemmQuantThresholds {
        InGemmQuantThresholds::for_arch(&self.device().arch)
    }

    #[allow(clippy::too_many_arguments)]
    fn matmul_tc(
        &self,
        amode: &str,
        m: usize,
        k: usize,
        n: usize,
        a_q: u64,
        a_scales: u64,
        a: u64,
        b: &GpuMatB,
        (y, out): (u64, &str),
        flags: u32,
        epi: EpilogueParams,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let GpuMatB::Mx {
            q: w, scales: ws, ..
        } = *b
        else {
            return Err(
                KernelError::Unsupported("tensor-core GEMM needs E4M3 weights".into()).into(),
            );
        };
        check_aligned("b", w, 8)?;
        check_aligned("b_scales", ws, 4)?;
        let mt = if m <= 8 { 1 } else { 2 };
        // Both kernel families take the same arguments; only the name and grid differ.
        let params = gemm_params(a_q, a_scales, Some(a), w, ws, y, m, n, k)?
            .push(flags)
            .push(epi);
        let pipe = if amode == "e4m3"
            && !self.v2()
            && self.pipe()
            && k.is_multiple_of(128)
            && w.is_multiple_of(16)
            && a_q.is_multiple_of(16)
        {
            // 16-byte cp.async of weight and activation rows, 4-byte copies of scale words.
            let table = PipeGemmTable::for_arch(&self.device().arch);
            pipe_shape(n, k, m, self.multiprocessors(), &table)
        } else {
            (0, 0)
        };
        if pipe.0 > 0 {
            let (wp, s) = pipe;
            let name = format!("mx_matmul_pipe_m{}_{out}_w{wp}_s{s}", 8 * mt);
            let params = gemm_params(a_q, a_scales, None, w, ws, y, m, n, k)?.push(epi);
            let grid = [
                dim_u32("grid", n.div_ceil(16 * wp) * s)?,
                dim_u32("grid", m.div_ceil(8 * mt))?,
                1,
            ];
            return self.run(&name, grid, 32 * wp as u32, params, stream);
        }
        if self.v2() && w.is_multiple_of(16) && (amode != "e4m3" || a_q.is_multiple_of(16)) {
            // 16-byte weight and activation loads (allocators give 256-byte alignment).
            let (s, warps) = splitk_shape(n, k, m, self.multiprocessors());
            let name = format!("mx_matmul_sk_{amode}_m{}_{out}_s{s}", 8 * mt);
            let grid = [
                dim_u32("grid", n.div_ceil(16) * s)?,
                dim_u32("grid", m.div_ceil(8 * mt))?,
                1,
            ];
            return self.run(&name, grid, 32 * warps as u32, params, stream);
        }
        let blocks = n.div_ceil(16) * m.div_ceil(8 * mt);
        let sms = self.multiprocessors();
        // Measured (BENCHMARKS.md): 16 warps split K when the grid has fewer column tiles than
        // SMs, 8 otherwise; the software pipeline only pays when blocks leave SMs idle.
        let warps: u32 = if n.div_ceil(16) < sms { 16 } else { 8 };
        let pf = if blocks < sms { "_pf" } else { "" };
        let name = format!("mx_matmul_tc_{amode}_m{}_{out}{pf}", 8 * mt);
        let grid = [
            dim_u32("grid", n.div_ceil(16))?,
            dim_u32("grid", m.div_ceil(8 * mt))?,
            1,
        ];
        self.run(&name, grid, 32 * warps, params, stream)
    }
}

#[cfg(test)]
mod tests {
    use super::{pdl_kernel, EpilogueParams, Params, MAX_PARAMS, PARAM_WORDS};

    #[test]
    fn params_hand_the_launch_one_aligned_pointer_per_value() {
        let epi = EpilogueParams {
            bias: 0xdead_beef,
            ld: 6144,
            cs: 1,
            alpha: 0.5,
            beta: -2.0,
        };
        let mut p = Params::new()
            .push(7u64)
            .push(-3i32)
            .push(2.5f32)
            .push(epi)
            .push(-9i64)
            .push(1u32);
        let ptrs = p.pointers();
        assert!(!p.overflow);
        assert_eq!(p.n, 6);
        assert!(ptrs[..6]
            .iter()
            .all(|q| (q.cast::<u8>() as usize).is_multiple_of(8)));
        assert!(ptrs[6..].iter().all(|q| q.is_null()));
        // SAFETY: each pointer points at the value pushed in its position, of that type.
        unsafe {
            assert_eq!(*ptrs[0].cast::<u64>(), 7);
            assert_eq!(*ptrs[1].cast::<i32>(), -3);
            assert_eq!(*ptrs[2].cast::<f32>(), 2.5);
            let e = *ptrs[3].cast::<EpilogueParams>();
            assert_eq!(
                (e.bias, e.ld, e.cs, e.alpha, e.beta),
                (0xdead_beef, 6144, 1, 0.5, -2.0)
            );
            assert_eq!(*ptrs[4].cast::<i64>(), -9);
            assert_eq!(*ptrs[5].cast::<u32>(), 1);
        }
        // The 24-byte struct took three words: the value after it starts past them.
        assert_eq!(
            ptrs[4].cast::<u8>() as usize - ptrs[3].cast::<u8>() as usize,
            std::mem::size_of::<EpilogueParams>()
        );
    }

    #[test]
    fn a_parameter_list_past_the_buffer_is_flagged_not_written() {
        let mut p = Params::new();
        for i in 0..MAX_PARAMS + 3 {
            p = p.push(i as u64);
        }
        assert!(p.overflow);
        assert_eq!(p.n, MAX_PARAMS);
        // Too many words in fewer values.
        let mut q = Params::new();
        for _ in 0..PARAM_WORDS / 3 + 1 {
            q = q.push([0u64; 3]);
        }
        assert!(q.overflow && q.used <= PARAM_WORDS);
    }

    #[test]
    fn env_switches_are_read_once() {
        // One use site, as a launcher has; a variable no other test reads: off at the first
        // read stays off.
        fn site() -> bool {
            env_switch!("MXFUSE_TEST_SWITCH_READ_ONCE")
        }
        std::env::set_var("MXFUSE_TEST_SWITCH_READ_ONCE", "off");
        assert!(!site());
        std::env::set_var("MXFUSE_TEST_SWITCH_READ_ONCE", "1");
        assert!(!site());
        assert!(env_switch!("MXFUSE_TEST_SWITCH_NEVER_SET"));
    }

    #[test]
    fn pdl_skips_the_pipeline_gemm_only() {
        for name in [
            "mx_add_rmsnorm_quant_bf16_c1",
            "mx_add_rmsnorm_quant_bf16_c1_s2",
            "mx_add_rmsnorm_quant_f16_gf32_c1_s4",
            "mx_add_rmsnorm_quant_bf16_gf32_c3",
            "mx_swiglu_quant_bf16_e1_a1",
            "mx_swiglu_quant_bf16_e8_a1_table",
            "mx_quantize_bf16_e2",
            "mx_matmul_frag_m8_bf16_w8_s2",
            "mx_matmul_tc_e4m3_m8_bf16_pf",
            "mx_matmul_sk_e4m3_m16_f32_s4",
            "mx_matmul_generic_f32",
        ] {
            assert!(pdl_kernel(name), "{name}");
        }
        assert!(!pdl_kernel("mx_matmul_pipe_m8_bf16_w2_s8"));
    }
}
