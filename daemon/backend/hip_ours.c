/* Our kernels as a provider of the HIP backend (hip_provider.h): the
 * MFMA / SMFMAC families of kernels/amd/, f16, bf16 and i8, dense and 2:4,
 * compiled per gfx arch into code objects that mfmad embeds.
 *
 * Each device loads its arch's object with hipModuleLoadData and launches
 * with hipModuleLaunchKernel, arguments through `extra` (the kernelParams
 * path is missing from some ROCm versions).  Weights stay resident in
 * device memory.  A 2:4 A's meta is converted to the SMFMAC index layout
 * on gfx942/gfx950 (once at load for a weight, per request otherwise);
 * gfx908/gfx90a keep the canonical meta, which their kernels expand in
 * LDS. */
#include "mfmad_build.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amd_kernels.h"
#include "hip_provider.h"
#include "sparse24.h"

#define NVARIANTS (AMD_NELEM * 2)

/* Per device: the loaded kernels, and a host buffer for a per-request
 * meta conversion. */
struct ours {
	enum amd_arch arch;
	bool has_kernel[NVARIANTS];
	hipModule_t mod;
	hipFunction_t fn[NVARIANTS];
	void *hmeta;
	size_t hmeta_cap;
};

/* A weight in device memory. */
struct ours_weight {
	void *a;    /* values (2:4) or the dense matrix */
	void *meta; /* device-format meta, NULL for dense */
};

/* Which variants of arch the embedded code object has; false when the
 * arch has no object at all. */
static bool find_kernels(const char *arch_name, enum amd_arch *arch, bool has[NVARIANTS])
{
	const void *co;
	size_t co_size;
	bool any = false;
	memset(has, 0, sizeof(bool) * NVARIANTS);
	if (amd_arch_parse(arch_name, arch) < 0 ||
	    amd_code_object(amd_arch_name(*arch), &co, &co_size) < 0)
		return false;
	for (size_t v = 0; v < NVARIANTS; v++) {
		struct amd_variant var;
		if (amd_variant_at(*arch, v, &var) == 0 &&
		    amd_elf_has_symbol(co, co_size, var.kernel) == 1)
			has[v] = any = true;
	}
	return any;
}

static int ours_usable(const char *arch_name)
{
	enum amd_arch arch;
	bool has[NVARIANTS];
	return find_kernels(arch_name, &arch, has);
}

static void ours_describe(const char *arch_name, struct backend_device_info *info)
{
	enum amd_arch arch;
	bool has[NVARIANTS];
	if (!find_kernels(arch_name, &arch, has))
		return;
	static const enum mfma_dtype of_elem[AMD_NELEM] = {
		[AMD_E_F16] = MFMA_DT_F16, [AMD_E_BF16] = MFMA_DT_BF16, [AMD_E_I8] = MFMA_DT_I8,
	};
	for (size_t v = 0; v < NVARIANTS; v++) {
		struct amd_variant var;
		if (!has[v] || amd_variant_at(arch, v, &var) < 0)
			continue;
		if (var.cfg.sparse)
			info->sparse_dtypes |= BACKEND_DTYPE_BIT(of_elem[var.cfg.elem]);
		else
			info->dense_dtypes |= BACKEND_DTYPE_BIT(of_elem[var.cfg.elem]);
		if (!backend_list_add(info->variants, sizeof(info->variants), var.name))
			break;
	}
}

static void ours_detach(struct hip_dev *dev, void *state)
{
	struct ours *o = state;
	(void)dev;
	if (!o)
		return;
	if (o->mod)
		(void)hipModuleUnload(o->mod);
	free(o->hmeta);
	free(o);
}

