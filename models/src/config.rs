//! What to build: the decoder's shapes ([`DecoderConfig`]) and how each fusable piece is spelled
//! ([`Spelling`], one enum per axis, each variant named after the exporter that emits it).

use clap::ValueEnum;
use serde::Serialize;

use crate::error::{Error, Result};

/// MXFP8 block size along K (the only one the fusions support).
pub const MX_BLOCK: usize = 32;

/// Largest weight payload accepted inline: protobuf messages stop at 2 GiB, keep 1 MiB for the graph.
const INLINE_LIMIT: u64 = (1 << 31) - (1 << 20);

/// Activation / weight element type of the float parts of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DType {
    F32,
    F16,
    Bf16,
}

/// How the RMSNorm is spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NormSpelling {
    /// torch dynamo export: `Pow(x,2) → ReduceMean → Add(eps) → Sqrt → Reciprocal → Mul(x,·) → Mul(γ)`.
    PowRecip,
    /// As `pow-recip` but `Sqrt → Div(x,·)` (what ORT's SimplifiedLayerNormFusion wants).
    PowDiv,
    /// `Mul(x,x)` instead of `Pow(x,2)`, then `Reciprocal`+`Mul`.
    MulRecip,
    /// `Mul(x,x)`, then `Div`.
    MulDiv,
    /// ONNX `RMSNormalization` (opset 23, `stash_type=1`).
    RmsNormalization,
    /// ORT's ai.onnx-domain `SimplifiedLayerNormalization` (norm only; the residual `Add` stays).
    Simplified,
    /// `com.microsoft::SkipSimplifiedLayerNormalization` (the residual Add inside; sum from output 3).
    /// A layer without a residual uses `SimplifiedLayerNormalization`, as ORT GenAI's builder does.
    SkipSimplified,
}

impl NormSpelling {
    /// True for the `Pow/Mul … Sqrt …` chains.
    pub fn is_decomposed(self) -> bool {
        matches!(
            self,
            Self::PowRecip | Self::PowDiv | Self::MulRecip | Self::MulDiv
        )
    }
}

/// How the RMSNorm weight γ is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GammaForm {
    /// `y = n · w` (Llama).
    Plain,
    /// Gemma `y = n · (1 + w)` with an explicit `Add(w, 1)` node.
    GemmaAddOne,
    /// Gemma with `1 + w` already folded into the initializer (what exporters emit).
    GemmaFolded,
    /// Gemma `y = n · (1 + Cast(w))`: w stored in the model dtype, cast to the multiply's dtype
    /// first (torch `1.0 + self.weight.float()`, HF Gemma3 through the dynamo exporter).
    GemmaCastAddOne,
}

/// How the SwiGLU activation is spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwigluSpelling {
    /// `Sigmoid(g) → Mul(g,σ) → Mul(·,up)` (SiLU·up, every torch export).
    SiluMul,
    /// MiniMax-M3 / GPT-OSS SwiGLU-OAI: `Clip(g,max=L)`, `Clip(up,±L)`, `Mul(α) → Sigmoid → Mul`,
    /// `Add(up,β)`, `Mul`.
    OaiClip,
    /// SwiGLU-OAI with the gate clamp spelled `Min(g, L)`.
    OaiMin,
    /// `com.microsoft::QuickGelu(alpha=1)·up` (ORT's optimizer on SiLU·up).
    QuickGelu,
    /// SwiGLU-OAI after ORT's optimizer: clamps, `QuickGelu(alpha=1.702)`, `Add(up,β)`, `Mul`.
    OaiQuickGelu,
    /// ONNX `Swish` (opset 24) `·up`.
    Swish,
    /// ONNX `SwiGLU(gate, up)` (opset 28).
    Swiglu,
}

impl SwigluSpelling {
    /// True for the spellings with SwiGLU-OAI semantics (clamps and `+β`).
    pub fn is_oai(self) -> bool {
        matches!(self, Self::OaiClip | Self::OaiMin | Self::OaiQuickGelu)
    }
}

/// Where gate and up come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateUpForm {
    /// One `[H, 2I]` MatMul, then `Split` into halves (gate first).
    FusedSplit,
    /// Two `[H, I]` MatMuls.
    TwoMatmuls,
    /// One `[H, 2I]` MatMul, then two `Slice`s into halves (gate first): `x[..., :I]`, `x[..., I:]`.
    FusedSlices,
    /// One `[H, 2I]` MatMul with gate and up interleaved: `x[..., 0::2]`, `x[..., 1::2]` (two
    /// step-2 `Slice`s; GPT-OSS style).
    Interleaved,
}

