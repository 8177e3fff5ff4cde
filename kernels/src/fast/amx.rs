//! The Intel AMX-BF16 kernel of the MXFP8 `[N, K]` GEMM for 4 ≤ M ≤ 64 (driven by `matmul_mx`).
//! The in-register AVX-512 path spends about two thirds of its cycles on `vdpbf16ps`; one
//! `tdpbf16ps` does 16 × 16 × 32 multiply-adds, so here the dot products are nearly free and the
//! GEMM is bound by the decode and the weight reads.
//!
//! Roles are swapped so that no weight transpose is needed: `C[16 columns × M] += W[16 columns ×
//! 32 k] · A[32 k × M]`. W (the AMX "A" operand, 64 bytes per row) is 16 decoded weight rows in
//! bf16, decoded as the AVX-512 path does (`avx512_regs::decode_bytes`: byte look-ups, scale
//! added to the exponent) after a byte permute that puts each 32-block in k order, and stored to
//! a small per-task buffer; A (the "B" operand) is the activations in bf16 in AMX's pair layout:
//! tile row p holds, for each of the M rows, the 32-bit pair of k = 2p, 2p+1 of the block
//! ([`pack_pairs`]; built once per call, read by every pass).
//!
//! Two column tiles (32 columns) per pass: tmm0 / tmm1 accumulate C over all of K in f32,
//! tmm2 / tmm3 hold the two A tiles of a 64-k step, tmm4..tmm7 the four W tiles.
//!
//! Stable Rust has no AMX intrinsics, so the tile instructions are `asm!` with explicit tile
//! registers. The compiler never touches tile state; the driver loads the tile configuration
//! ([`TileConfig::load`]) on the thread of a task before its kernel calls, and the guard it
//! returns releases it at the task's end.
//!
//! Precision: TDPBF16PS, like `vdpbf16ps`, treats bf16 denormal inputs as zero and may flush
//! denormal results, so the same guards as the AVX-512 path apply (`normal_products`,
//! `MAX_FAST_SCALE`; NaN weights leave the path). Sums are f32 in hardware order (docs/ops.md:
//! GEMM outputs are within f32 accumulation tolerance, never a bit-exact target).

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

use super::avx2_mx::nan_bytes32;
use super::avx512_regs::{decode32, decode_bytes, exp_add, lookup_tables};
use crate::codec::BLOCK;

/// Columns per C tile (AMX tile rows).
pub const TILE_COLS: usize = 16;
/// Columns per pass: two C tiles.
pub const PASS_COLS: usize = 2 * TILE_COLS;
/// Rows of A per tile: the C and A tiles hold that many f32 / pairs per row (64 bytes).
pub const TILE_M: usize = 16;
/// Largest M: groups of 16 rows of A, each a pass of its own over the weights (decoded again:
/// the decode is the cost, yet 4 groups still beat the AVX-512 path's dot products at M = 64).
pub const MAX_M: usize = 64;
/// Smallest M that takes the tiles. The tile work does not shrink with M, and at M = 1 the
/// AVX-512 path is bound by the weight reads already (2 threads from DRAM: 0.53 vs 0.63 ms at
/// 1536 × 6144, 0.34 vs 0.47 at 6144 × 768); M = 2 was a tie, M = 4 mostly an AMX win.
pub const MIN_M: usize = 4;
/// bf16 words of the per-task decode buffer: two steps (double-buffered) × 2 column tiles ×
/// 2 halves × 16 rows × 32 words.
const BUF_WORDS: usize = 2 * 2 * 2 * TILE_COLS * BLOCK;

/// A task's decode buffer (8 KiB; whole cache lines, so a W tile row is one line).
#[repr(C, align(64))]
pub struct DecodeBuf([u16; BUF_WORDS]);

impl DecodeBuf {
    pub fn new() -> Box<DecodeBuf> {
        Box::new(DecodeBuf([0; BUF_WORDS]))
    }
}