static int ours_attach(struct hip_dev *dev, void **state, char *err, size_t errlen)
{
	struct ours *o = calloc(1, sizeof(*o));
	if (!o) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	const char *arch = hip_dev_arch(dev);
	const void *co;
	size_t co_size;
	int rc;
	if (!find_kernels(arch, &o->arch, o->has_kernel) ||
	    amd_code_object(amd_arch_name(o->arch), &co, &co_size) < 0) {
		snprintf(err, errlen, "hip: no code object for %s in this build", arch);
		rc = -ENOENT;
		goto out;
	}
	hipError_t e = hipModuleLoadData(&o->mod, co);
	if (e != hipSuccess) {
		o->mod = NULL;
		rc = hip_fail(e, err, errlen, "hipModuleLoadData");
		goto out;
	}
	for (size_t v = 0; v < NVARIANTS; v++) {
		struct amd_variant var;
		if (!o->has_kernel[v] || amd_variant_at(o->arch, v, &var) < 0)
			continue;
		e = hipModuleGetFunction(&o->fn[v], o->mod, var.kernel);
		if (e != hipSuccess) {
			snprintf(err, errlen, "hip: kernel %s is missing from the %s code object: %s",
				 var.kernel, arch, hipGetErrorString(e));
			rc = -EIO;
			goto out;
		}
	}
	*state = o;
	return 0;
out:
	ours_detach(dev, o);
	return rc;
}

static int variant_for(const struct ours *o, enum mfma_dtype in, bool sparse,
		       struct amd_variant *var, size_t *vi, char *err, size_t errlen)
{
	const char *arch = amd_arch_name(o->arch);
	if (amd_variant_get(o->arch, in, sparse, var) < 0) {
		snprintf(err, errlen,
			 "hip: in_dtype=%s has no matrix-core kernel on %s (f16, bf16 and i8 do)",
			 mfma_dtype_name(in), arch);
		return -ENOTSUP;
	}
	*vi = (size_t)var->cfg.elem * 2 + (sparse ? 1 : 0);
	if (!o->has_kernel[*vi]) {
		snprintf(err, errlen, "hip: kernel %s is not in the %s code object", var->kernel, arch);
		return -ENOTSUP;
	}
	return 0;
}

static int ours_supports(const struct hip_dev *dev, void *state, const struct hip_shape *s,
			 char *err, size_t errlen)
{
	(void)dev;
	struct amd_variant var;
	size_t vi;
	int rc = variant_for(state, s->in, s->sparse, &var, &vi, err, errlen);
	if (rc < 0)
		return rc;
	/* The daemon has checked the pair; this keeps a direct caller (the
	 * device tests) from reaching the kernels with one they never take. */
	if (s->out != MFMA_DT_NONE && !mfma_out_dtype_ok(s->in, s->out)) {
		snprintf(err, errlen, "hip: out_dtype=%s is not produced from in_dtype=%s",
			 mfma_dtype_name(s->out), mfma_dtype_name(s->in));
		return -EINVAL;
	}
	return 0;
}

/* The meta in the form the variant's kernel reads, in host memory: the
 * canonical array itself, or its SMFMAC conversion in *buf. */
static int device_meta(const struct amd_cfg *c, const uint32_t *canon, uint32_t m, uint32_t k,
		       void **buf, size_t *cap, const void **out, size_t *size, char *err,
		       size_t errlen)
{
	if (!c->smfmac) {
		*out = canon;
		*size = sparse24_meta_bytes(m, k);
		return 0;
	}
	size_t need = amd_meta_bytes(c, m, k);
	if (need > *cap) {
		void *p = realloc(*buf, need);
		if (!p) {
			snprintf(err, errlen, "out of host memory converting %zu bytes of 2:4 meta", need);
			return -ENOMEM;
		}
		*buf = p;
		*cap = need;
	}
	int rc = amd_meta_convert(c, canon, m, k, *buf, *cap);
	if (rc < 0) {
		snprintf(err, errlen, "hip: cannot convert the 2:4 meta of a %ux%u matrix", m, k);
		return rc;
	}
	*out = *buf;
	*size = need;
	return 0;
}

/* The values of an A operand: half of K when 2:4, all of it when dense. */
static size_t a_bytes(uint32_t m, uint32_t k, enum mfma_dtype t, bool sparse)
{
	size_t es = mfma_dtype_size(t);
	return sparse ? sparse24_values_bytes(m, k, es) : sparse24_operand_bytes(m, k, es, 0);
}