/// How an MXFP8 activation quantization in front of a MatMul is spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuantSpelling {
    /// No activation quantization (the float baseline).
    None,
    /// Standard opset 24, OCP floor rule: `Reshape → Abs → ReduceMax → Mul(2^-8) →
    /// Cast(FLOAT8E8M0, round_mode=down)`, `QuantizeLinear(block_size=32)`, `DequantizeLinear`.
    StdFloor,
    /// RCEIL twin: `Mul(1/448)`, `Cast(round_mode=up)`.
    StdRceilMul,
    /// RCEIL twin: `Div(448)`, `Cast(round_mode=up)`.
    StdRceilDiv,
    /// AMD Quark `com.amd.quark::MXQuantizeDequantize(element_dtype=fp8_e4m3, block_size=32, axis=-1)`.
    Quark,
}

impl QuantSpelling {
    /// True for the standard-ONNX (opset 24) spellings.
    pub fn is_standard(self) -> bool {
        matches!(self, Self::StdFloor | Self::StdRceilMul | Self::StdRceilDiv)
    }
}

/// How the consumer MatMuls' weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WeightForm {
    /// Float initializer `[K, N]` of the model dtype.
    Float,
    /// `DequantizeLinear(E4M3 [K,N], E8M0 [K/32,N], axis=0, block_size=32)` of initializers.
    StdMx,
    /// `com.amd.quark::MXQuantizeDequantize(axis=0)` of a float initializer.
    Quark,
    /// MXFP4 (gpt-oss / MiniMax-M3 expert weights): `DequantizeLinear(FLOAT4E2M1 [K,N] packed
    /// two per byte, E8M0 [K/32,N], axis=0, block_size=32)` of initializers.
    StdMxfp4,
}

/// Operand order of the residual `Add`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AddOrder {
    /// `Add(residual, branch_out)` (HF: `residual + hidden_states`).
    ResidualFirst,
    /// `Add(branch_out, residual)`.
    BranchFirst,
}

/// Every spelling axis of one generated model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Spelling {
    pub norm: NormSpelling,
    pub gamma: GammaForm,
    /// Decomposed norms only, f16/bf16 only: `Cast` to float around the fp32 norm math (HF style).
    pub norm_f32_casts: bool,
    pub swiglu: SwigluSpelling,
    pub gate_up: GateUpForm,
    pub quant: QuantSpelling,
    pub weights: WeightForm,
    pub add_order: AddOrder,
    /// True: the first layer's input norm has no residual Add (a real first layer).
    /// False: the graph takes a `residual` input too and every layer adds it (a pipeline stage).
    pub first_layer_without_residual: bool,
    /// `com.microsoft::AllReduce` on the embedding input and after every o_proj / down_proj.
    pub allreduce: bool,
}

impl Default for Spelling {
    /// The MiniMax-M3 torch-export spelling with standard-ONNX MXFP8 quantization.
    fn default() -> Self {
        Self {
            norm: NormSpelling::PowRecip,
            gamma: GammaForm::GemmaFolded,
            norm_f32_casts: true,
            swiglu: SwigluSpelling::OaiClip,
            gate_up: GateUpForm::FusedSplit,
            quant: QuantSpelling::StdFloor,
            weights: WeightForm::Float,
            add_order: AddOrder::ResidualFirst,
            first_layer_without_residual: true,
            allreduce: false,
        }
    }
}

/// Where initializer bytes go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightStorage {
    /// In the model's `raw_data` (fails past protobuf's 2 GiB).
    Inline,
    /// Large initializers in a side file next to the model (`<model file name>.data`).
    External {
        /// Do not generate weights: size the side file with `set_len` (a sparse file of zeros),
        /// so a 60-layer hidden-6144 model costs no disk and no time.
        sparse: bool,
    },
}

/// Shapes of a MiniMax-M3-like decoder stack (per tensor-parallel rank) plus its spellings.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    pub hidden: usize,
    /// Dense-MLP intermediate size (per rank).
    pub intermediate: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Routed experts per MoE layer; 0 = every layer dense.
    pub n_experts: usize,
    /// Expert MLP intermediate size (per rank).
    pub moe_intermediate: usize,
    /// Layers `0..first_dense_layers` are dense, later ones MoE (when `n_experts > 0`).
    pub first_dense_layers: usize,
    /// One shared expert next to the routed ones in MoE layers (MiniMax-M3 has one).
    pub shared_expert: bool,
    pub dtype: DType,
    pub rms_eps: f32,
    pub swiglu_alpha: f32,
    pub swiglu_limit: f32,
    pub swiglu_beta: f32,
    /// Seed of the deterministic random weights.
    pub seed: u64,
    /// Fixed batch/sequence sizes of the graph input; `None` = symbolic `batch` / `seq`.
    pub batch: Option<usize>,
    pub seq: Option<usize>,
    pub spelling: Spelling,
    pub storage: WeightStorage,
}

