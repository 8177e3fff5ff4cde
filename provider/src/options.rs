//! Provider options: the `ep.mxfuseexecutionprovider.*` session config entries.
//!
//! ORT adds the options a user passes with the EP (`add_provider_for_devices(devs, {"k": "v"})`,
//! `SessionBuilder::with_devices(.., options)`) to the session config as `ep.<ep name
//! lowercased>.<k>`. Unknown keys are errors: a mistyped option must not be silently ignored.
//! One of ORT's own session settings is read here too, `ep.context_enable` (see
//! [`EpOptions::ep_context`]).

use std::collections::BTreeMap;

use graph_rewrites::pattern::rule::RuleConfig;
use graph_rewrites::pipeline::PipelineOptions;

use crate::error::{Error, Result};

/// The EP's registered name.
pub const EP_NAME: &str = "MxFuseExecutionProvider";

/// Config-key prefix of our options (ORT lowercases the EP name).
pub fn config_prefix() -> String {
    format!("ep.{}.", EP_NAME.to_ascii_lowercase())
}

/// Parsed provider options.
#[derive(Clone, Debug, Default)]
pub struct EpOptions {
    /// What `find_sites` / `run_pipeline` run with.
    pub pipeline: PipelineOptions,
    /// Worker threads for our kernels; 0 = one per available core.
    pub threads: usize,
    /// Which kernels run the fused nodes (`device`; see `gpu::device::Placement`).
    pub device: DeviceChoice,
    /// ORT's session option `ep.context_enable = 1` (not one of ours): the session is to write
    /// an EPContext model, which needs EPContext nodes from `Compile`; this EP writes none, so
    /// `Compile` fails with [`EP_CONTEXT_UNSUPPORTED`] (ORT's own error said only "OrtEp::Compile()
    /// returned a NULL EPContext node").
    pub ep_context: bool,
}

/// ORT's session config key asking every EP for an EPContext model.
pub const EP_CONTEXT_ENABLE: &str = "ep.context_enable";

/// Why a session with `ep.context_enable = 1` fails (see [`EpOptions::ep_context`]).
pub const EP_CONTEXT_UNSUPPORTED: &str = "ep.context_enable=1 asks for an EPContext model, which \
    MxFuseExecutionProvider does not write: it compiles its fused subgraphs from the original graph \
    at every session creation. To keep the fused graph, rewrite the model offline (`mxfuse \
    rewrite model.onnx -o fused.onnx`) and run fused.onnx with the custom-op library or this EP, \
    without ep.context_enable";

/// The `device` provider option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceChoice {
    /// Follow the device ORT assigned the session (CPU device: CPU kernels, GPU device: GPU).
    #[default]
    Auto,
    /// CPU kernels (only on the CPU device).
    Cpu,
    /// GPU kernels; on the CPU device the inputs are staged to the GPU per run.
    Gpu,
}

/// Options passed through to the rules engine as pipeline settings (`RuleConfig`).
pub const RULE_SETTINGS: &[&str] = graph_rewrites::pattern::SETTINGS;

/// The documented option keys (without prefix), for error messages and docs/provider.md.
pub const KEYS: &[&str] = &[
    "enable_rules",
    "disable_rules",
    "rule.<name>",
    "scale_rule",
    "swiglu_fp32_activation",
    "nan_policy",
    "quark_weight_max_mib",
    "threads",
    "device",
    "world_size",
];

/// Most kernel threads the `threads` option may ask for: a pool of tens of thousands of threads
/// helps no kernel, and asking the OS for them can exhaust the process's thread limit.
pub const MAX_THREADS: usize = 1024;

/// Whether `key` (bare, with our `ep.mxfuseexecutionprovider.` prefix, or with the
/// `MxFuseExecutionProvider.` one that `ort` (Rust) callers write; any case) names one of our
/// provider options.
pub fn is_option_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let ep_prefix = format!("{}.", EP_NAME.to_ascii_lowercase());
    let key = key
        .strip_prefix(&config_prefix())
        .or_else(|| key.strip_prefix(&ep_prefix))
        .unwrap_or(&key);
    key.starts_with("rule.") || KEYS.contains(&key) || RULE_SETTINGS.contains(&key)
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    graph_rewrites::pattern::parse_flag(value).ok_or_else(|| {
        Error::invalid(format!(
            "provider option {key}: expected 0 or 1 (or true / false, on / off, yes / no), got {value:?}"
        ))
    })
}

fn rule_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

impl EpOptions {
    /// `enable_rules` naming only rules that `off_by` turns off again would claim nothing, and
    /// the session would fail later with ORT's "Could not find an implementation for
    /// QuantizeLinear(24)" instead of naming the contradiction.
    fn check_enabled_rules_run(&self, off_by: &str) -> Result<()> {
        let p = &self.pipeline;
        if !p.only.is_empty() && p.only.iter().all(|r| p.disable.contains(r)) {
            return Err(Error::invalid(format!(
                "provider options enable_rules ({}) and {off_by} turn off every rule enabled: no rule would run",
                p.only.join(", ")
            )));
        }
        Ok(())
    }

