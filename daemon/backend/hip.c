/* The HIP backend: AMD Instinct GPUs through the HIP runtime API, from C.
 *
 * At probe time every device's gcnArchName is cut at the first ':' and
 * matched against the code objects embedded in mfmad (one per gfx arch,
 * kernels/amd/); devices of an arch without one are not offered.  Each
 * worker loads its device's object with hipModuleLoadData and launches
 * with hipModuleLaunchKernel, arguments through `extra` (the kernelParams
 * path is missing from some ROCm versions).  One stream per device;
 * events around the copies and the kernel give the timing.
 *
 * Weights stay resident in device memory.  A 2:4 weight's meta is
 * converted once, at load, to the SMFMAC index layout on gfx942/gfx950;
 * gfx908/gfx90a keep the canonical meta, which their kernels expand in
 * LDS. */
#include "mfmad_build.h"

#include <errno.h>
#include <hip/hip_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amd_kernels.h"
#include "backend.h"
#include "sparse24.h"

#define HIP_MAX_DEVICES 64
#define NVARIANTS (AMD_NELEM * 2)

/* What probe learned; read by describe and open. */
struct hip_slot {
	int ordinal; /* HIP device number */
	enum amd_arch arch;
	char name[128];
	uint64_t mem_total;
	bool has_kernel[NVARIANTS];
};

static struct hip_slot slots[HIP_MAX_DEVICES];
static int nslots;

struct dbuf {
	void *p;
	size_t cap;
};

struct hip_dev {
	struct hip_slot *slot;
	hipModule_t mod;
	hipFunction_t fn[NVARIANTS];
	hipStream_t stream;
	hipEvent_t ev[4]; /* start, after H2D, after the kernel, after D2H */
	/* Per-request device buffers, grown as needed and kept. */
	struct dbuf a, meta, b, c, d;
	/* Host buffer for a per-request meta conversion. */
	void *hmeta;
	size_t hmeta_cap;
};

struct hip_weight {
	void *a;    /* values (2:4) or the dense matrix */
	void *meta; /* device-format meta, NULL for dense */
	uint32_t m, k;
	enum mfma_dtype dtype;
	bool sparse;
};

static int fail(hipError_t e, char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "hip: %s failed: %s (%s)", what, hipGetErrorString(e),
		 hipGetErrorName(e));
	return e == hipErrorOutOfMemory ? -ENOMEM : -EIO;
}

static int hip_probe(const struct backend_config *cfg, char *err, size_t errlen)
{
	(void)cfg;
	nslots = 0;
	int count = 0;
	hipError_t e = hipGetDeviceCount(&count);
	/* No GPU, or no amdgpu driver: a machine without AMD devices, not a
	 * fault. */
	if (e == hipErrorNoDevice || e == hipErrorInsufficientDriver)
		return 0;
	if (e != hipSuccess)
		return fail(e, err, errlen, "hipGetDeviceCount");
	for (int i = 0; i < count && nslots < HIP_MAX_DEVICES; i++) {
		hipDeviceProp_t p;
		e = hipGetDeviceProperties(&p, i);
		if (e != hipSuccess)
			return fail(e, err, errlen, "hipGetDeviceProperties");
		struct hip_slot *s = &slots[nslots];
		memset(s, 0, sizeof(*s));
		p.gcnArchName[sizeof(p.gcnArchName) - 1] = '\0';
		const void *co;
		size_t co_size;
		/* An arch we have no kernels for (e.g. a Radeon gfx1100 next to
		 * the Instincts) is left out: it could run nothing. */
		if (amd_arch_parse(p.gcnArchName, &s->arch) < 0 ||
		    amd_code_object(amd_arch_name(s->arch), &co, &co_size) < 0)
			continue;
		bool any = false;
		for (size_t v = 0; v < NVARIANTS; v++) {
			struct amd_variant var;
			if (amd_variant_at(s->arch, v, &var) == 0 &&
			    amd_elf_has_symbol(co, co_size, var.kernel) == 1)
				s->has_kernel[v] = any = true;
		}
		if (!any)
			continue;
		s->ordinal = i;
		p.name[sizeof(p.name) - 1] = '\0';
		snprintf(s->name, sizeof(s->name), "%.127s", p.name);
		s->mem_total = p.totalGlobalMem;
		nslots++;
	}
	if (nslots == 0 && count > 0)
		snprintf(err, errlen, "hip: %d device(s), none of an arch with kernels in this build",
			 count);
	return nslots;
}