/// Named starting points for `mxfuse-gen-model --preset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Preset {
    /// hidden 128, intermediate 64, 2 layers (tests and fixtures).
    Tiny,
    /// MiniMax-M3 at tensor-parallel 4, one rank: hidden 6144, intermediate 768, 60 layers,
    /// 16 q heads / 2 kv heads of 128, bf16, external sparse weights.
    M3Tp4,
}

impl DecoderConfig {
    /// Small test defaults: hidden 128, intermediate 64, 2 layers, f32, inline weights.
    pub fn tiny() -> Self {
        Self {
            hidden: 128,
            intermediate: 64,
            n_layers: 2,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 32,
            n_experts: 0,
            moe_intermediate: 64,
            first_dense_layers: 1,
            shared_expert: false,
            dtype: DType::F32,
            rms_eps: 1e-6,
            swiglu_alpha: 1.702,
            swiglu_limit: 7.0,
            swiglu_beta: 1.0,
            seed: 0,
            batch: None,
            seq: None,
            spelling: Spelling::default(),
            storage: WeightStorage::Inline,
        }
    }

    /// MiniMax-M3-ish TP4 bench shapes (one rank), dense MLP in every layer.
    pub fn m3_tp4() -> Self {
        Self {
            hidden: 6144,
            intermediate: 768,
            n_layers: 60,
            n_heads: 16,
            n_kv_heads: 2,
            head_dim: 128,
            moe_intermediate: 768,
            dtype: DType::Bf16,
            storage: WeightStorage::External { sparse: true },
            ..Self::tiny()
        }
    }

    pub fn from_preset(p: Preset) -> Self {
        match p {
            Preset::Tiny => Self::tiny(),
            Preset::M3Tp4 => Self::m3_tp4(),
        }
    }

    /// True when layer `l` has an MoE MLP.
    pub fn is_moe_layer(&self, l: usize) -> bool {
        self.n_experts > 0 && l >= self.first_dense_layers
    }

    /// Rejects shapes and combinations that cannot be built (never panics later on them).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        let sp = &self.spelling;
        if self.n_layers == 0 {
            return bad("n_layers must be at least 1".into());
        }
        for (name, v) in [
            ("hidden", self.hidden),
            ("intermediate", self.intermediate),
            ("moe_intermediate", self.moe_intermediate),
            ("head_dim", self.head_dim),
        ] {
            // Every MatMul activation may be MX-quantized, so every K must split into blocks.
            if v == 0 || !v.is_multiple_of(MX_BLOCK) {
                return bad(format!(
                    "{name} = {v} must be a positive multiple of {MX_BLOCK}"
                ));
            }
        }
        if self.n_kv_heads == 0
            || self.n_heads == 0
            || !self.n_heads.is_multiple_of(self.n_kv_heads)
        {
            return bad(format!(
                "n_heads ({}) must be a positive multiple of n_kv_heads ({})",
                self.n_heads, self.n_kv_heads
            ));
        }
        if !(self.rms_eps > 0.0 && self.rms_eps.is_finite()) {
            return bad(format!("rms_eps = {} must be positive", self.rms_eps));
        }
        if self.batch == Some(0) || self.seq == Some(0) {
            return bad("batch and seq must be at least 1 when fixed".into());
        }
        if self.storage == WeightStorage::Inline && self.approx_weight_bytes() > INLINE_LIMIT {
            return bad(format!(
                "about {} MiB of weights cannot be inline (protobuf limit 2 GiB): use external weights",
                self.approx_weight_bytes() >> 20
            ));
        }
        if sp.quant == QuantSpelling::Quark && self.dtype == DType::Bf16 {
            // Quark's MXQuantizeDequantize is typed float/float16 only.
            return bad("Quark MXQuantizeDequantize does not take bfloat16".into());
        }
        if sp.weights == WeightForm::Quark && self.dtype == DType::Bf16 {
            return bad("Quark weight fake-quant does not take bfloat16".into());
        }
        Ok(())
    }

    /// Number of weight bytes (all MatMul weights), to refuse an impossible inline model early.
    pub fn approx_weight_bytes(&self) -> u64 {
        let (h, q, kv) = (
            self.hidden as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
        );
        let attn = h * (q + 2 * kv) + q * h;
        let mlp = |i: u64| 3 * h * i;
        let mut params = 0u64;
        for l in 0..self.n_layers {
            params += attn;
            params += if self.is_moe_layer(l) {
                let experts = self.n_experts as u64 + u64::from(self.shared_expert);
                experts * mlp(self.moe_intermediate as u64) + h * self.n_experts as u64
            } else {
                mlp(self.intermediate as u64)
            };
        }
        let elem = match (self.spelling.weights, self.dtype) {
            (WeightForm::StdMxfp4, _) => return params / 2,
            (WeightForm::StdMx, _) => 1,
            (_, DType::F32) => 4,
            _ => 2,
        };
        params * elem
    }

    /// Width of the q projection (per rank).
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of each of the k and v projections (per rank).
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}
