//! One launch for the constant-weight `MxMatMul`s of one MXFP8 activation (q / k / v after a
//! norm, gate / up): [`group_matmuls`] finds them among a fused node's steps when the program is
//! built and packs their weights into one buffer; the first of them launches
//! `kernels::gpu::GpuRuntime::mx_matmul_frag_grouped` for all, the others launch nothing. Why:
//! the plugin EP's decode step is bound by launches on the host (2.2-3.4 µs of driver time
//! each on the H200 hosts, BENCHMARKS.md session 27), and small N (k / v) leave most SMs idle
//! alone.
//!
//! Each output's tiles are computed as the one-matrix fragment kernel computes them for the
//! group's N (`gpu_kernels` checks it bit for bit); against a launch per weight only the split
//! of K over warps, which the kernel choice takes from N, may differ: the GEMM's documented
//! summation-order tolerance. `MXFUSE_GPU_MATMUL_GROUP=0` launches each weight alone.

use std::sync::Arc;

use kernels::gpu::{FragSegment, GpuEpilogue, GpuRuntime, MAX_FRAG_SEGMENTS};
use kernels::DType;

use super::memory::{DeviceBox, DeviceMemory};
use super::program::{GpuOp, PackedWeight, Source, Step};
use crate::error::{Error, Result};
use crate::ort_types::element_count;
use crate::tensor::Meta;

/// A group's packed weights and its members (the first is the step holding the group).
pub struct MatMulGroup {
    pub(super) members: Vec<Member>,
    q: DeviceBox,
    scales: DeviceBox,
    k: usize,
}

/// One `MxMatMul` of a group.
pub(super) struct Member {
    /// Its step.
    pub(super) step: usize,
    alpha: f32,
    beta: f32,
    n: usize,
    f16_shift: Option<i32>,
}

/// Whether programs group (`MXFUSE_GPU_MATMUL_GROUP=0`: every weight its own launch).
fn grouping_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        !std::env::var("MXFUSE_GPU_MATMUL_GROUP").is_ok_and(|v| v == "0" || v == "off")
    })
}

/// What steps must share to run as one launch: the activation and its scales (slots), K and the
/// output type. Only fragment-packed constant weights of an MXFP8 activation, and a bias, if
/// any, that no step produces (the group runs at its first member, before later steps).
fn group_key(step: &Step, sources: &[Source]) -> Option<(usize, usize, usize, DType)> {
    let GpuOp::MatMul {
        packed: Some(p),
        out: Some(out),
        ..
    } = &step.op
    else {
        return None;
    };
    if !p.frag {
        return None;
    }
    let a = step.inputs.first().copied().flatten()?;
    let a_scale = step.inputs.get(1).copied().flatten()?;
    if let Some(Some(bias)) = step.inputs.get(4) {
        if matches!(sources.get(*bias), Some(Source::Step) | None) {
            return None;
        }
    }
    Some((a, a_scale, p.nk.1, *out))
}

/// Groups the program's constant-weight `MxMatMul`s by [`group_key`], up to
/// [`MAX_FRAG_SEGMENTS`] a group, in step order; a weight alone stays as it is.
pub(super) fn group_matmuls(
    steps: &mut [Step],
    sources: &[Source],
    memory: &Arc<dyn DeviceMemory>,
) -> Result<()> {
    if !grouping_on() {
        return Ok(());
    }
    for first in 0..steps.len() {
        let Some(key) = group_key(&steps[first], sources) else {
            continue;
        };
        let mut members = vec![first];
        for (j, step) in steps.iter().enumerate().skip(first + 1) {
            if members.len() == MAX_FRAG_SEGMENTS {
                break;
            }
            if group_key(step, sources) == Some(key) {
                members.push(j);
            }
        }
        if members.len() < 2 {
            continue;
        }
        let group = pack_group(steps, &members, key.2, memory)?;
        let names: Vec<&str> = members.iter().map(|&j| steps[j].name.as_str()).collect();
        kernels::log::info(&format!(
            "mxfuse: {} MxMatMul of one activation run as one GPU launch: {}",
            members.len(),
            names.join(", ")
        ));
        for &j in &members[1..] {
            steps[j].op = GpuOp::Grouped;
        }
        steps[first].op = GpuOp::MatMulGroup(group);
    }
    Ok(())
}