static int hip_describe(int index, struct backend_device_info *info)
{
	if (index < 0 || index >= nslots || !info)
		return -EINVAL;
	const struct hip_slot *s = &slots[index];
	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", s->name);
	snprintf(info->arch, sizeof(info->arch), "%s", amd_arch_name(s->arch));
	info->mem_total = s->mem_total;
	size_t used = 0;
	for (size_t v = 0; v < NVARIANTS; v++) {
		struct amd_variant var;
		if (!s->has_kernel[v] || amd_variant_at(s->arch, v, &var) < 0)
			continue;
		static const enum mfma_dtype of_elem[AMD_NELEM] = {
			[AMD_E_F16] = MFMA_DT_F16, [AMD_E_BF16] = MFMA_DT_BF16, [AMD_E_I8] = MFMA_DT_I8,
		};
		if (var.cfg.sparse)
			info->sparse_dtypes |= BACKEND_DTYPE_BIT(of_elem[var.cfg.elem]);
		else
			info->dense_dtypes |= BACKEND_DTYPE_BIT(of_elem[var.cfg.elem]);
		int n = snprintf(info->variants + used, sizeof(info->variants) - used, "%s%s",
				 used ? "," : "", var.name);
		if (n < 0 || (size_t)n >= sizeof(info->variants) - used)
			break;
		used += (size_t)n;
	}
	return 0;
}

static void dbuf_free(struct dbuf *b)
{
	if (b->p)
		(void)hipFree(b->p);
	b->p = NULL;
	b->cap = 0;
}

static int dbuf_need(struct dbuf *b, size_t size, char *err, size_t errlen, const char *what)
{
	if (size <= b->cap)
		return 0;
	dbuf_free(b);
	hipError_t e = hipMalloc(&b->p, size);
	if (e != hipSuccess) {
		b->p = NULL;
		snprintf(err, errlen, "hip: cannot allocate %zu bytes of device memory for %s: %s",
			 size, what, hipGetErrorString(e));
		return e == hipErrorOutOfMemory ? -ENOMEM : -EIO;
	}
	b->cap = size;
	return 0;
}

static void hip_close(void *dev)
{
	struct hip_dev *h = dev;
	if (!h)
		return;
	(void)hipSetDevice(h->slot->ordinal);
	dbuf_free(&h->a);
	dbuf_free(&h->meta);
	dbuf_free(&h->b);
	dbuf_free(&h->c);
	dbuf_free(&h->d);
	for (int i = 0; i < 4; i++)
		if (h->ev[i])
			(void)hipEventDestroy(h->ev[i]);
	if (h->stream)
		(void)hipStreamDestroy(h->stream);
	if (h->mod)
		(void)hipModuleUnload(h->mod);
	free(h->hmeta);
	free(h);
}

