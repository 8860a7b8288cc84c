/* cuSPARSELt for the kernel benchmark, behind a C interface: its header
 * is C++ (it includes <cstddef>), so this part is a C++ file built only
 * where the header is (the H200's PyTorch environment). */
#ifndef MFMA_BENCH_CSLT_H
#define MFMA_BENCH_CSLT_H

#include <stddef.h>

#include "nv_driver.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cslt;

/* A row-major 2:4 A (m x k, dense copies on the device, dtype 0 f16,
 * 1 bf16, 2 i8) times B (k x n): descriptors, plan, A compressed once per
 * copy, cusparseLtMatmulSearch done.  The plan is kept until destroy.
 * B is row-major [k][n]; bt (may be 0) is the same B transposed, [n][ldbt],
 * tried as a column-major B where the row-major one is not supported.
 * 0, or negative with a sentence in why. */
int cslt_create(struct cslt **out, int dtype, int m, int n, int k, const CUdeviceptr *dense,
		int ndense, CUdeviceptr b, CUdeviceptr bt, int ldbt, CUstream s, char *why, size_t whylen);
int cslt_run(struct cslt *c, int copy, CUstream s);
int cslt_copies(const struct cslt *c);
CUdeviceptr cslt_d(const struct cslt *c);
/* The output type used ("same" as the inputs, i32 for i8, or the f16
 * fallback) and whether it is the one our kernels write. */
const char *cslt_out_name(const struct cslt *c);
int cslt_out_same(const struct cslt *c);
void cslt_destroy(struct cslt *c);

#ifdef __cplusplus
}
#endif

#endif
