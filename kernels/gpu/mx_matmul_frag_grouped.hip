// com.mxfuse MxMatMul, the fragment-packed decode GEMM over several weights at once (the grouped
// module, kernels::gpu::sources "gemm_frag_grouped"): the consumers of one MXFP8 activation (q / k
// / v projections, gate / up) whose constant weights were packed one after another, tile after
// tile, run as one launch of the kernels of mx_matmul_frag.hip, which this define compiles with the
// MxFragSegs entry points (names mx_matmul_fragg_*): the grid covers the tiles of all segments (a
// better filled GPU than each small N alone) and each tile's outputs go to its segment's tensor
// with its own epilogue. Every tile's arithmetic is the single-weight kernel's: same bits.
// Listed first in that module, so the define precedes mx_matmul_frag.hip; last in the whole
// program text, where it changes nothing.
#define MX_FRAG_GROUPED 1
