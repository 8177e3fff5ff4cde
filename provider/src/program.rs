//! A compiled fused node: the `com.mxfuse` nodes the rewrite produced, in order, with value
//! slots between them. Built once in `Compile` (owning everything it needs — no ORT graph
//! pointer survives), run on every `Compute`; immutable, so concurrent runs share it.

use graph_rewrites::view::{ConstTensor, GraphView, NodeId};
use ort_sys::OrtKernelContext;

use crate::error::{Error, Result};
use crate::kernel_io::{alloc_output, Inputs};
use crate::ops::{self, Kernel, Parallelism};
use crate::program_slots::{mxfuse_attrs, Slots};
use crate::tensor::{Meta, Tensor, TensorMut, TensorRef};

struct Step {
    name: String,
    kernel: Box<dyn Kernel>,
    inputs: Vec<Option<usize>>,
    /// `None` for an omitted optional output.
    outputs: Vec<Option<usize>>,
}

/// Where a slot's value comes from before any step runs.
enum Source {
    /// The fused node's input `i`.
    Input(usize),
    /// A constant captured at compile time.
    Const(Tensor),
    /// Produced by a step.
    Step,
}

pub struct Program {
    steps: Vec<Step>,
    parallelism: Parallelism,
    sources: Vec<Source>,
    /// Slot of each fused-node output, in the fused node's output order.
    outputs: Vec<usize>,
    /// Per slot: the fused-node output a step writes it straight into (`None`: an owned
    /// intermediate, copied out at the end if it is an output).
    direct: Vec<Option<usize>>,
}

/// A value produced by a step: owned, or written straight into ORT's output buffer.
enum Produced<'a> {
    Owned(Tensor),
    Ort(Meta, &'a [u8]),
}

impl Produced<'_> {
    fn view(&self) -> TensorRef<'_> {
        match self {
            Produced::Owned(t) => t.view(),
            Produced::Ort(meta, data) => TensorRef { meta, data },
        }
    }
}

/// Per slot, the first fused-node output it is, where a step produces it: those steps write
/// into ORT's buffer instead of a zero-filled intermediate copied out afterwards (that fill
/// and copy were ~3 % of a decoder step at 8 tokens: `memset` + `memcpy` of every GEMM's
/// output in `perf`). Kernels write every output element (as on the single-node path).
fn direct_outputs<S>(
    sources: &[S],
    outputs: &[usize],
    is_step: impl Fn(&S) -> bool,
) -> Vec<Option<usize>> {
    let mut direct = vec![None; sources.len()];
    for (i, &slot) in outputs.iter().enumerate() {
        if is_step(&sources[slot]) && direct[slot].is_none() {
            direct[slot] = Some(i);
        }
    }
    direct
}

/// Hands the step's constant inputs that the kernel asks for to its `prepack` (the custom-op
/// library does the same from `KernelInfo`, so both paths run the same packed weights).
pub(crate) fn prepack(
    kernel: &mut dyn Kernel,
    g: &dyn GraphView,
    n: NodeId,
    constant: &dyn Fn(&str) -> Result<Option<ConstTensor>>,
) -> Result<()> {
    let inputs = g.inputs(n);
    let present: Vec<bool> = inputs.iter().map(Option::is_some).collect();
    kernel.inputs_present(&present);
    let wanted = kernel.prepack_inputs();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut owned: Vec<Option<Tensor>> = (0..inputs.len()).map(|_| None).collect();
    for &i in wanted.iter().filter(|&&i| i < inputs.len()) {
        let Some(v) = inputs[i] else { continue };
        if !g.is_constant(v) {
            continue;
        }
        if let Some(t) = constant(g.value_name(v))? {
            let meta = Meta::new(t.elem_type, t.dims);
            if meta.byte_len()? == t.raw.len() {
                owned[i] = Some(Tensor { meta, data: t.raw });
            }
        }
    }
    let views: Vec<Option<TensorRef<'_>>> =
        owned.iter().map(|t| t.as_ref().map(Tensor::view)).collect();
    kernel.prepack(&views)
}

impl Program {
    /// Builds the program from `g` (every node must be a `com.mxfuse` op, an ONNX `Reshape` of
    /// a constant shape or an ONNX `Shape`), binding values by name to the fused node's
    /// `input_names` / `output_names`.
    pub fn build(
        g: &dyn GraphView,
        input_names: &[String],
        output_names: &[String],
        parallelism: Parallelism,
        constant: &dyn Fn(&str) -> Result<Option<ConstTensor>>,
    ) -> Result<Self> {
        let mut slots = Slots::for_inputs(input_names, Source::Input);
        let mut steps = Vec::new();
        for &n in g.nodes().iter() {
            let name = g.node_label(n);
            let reshape = ops::reshape::Reshape::of_node(g, n)?;
            let mut kernel: Box<dyn Kernel> = match (reshape, ops::shape::Shape::of_node(g, n)?) {
                // The output Reshape of an MxMatMul read through torch's `view(-1, K)`.
                (Some(r), _) => Box::new(r),
                // The Shape of a flattened norm's input (`ops::shape`).
                (_, Some(s)) => Box::new(s),
                _ => {
                    let attrs = mxfuse_attrs(g, n)?;
                    ops::create(&attrs).map_err(|e| Error::invalid(format!("node {name}: {e}")))?
                }
            };
            prepack(kernel.as_mut(), g, n, constant)?;
            let inputs = slots.bind_inputs(g, n, |_, meta, data| {
                Ok(Source::Const(Tensor { meta, data }))
            })?;
            let outputs = slots.bind_outputs(g, n, || Source::Step);
            steps.push(Step {
                name,
                kernel,
                inputs,
                outputs,
            });
        }
        let (outputs, sources) = slots.finish(output_names)?;
        let direct = direct_outputs(&sources, &outputs, |s| matches!(s, Source::Step));
        Ok(Program {
            steps,
            parallelism,
            sources,
            outputs,
            direct,
        })
    }

