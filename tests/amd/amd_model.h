/* A host model of the AMD GEMM kernel (kernels/amd/amd_gemm.hip): the
 * same stages, chunk copies, LDS layout, per-lane operand reads and
 * epilogue, all through the functions of amd_lanes.h the device code
 * calls, with each matrix instruction run by the table-driven emulator.
 *
 * What it cannot check: the device-only glue (vector loads, the
 * builtins' argument order, barriers); the instruction check
 * (check_code_objects.py) and a real GPU cover those. */
#ifndef MFMA_TEST_AMD_MODEL_H
#define MFMA_TEST_AMD_MODEL_H

#include <stddef.h>

#include "amd_emu.h"
#include "amd_lanes.h"
#include "mfma_gemm.h"

/* Runs g (in_dtype F16, BF16 or I8; a_sparse with canonical meta) as the
 * kernel for arch would, writing g->d.  0, or -errno with err filled. */
int model_gemm(enum amd_arch arch, const struct emu_instr *ins, const struct mfma_gemm *g,
	       char *err, size_t errlen);

#endif