/// At least this many weight bytes of whole passes (32 rows each) between a step and its
/// prefetch (into L2): the same k of the rows a later pass reads, as `avx512_regs` does (2
/// threads from DRAM, 6144 × 768: M = 1 0.47 → 0.35 ms, M = 8 0.43 → 0.32 ms against 1 KiB
/// ahead in the same row).
const PREFETCH_AHEAD: usize = 4096;

/// `exp_add(s)` twice in a 32-bit word, for a broadcast straight from memory (a load-port uop,
/// where a 16-bit broadcast from a register costs two on port 5, which also runs every look-up
/// and unpack of the decode).
static EXP_ADD_PAIRS: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut s = 0;
    while s < 256 {
        t[s] = exp_add(s as u8) as u32 * 0x1_0001;
        s += 1;
    }
    t
};

/// Byte order for [`decode64`]: bytes 0..8 of 128-bit lane L take weights 8L..8L+8 (block 0),
/// bytes 8..16 weights 32+8L.. (block 1), so the two unpacks give the blocks in k order.
const BLOCK_ORDER: [u8; 64] = {
    let mut p = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        let (lane, j) = (i / 16, i % 16);
        p[i] = (if j < 8 {
            8 * lane + j
        } else {
            32 + 8 * lane + j - 8
        }) as u8;
        i += 1;
    }
    p
};

/// 64 E4M3 bytes at `q` (blocks with scales `s0`, `s1` ≤ `MAX_FAST_SCALE`) → block 0 and
/// block 1 in bf16, each in k order (`avx512_regs::decode_bytes` after a byte permute:
/// per-block scales then are whole-vector broadcasts). `nan` as `decode_bytes`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")]
#[inline]
unsafe fn decode64(
    q: *const u8,
    (s0, s1): (u8, u8),
    (t, order): (&[__m512i; 4], __m512i),
    nan: &mut __m512i,
) -> (__m512bh, __m512bh) {
    let b = _mm512_permutexvar_epi8(order, _mm512_loadu_si512(q as *const __m512i));
    let e = |s: u8| _mm512_set1_epi32(*EXP_ADD_PAIRS.get_unchecked(s as usize) as i32);
    decode_bytes(b, (e(s0), e(s1)), t, nan)
}

/// Whether this CPU and OS run AMX-BF16 for this process: CPUID.(7,0):EDX bits 22 (AMX-BF16)
/// and 24 (AMX-TILE), OSXSAVE with XCR0 bits 17/18 (tile config and data) enabled, and — on
/// Linux, where tile data is off until a process asks — `arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)` granted. Checked once; any failure means no.
pub fn supported() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // SAFETY: CPUID leaves 0, 1 and 7 exist on every x86-64 CPU (leaf 7 checked against
        // the max leaf); xgetbv only after OSXSAVE says it may run.
        unsafe {
            if __cpuid(0).eax < 7 {
                return false;
            }
            let leaf7 = __cpuid_count(7, 0);
            let osxsave = __cpuid(1).ecx & (1 << 27) != 0;
            if leaf7.edx & (1 << 22) == 0 || leaf7.edx & (1 << 24) == 0 || !osxsave {
                return false;
            }
            if xcr0() & (3 << 17) != 3 << 17 {
                return false;
            }
        }
        request_tile_permission()
    })
}