static int hip_open(int index, const struct backend_config *cfg, void **dev, char *err,
		    size_t errlen)
{
	(void)cfg;
	if (index < 0 || index >= nslots) {
		snprintf(err, errlen, "hip: no device %d (probe found %d)", index, nslots);
		return -EINVAL;
	}
	struct hip_dev *h = calloc(1, sizeof(*h));
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	h->slot = &slots[index];
	const char *arch = amd_arch_name(h->slot->arch);
	const void *co;
	size_t co_size;
	hipError_t e = hipSetDevice(h->slot->ordinal);
	int rc;
	if (e != hipSuccess) {
		rc = fail(e, err, errlen, "hipSetDevice");
		goto out;
	}
	if (amd_code_object(arch, &co, &co_size) < 0) {
		snprintf(err, errlen, "hip: no code object for %s in this build", arch);
		rc = -ENOENT;
		goto out;
	}
	e = hipModuleLoadData(&h->mod, co);
	if (e != hipSuccess) {
		h->mod = NULL;
		rc = fail(e, err, errlen, "hipModuleLoadData");
		goto out;
	}
	for (size_t v = 0; v < NVARIANTS; v++) {
		struct amd_variant var;
		if (!h->slot->has_kernel[v] || amd_variant_at(h->slot->arch, v, &var) < 0)
			continue;
		e = hipModuleGetFunction(&h->fn[v], h->mod, var.kernel);
		if (e != hipSuccess) {
			snprintf(err, errlen, "hip: kernel %s is missing from the %s code object: %s",
				 var.kernel, arch, hipGetErrorString(e));
			rc = -EIO;
			goto out;
		}
	}
	e = hipStreamCreate(&h->stream);
	if (e != hipSuccess) {
		h->stream = NULL;
		rc = fail(e, err, errlen, "hipStreamCreate");
		goto out;
	}
	for (int i = 0; i < 4; i++) {
		e = hipEventCreate(&h->ev[i]);
		if (e != hipSuccess) {
			h->ev[i] = NULL;
			rc = fail(e, err, errlen, "hipEventCreate");
			goto out;
		}
	}
	*dev = h;
	return 0;
out:
	hip_close(h);
	return rc;
}

static int variant_for(const struct hip_dev *h, enum mfma_dtype in, bool sparse,
		       struct amd_variant *var, size_t *vi, char *err, size_t errlen)
{
	const char *arch = amd_arch_name(h->slot->arch);
	if (amd_variant_get(h->slot->arch, in, sparse, var) < 0) {
		snprintf(err, errlen,
			 "hip: in_dtype=%s has no matrix-core kernel on %s (f16, bf16 and i8 do)",
			 mfma_dtype_name(in), arch);
		return -ENOTSUP;
	}
	*vi = (size_t)var->cfg.elem * 2 + (sparse ? 1 : 0);
	if (!h->slot->has_kernel[*vi]) {
		snprintf(err, errlen, "hip: kernel %s is not in the %s code object", var->kernel, arch);
		return -ENOTSUP;
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
		*size = (size_t)m * sparse24_meta_words(k) * 4;
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

static size_t a_bytes(uint32_t m, uint32_t k, enum mfma_dtype t, bool sparse)
{
	return (size_t)m * (sparse ? k / 2 : k) * mfma_dtype_size(t);
}

static void hip_weight_free(void *dev, void *handle)
{
	struct hip_dev *h = dev;
	struct hip_weight *w = handle;
	if (!w)
		return;
	if (h)
		(void)hipSetDevice(h->slot->ordinal);
	if (w->a)
		(void)hipFree(w->a);
	if (w->meta)
		(void)hipFree(w->meta);
	free(w);
}

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
			return fail(e, err, errlen, "hipMemcpy (weight upload)");
	}
	return 0;
}

