//! Verdicts of the Quark weight check ([`check_quark_weight_exact`]) kept beyond one scan of the
//! rules, keyed by what the weight *is* (its name, types, dims and a fingerprint of its bytes)
//! rather than by a value id of one graph.
//!
//! The check quantizes the whole weight and compares it with Quark's reference kernel element by
//! element: about 2.5 s of CPU for the 680 MB of f32 weights of a 4-layer m3-tp4 model when this
//! cache was written (BENCHMARKS "Rewrite", 2026-12-02 h-quarkcache); the check now runs at
//! 1.3-1.6 GB/s of f32 on two cores (`rules::quark_check`, h-quarkbig), under 1 s there, still
//! several times the fingerprint below. Within one scan [`crate::view::ConstMemo`] shares it; two
//! costs were left across scans, and this cache removes both:
//!
//! * **The plugin EP checked each weight twice per session**: `GetCapability` (the rules'
//!   `find_sites` on ORT's graph) and again `Compile` (the pipeline on a fresh IR copy of the
//!   claimed subgraph: other value ids, other bytes in memory). The EP keeps one
//!   [`WeightChecks::for_session`] for `GetCapability`; each rewrite in `Compile` runs with a
//!   [`WeightChecks::taking_from`] it, which takes `GetCapability`'s verdict and E4M3 / E8M0
//!   bytes out of the session's cache.
//! * **A refused weight was re-checked on every pipeline iteration** (the rules run to a fixed
//!   point; a refused site is found again each round). A pipeline run keeps a
//!   [`WeightChecks::refusals`] for all of its scans.
//!
//! The key holds a 128-bit fingerprint of the weight's raw bytes, read at memory speed (0.07 s
//! for those 680 MB on the Zen 4 VM, ~10 GB/s, against ~0.5 s for the check), so the cache cannot
//! hand out the bytes of another weight: a same-named initializer with other contents (another graph, a
//! graph optimization between the two calls) is another key. It guards against accidental
//! collisions, not crafted ones (the model is the user's own input either way). The verdict
//! depends on nothing but the key: the bytes, their type, the graph's element type of the value
//! (float16 / bfloat16 round the fake-quant's output) and the name (in the refusal's text).
//!
//! Thread safety: the map is behind a mutex that is not held while a check runs (one may take
//! seconds); two threads checking the same weight at once both check it and the first stored
//! verdict wins (the same bytes either way: the check is deterministic).
//!
//! Memory: an EP session holds the E4M3 / E8M0 bytes of the weights `GetCapability` accepted
//! (a quarter of their f32 bytes) until `Compile`'s rewrite of the subgraph that reads each one
//! takes them (the rewrite's own cache drops them with the rewritten graph, once the program
//! holds them prepacked). Kept to the end of `Compile` instead, they were all resident beside the
//! finished programs: +168 MB of peak RSS (1146 → 1314 MB) on the m3-tp4 f32 4-layer model with
//! every weight read by the EP; taken, +35 MB (the bytes of the subgraphs not compiled yet). A
//! pipeline run holds only refusal texts.
//!
//! [`check_quark_weight_exact`]: crate::rules::mx_consumers

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::rules::mx_consumers::QuarkMx;
use crate::view::{ConstBytes, GraphView, ValueId};

/// A check's outcome: the weight's E4M3 values and E8M0 scales, or why it is refused.
pub type Verdict = Result<Arc<QuarkMx>, String>;

/// What a weight is, as far as the check can tell.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WeightKey {
    name: String,
    /// The graph's element type of the value (`tensor_info`), 0 if unknown.
    value_type: i32,
    /// The stored bytes' element type, dims and fingerprint.
    elem_type: i32,
    dims: Vec<i64>,
    fingerprint: u128,
    /// The quantized axis (0 for a `[K, N]` MatMul weight; stacked experts' K axis).
    axis: usize,
}

/// How often [`WeightChecks::verdict`] ran the check, and how often it reused a verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckCounts {
    pub run: usize,
    pub reused: usize,
}

impl std::ops::AddAssign for CheckCounts {
    fn add_assign(&mut self, o: Self) {
        self.run += o.run;
        self.reused += o.reused;
    }
}

/// Quark weight check verdicts shared by several scans (see the module docs).
#[derive(Debug)]
pub struct WeightChecks {
    verdicts: Mutex<HashMap<WeightKey, Verdict>>,
    /// Whether accepted verdicts (with their quantized bytes) are kept, or only refusals.
    keep_accepted: bool,
    /// Where verdicts come from before a check runs: taken out of it (accepted ones; refusals,
    /// small, are copied).
    source: Option<Arc<WeightChecks>>,
    run: AtomicUsize,
    reused: AtomicUsize,
}

impl WeightChecks {
    /// Keeps refusals only: what one pipeline run needs (an accepted weight is rewritten by the
    /// fusion that checked it, so its bytes, kept, would only cost memory — a quarter of the f32
    /// weight's — until the run ends).
    pub fn refusals() -> Self {
        Self::new(false)
    }

    /// Keeps accepted verdicts too, with their E4M3 / E8M0 bytes: what an EP session needs
    /// between `GetCapability` and `Compile` ([`WeightChecks::clear`] what is left once compiled).
    pub fn for_session() -> Self {
        Self::new(true)
    }

