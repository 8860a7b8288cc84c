/* Kernel providers of the HIP backend: a family of GEMM kernels that runs
 * on the device layer (hip_device.h).  hip.c holds the table of providers
 * and walks it; each provider is one file (hip_ours.c: our MFMA/SMFMAC
 * kernels from kernels/amd/).  The same shape as cuda_provider.h.
 *
 * Adding a provider (hipBLASLt, hipSPARSELt, another kernel family):
 *   1. Write hip_<name>.c defining a `const struct hip_provider
 *      hip_provider_<name>` and declare it below.  It talks to the device
 *      only through hip_device.h: copies in and out, the scratch buffers
 *      and hip_buf_need, the stream, the timing marks.  What it needs per device (a loaded module, a library
 *      handle, its private buffers) is its state, made by attach and freed
 *      by detach.  A provider whose library may be absent (dlopen) finds
 *      out in usable() or attach(), never fails the device because of it:
 *      it answers no in usable(), or attaches with a state that makes
 *      supports() say no.
 *   2. Add it to the table in hip.c, in order of preference: the first
 *      provider whose supports() accepts a request runs it.
 *   3. Add the file to backend_hip_sources in meson.build, and its name
 *      to providers.c's hip list at the same place in the order (the
 *      configuration's hip.providers names it; probe refuses a mismatch).
 * The daemon sees none of this: the variant string a GEMM reports names
 * the kernel (and so the provider) that ran. */
#ifndef MFMAD_HIP_PROVIDER_H
#define MFMAD_HIP_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "hip_device.h"

/* What a provider is asked to run.  At weight_load the request is not
 * known yet: n is 0 and out is MFMA_DT_NONE, meaning "any". */
struct hip_shape {
	uint32_t m, n, k;
	enum mfma_dtype in, out;
	bool sparse;
};

struct hip_provider {
	const char *name;

	/* Probe time: whether the provider has kernels for the gfx arch
	 * ("gfx942"). */
	int (*usable)(const char *arch);
	/* Adds the variants the provider runs on arch to info->variants
	 * (comma-separated, after what is there) and its input dtypes to
	 * info->dense_dtypes / sparse_dtypes. */
	void (*describe)(const char *arch, struct backend_device_info *info);

	/* Worker thread, device current.  attach makes the provider's state
	 * on an open device (*state may stay NULL); a negative code fails the
	 * device's open.  detach accepts a NULL state. */
	int (*attach)(struct hip_dev *dev, void **state, char *err, size_t errlen);
	void (*detach)(struct hip_dev *dev, void *state);

	/* 0 when the provider runs this shape on this device, else a
	 * negative code (-ENOTSUP: no kernel for it; -EINVAL: a request no
	 * kernel could run) with the reason in err.  Pure: no device work. */
	int (*supports)(const struct hip_dev *dev, void *state, const struct hip_shape *s,
			char *err, size_t errlen);

	/* Makes an A operand (canonical 2:4 or dense, w->m x w->k) resident in
	 * the provider's own layout: *packed is passed back to launch and
	 * weight_free, *dev_bytes is the device memory it holds.  The work may
	 * end on the stream; the caller waits for it. */
	int (*weight_pack)(struct hip_dev *dev, void *state, const struct mfma_weight_host *w,
			   void **packed, uint64_t *dev_bytes, char *err, size_t errlen);
	void (*weight_free)(struct hip_dev *dev, void *state, void *packed);

	/* Runs one GEMM that supports() accepted: records the timing marks,
	 * copies in, launches, copies D out (hip_dev_copy_out, which waits),
	 * and names the kernel in *variant (a static string).  packed is a
	 * weight_pack result replacing g->a / g->a_meta, or NULL.  On failure
	 * the caller drains the stream. */
	int (*launch)(struct hip_dev *dev, void *state, const struct mfma_gemm *g, void *packed,
		      const char **variant, char *err, size_t errlen);
};

extern const struct hip_provider hip_provider_ours;

#endif
