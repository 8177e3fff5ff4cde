//! Launchers of kernels/gpu/mx_gather.hip: `MxGatherDequantize` and `MxGatherMatMul` on device
//! pointers, the shapes and attributes checked as the CPU kernels (`crate::ops::gather`,
//! `crate::ops::gather_matmul`) check them. (The same GEMV kernels on one "expert" are the
//! weight-only `MxMatMul`: `super::weight_only`.)
//!
//! The indices stay on the device: the kernels check each against its range and, for one out of
//! range, write NaN instead of reading and record the value in the caller's error record `err`
//! (two u64: a flag, then the value; zero before the launch). The caller reads it after
//! synchronizing and fails the run with [`index_error`] when the flag is set.

use super::error::GpuResult;
use super::launch::{
    check_aligned, dim_i32, dim_u32, dtype_suffix, mx_values_suffix, Params, StreamHandle,
};
use super::runtime::GpuRuntime;
use crate::codec::BLOCK;
use crate::element::DType;
use crate::error::KernelError;
use crate::scale_map::ScaleMap;

/// Indices on the device: `count` int32 values, or int64 when `wide`.
#[derive(Debug, Clone, Copy)]
pub struct GpuIndices {
    pub ptr: u64,
    pub count: usize,
    pub wide: bool,
}

/// Stacked MX experts on the device: E4M3 (or FLOAT4E2M1 when `fp4`, two a byte, low nibble
/// first) values and E8M0 scales with blocks of 32 along K, `[E, N, K]` + `[E, N, K/32]` when
/// `nk`, else `[E, K, N]` + `[E, K/32, N]`.
#[derive(Debug, Clone, Copy)]
pub struct GpuExperts {
    pub q: u64,
    pub scales: u64,
    pub e: usize,
    pub n: usize,
    pub k: usize,
    pub fp4: bool,
    pub nk: bool,
}

/// One `MxGatherMatMul` product: `a` holds `a_samples` (1 or `samples`) samples of `p` rows of
/// K (weight first: p = 1, a `[S, K, 1]`), `y` `samples` × `p` rows of N.
#[derive(Debug, Clone, Copy)]
pub struct GpuGatherMatMul {
    pub a: u64,
    pub a_dtype: DType,
    pub a_samples: usize,
    pub p: usize,
    pub samples: usize,
    pub y: u64,
    pub y_dtype: DType,
}

/// Bytes of a gathered kernel's error record: a flag, then the offending index (two u64).
pub const GATHER_ERR_BYTES: usize = 16;

/// The run's error when the error record a gathered kernel wrote (`[flag, value]`) is set.
pub fn index_error(record: [u64; 2], range: usize) -> Option<KernelError> {
    (record[0] != 0).then(|| {
        KernelError::Shape(format!(
            "index {} is out of range [-{range}, {range}) (checked on the device)",
            record[1] as i64
        ))
    })
}

pub(super) fn i64_of(what: &str, v: usize) -> GpuResult<i64> {
    i64::try_from(v)
        .map_err(|_| KernelError::Shape(format!("{what} = {v} exceeds the kernel's range")).into())
}

/// The sample dim broadcasts as MatMul's batch dim: a's samples and the indices are 1 or
/// `mm.samples` each.
pub(super) fn check_broadcast(mm: &GpuGatherMatMul, idx: &GpuIndices) -> GpuResult<()> {
    let s = mm.samples;
    if !(mm.a_samples == 1 || mm.a_samples == s) || !(idx.count == 1 || idx.count == s) {
        return Err(KernelError::Shape(format!(
            "{} indices and {} activation samples do not broadcast to {s} samples",
            idx.count, mm.a_samples
        ))
        .into());
    }
    Ok(())
}

fn check_indices(idx: &GpuIndices) -> GpuResult<()> {
    check_aligned("indices", idx.ptr, if idx.wide { 8 } else { 4 })
}

/// Warps a block of the `[E, N, K]` E4M3 kernel (`MX_GMM_WARPS`), rows a block (`MX_GMM_ROWS`).
pub(super) const GMM_WARPS: usize = 8;
pub(super) const GMM_ROWS: usize = 8;
/// Threads a block of the any-layout kernel.
pub(super) const GMM_ANY_BLOCK: usize = 128;

