/* Host side of the AMD kernels: which kernel an (arch, dtype, sparsity)
 * runs, the one-time conversion of canonical 2:4 meta to the SMFMAC
 * index layout, and the embedded code objects.
 *
 * Pure functions (no HIP, no allocation, no I/O), used by the HIP backend
 * and the tests. */
#ifndef MFMA_AMD_KERNELS_H
#define MFMA_AMD_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amd_lanes.h"
#include "mfma_dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct amd_variant {
	const char *kernel; /* symbol in the code object, e.g. "mfmad_gemm_sp24_f16" */
	const char *name;   /* what responses and status report */
	struct amd_cfg cfg;
};

/* gcnArchName ("gfx942:sramecc+:xnack-") or a plain name ("gfx942") to
 * an arch: the name is cut at the first ':'.  -ENOENT when the arch has
 * no kernels here. */
int amd_arch_parse(const char *gcn_arch_name, enum amd_arch *arch);
const char *amd_arch_name(enum amd_arch arch);

/* The kernel for inputs of dtype (F16, BF16 or I8) with dense or 2:4 A.
 * -ENOTSUP for other dtypes (no matrix instruction takes them here). */
int amd_variant_get(enum amd_arch arch, enum mfma_dtype in, bool sparse, struct amd_variant *v);

/* Every variant of an arch, i < amd_variant_count(), in a fixed order;
 * -EINVAL past the end. */
size_t amd_variant_count(void);
int amd_variant_at(enum amd_arch arch, size_t i, struct amd_variant *v);

/* The device form of the 2:4 meta of an m x k weight for variant c:
 * amd_meta_bytes(c, m, k) bytes (see amd_lanes.h).  -EINVAL if c is not
 * an SMFMAC variant, k is not a multiple of 4 or out_size is too small. */
int amd_meta_convert(const struct amd_cfg *c, const uint32_t *canon, uint32_t m, uint32_t k,
		     void *out, size_t out_size);

/* 1 if the ELF code object defines a symbol of that name, 0 if not,
 * -EINVAL if it is not a well-formed 64-bit ELF. */
int amd_elf_has_symbol(const void *data, size_t size, const char *name);

/* The embedded code object for an arch name ("gfx942"), from the
 * generated amd_code_objects.c; -ENOENT when none was built for it. */
int amd_code_object(const char *arch, const void **data, size_t *size);

#ifdef __cplusplus
}
#endif

#endif