    /// Parses options from session config entries; entries without our prefix are ignored.
    /// `known_rules` validates rule names (an unknown rule name is an error).
    pub fn from_config<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
        known_rules: &[&str],
    ) -> Result<Self> {
        let prefix = config_prefix();
        let mut opts = EpOptions::default();
        let check_rule = |name: &str| -> Result<()> {
            if known_rules.contains(&name) {
                Ok(())
            } else {
                Err(Error::invalid(format!(
                    "provider option: unknown rule {name:?} (known: {})",
                    known_rules.join(", ")
                )))
            }
        };
        let mut settings = BTreeMap::new();
        for (key, value) in entries {
            if key.eq_ignore_ascii_case(EP_CONTEXT_ENABLE) {
                opts.ep_context = value.trim() == "1";
                continue;
            }
            let Some(key) = key
                .to_ascii_lowercase()
                .strip_prefix(&prefix)
                .map(String::from)
            else {
                continue;
            };
            match key.as_str() {
                "enable_rules" => {
                    let rules = rule_list(value);
                    // An empty list would mean "only these: none" to a reader and "all" to the
                    // pipeline (an empty `only`); neither is what was meant.
                    if rules.is_empty() {
                        return Err(Error::invalid(format!(
                            "provider option enable_rules: names no rule ({value:?}); leave it out to run every rule, or use disable_rules"
                        )));
                    }
                    rules.iter().try_for_each(|r| check_rule(r))?;
                    opts.pipeline.only = rules;
                }
                "disable_rules" => {
                    let rules = rule_list(value);
                    rules.iter().try_for_each(|r| check_rule(r))?;
                    opts.pipeline.disable.extend(rules);
                }
                k if RULE_SETTINGS.contains(&k) => {
                    settings.insert(k.to_string(), value.trim().to_string());
                }
                "threads" => {
                    opts.threads = value
                        .trim()
                        .parse()
                        .ok()
                        .filter(|n| *n <= MAX_THREADS)
                        .ok_or_else(|| {
                            Error::invalid(format!(
                                "provider option threads: expected a count from 0 to {MAX_THREADS}, got {value:?}"
                            ))
                        })?;
                }
                "device" => {
                    opts.device = match value.trim().to_ascii_lowercase().as_str() {
                        "auto" => DeviceChoice::Auto,
                        "cpu" => DeviceChoice::Cpu,
                        "gpu" => DeviceChoice::Gpu,
                        _ => {
                            return Err(Error::invalid(format!(
                                "provider option device: expected cpu, gpu or auto, got {value:?}"
                            )))
                        }
                    };
                }
                "world_size" => {
                    // Tensor-parallel group size of absorbed AllReduces: only 1 is implemented.
                    match value.trim().parse::<usize>() {
                        Ok(1) => {}
                        Ok(n) if n > 1 => {
                            return Err(Error::Unsupported(format!(
                                "provider option world_size={n}: multi-rank AllReduce is not implemented (world size 1 only)"
                            )))
                        }
                        _ => {
                            return Err(Error::invalid(format!(
                                "provider option world_size: expected a positive count, got {value:?}"
                            )))
                        }
                    }
                }
                other => {
                    if let Some(rule) = other.strip_prefix("rule.") {
                        check_rule(rule)?;
                        if !parse_bool(other, value)? {
                            opts.pipeline.disable.push(rule.to_string());
                        }
                    } else {
                        return Err(Error::invalid(format!(
                            "unknown provider option {other:?} (known: {})",
                            KEYS.join(", ")
                        )));
                    }
                }
            }
        }
        opts.check_enabled_rules_run("disable_rules / rule.<name>=0")?;
        // The rules engine validates its own settings (one definition of the allowed values).
        RuleConfig::from_settings(&settings)
            .map_err(|e| Error::invalid(format!("provider option {e}")))?;
        opts.pipeline.settings = settings;
        Ok(opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &[&str] = &["add_rmsnorm_mxquant", "swiglu_mxquant"];

    fn parse(pairs: &[(&str, &str)]) -> Result<EpOptions> {
        EpOptions::from_config(pairs.iter().copied(), RULES)
    }

    #[test]
    fn parses_all_keys() {
        let o = parse(&[
            ("ep.mxfuseexecutionprovider.disable_rules", "swiglu_mxquant"),
            ("ep.mxfuseexecutionprovider.rule.add_rmsnorm_mxquant", "0"),
            ("ep.mxfuseexecutionprovider.scale_rule", "rceil"),
            ("ep.mxfuseexecutionprovider.swiglu_fp32_activation", "true"),
            ("ep.mxfuseexecutionprovider.threads", "4"),
            ("session.intra_op.allow_spinning", "0"),
        ])
        .unwrap();
        assert_eq!(
            o.pipeline.disable,
            vec!["swiglu_mxquant", "add_rmsnorm_mxquant"]
        );
        assert_eq!(o.pipeline.settings["scale_rule"], "rceil");
        assert_eq!(o.pipeline.settings["swiglu_fp32_activation"], "true");
        assert_eq!(o.threads, 4);
    }

    #[test]
    fn ep_context_enable_is_read_from_ort_s_own_key() {
        assert!(!parse(&[]).unwrap().ep_context);
        assert!(!parse(&[("ep.context_enable", "0")]).unwrap().ep_context);
        assert!(parse(&[("ep.context_enable", "1")]).unwrap().ep_context);
    }

    #[test]
    fn device_and_world_size() {
        assert_eq!(parse(&[]).unwrap().device, DeviceChoice::Auto);
        let o = parse(&[("ep.mxfuseexecutionprovider.device", "GPU")]).unwrap();
        assert_eq!(o.device, DeviceChoice::Gpu);
        let o = parse(&[("ep.mxfuseexecutionprovider.world_size", "1")]).unwrap();
        assert_eq!(o.device, DeviceChoice::Auto);
        let err = parse(&[("ep.mxfuseexecutionprovider.world_size", "4")])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("world_size=4") && err.contains("AllReduce"),
            "{err}"
        );
        for (k, v) in [("device", "npu"), ("world_size", "0")] {
            let key = format!("ep.mxfuseexecutionprovider.{k}");
            let err = parse(&[(key.as_str(), v)]).unwrap_err().to_string();
            assert!(err.contains(k), "{k}={v}: {err}");
        }
    }

    #[test]
    fn option_keys_are_recognised_bare_and_prefixed() {
        for k in [
            "threads",
            "scale_rule",
            "rule.mxquant",
            "Enable_Rules",
            "ep.MxFuseExecutionProvider.device",
            // As `ort` (Rust) callers write keys (docs/provider.md); a dynamic option spelled so
            // was accepted and silently did nothing (new-user probe 5).
            "MxFuseExecutionProvider.threads",
        ] {
            assert!(is_option_key(k), "{k}");
        }
        for k in [
            "ep.dynamic.workload_type",
            "rule",
            "thread",
            "ep.otherexecutionprovider.threads",
            "OtherExecutionProvider.threads",
        ] {
            assert!(!is_option_key(k), "{k}");
        }
    }

    #[test]
    fn prefix_is_case_insensitive_and_only_sets_only() {
        let o = parse(&[("EP.MxFuseExecutionProvider.enable_rules", "swiglu_mxquant")]).unwrap();
        assert_eq!(o.pipeline.only, vec!["swiglu_mxquant"]);
    }

    #[test]
    fn rejects_bad_values_with_a_message() {
        for (k, v, needle) in [
            (
                "ep.mxfuseexecutionprovider.scale_rule",
                "ceil",
                "scale_rule",
            ),
            ("ep.mxfuseexecutionprovider.threads", "-1", "threads"),
            (
                "ep.mxfuseexecutionprovider.threads",
                "99999",
                "from 0 to 1024",
            ),
            (
                "ep.mxfuseexecutionprovider.enable_rules",
                ",,",
                "names no rule",
            ),
            (
                "ep.mxfuseexecutionprovider.bogus",
                "1",
                "unknown provider option",
            ),
            (
                "ep.mxfuseexecutionprovider.disable_rules",
                "nope",
                "unknown rule",
            ),
            (
                "ep.mxfuseexecutionprovider.swiglu_fp32_activation",
                "2",
                "swiglu_fp32_activation",
            ),
            (
                "ep.mxfuseexecutionprovider.nan_policy",
                "drop",
                "nan_policy",
            ),
            (
                "ep.mxfuseexecutionprovider.rule.mxquant_typo",
                "0",
                "unknown rule",
            ),
            (
                "ep.mxfuseexecutionprovider.rule.swiglu_mxquant",
                "2",
                "or true / false",
            ),
        ] {
            let err = parse(&[(k, v)]).unwrap_err().to_string();
            assert!(err.contains(needle), "{k}={v}: {err}");
        }
    }

    #[test]
    fn enabling_only_rules_that_are_disabled_again_is_an_error() {
        let p = "ep.mxfuseexecutionprovider.";
        let (only, off, rule_off) = (
            format!("{p}enable_rules"),
            format!("{p}disable_rules"),
            format!("{p}rule.swiglu_mxquant"),
        );
        for pairs in [
            vec![
                (only.as_str(), "swiglu_mxquant"),
                (off.as_str(), "swiglu_mxquant"),
            ],
            vec![(rule_off.as_str(), "0"), (only.as_str(), "swiglu_mxquant")],
        ] {
            let err = parse(&pairs).unwrap_err().to_string();
            assert!(err.contains("no rule would run"), "{pairs:?}: {err}");
        }
        // One of the enabled rules left on is fine.
        let o = parse(&[
            (only.as_str(), "swiglu_mxquant,add_rmsnorm_mxquant"),
            (off.as_str(), "swiglu_mxquant"),
        ])
        .unwrap();
        assert_eq!(o.pipeline.disable, vec!["swiglu_mxquant"]);
    }
}