impl GpuRuntime {
    /// `MxGatherDequantize`: `y = Gather(DequantizeLinear(x, scale, axis, block_size),
    /// indices, gather_axis)`; x E4M3, E5M2 or E2M1 of dims `x_dims`, scale E8M0 of
    /// `scale_dims` (per-tensor, per-axis or blocked, as `MxDequantize`), y of `y_dtype` and
    /// Gather's shape. `err`: the error record (module docs).
    #[allow(clippy::too_many_arguments)]
    pub fn mx_gather_dequantize(
        &self,
        x_dtype: DType,
        y_dtype: DType,
        x_dims: &[usize],
        scale_dims: &[usize],
        axis: i64,
        block_size: usize,
        gather_axis: i64,
        idx: GpuIndices,
        (x, scale, y, err): (u64, u64, u64, u64),
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let xt = mx_values_suffix("MxGatherDequantize", x_dtype)?;
        let t = dtype_suffix(y_dtype)?;
        let map = ScaleMap::new(x_dims, scale_dims, axis, block_size)?;
        let rank = x_dims.len() as i64;
        let norm = |a: i64, what: &str| -> GpuResult<usize> {
            if a < -rank || a >= rank {
                return Err(KernelError::Shape(format!(
                    "{what} {a} is out of range for x of rank {rank}"
                ))
                .into());
            }
            Ok(a.rem_euclid(rank.max(1)) as usize)
        };
        let g = norm(gather_axis, "gather_axis")?;
        let per_tensor = block_size == 0 && (scale_dims.is_empty() || scale_dims == [1]);
        if !per_tensor && norm(axis, "axis")? == g {
            return Err(KernelError::Attribute(format!(
                "gather_axis {gather_axis} is the quantized axis {axis}: gathering there would split scale blocks"
            ))
            .into());
        }
        let outer: usize = x_dims[..g].iter().product();
        let inner: usize = x_dims[g + 1..].iter().product();
        let d = x_dims[g];
        let elements = outer
            .checked_mul(idx.count)
            .and_then(|v| v.checked_mul(inner))
            .ok_or_else(|| KernelError::Shape("the gathered output overflows".into()))?;
        if elements == 0 {
            return Ok(());
        }
        if d == 0 {
            return Err(KernelError::Shape(format!(
                "x {x_dims:?} has nothing to gather along axis {g}"
            ))
            .into());
        }
        check_indices(&idx)?;
        check_aligned("x", x, 1)?;
        check_aligned("scale", scale, 1)?;
        check_aligned("y", y, y_dtype.size() as u64)?;
        check_aligned("err", err, 8)?;
        let params = Params::new()
            .push(x)
            .push(scale)
            .push(idx.ptr)
            .push(i32::from(idx.wide))
            .push(y)
            .push(i64_of("elements", elements)?)
            .push(i64_of("indices", idx.count)?)
            .push(i64_of("gathered axis", d)?)
            .push(i64_of("inner", inner)?)
            .push(i64_of("axis length", map.axis_len)?)
            .push(i64_of("inner", map.inner)?)
            .push(i64_of("block", map.block)?)
            .push(i64_of("outer stride", map.stride_outer)?)
            .push(i64_of("block stride", map.stride_block)?)
            .push(i64_of("inner stride", map.stride_inner)?)
            .push(err);
        let blocks = elements.div_ceil(256).min(1 << 16);
        let name = format!("mx_gather_dequantize_{xt}_{t}");
        self.run(&name, [dim_u32("grid", blocks)?, 1, 1], 256, params, stream)
    }