    /// One rewrite's cache (it keeps accepted verdicts too) that takes the verdicts it needs out
    /// of `session` before checking anything: each of `Compile`'s rewrites of a claimed subgraph
    /// gets `GetCapability`'s bytes, and the session holds them no longer than that.
    pub fn taking_from(session: Arc<WeightChecks>) -> Self {
        WeightChecks {
            source: Some(session),
            ..Self::new(true)
        }
    }

    fn new(keep_accepted: bool) -> Self {
        WeightChecks {
            verdicts: Mutex::default(),
            keep_accepted,
            source: None,
            run: AtomicUsize::new(0),
            reused: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<WeightKey, Verdict>> {
        self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept verdict of `key`, taken out if it accepts (refusals stay).
    fn take(&self, key: &WeightKey) -> Option<Verdict> {
        let mut map = self.lock();
        match map.get(key)? {
            Err(why) => Some(Err(why.clone())),
            Ok(_) => map.remove(key),
        }
    }

    /// The verdict on weight `w` of `g`, whose bytes are `t`, quantized along `axis`: a kept one
    /// if the same weight was checked along it before (here, or in the cache this one takes
    /// from), else `check()`'s (kept unless it accepts and only refusals are kept).
    pub fn verdict(
        &self,
        g: &dyn GraphView,
        w: ValueId,
        t: &ConstBytes<'_>,
        axis: usize,
        check: impl FnOnce() -> Result<QuarkMx, String>,
    ) -> Verdict {
        let key = WeightKey {
            name: g.value_name(w).to_string(),
            value_type: g.tensor_info(w).map_or(0, |i| i.elem_type),
            elem_type: t.elem_type,
            dims: t.dims.clone(),
            fingerprint: fingerprint(&t.raw),
            axis,
        };
        if let Some(v) = self.lock().get(&key) {
            self.reused.fetch_add(1, Ordering::Relaxed);
            return v.clone();
        }
        let taken = self.source.as_ref().and_then(|s| s.take(&key));
        if taken.is_some() {
            self.reused.fetch_add(1, Ordering::Relaxed);
        }
        let v = taken.unwrap_or_else(|| {
            // Not locked while the check runs (seconds on a large weight).
            self.run.fetch_add(1, Ordering::Relaxed);
            check().map(Arc::new)
        });
        if v.is_err() || self.keep_accepted {
            self.lock().entry(key).or_insert_with(|| v.clone());
        }
        v
    }

    /// Checks run and verdicts reused so far.
    pub fn counts(&self) -> CheckCounts {
        CheckCounts {
            run: self.run.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
        }
    }

    /// How many verdicts are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every kept verdict (and its bytes); the counts stay.
    pub fn clear(&self) {
        self.lock().clear();
    }
}

/// A 128-bit fingerprint of `raw`: four independent multiply-rotate lanes over 8-byte words
/// (a change of any word changes its lane's state for good, short of a 2^-64 state collision),
/// then the lanes, the length and the tail mixed into two words. Reads at memory speed.
pub fn fingerprint(raw: &[u8]) -> u128 {
    const K: [u64; 4] = [
        0x9e37_79b9_7f4a_7c15,
        0xc2b2_ae3d_27d4_eb4f,
        0x1656_67b1_9e37_79f9,
        0xd6e8_feb8_6659_fd93,
    ];
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let mut lanes = K;
    let mut chunks = raw.chunks_exact(32);
    for c in &mut chunks {
        for (i, lane) in lanes.iter_mut().enumerate() {
            *lane = (*lane ^ word(&c[i * 8..i * 8 + 8]))
                .wrapping_mul(K[i])
                .rotate_left(29);
        }
    }
    let mut tail = [0u8; 32];
    let rest = chunks.remainder();
    tail[..rest.len()].copy_from_slice(rest);
    for (i, lane) in lanes.iter_mut().enumerate() {
        *lane = (*lane ^ word(&tail[i * 8..i * 8 + 8]))
            .wrapping_mul(K[i])
            .rotate_left(29);
    }
    // murmur3's 64-bit finalizer, over two different combinations of the lanes and the length.
    let fmix = |mut h: u64| {
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    };
    let len = raw.len() as u64;
    let lo = fmix(lanes[0] ^ fmix(lanes[1] ^ fmix(len)));
    let hi = fmix(lanes[2] ^ fmix(lanes[3] ^ fmix(len ^ K[0])));
    (u128::from(hi) << 64) | u128::from(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any one changed byte, a shorter or longer input, and words moved between lanes all change
    /// the fingerprint.
    #[test]
    fn fingerprint_sees_every_byte_and_the_length() {
        let raw: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let base = fingerprint(&raw);
        for i in [0, 7, 8, 31, 32, 500, 991, 992, 999] {
            let mut r = raw.clone();
            r[i] ^= 1;
            assert_ne!(fingerprint(&r), base, "byte {i}");
        }
        assert_ne!(fingerprint(&raw[..999]), base);
        let mut longer = raw.clone();
        longer.push(0);
        assert_ne!(fingerprint(&longer), base);
        let mut swapped = raw.clone();
        swapped[..16].rotate_left(8); // words 0 and 1: lanes 0 and 1 swap inputs
        assert_ne!(fingerprint(&swapped), base);
        assert_eq!(fingerprint(&raw), base);
        assert_ne!(fingerprint(&[]), fingerprint(&[0]));
    }
}