static int hip_weight_load(void *dev, const struct mfma_weight_host *w, void **handle,
			   uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct hip_dev *h = dev;
	struct amd_variant var;
	size_t vi;
	int rc = variant_for(h, w->dtype, w->sparse, &var, &vi, err, errlen);
	if (rc < 0)
		return rc;
	hipError_t e = hipSetDevice(h->slot->ordinal);
	if (e != hipSuccess)
		return fail(e, err, errlen, "hipSetDevice");
	struct hip_weight *hw = calloc(1, sizeof(*hw));
	if (!hw) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	hw->m = w->m;
	hw->k = w->k;
	hw->dtype = w->dtype;
	hw->sparse = w->sparse;
	void *conv = NULL;
	size_t conv_cap = 0;
	size_t meta_size = 0;
	rc = upload(&hw->a, w->a, a_bytes(w->m, w->k, w->dtype, w->sparse), err, errlen, "a weight");
	if (rc == 0 && w->sparse) {
		const void *meta;
		rc = device_meta(&var.cfg, w->meta, w->m, w->k, &conv, &conv_cap, &meta, &meta_size,
				 err, errlen);
		if (rc == 0)
			rc = upload(&hw->meta, meta, meta_size, err, errlen, "a weight's 2:4 meta");
	}
	free(conv);
	if (rc < 0) {
		hip_weight_free(h, hw);
		return rc;
	}
	*handle = hw;
	*dev_bytes = a_bytes(w->m, w->k, w->dtype, w->sparse) + meta_size;
	return 0;
}

static int copy_in(struct hip_dev *h, struct dbuf *b, const void *src, size_t size, char *err,
		   size_t errlen, const char *what)
{
	int rc = dbuf_need(b, size ? size : 1, err, errlen, what);
	if (rc < 0)
		return rc;
	if (!size)
		return 0;
	hipError_t e = hipMemcpyAsync(b->p, src, size, hipMemcpyHostToDevice, h->stream);
	if (e != hipSuccess) {
		snprintf(err, errlen, "hip: copying %s (%zu bytes) to the device failed: %s", what, size,
			 hipGetErrorString(e));
		return -EIO;
	}
	return 0;
}

static uint64_t elapsed_ns(hipEvent_t from, hipEvent_t to)
{
	float ms = 0.0f;
	if (hipEventElapsedTime(&ms, from, to) != hipSuccess || ms < 0.0f)
		return 0;
	return (uint64_t)((double)ms * 1e6);
}