    /// `MxGatherMatMul`: each of `mm.samples` samples times the expert its index selects
    /// (`idx.count` 1 or `samples`), weight first (`weight_first`: `y[s] = W a[s]`, p = 1) or
    /// second (`y[s] = a[s] Wᵀ` over `[N, K]` rows). `err`: the error record (module docs).
    pub fn mx_gather_matmul(
        &self,
        mm: &GpuGatherMatMul,
        w: &GpuExperts,
        idx: GpuIndices,
        err: u64,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let (s, p, k, e, n) = (mm.samples, mm.p, w.k, w.e, w.n);
        if k == 0 || !k.is_multiple_of(BLOCK) {
            return Err(KernelError::Shape(format!(
                "MxGatherMatMul K = {k} must be a positive multiple of 32"
            ))
            .into());
        }
        check_broadcast(mm, &idx)?;
        if s == 0 || p == 0 || n == 0 {
            return Ok(());
        }
        if e == 0 {
            return Err(KernelError::Shape("no experts to select from".into()).into());
        }
        let (ta, to) = (dtype_suffix(mm.a_dtype)?, dtype_suffix(mm.y_dtype)?);
        check_indices(&idx)?;
        // The fast kernel's 16-byte loads: K % 32 == 0 keeps every row aligned to its base.
        check_aligned("a", mm.a, 16)?;
        check_aligned("b", w.q, 16)?;
        check_aligned("b_scale", w.scales, 1)?;
        check_aligned("y", mm.y, mm.y_dtype.size() as u64)?;
        check_aligned("err", err, 8)?;
        let params = Params::new()
            .push(mm.a)
            .push(w.q)
            .push(w.scales)
            .push(idx.ptr)
            .push(i32::from(idx.wide))
            .push(mm.y)
            .push(dim_i32("P", p)?)
            .push(dim_i32("K", k)?)
            .push(dim_i32("E", e)?)
            .push(dim_i32("N", n)?)
            .push(i32::from(mm.a_samples == 1))
            .push(i32::from(idx.count == 1));
        // Element offsets such as (e N + n) K are 64-bit in the kernels; this keeps them there.
        i64_of("expert elements", e.saturating_mul(n).saturating_mul(k))?;
        self.run_gemv(
            "mx_gather_matmul_",
            (ta, to),
            w,
            (s, p),
            params,
            |q| q.push(err),
            stream,
        )
    }

    /// Launches a GEMV kernel of mx_gather.hip over `samples` × `rows` rows of N: on `[.., N, K]`
    /// E4M3 rows `<family>nk_<ta>_<to>` (grid x = sample, y = MX_GMM_WARPS columns, z = row
    /// chunk), else `<family>any_*` (`family` ends in `_`) (x = 128 columns, y = sample, z = row; `nk` and `fp4` pushed
    /// after `params`). `tail` pushes the kernel's last argument (the error record, or the
    /// epilogue).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_gemv(
        &self,
        family: &str,
        (ta, to): (&str, &str),
        w: &GpuExperts,
        (samples, rows): (usize, usize),
        params: Params,
        tail: impl FnOnce(Params) -> Params,
        stream: StreamHandle,
    ) -> GpuResult<()> {
        let n = w.n;
        if w.nk && !w.fp4 {
            let grid = [
                dim_u32("samples", samples)?,
                grid_dim("N / 8", n.div_ceil(GMM_WARPS))?,
                grid_dim("rows / 8", rows.div_ceil(GMM_ROWS))?,
            ];
            // MX_GMM_WARPS wavefronts (32 lanes on NVIDIA, 64 on CDNA).
            let block = GMM_WARPS * self.device().warp_size.max(32) as usize;
            let name = format!("{family}nk_{ta}_{to}");
            self.run(&name, grid, dim_u32("block", block)?, tail(params), stream)
        } else {
            let grid = [
                dim_u32("N / 128", n.div_ceil(GMM_ANY_BLOCK))?,
                grid_dim("samples", samples)?,
                grid_dim("rows", rows)?,
            ];
            let params = tail(params.push(i32::from(w.nk)).push(i32::from(w.fp4)));
            let name = format!("{family}any_{ta}_{to}");
            self.run(&name, grid, GMM_ANY_BLOCK as u32, params, stream)
        }
    }
}

/// A grid's y or z extent (at most 65535).
pub(super) fn grid_dim(what: &str, v: usize) -> GpuResult<u32> {
    if v > 65535 {
        return Err(KernelError::Shape(format!("{what} = {v} exceeds the grid's 65535")).into());
    }
    dim_u32(what, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_error_names_the_value_and_range() {
        assert!(index_error([0, 0], 8).is_none());
        let e = index_error([1, (-9i64) as u64], 8).unwrap().to_string();
        assert!(e.contains("index -9 is out of range [-8, 8)"), "{e}");
    }
}