static void ours_weight_free(struct hip_dev *dev, void *state, void *packed)
{
	struct ours_weight *w = packed;
	(void)dev;
	(void)state;
	if (!w)
		return;
	if (w->a)
		(void)hipFree(w->a);
	if (w->meta)
		(void)hipFree(w->meta);
	free(w);
}

/* A synchronous upload into a new allocation of max(size, 1) bytes. */
static int upload(void **dst, const void *src, size_t size, char *err, size_t errlen,
		  const char *what)
{
	hipError_t e = hipMalloc(dst, size ? size : 1);
	if (e != hipSuccess) {
		*dst = NULL;
		snprintf(err, errlen, "hip: cannot allocate %zu bytes of device memory for %s: %s",
			 size, what, hipGetErrorString(e));
		return e == hipErrorOutOfMemory ? -ENOMEM : -EIO;
	}
	if (size) {
		e = hipMemcpy(*dst, src, size, hipMemcpyHostToDevice);
		if (e != hipSuccess)
			return hip_fail(e, err, errlen, "hipMemcpy (weight upload)");
	}
	return 0;
}

static int ours_weight_pack(struct hip_dev *dev, void *state, const struct mfma_weight_host *w,
			    void **packed, uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct ours *o = state;
	struct amd_variant var;
	size_t vi;
	int rc = variant_for(o, w->dtype, w->sparse, &var, &vi, err, errlen);
	if (rc < 0)
		return rc;
	struct ours_weight *hw = calloc(1, sizeof(*hw));
	if (!hw) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	void *conv = NULL;
	size_t conv_cap = 0, meta_size = 0;
	size_t abytes = a_bytes(w->m, w->k, w->dtype, w->sparse);
	rc = upload(&hw->a, w->a, abytes, err, errlen, "a weight");
	if (rc == 0 && w->sparse) {
		const void *meta;
		rc = device_meta(&var.cfg, w->meta, w->m, w->k, &conv, &conv_cap, &meta, &meta_size,
				 err, errlen);
		if (rc == 0)
			rc = upload(&hw->meta, meta, meta_size, err, errlen, "a weight's 2:4 meta");
	}
	free(conv);
	if (rc < 0) {
		ours_weight_free(dev, state, hw);
		return rc;
	}
	*packed = hw;
	/* What hipMalloc was asked for (upload allocates at least a byte). */
	*dev_bytes = (abytes ? abytes : 1) + (w->sparse ? (meta_size ? meta_size : 1) : 0);
	return 0;
}