/// The members' packed weights copied one after another into one buffer (each member's own
/// buffer is freed with its op).
fn pack_group(
    steps: &[Step],
    members: &[usize],
    k: usize,
    memory: &Arc<dyn DeviceMemory>,
) -> Result<MatMulGroup> {
    let packed: Vec<(&PackedWeight, f32, f32)> = members
        .iter()
        .map(|&j| match &steps[j].op {
            GpuOp::MatMul {
                packed: Some(p),
                attrs,
                ..
            } => Ok((p, attrs.alpha, attrs.beta)),
            _ => Err(Error::invalid(
                "internal: a grouped step is not a packed MxMatMul",
            )),
        })
        .collect::<Result<_>>()?;
    let (q_len, s_len) = packed.iter().fold((0, 0), |(q, s), (p, ..)| {
        (q + p.q.len(), s + p.scales.len())
    });
    let (q, scales) = (
        DeviceBox::new(memory, q_len)?,
        DeviceBox::new(memory, s_len)?,
    );
    let (mut q_at, mut s_at) = (0u64, 0u64);
    let mut out = Vec::with_capacity(members.len());
    for (&step, (p, alpha, beta)) in members.iter().zip(&packed) {
        let n = p.nk.0;
        // The launcher finds a member's part by its tile count: the packing must be exactly
        // whole tiles of K / 32 k-blocks (512 bytes) and K / 128 scale groups (64 bytes).
        let tiles = n.div_ceil(16);
        if p.q.len() != tiles * (k / 32) * 512 || p.scales.len() != tiles * (k / 128) * 64 {
            return Err(Error::invalid(format!(
                "internal: packed weight of {} is not {tiles} whole tiles",
                steps[step].name
            )));
        }
        memory.device_to_device(q.ptr() + q_at, p.q.ptr(), p.q.len())?;
        memory.device_to_device(scales.ptr() + s_at, p.scales.ptr(), p.scales.len())?;
        q_at += p.q.len() as u64;
        s_at += p.scales.len() as u64;
        out.push(Member {
            step,
            alpha: *alpha,
            beta: *beta,
            n,
            f16_shift: p.f16_shift,
        });
    }
    Ok(MatMulGroup {
        members: out,
        q,
        scales,
        k,
    })
}

/// One member's operands at run time: its bias (if any) and its output.
pub(super) struct MemberIo {
    pub(super) bias: Option<(Meta, u64)>,
    pub(super) y: (Meta, u64),
}

