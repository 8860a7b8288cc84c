/* bf16 kernels: dense mma m16n8k16 and 2:4 mma.sp m16n8k32, every tile. */
#include "nv_gemm.cuh"
#include "nv_variants.h"

#define NV_BF16D(name, bm, bn, wm, wn, std, sts, minb) NV_DEFINE_KERNEL(bf16d, nv_pol_bf16_dense, name, bm, bn, wm, wn, std, minb)
#define NV_BF16S(name, bm, bn, wm, wn, std, sts, minb) NV_DEFINE_KERNEL(bf16s, nv_pol_bf16_sparse, name, bm, bn, wm, wn, sts, minb)
NV_TILES(NV_BF16D)
NV_TILES(NV_BF16S)
