//! Row bookkeeping shared by the packed-word norm paths (`avx512_norm_words`,
//! `avx2_norm_words`), which run row r + 1's pass 1 inside row r's pass 2 and, for calls past
//! the caches, prefetch row r + 2 meanwhile.

use half::bf16;

/// The row whose pass 1 runs inside the previous row's pass 2 (block by block): its x, residual
/// (null: none), residual_out (null: none) and where its s words are (`sw`: each path's choice
/// of its residual_out, a scratch row, or x itself).
#[derive(Clone, Copy)]
pub(super) struct Ahead {
    pub xp: *const bf16,
    pub rp: *const bf16,
    pub rop: *mut bf16,
    pub sw: *mut u16,
}

/// What row r's pass 2 prefetches (`avx512_norm::prefetch_block`): the inputs and residual_out
/// of row r + 2, one row ahead of the pass 1 that runs inside it.
pub(super) struct RowPrefetch {
    inputs: [*const bf16; 2],
    count: usize,
    /// residual_out of row r + 2 (null: none, or no prefetch).
    pub out: *const bf16,
}

impl RowPrefetch {
    /// The targets while row `r` (`this`) of `rows` rows of `h` runs its pass 2: none unless
    /// `on` and row r + 2 exists.
    pub fn new(this: Ahead, r: usize, rows: usize, h: usize, on: bool) -> Self {
        let more = on && r + 2 < rows;
        let count = match (more, this.rp.is_null()) {
            (false, _) => 0,
            (true, true) => 1,
            (true, false) => 2,
        };
        RowPrefetch {
            inputs: [this.xp.wrapping_add(2 * h), this.rp.wrapping_add(2 * h)],
            count,
            out: if more && !this.rop.is_null() {
                this.rop.wrapping_add(2 * h) as *const bf16
            } else {
                std::ptr::null()
            },
        }
    }

    /// Row r + 2's x (and residual) to prefetch.
    pub fn inputs(&self) -> &[*const bf16] {
        &self.inputs[..self.count]
    }
}