static int hip_gemm(void *dev, const struct mfma_gemm *g, void *weight, struct backend_timing *t,
		    char *err, size_t errlen)
{
	struct hip_dev *h = dev;
	const struct hip_weight *w = weight;
	bool sparse = w ? w->sparse : g->a_sparse;
	struct amd_variant var;
	size_t vi;
	int rc = variant_for(h, g->in_dtype, sparse, &var, &vi, err, errlen);
	if (rc < 0)
		return rc;
	if (w && (w->m != g->m || w->k != g->k || w->dtype != g->in_dtype)) {
		snprintf(err, errlen, "hip: the weight is %ux%u %s, the request wants %ux%u %s", w->m,
			 w->k, mfma_dtype_name(w->dtype), g->m, g->k, mfma_dtype_name(g->in_dtype));
		return -EINVAL;
	}
	bool want_out = g->in_dtype == MFMA_DT_I8 ? g->out_dtype == MFMA_DT_I32
						   : (g->out_dtype == MFMA_DT_F32 ||
						      g->out_dtype == g->in_dtype);
	if (!want_out) {
		snprintf(err, errlen, "hip: out_dtype=%s is not produced from in_dtype=%s",
			 mfma_dtype_name(g->out_dtype), mfma_dtype_name(g->in_dtype));
		return -EINVAL;
	}
	/* The i8 kernels add C as integers and cannot scale. */
	if (g->in_dtype == MFMA_DT_I8 && (g->alpha != 1.0f || (g->beta != 0.0f && g->beta != 1.0f))) {
		snprintf(err, errlen, "hip: i8 GEMMs take alpha=1 and beta 0 or 1, not alpha=%g beta=%g",
			 (double)g->alpha, (double)g->beta);
		return -EINVAL;
	}
	memset(t, 0, sizeof(*t));
	t->variant = var.name;
	if (g->m == 0 || g->n == 0)
		return 0;

	hipError_t e = hipSetDevice(h->slot->ordinal);
	if (e != hipSuccess)
		return fail(e, err, errlen, "hipSetDevice");
	size_t es = mfma_dtype_size(g->in_dtype), os = mfma_dtype_size(g->out_dtype);
	size_t d_size = (size_t)g->m * g->n * os;
	bool has_c = g->beta != 0.0f && g->c;

	if ((e = hipEventRecord(h->ev[0], h->stream)) != hipSuccess)
		return fail(e, err, errlen, "hipEventRecord");
	const void *a_dev, *meta_dev = NULL;
	if (w) {
		a_dev = w->a;
		meta_dev = w->meta;
	} else {
		rc = copy_in(h, &h->a, g->a, a_bytes(g->m, g->k, g->in_dtype, sparse), err, errlen,
			     "A");
		if (rc < 0)
			return rc;
		a_dev = h->a.p;
		if (sparse) {
			const void *meta;
			size_t meta_size;
			rc = device_meta(&var.cfg, g->a_meta, g->m, g->k, &h->hmeta, &h->hmeta_cap,
					 &meta, &meta_size, err, errlen);
			if (rc == 0)
				rc = copy_in(h, &h->meta, meta, meta_size, err, errlen, "A's 2:4 meta");
			if (rc < 0)
				return rc;
			meta_dev = h->meta.p;
		}
	}
	rc = copy_in(h, &h->b, g->b, (size_t)g->k * g->n * es, err, errlen, "B");
	if (rc == 0 && has_c)
		rc = copy_in(h, &h->c, g->c, d_size, err, errlen, "C");
	if (rc == 0)
		rc = dbuf_need(&h->d, d_size, err, errlen, "D");
	if (rc < 0)
		return rc;
	if ((e = hipEventRecord(h->ev[1], h->stream)) != hipSuccess)
		return fail(e, err, errlen, "hipEventRecord");

	struct amd_gemm_args args = {
		.a = (uint64_t)(uintptr_t)a_dev,
		.a_meta = (uint64_t)(uintptr_t)meta_dev,
		.b = (uint64_t)(uintptr_t)h->b.p,
		.c = has_c ? (uint64_t)(uintptr_t)h->c.p : 0,
		.d = (uint64_t)(uintptr_t)h->d.p,
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
	e = hipModuleLaunchKernel(h->fn[vi], gx, gy, 1, AMD_THREADS, 1, 1, amd_lds_bytes(&var.cfg),
				  h->stream, NULL, extra);
	if (e != hipSuccess) {
		snprintf(err, errlen, "hip: launching %s (%ux%u blocks) failed: %s", var.kernel, gx, gy,
			 hipGetErrorString(e));
		return -EIO;
	}
	if ((e = hipEventRecord(h->ev[2], h->stream)) != hipSuccess)
		return fail(e, err, errlen, "hipEventRecord");
	e = hipMemcpyAsync(g->d, h->d.p, d_size, hipMemcpyDeviceToHost, h->stream);
	if (e != hipSuccess)
		return fail(e, err, errlen, "hipMemcpyAsync (D to the host)");
	if ((e = hipEventRecord(h->ev[3], h->stream)) != hipSuccess)
		return fail(e, err, errlen, "hipEventRecord");
	/* A kernel fault surfaces here, on the request that caused it. */
	if ((e = hipEventSynchronize(h->ev[3])) != hipSuccess)
		return fail(e, err, errlen, "running the GEMM");
	t->h2d_ns = elapsed_ns(h->ev[0], h->ev[1]);
	t->kernel_ns = elapsed_ns(h->ev[1], h->ev[2]);
	t->d2h_ns = elapsed_ns(h->ev[2], h->ev[3]);
	return 0;
}

const struct backend_ops backend_hip = {
	.name = "hip",
	.probe = hip_probe,
	.describe = hip_describe,
	.open = hip_open,
	.close = hip_close,
	.weight_load = hip_weight_load,
	.weight_free = hip_weight_free,
	.gemm = hip_gemm,
};