impl MatMulGroup {
    /// Launches the group on activation `a` (E4M3 `[.., K]`) with scales `a_scale`; `io[i]` is
    /// member i's bias and output.
    pub(super) fn launch(
        &self,
        rt: &GpuRuntime,
        a: &(Meta, u64),
        a_scale: u64,
        io: &[MemberIo],
        stream: usize,
    ) -> Result<()> {
        let (am, a_q) = a;
        let m = element_count(&am.dims)? / self.k.max(1);
        let Some(first) = io.first() else {
            return Ok(());
        };
        let ydt = crate::ops::dtype(first.y.0.dtype)?;
        let mut segs = Vec::with_capacity(io.len());
        for (member, io) in self.members.iter().zip(io) {
            let n = io.y.0.dims.last().copied().unwrap_or(-1);
            if n != member.n as i64 || crate::ops::dtype(io.y.0.dtype)? != ydt {
                return Err(Error::invalid(format!(
                    "grouped MxMatMul output {:?} of {:?}: not [.., {}] of {ydt:?}",
                    io.y.0.dims, io.y.0.dtype, member.n
                )));
            }
            segs.push(FragSegment {
                n: member.n,
                y: io.y.1,
                ep: GpuEpilogue {
                    alpha: member.alpha,
                    beta: member.beta,
                    bias: super::program::gpu_bias(io.bias.as_ref(), ydt, m, member.n)?,
                },
                f16_shift: member.f16_shift,
            });
        }
        rt.mx_matmul_frag_grouped(
            m,
            self.k,
            (*a_q, a_scale),
            (self.q.ptr(), self.scales.ptr()),
            &segs,
            ydt,
            stream,
        )
        .map_err(super::program::gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::memory::HostMemory;
    use crate::ops::Kernel;
    use crate::tensor::{TensorMut, TensorRef};
    use kernels::MxMatMulAttrs;

    /// Shapes are not asked for by the grouping pass.
    struct NoShapes;
    impl Kernel for NoShapes {
        fn output_metas(&self, _: &[Option<&Meta>]) -> Result<Vec<Meta>> {
            Ok(Vec::new())
        }
        fn compute(
            &self,
            _: &[Option<TensorRef<'_>>],
            _: &mut [Option<TensorMut<'_>>],
            _: &dyn kernels::Parallel,
        ) -> Result<()> {
            Ok(())
        }
    }

    /// An `MxMatMul` step reading slots `a`, `a_scale` (and `bias`), its weight `[n, k]` packed
    /// (`frag`) as whole tiles of bytes `fill`, writing slot `y`.
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        memory: &Arc<dyn DeviceMemory>,
        (a, a_scale, bias, y): (usize, usize, Option<usize>, usize),
        (n, k): (usize, usize),
        frag: bool,
        out: DType,
        fill: u8,
    ) -> Step {
        let tiles = n.div_ceil(16);
        let bytes = |len: usize| DeviceBox::upload(memory, &vec![fill; len]).expect("upload");
        Step {
            name: format!("mm{fill}"),
            shapes: Box::new(NoShapes),
            op: GpuOp::MatMul {
                attrs: MxMatMulAttrs {
                    alpha: f32::from(fill),
                    ..MxMatMulAttrs::default()
                },
                packed: Some(PackedWeight {
                    q: bytes(tiles * (k / 32) * 512),
                    scales: bytes(tiles * (k / 128) * 64),
                    nk: (n, k),
                    frag,
                    f16_shift: None,
                }),
                out: Some(out),
            },
            inputs: vec![Some(a), Some(a_scale), None, None, bias],
            outputs: vec![Some(y)],
        }
    }

    #[test]
    fn one_activations_fragment_gemms_group_in_order_up_to_four() {
        let memory: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
        // Slots 0-1: the activation and its scales; 2-3: another's; 4: a bias a step writes; 5: a
        // bias that is a fused input; 10..: outputs.
        let sources = vec![
            Source::Input(0),
            Source::Input(1),
            Source::Input(2),
            Source::Input(3),
            Source::Step,
            Source::Input(4),
        ];
        let (k, bf) = (256, DType::BF16);
        let mut steps = vec![
            matmul(&memory, (0, 1, None, 10), (100, k), true, bf, 1),
            matmul(&memory, (0, 1, Some(5), 11), (16, k), true, bf, 2),
            matmul(&memory, (2, 3, None, 12), (64, k), true, bf, 3), // another activation
            matmul(&memory, (0, 1, Some(4), 13), (32, k), true, bf, 4), // a step's bias
            matmul(&memory, (0, 1, None, 14), (32, k), false, bf, 5), // not fragment-packed
            matmul(&memory, (0, 1, None, 15), (32, 512), true, bf, 6), // another K
            matmul(&memory, (0, 1, None, 16), (32, k), true, DType::F32, 7), // another type
            matmul(&memory, (0, 1, None, 17), (40, k), true, bf, 8),
            matmul(&memory, (0, 1, None, 18), (8, k), true, bf, 9),
            matmul(&memory, (0, 1, None, 19), (24, k), true, bf, 10), // the fifth: alone
        ];
        group_matmuls(&mut steps, &sources, &memory).expect("group");
        let GpuOp::MatMulGroup(g) = &steps[0].op else {
            panic!("step 0 does not hold a group");
        };
        let members: Vec<usize> = g.members.iter().map(|m| m.step).collect();
        assert_eq!(members, [0, 1, 7, 8]);
        assert_eq!(
            g.members.iter().map(|m| m.n).collect::<Vec<_>>(),
            [100, 16, 40, 8]
        );
        assert_eq!(
            g.members.iter().map(|m| m.alpha).collect::<Vec<_>>(),
            [1.0, 2.0, 8.0, 9.0]
        );
        for (j, step) in steps.iter().enumerate() {
            let grouped = matches!(step.op, GpuOp::Grouped);
            assert_eq!(grouped, [1, 7, 8].contains(&j), "step {j}");
            if ![0, 1, 7, 8].contains(&j) {
                assert!(matches!(step.op, GpuOp::MatMul { .. }), "step {j} changed");
            }
        }
        // The packed weights one after another, whole tiles each.
        let tiles = [7usize, 1, 3, 1];
        // `buf` holds each member's `per_tile` bytes a tile (filled with its step's byte).
        let holds = |buf: &DeviceBox, per_tile: usize| {
            let mut got = vec![0u8; buf.len()];
            memory.device_to_host(&mut got, buf.ptr()).expect("read");
            let want: Vec<u8> = tiles
                .iter()
                .zip([1u8, 2, 8, 9])
                .flat_map(|(&t, fill)| vec![fill; t * per_tile])
                .collect();
            got == want
        };
        assert!(holds(&g.q, (k / 32) * 512), "packed fragments");
        assert!(holds(&g.scales, (k / 128) * 64), "packed scale words");
    }

    #[test]
    fn a_weight_alone_is_left_as_it_is() {
        let memory: Arc<dyn DeviceMemory> = Arc::new(HostMemory::default());
        let sources = vec![Source::Input(0), Source::Input(1)];
        let mut steps = vec![matmul(
            &memory,
            (0, 1, None, 5),
            (48, 128),
            true,
            DType::F16,
            1,
        )];
        group_matmuls(&mut steps, &sources, &memory).expect("group");
        assert!(matches!(steps[0].op, GpuOp::MatMul { .. }));
    }
}