static int ours_launch(struct hip_dev *dev, void *state, const struct mfma_gemm *g, void *packed,
		       const char **variant, char *err, size_t errlen)
{
	struct ours *o = state;
	const struct ours_weight *w = packed;
	const bool sparse = g->a_sparse;
	struct amd_variant var;
	size_t vi;
	int rc = variant_for(o, g->in_dtype, sparse, &var, &vi, err, errlen);
	if (rc < 0)
		return rc;
	/* The i8 kernels add C as integers and cannot scale. */
	if (g->in_dtype == MFMA_DT_I8 && (g->alpha != 1.0f || (g->beta != 0.0f && g->beta != 1.0f))) {
		snprintf(err, errlen, "hip: i8 GEMMs take alpha=1 and beta 0 or 1, not alpha=%g beta=%g",
			 (double)g->alpha, (double)g->beta);
		return -EINVAL;
	}
	*variant = var.name;
	if (g->m == 0 || g->n == 0)
		return 0;

	size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	size_t d_size = (size_t)g->m * g->n * os;
	bool has_c = g->beta != 0.0f && g->c;
	struct hip_buf *a = hip_dev_scratch(dev, HIP_SCRATCH_A);
	struct hip_buf *meta = hip_dev_scratch(dev, HIP_SCRATCH_META);
	struct hip_buf *b = hip_dev_scratch(dev, HIP_SCRATCH_B);
	struct hip_buf *c = hip_dev_scratch(dev, HIP_SCRATCH_C);
	struct hip_buf *d = hip_dev_scratch(dev, HIP_SCRATCH_D);

	/* From the first copy on, a failure leaves work on the stream: the
	 * caller (hip.c) drains it before returning. */
	if ((rc = hip_dev_mark(dev, HIP_MARK_START, err, errlen)) < 0)
		return rc;
	const void *a_dev, *meta_dev = NULL;
	if (w) {
		a_dev = w->a;
		meta_dev = w->meta;
	} else {
		rc = hip_dev_copy_in(dev, a, g->a, a_bytes(g->m, g->k, g->in_dtype, sparse), "A", err,
				     errlen);
		if (rc < 0)
			return rc;
		a_dev = a->p;
		if (sparse) {
			const void *hmeta;
			size_t meta_size;
			rc = device_meta(&var.cfg, g->a_meta, g->m, g->k, &o->hmeta, &o->hmeta_cap,
					 &hmeta, &meta_size, err, errlen);
			if (rc == 0)
				rc = hip_dev_copy_in(dev, meta, hmeta, meta_size, "A's 2:4 meta", err,
						     errlen);
			if (rc < 0)
				return rc;
			meta_dev = meta->p;
		}
	}
	rc = hip_dev_copy_in(dev, b, g->b, (size_t)g->k * g->n * es, "B", err, errlen);
	if (rc == 0 && has_c)
		rc = hip_dev_copy_in(dev, c, g->c, d_size, "C", err, errlen);
	if (rc == 0)
		rc = hip_buf_need(d, d_size, "D", err, errlen);
	if (rc < 0)
		return rc;
	if ((rc = hip_dev_mark(dev, HIP_MARK_IN, err, errlen)) < 0)
		return rc;

	struct amd_gemm_args args = {
		.a = (uint64_t)(uintptr_t)a_dev,
		.a_meta = (uint64_t)(uintptr_t)meta_dev,
		.b = (uint64_t)(uintptr_t)b->p,
		.c = has_c ? (uint64_t)(uintptr_t)c->p : 0,
		.d = (uint64_t)(uintptr_t)d->p,
		.m = g->m,
		.n = g->n,
		.k = g->k,
		.out_dtype = (uint32_t)g->out_dtype,
		.alpha = g->alpha,
		.beta = g->beta,
	};
	/* Vector loads need every row to start 16-byte aligned (hipMalloc
	 * gives aligned bases). */
	size_t a_row = (size_t)(sparse ? g->k / 2 : g->k) * es;
	args.flags = (has_c ? AMD_ARG_HAS_C : 0) | (a_row % 16 == 0 ? AMD_ARG_A_VEC : 0) |
		     ((size_t)g->n * es % 16 == 0 ? AMD_ARG_B_VEC : 0);
	size_t args_size = sizeof(args);
	void *extra[] = { HIP_LAUNCH_PARAM_BUFFER_POINTER, &args, HIP_LAUNCH_PARAM_BUFFER_SIZE,
			  &args_size, HIP_LAUNCH_PARAM_END };
	unsigned gx = (g->n + AMD_BN - 1) / AMD_BN, gy = (g->m + AMD_BM - 1) / AMD_BM;
	hipError_t e = hipModuleLaunchKernel(o->fn[vi], gx, gy, 1, AMD_THREADS, 1, 1,
					     amd_lds_bytes(&var.cfg), hip_dev_stream(dev), NULL,
					     extra);
	if (e != hipSuccess) {
		snprintf(err, errlen, "hip: launching %s (%ux%u blocks) failed: %s", var.kernel, gx, gy,
			 hipGetErrorString(e));
		return -EIO;
	}
	if ((rc = hip_dev_mark(dev, HIP_MARK_KERNEL, err, errlen)) < 0)
		return rc;
	return hip_dev_copy_out(dev, g->d, d->p, d_size, err, errlen);
}

const struct hip_provider hip_provider_ours = {
	.name = "ours",
	.usable = ours_usable,
	.describe = ours_describe,
	.attach = ours_attach,
	.detach = ours_detach,
	.supports = ours_supports,
	.weight_pack = ours_weight_pack,
	.weight_free = ours_weight_free,
	.launch = ours_launch,
};