/// XCR0 (`xgetbv` with ECX = 0).
///
/// # Safety
/// CPUID.1:ECX.OSXSAVE is set.
unsafe fn xcr0() -> u64 {
    let (lo, hi): (u32, u32);
    asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack));
    (hi as u64) << 32 | lo as u64
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: true when granted (Linux ≥ 5.16).
#[cfg(target_os = "linux")]
fn request_tile_permission() -> bool {
    const SYS_ARCH_PRCTL: usize = 158;
    const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
    const XFEATURE_XTILEDATA: usize = 18;
    let ret: isize;
    // SAFETY: a plain Linux syscall; `syscall` clobbers rcx and r11, the result is in rax.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

/// Other OSes: not probed (Windows enables tile data by default, but it is untested here).
#[cfg(not(target_os = "linux"))]
fn request_tile_permission() -> bool {
    false
}

/// The 64-byte palette-1 tile configuration for M rows of A (see the module docs for the
/// roles of tmm0..tmm7).
#[repr(C, align(64))]
pub struct TileConfig([u8; 64]);

impl TileConfig {
    pub fn new(m: usize) -> TileConfig {
        assert!((1..=TILE_M).contains(&m));
        let mut c = [0u8; 64];
        c[0] = 1; // palette 1
        for t in 0..8 {
            // C (tmm0, tmm1) and A (tmm2, tmm3): 16 rows of M f32 / pairs; W: 16 rows of 64 B.
            let colsb = if t < 4 { 4 * m } else { 64 } as u16;
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
            c[48 + t] = TILE_COLS as u8;
        }
        TileConfig(c)
    }

    /// Loads this configuration on the calling thread until the returned guard drops (then
    /// `tilerelease`: the thread, maybe another pool's, leaves with no tile state — also when
    /// a fallback path panics).
    ///
    /// # Safety
    /// [`supported`] returned true.
    pub unsafe fn load(&self) -> TilesLoaded {
        asm!("ldtilecfg [{}]", in(reg) self.0.as_ptr(), options(nostack, readonly));
        TilesLoaded(std::marker::PhantomData)
    }
}

/// The tile configuration is loaded on this thread; dropping releases it. Not `Send`: the
/// state belongs to the thread.
pub struct TilesLoaded(std::marker::PhantomData<*const ()>);

impl Drop for TilesLoaded {
    fn drop(&mut self) {
        // SAFETY: only `TileConfig::load` makes one, after `supported` (its safety contract).
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// Rows r0..r0+tm of the `pack_steps` output (`m` rows of `k` bf16 values, `avx512_regs`) in
/// the pair layout of the A tiles (rows past `m` are zeros), k in order: for each 32-k chunk,
/// 16 tile rows of `tm` pairs: `out[(chunk · 16 + p) · tm + j]` = A[r0 + j, 32·chunk + 2p] and
/// A[r0 + j, 32·chunk + 2p + 1] (low word first). A scalar transpose: tm·k/2 moves, ~1 % of a
/// call at M = 16.
pub fn pack_pairs(packed: &[u16], m: usize, k: usize, (r0, tm): (usize, usize)) -> Vec<u32> {
    assert!(packed.len() == m * k && k.is_multiple_of(BLOCK) && r0 < m && tm <= TILE_M);
    let whole = k - k % (2 * BLOCK);
    // Where A[r, kk] is in the packed A: 64-k steps of m rows in the unpack lane order
    // (k ≡ 0..7 mod 16 first, then 8..15), then a tail of m rows of 32 in k order. An even kk
    // and kk + 1 are neighbours in both.
    let at = |r: usize, kk: usize| {
        if kk < whole {
            let (t, j) = (kk / (2 * BLOCK), kk % (2 * BLOCK));
            (t * m + r) * 2 * BLOCK + (j % 16 / 8) * BLOCK + j / 16 * 8 + j % 8
        } else {
            m * whole + r * BLOCK + kk - whole
        }
    };
    let mut out = vec![0u32; tm * k / 2];
    for chunk in 0..k / BLOCK {
        for j in 0..tm.min(m - r0) {
            for p in 0..TILE_COLS {
                let i = at(r0 + j, chunk * BLOCK + 2 * p);
                out[(chunk * TILE_COLS + p) * tm + j] =
                    packed[i] as u32 | (packed[i + 1] as u32) << 16;
            }
        }
    }
    out
}

/// `out[t][i][r] = Σ_k a[r, k] · deq(W_{16t+i})[k]` for the 32 weight rows of one pass: row i
/// at `q + min(i, rows - 1)·k` (scales at `s + min(i, rows - 1)·k/32`; rows past `rows`
/// repeat the last one, their sums are the caller's to drop), A in the pair layout at `pa`
/// ([`pack_pairs`], `m` rows). `false` when a weight is NaN: the caller recomputes the
/// columns exactly.
///
/// # Safety
/// The CPU has AVX512F/BW/VL/VBMI/BF16, AVX2/FMA/F16C and AMX-BF16 ([`supported`]); the
/// calling thread loaded `TileConfig::new(m)`; `rows ≥ 1` rows of `k` bytes at `q` and `k/32`
/// scales at `s` are in bounds, every scale ≤ `MAX_FAST_SCALE`; `pa` holds `m·k/2` pairs.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,avx2,fma,f16c")]
pub unsafe fn nk_pass(
    pa: *const u32,
    m: usize,
    k: usize,
    (q, s, rows): (*const u8, *const u8, usize),
    buf: &mut DecodeBuf,
    out: &mut [[[f32; TILE_COLS]; TILE_COLS]; 2],
) -> bool {
    let kb = k / BLOCK;
    let t = lookup_tables();
    let order = _mm512_loadu_si512(BLOCK_ORDER.as_ptr() as *const __m512i);
    let ahead = PASS_COLS * k * PREFETCH_AHEAD.div_ceil(PASS_COLS * k);
    let qr: [*const u8; PASS_COLS] = std::array::from_fn(|i| q.add(i.min(rows - 1) * k));
    let sr: [*const u8; PASS_COLS] = std::array::from_fn(|i| s.add(i.min(rows - 1) * kb));
    let mut nan = _mm512_setzero_si512();
    let mut nan_tail = 0u32;
    // A tile of 32 k: 16 rows of m pairs, m·4 bytes apart.
    let a_stride = 4 * m;
    let a_tile = |chunk: usize| pa.add(chunk * TILE_COLS * m);
    asm!("tilezero tmm0", "tilezero tmm1", options(nostack, nomem));
    let whole = k - k % (2 * BLOCK);
    for (step, k0) in (0..whole).step_by(2 * BLOCK).enumerate() {
        // buf[step % 2]: [column tile][half][row][32 words].
        let b = buf.0.as_mut_ptr().add(step % 2 * (BUF_WORDS / 2));
        for i in 0..PASS_COLS {
            let (qi, si) = (qr[i].add(k0), sr[i].add(k0 / BLOCK));
            _mm_prefetch::<_MM_HINT_T1>(qi.wrapping_add(ahead) as *const i8);
            let (v0, v1) = decode64(qi, (*si, *si.add(1)), (&t, order), &mut nan);
            let row = b.add((i / TILE_COLS * 2 * TILE_COLS + i % TILE_COLS) * BLOCK);
            _mm512_storeu_si512(
                row as *mut __m512i,
                std::mem::transmute::<__m512bh, __m512i>(v0),
            );
            _mm512_storeu_si512(
                row.add(TILE_COLS * BLOCK) as *mut __m512i,
                std::mem::transmute::<__m512bh, __m512i>(v1),
            );
        }
        let w = |tile: usize| b.add(tile * TILE_COLS * BLOCK);
        asm!(
            "tileloadd tmm2, [{a0} + {ast}*1]",
            "tileloadd tmm3, [{a1} + {ast}*1]",
            "tileloadd tmm4, [{w0} + {ws}*1]",
            "tileloadd tmm5, [{w1} + {ws}*1]",
            "tileloadd tmm6, [{w2} + {ws}*1]",
            "tileloadd tmm7, [{w3} + {ws}*1]",
            "tdpbf16ps tmm0, tmm4, tmm2",
            "tdpbf16ps tmm0, tmm5, tmm3",
            "tdpbf16ps tmm1, tmm6, tmm2",
            "tdpbf16ps tmm1, tmm7, tmm3",
            a0 = in(reg) a_tile(2 * step),
            a1 = in(reg) a_tile(2 * step + 1),
            ast = in(reg) a_stride,
            w0 = in(reg) w(0),
            w1 = in(reg) w(1),
            w2 = in(reg) w(2),
            w3 = in(reg) w(3),
            ws = in(reg) 2 * BLOCK,
            options(nostack, readonly),
        );
    }
    if whole < k {
        let b = buf.0.as_mut_ptr();
        for i in 0..PASS_COLS {
            let (qi, si) = (qr[i].add(whole), *sr[i].add(whole / BLOCK));
            nan_tail |= _mm256_movemask_epi8(nan_bytes32(qi)) as u32;
            let v = decode32(qi, si);
            let row = b.add((i / TILE_COLS * 2 * TILE_COLS + i % TILE_COLS) * BLOCK);
            _mm512_storeu_si512(
                row as *mut __m512i,
                std::mem::transmute::<__m512bh, __m512i>(v),
            );
        }
        asm!(
            "tileloadd tmm2, [{a0} + {ast}*1]",
            "tileloadd tmm4, [{w0} + {ws}*1]",
            "tileloadd tmm6, [{w2} + {ws}*1]",
            "tdpbf16ps tmm0, tmm4, tmm2",
            "tdpbf16ps tmm1, tmm6, tmm2",
            a0 = in(reg) a_tile(whole / BLOCK),
            ast = in(reg) a_stride,
            w0 = in(reg) b,
            w2 = in(reg) b.add(2 * TILE_COLS * BLOCK),
            ws = in(reg) 2 * BLOCK,
            options(nostack, readonly),
        );
    }
    // C rows (columns of y) 64 bytes apart; only the first m f32 of each are written.
    asm!(
        "tilestored [{c0} + {cs}*1], tmm0",
        "tilestored [{c1} + {cs}*1], tmm1",
        c0 = in(reg) out[0].as_mut_ptr(),
        c1 = in(reg) out[1].as_mut_ptr(),
        cs = in(reg) 4 * TILE_COLS,
        options(nostack),
    );
    nan_tail == 0 && _mm512_cmpeq_epi8_mask(nan, _mm512_set1_epi8(-1)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{e4m3_to_f32, e8m0_to_f32};
    use crate::fast::avx512_regs::pack_steps;
    use crate::fast::isa;

    /// xorshift64: fresh, reproducible operands.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// One pass straight through the kernel (the driver's dispatch aside: every M it can take,
    /// 1..=16), against f64 sums of the exact deq values.
    #[test]
    fn pass_matches_f64_sums_and_leaves_on_nan() {
        if !isa::with_amx(true, isa::amx_bf16) {
            eprintln!("skipped: this CPU / OS has no AMX-BF16 (or no AVX-512 BF16)");
            return;
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        // k = 32·odd (a tail; 32: only it), rows < 32 (repeated last row), m = 1..16.
        for (m, k, rows) in [
            (1, 96, 32),
            (3, 32, 17),
            (8, 1056, 32),
            (9, 192, 5),
            (16, 160, 32),
        ] {
            // A: bf16-exact values of both signs, 2^-8 .. 2^8.
            let a: Vec<f32> = (0..m * k)
                .map(|_| {
                    let r = rng.next();
                    let e = 119 + (r % 17) as u32;
                    f32::from_bits(
                        ((r >> 63) as u32) << 31 | e << 23 | ((r >> 8) as u32 & 0x7F) << 16,
                    )
                })
                .collect();
            // Weights: any non-NaN byte; scales 100..=150 (on the route for this A).
            let mut q: Vec<u8> = (0..rows * k).map(|_| (rng.next() >> 20) as u8).collect();
            for b in q.iter_mut().filter(|b| **b & 0x7F == 0x7F) {
                *b &= 0xFE;
            }
            let s: Vec<u8> = (0..rows * k / BLOCK)
                .map(|_| 100 + (rng.next() % 51) as u8)
                .collect();
            // SAFETY: amx_bf16() checked AVX-512 BF16 and AMX; a holds m·k values, k % 32 == 0.
            let pairs = pack_pairs(&unsafe { pack_steps(&a, m, k) }, m, k, (0, m));
            let run = |q: &[u8], out: &mut [[[f32; TILE_COLS]; TILE_COLS]; 2]| {
                let (cfg, mut buf) = (TileConfig::new(m), DecodeBuf::new());
                // SAFETY: as above; tiles configured for m for the pass (released as `_tiles` drops);
                // rows·k bytes, rows·k/32 scales ≤ 150, m·k/2 pairs.
                unsafe {
                    let _tiles = cfg.load();
                    nk_pass(
                        pairs.as_ptr(),
                        m,
                        k,
                        (q.as_ptr(), s.as_ptr(), rows),
                        &mut buf,
                        out,
                    )
                }
            };
            let mut out = [[[0f32; TILE_COLS]; TILE_COLS]; 2];
            assert!(run(&q, &mut out), "m {m} k {k}: no NaN, yet off the route");
            for i in 0..PASS_COLS {
                let row = i.min(rows - 1);
                for r in 0..m {
                    let (mut want, mut abs) = (0f64, 0f64);
                    for kk in 0..k {
                        let w = e4m3_to_f32(q[row * k + kk]) as f64
                            * e8m0_to_f32(s[row * k / BLOCK + kk / BLOCK]) as f64;
                        want += a[r * k + kk] as f64 * w;
                        abs += (a[r * k + kk] as f64 * w).abs();
                    }
                    let got = out[i / TILE_COLS][i % TILE_COLS][r] as f64;
                    let bound = abs * k as f64 * 2f64.powi(-23) + 1e-30;
                    assert!(
                        (got - want).abs() <= bound,
                        "m {m} k {k} column {i} row {r}: {got} vs {want} (bound {bound})"
                    );
                }
            }
            for nan in [0x7F, 0xFF] {
                for pos in [0, k - 1, (rows - 1) * k + k / 2] {
                    let mut bad = q.clone();
                    bad[pos] = nan;
                    assert!(
                        !run(&bad, &mut out),
                        "m {m} k {k}: NaN {nan:#x} at {pos} missed"
                    );
                }
            }
        }
    }

    #[test]
    fn pair_layout_holds_k_in_order() {
        if !isa::avx512_bf16() {
            return;
        }
        let (m, k) = (3, 160); // two 64-k steps and a 32-wide tail
        let bits = |i: usize| 0x3F80 + i as u16; // distinct bf16-exact values
        let a: Vec<f32> = (0..m * k)
            .map(|i| f32::from_bits((bits(i) as u32) << 16))
            .collect();
        // SAFETY: avx512_bf16() checked the CPU features; k is a multiple of 32.
        let packed = unsafe { pack_steps(&a, m, k) };
        // All rows; rows 1.. as a group of 4 tile rows (the last one zeros).
        for (r0, tm) in [(0, m), (1, 4)] {
            let pairs = pack_pairs(&packed, m, k, (r0, tm));
            for chunk in 0..k / BLOCK {
                for p in 0..TILE_COLS {
                    for j in 0..tm {
                        let (r, kk) = (r0 + j, chunk * BLOCK + 2 * p);
                        let want = if r < m {
                            bits(r * k + kk) as u32 | (bits(r * k + kk + 1) as u32) << 16
                        } else {
                            0
                        };
                        assert_eq!(
                            pairs[(chunk * TILE_COLS + p) * tm + j],
                            want,
                            "group {r0}+{tm}: chunk {chunk} p {p} row {r}"
                        );
                    }
                }
            }
        }
    }
}
