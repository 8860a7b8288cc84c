/* Kernel providers of the CUDA backend: a family of GEMM kernels that
 * runs on the device layer (cuda_device.h).  cuda.c holds the table of
 * providers and walks it; each provider is one file (cuda_ours.c: our
 * mma.sp kernels from kernels/nvidia/).
 *
 * Adding a provider (cuBLASLt, cuSPARSELt, a wgmma family):
 *   1. Write cuda_<name>.c defining a `const struct cuda_provider
 *      cuda_provider_<name>` and declare it below.  It talks to the device
 *      only through cuda_device.h: copies in and out through the pinned
 *      pool, the scratch buffers and cuda_buf_need, the stream, the timing
 *      marks.  What it needs per device (a loaded module, a library
 *      handle, its private buffers) is its state, made by attach and freed
 *      by detach.  A provider whose library may be absent (dlopen) finds
 *      out in usable() or attach(), never fails the device because of it:
 *      it answers no in usable(), or attaches with a state that makes
 *      supports() say no.
 *   2. Add it to the table in cuda.c, in order of preference for a
 *      request that brings its own A: the first provider whose supports()
 *      accepts it runs it.  A resident weight is packed by every provider
 *      that supports it, and cuda.c times them on the device for each N
 *      bucket the first time the bucket is seen, keeping the fastest.
 *   3. Add the file to backend_cuda_sources in meson.build, and its name
 *      to providers.c's cuda list at the same place in the order (the
 *      configuration's cuda.providers names it; probe refuses a mismatch).
 * The daemon sees none of this: the variant string a GEMM reports names
 * the kernel (and so the provider) that ran; a library's variants start
 * with its name ("cublaslt.f16.dense"). */
#ifndef MFMAD_CUDA_PROVIDER_H
#define MFMAD_CUDA_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_device.h"

/* What a provider is asked to run.  At weight_load the request is not
 * known yet: n is 0 and out is MFMA_DT_NONE, meaning "any".  resident: A
 * is a weight packed by weight_pack (a provider whose packing is costly,
 * like cuSPARSELt's compression, may run only those).  A batched launch
 * reaches a provider as one GEMM over its parts joined on the device
 * (cuda_batch.h): its b, c and d are then device addresses, which the
 * device layer's copies recognise (cuda_dev_on_device). */
struct cuda_shape {
	uint32_t m, n, k;
	enum mfma_dtype in, out;
	bool sparse;
	bool resident;
};

struct cuda_provider {
	const char *name;

	/* Probe time, no context: whether the provider has kernels for
	 * compute capability cc. */
	int (*usable)(int cc);
	/* Adds the variants the provider runs on cc to info->variants
	 * (comma-separated, after what is there) and its input dtypes to
	 * info->dense_dtypes / sparse_dtypes. */
	void (*describe)(int cc, struct backend_device_info *info);

	/* Worker thread, context current.  attach makes the provider's state
	 * on an open device (*state may stay NULL); a negative code fails the
	 * device's open.  detach accepts a NULL state. */
	int (*attach)(struct cuda_dev *dev, void **state, char *err, size_t errlen);
	void (*detach)(struct cuda_dev *dev, void *state);
	/* Optional, after attach: the library's version (as it gives it), 0
	 * when it has none to give; it goes into the key of the choices
	 * measured on the device, so that a new library measures again.  Our
	 * own kernels have none: the key carries nv_images_stamp. */
	long (*version)(void *state);

	/* 0 when the provider runs this shape on this device, else a
	 * negative code (-ENOTSUP: no kernel for it; -EINVAL: a request no
	 * kernel could run) with the reason in err.  Pure: no device work. */
	int (*supports)(const struct cuda_dev *dev, void *state, const struct cuda_shape *s,
			char *err, size_t errlen);

	/* Makes an A operand (canonical 2:4 or dense, w->m x w->k) resident in
	 * the provider's own layout: *packed is passed back to launch and
	 * weight_free, *dev_bytes is the device memory it holds.  The work may
	 * end on the stream; the caller waits for it. */
	int (*weight_pack)(struct cuda_dev *dev, void *state, const struct mfma_weight_host *w,
			   void **packed, uint64_t *dev_bytes, char *err, size_t errlen);
	void (*weight_free)(struct cuda_dev *dev, void *state, void *packed);

	/* Runs one GEMM that supports() accepted: records the timing marks,
	 * copies in, launches, copies D out (cuda_dev_copy_out, which waits),
	 * and names the kernel in *variant (a static string).  packed is a
	 * weight_pack result replacing g->a / g->a_meta, or NULL.  On failure
	 * the caller drains the stream. */
	int (*launch)(struct cuda_dev *dev, void *state, const struct mfma_gemm *g, void *packed,
		      const char **variant, char *err, size_t errlen);
	/* Optional (NULL: nothing is planned per shape): whether a launch of
	 * g would find its plan made (no library search or heuristic first),
	 * so that the loop thread may start it (leave_only) without waiting
	 * on one.  Any thread that holds the device. */
	bool (*planned)(void *state, const struct mfma_gemm *g, void *packed);
};

/* ---- Vendor libraries opened at run time (cuda.c) ---- */

/* An entry point to resolve: its symbol and where to store the address
 * (a function pointer, written with memcpy). */
struct cuda_lib_sym {
	const char *name;
	void *fn;
};

/* Opens the first library of names[] that dlopen finds, else, when the
 * environment variable env (may be NULL) is set, the file it names or
 * names[0] inside the folder it names; resolves every symbol.  path gets
 * what was opened.  0, or -ENOENT (no library) / -ENOSYS (a symbol
 * missing) with the reason in err.  Called once per library (under the
 * provider's pthread_once): the handle is kept for the process. */
int cuda_lib_open(const char *const *names, size_t nnames, const char *env,
		  const struct cuda_lib_sym *syms, size_t nsyms, char *path, size_t pathlen,
		  char *err, size_t errlen);

extern const struct cuda_provider cuda_provider_ours;
/* The sm_90a wgmma.sp and wgmma kernels (2:4 and dense f16, bf16 on
 * sm_90), cuda_wgmma.c. */
extern const struct cuda_provider cuda_provider_wgmma;
/* NVIDIA's libraries, opened with dlopen when a device attaches; without
 * them the providers attach with a state that supports nothing. */
extern const struct cuda_provider cuda_provider_cublaslt;   /* dense f16, bf16 */
extern const struct cuda_provider cuda_provider_cusparselt; /* 2:4 f16, bf16, resident */

#endif
