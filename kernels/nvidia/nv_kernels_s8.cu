/* s8 kernels: dense mma m16n8k32 and 2:4 mma.sp m16n8k64 (s32
 * accumulate), every tile.  B arrives transposed (nv_transpose_b8). */
#include "nv_gemm.cuh"
#include "nv_variants.h"

#define NV_S8D(name, bm, bn, wm, wn, std, sts, minb) NV_DEFINE_KERNEL(s8d, nv_pol_s8_dense, name, bm, bn, wm, wn, std, minb)
#define NV_S8S(name, bm, bn, wm, wn, std, sts, minb) NV_DEFINE_KERNEL(s8s, nv_pol_s8_sparse, name, bm, bn, wm, wn, sts, minb)
NV_TILES(NV_S8D)
NV_TILES(NV_S8S)