    /// Runs the program on the fused node's inputs and writes its outputs.
    ///
    /// # Safety
    /// `ctx` must be the live context of the current `Compute` call.
    pub unsafe fn run(&self, ctx: *mut OrtKernelContext) -> Result<()> {
        let inputs = Inputs::read(ctx)?;
        let views = inputs.views()?;
        let mut produced: Vec<Option<Produced<'_>>> =
            (0..self.sources.len()).map(|_| None).collect();
        for step in &self.steps {
            let metas: Vec<Option<Meta>> = {
                let ins = self.gather(&step.inputs, &views, &produced)?;
                let in_metas: Vec<Option<&Meta>> = ins.iter().map(|t| t.map(|t| t.meta)).collect();
                step.kernel
                    .output_metas(&in_metas)
                    .map_err(|e| Error::invalid(format!("{}: {e}", step.name)))?
                    .into_iter()
                    .map(Some)
                    .collect()
            };
            let mut outs: Vec<Option<Out<'_>>> = Vec::with_capacity(step.outputs.len());
            for (slot, meta) in step.outputs.iter().zip(metas) {
                outs.push(match (slot.map(|s| self.direct[s]), meta) {
                    (Some(Some(i)), Some(meta)) => match alloc_output(ctx, i, &meta)? {
                        Some(data) => Some(Out::Ort(meta, data)),
                        None => Some(Out::Owned(Tensor::zeros(meta)?)),
                    },
                    (Some(None), Some(meta)) => Some(Out::Owned(Tensor::zeros(meta)?)),
                    _ => None,
                });
            }
            {
                let ins = self.gather(&step.inputs, &views, &produced)?;
                let mut out_views: Vec<Option<TensorMut<'_>>> = outs
                    .iter_mut()
                    .map(|o| o.as_mut().map(Out::view_mut))
                    .collect();
                self.parallelism
                    .with(ctx, |par| step.kernel.compute(&ins, &mut out_views, par))
                    .map_err(|e| Error::invalid(format!("{}: {e}", step.name)))?;
            }
            for (slot, t) in step.outputs.iter().zip(outs) {
                if let (Some(slot), Some(t)) = (slot, t) {
                    produced[*slot] = Some(match t {
                        Out::Owned(t) => Produced::Owned(t),
                        Out::Ort(meta, data) => Produced::Ort(meta, data),
                    });
                }
            }
        }
        for (i, &slot) in self.outputs.iter().enumerate() {
            if let Some(Produced::Ort(..)) = &produced[slot] {
                if self.direct[slot] == Some(i) {
                    continue; // already written there
                }
            }
            let src = self.slot_view(slot, &views, &produced)?;
            if let Some(dst) = alloc_output(ctx, i, src.meta)? {
                dst.copy_from_slice(src.data);
            }
        }
        Ok(())
    }

    fn slot_view<'a>(
        &'a self,
        slot: usize,
        views: &[Option<TensorRef<'a>>],
        produced: &'a [Option<Produced<'_>>],
    ) -> Result<TensorRef<'a>> {
        match &self.sources[slot] {
            Source::Input(i) => views
                .get(*i)
                .copied()
                .flatten()
                .ok_or_else(|| Error::invalid(format!("fused input {i} missing"))),
            Source::Const(t) => Ok(t.view()),
            Source::Step => produced[slot]
                .as_ref()
                .map(Produced::view)
                .ok_or_else(|| Error::invalid("value used before it is produced")),
        }
    }

    fn gather<'a>(
        &'a self,
        slots: &[Option<usize>],
        views: &[Option<TensorRef<'a>>],
        produced: &'a [Option<Produced<'_>>],
    ) -> Result<Vec<Option<TensorRef<'a>>>> {
        slots
            .iter()
            .map(|s| s.map(|s| self.slot_view(s, views, produced)).transpose())
            .collect()
    }
}

/// A step's output buffer while it runs.
enum Out<'a> {
    Owned(Tensor),
    Ort(Meta, &'a mut [u8]),
}

impl Out<'_> {
    fn view_mut(&mut self) -> TensorMut<'_> {
        match self {
            Out::Owned(t) => t.view_mut(),
            Out::Ort(meta, data) => TensorMut { meta, data },
        }
    }
}
