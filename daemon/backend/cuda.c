/* The CUDA backend: NVIDIA GPUs (sm_80 and newer) through the driver API,
 * from C.
 *
 * The driver library is opened at run time (kernels/nvidia/nv_driver.h):
 * without it, or without a GPU, probe() reports zero devices.  Each
 * worker retains its device's primary context, loads the kernels embedded
 * for the device's compute capability (nv_gemm.h: the exact cubin, else a
 * compatible one, else the PTX for the JIT), and works on one stream.
 * Copies go through a pinned staging pool, split in two halves so that
 * filling one half on the host overlaps the DMA of the other.  Four events
 * per request time the copies in, the kernels and the copy out.
 *
 * A operands are rewritten on the device into the packed fragment order of
 * kernels/nvidia/nv_layout.h (and canonical 2:4 metadata into mma.sp
 * metadata words): once at load for a resident weight, per request
 * otherwise (counted in the kernel time).  8-bit B is transposed on the
 * device (also kernel time). */
#include "mfmad_build.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "nv_gemm.h"
#include "sparse24.h"

#define CUDA_MAX_DEVICES 64
#define CUDA_DEFAULT_PINNED (64u << 20)
#define CUDA_MIN_PINNED (2u << 20)

/* What probe learned; read by describe and open. */
struct cuda_slot {
	CUdevice dev;
	int cc;
	char name[128];
	uint64_t mem_total;
};

static struct cuda_slot slots[CUDA_MAX_DEVICES];
static int nslots;

struct dbuf {
	CUdeviceptr p;
	size_t cap;
};

struct cuda_dev {
	struct cuda_slot *slot;
	CUcontext ctx;
	struct nv_module mod;
	CUstream stream;
	CUevent ev[4]; /* start, after H2D, after the kernels, after D2H */
	/* Pinned staging pool: two halves, each with the event of the last
	 * copy that used it. */
	unsigned char *pin;
	size_t pin_half;
	CUevent pin_ev[2];
	int pin_busy[2];
	/* Per-request device buffers, grown as needed and kept. */
	struct dbuf raw_a, raw_meta, pack_a, pack_meta, b, bt, c, d, ws, counters;
};

struct cuda_weight {
	struct nv_packed pk;
	enum mfma_dtype dtype;
	uint32_t m, k;
	bool sparse;
};

static int fail(CUresult r, char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "cuda: %s failed: %s", what, nv_result_str(r));
	return nv_result_errno(r);
}

#define CU_TRY(call, what)                                        \
	do {                                                      \
		CUresult r_ = (call);                             \
		if (r_ != CUDA_SUCCESS)                           \
			return fail(r_, err, errlen, what);       \
	} while (0)

/* cuInit results that mean "no usable NVIDIA GPU here" rather than a
 * failure of the daemon. */
static int init_means_no_device(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_SYSTEM_NOT_READY:
	case CUDA_ERROR_STUB_LIBRARY:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
	case CUDA_ERROR_DEVICE_NOT_LICENSED:
	case CUDA_ERROR_OPERATING_SYSTEM:
		return 1;
	default:
		return 0;
	}
}

static int cuda_probe(const struct backend_config *cfg, char *err, size_t errlen)
{
	(void)cfg;
	nslots = 0;
	int rc = nv_driver_open(err, errlen);
	if (rc == -ENOENT)
		return 0; /* no driver: no devices (err says so) */
	if (rc < 0)
		return rc;
	CUresult r = nv_drv.cuInit(0);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuda: no usable device: cuInit: %s", nv_result_str(r));
		return init_means_no_device(r) ? 0 : nv_result_errno(r);
	}
	int count = 0;
	CU_TRY(nv_drv.cuDeviceGetCount(&count), "cuDeviceGetCount");
	for (int i = 0; i < count && nslots < CUDA_MAX_DEVICES; i++) {
		struct cuda_slot *s = &slots[nslots];
		int major = 0, minor = 0;
		size_t mem = 0;
		CU_TRY(nv_drv.cuDeviceGet(&s->dev, i), "cuDeviceGet");
		CU_TRY(nv_drv.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
						   s->dev),
		       "cuDeviceGetAttribute(compute capability)");
		CU_TRY(nv_drv.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
						   s->dev),
		       "cuDeviceGetAttribute(compute capability)");
		s->cc = major * 10 + minor;
		/* The kernels need mma.sp (sm_80+) and an image that runs on
		 * this arch; other GPUs are not offered. */
		if (s->cc < 80)
			continue;
		int ok = 1;
		for (int u = 0; u < NV_UNIT_COUNT; u++)
			if (!nv_image_find(nv_images, nv_image_count, nv_unit_name(u), s->cc))
				ok = 0;
		if (!ok)
			continue;
		CU_TRY(nv_drv.cuDeviceGetName(s->name, (int)sizeof(s->name), s->dev), "cuDeviceGetName");
		CU_TRY(nv_drv.cuDeviceTotalMem(&mem, s->dev), "cuDeviceTotalMem");
		s->mem_total = mem;
		nslots++;
	}
	if (nslots == 0)
		snprintf(err, errlen, "cuda: %d device(s), none sm_80+ with kernels built for it", count);
	return nslots;
}

static int cuda_describe(int index, struct backend_device_info *info)
{
	if (index < 0 || index >= nslots || !info)
		return -EINVAL;
	const struct cuda_slot *s = &slots[index];
	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", s->name);
	snprintf(info->arch, sizeof(info->arch), "sm_%d", s->cc);
	info->mem_total = s->mem_total;
	/* The tensor-core kernels take f16, bf16 and i8, dense and 2:4; the
	 * scheduler sends f32 elsewhere (the CPU) or refuses it clearly. */
	info->dense_dtypes = info->sparse_dtypes = BACKEND_DTYPE_BIT(MFMA_DT_F16) |
						  BACKEND_DTYPE_BIT(MFMA_DT_BF16) |
						  BACKEND_DTYPE_BIT(MFMA_DT_I8);
	size_t len = 0;
	for (int kind = 0; kind < NV_KIND_COUNT; kind++)
		for (int tile = 0; tile < NV_TILE_COUNT; tile++) {
			int n = snprintf(info->variants + len, sizeof(info->variants) - len, "%s%s",
					 len ? "," : "", nv_variant_label(kind, tile));
			if (n < 0 || (size_t)n >= sizeof(info->variants) - len)
				return 0; /* truncated list; the names that fit are there */
			len += (size_t)n;
		}
	return 0;
}

static void dbuf_free(struct dbuf *b)
{
	if (b->p)
		nv_drv.cuMemFree(b->p);
	b->p = 0;
	b->cap = 0;
}

/* Grows b to at least size bytes (contents are not kept).  *grown tells
 * whether it was reallocated. */
static int dbuf_need(struct dbuf *b, size_t size, char *err, size_t errlen, const char *what,
		     int *grown)
{
	if (grown)
		*grown = 0;
	if (size == 0 || size <= b->cap)
		return 0;
	dbuf_free(b);
	CUresult r = nv_drv.cuMemAlloc(&b->p, size);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuda: allocating %zu bytes for %s failed: %s", size, what,
			 nv_result_str(r));
		return nv_result_errno(r);
	}
	b->cap = size;
	if (grown)
		*grown = 1;
	return 0;
}

static void cuda_close(void *dev)
{
	struct cuda_dev *d = dev;
	if (!d)
		return;
	if (d->ctx) {
		nv_drv.cuCtxSetCurrent(d->ctx);
		if (d->stream)
			nv_drv.cuStreamSynchronize(d->stream);
		struct dbuf *bufs[] = { &d->raw_a, &d->raw_meta, &d->pack_a, &d->pack_meta, &d->b,
					&d->bt, &d->c, &d->d, &d->ws, &d->counters };
		for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
			dbuf_free(bufs[i]);
		for (int i = 0; i < 4; i++)
			if (d->ev[i])
				nv_drv.cuEventDestroy(d->ev[i]);
		for (int i = 0; i < 2; i++)
			if (d->pin_ev[i])
				nv_drv.cuEventDestroy(d->pin_ev[i]);
		if (d->pin)
			nv_drv.cuMemFreeHost(d->pin);
		if (d->stream)
			nv_drv.cuStreamDestroy(d->stream);
		nv_module_unload(&d->mod);
		nv_drv.cuDevicePrimaryCtxRelease(d->slot->dev);
	}
	free(d);
}

static int cuda_open(int index, const struct backend_config *cfg, void **dev, char *err,
		     size_t errlen)
{
	if (index < 0 || index >= nslots || !dev) {
		snprintf(err, errlen, "cuda: device index %d out of range (0..%d)", index, nslots - 1);
		return -EINVAL;
	}
	struct cuda_dev *d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	d->slot = &slots[index];
	int rc;
	CUresult r = nv_drv.cuDevicePrimaryCtxRetain(&d->ctx, d->slot->dev);
	if (r != CUDA_SUCCESS) {
		d->ctx = NULL;
		rc = fail(r, err, errlen, "cuDevicePrimaryCtxRetain");
		goto out;
	}
	if ((r = nv_drv.cuCtxSetCurrent(d->ctx)) != CUDA_SUCCESS) {
		rc = fail(r, err, errlen, "cuCtxSetCurrent");
		goto out;
	}
	if ((rc = nv_module_load(&d->mod, d->slot->dev, err, errlen)) < 0)
		goto out;
	if ((r = nv_drv.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		rc = fail(r, err, errlen, "cuStreamCreate");
		goto out;
	}
	for (int i = 0; i < 4; i++)
		if ((r = nv_drv.cuEventCreate(&d->ev[i], CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
			rc = fail(r, err, errlen, "cuEventCreate");
			goto out;
		}
	for (int i = 0; i < 2; i++)
		if ((r = nv_drv.cuEventCreate(&d->pin_ev[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
			rc = fail(r, err, errlen, "cuEventCreate");
			goto out;
		}
	size_t pinned = cfg && cfg->pinned_bytes ? (size_t)cfg->pinned_bytes : CUDA_DEFAULT_PINNED;
	if (pinned < CUDA_MIN_PINNED)
		pinned = CUDA_MIN_PINNED;
	void *pin = NULL;
	if ((r = nv_drv.cuMemHostAlloc(&pin, pinned, 0)) != CUDA_SUCCESS) {
		rc = fail(r, err, errlen, "cuMemHostAlloc (pinned staging pool)");
		goto out;
	}
	d->pin = pin;
	d->pin_half = pinned / 2 / 256 * 256;
	*dev = d;
	return 0;
out:
	cuda_close(d);
	return rc;
}

/* Waits until half h of the pool is free again. */
static int pin_wait(struct cuda_dev *d, int h, char *err, size_t errlen)
{
	if (!d->pin_busy[h])
		return 0;
	d->pin_busy[h] = 0;
	CU_TRY(nv_drv.cuEventSynchronize(d->pin_ev[h]), "cuEventSynchronize(staging)");
	return 0;
}

static int pin_mark(struct cuda_dev *d, int h, char *err, size_t errlen)
{
	CU_TRY(nv_drv.cuEventRecord(d->pin_ev[h], d->stream), "cuEventRecord(staging)");
	d->pin_busy[h] = 1;
	return 0;
}

/* rows x row_bytes of host memory to dst, whose rows are dpitch bytes
 * apart (the gap is zero-filled), through the pinned pool. */
static int stage_h2d(struct cuda_dev *d, CUdeviceptr dst, size_t dpitch, const void *src,
		     size_t rows, size_t row_bytes, char *err, size_t errlen)
{
	const unsigned char *s = src;
	int rc, h = 0;
	if (dpitch == row_bytes) {
		size_t total = rows * row_bytes;
		for (size_t off = 0; off < total; off += d->pin_half, h ^= 1) {
			size_t len = total - off < d->pin_half ? total - off : d->pin_half;
			if ((rc = pin_wait(d, h, err, errlen)) < 0)
				return rc;
			unsigned char *p = d->pin + (size_t)h * d->pin_half;
			memcpy(p, s + off, len);
			CU_TRY(nv_drv.cuMemcpyHtoDAsync(dst + off, p, len, d->stream), "cuMemcpyHtoDAsync");
			if ((rc = pin_mark(d, h, err, errlen)) < 0)
				return rc;
		}
		return 0;
	}
	size_t per = d->pin_half / dpitch;
	if (per == 0) {
		snprintf(err, errlen, "cuda: a row of %zu bytes does not fit the pinned pool (%zu bytes)",
			 dpitch, d->pin_half);
		return -E2BIG;
	}
	for (size_t r0 = 0; r0 < rows; r0 += per, h ^= 1) {
		size_t n = rows - r0 < per ? rows - r0 : per;
		if ((rc = pin_wait(d, h, err, errlen)) < 0)
			return rc;
		unsigned char *p = d->pin + (size_t)h * d->pin_half;
		for (size_t i = 0; i < n; i++) {
			memcpy(p + i * dpitch, s + (r0 + i) * row_bytes, row_bytes);
			memset(p + i * dpitch + row_bytes, 0, dpitch - row_bytes);
		}
		CU_TRY(nv_drv.cuMemcpyHtoDAsync(dst + r0 * dpitch, p, n * dpitch, d->stream),
		       "cuMemcpyHtoDAsync");
		if ((rc = pin_mark(d, h, err, errlen)) < 0)
			return rc;
	}
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* total bytes from src to host dst through the pool; the copy of chunk i
 * out of the pool overlaps the DMA of chunk i + 1.  Records `done` after
 * the last DMA and returns in *tail_ns the host time spent after it. */
static int stage_d2h(struct cuda_dev *d, void *dst, CUdeviceptr src, size_t total, CUevent done,
		     uint64_t *tail_ns, char *err, size_t errlen)
{
	unsigned char *out = dst;
	size_t nchunks = (total + d->pin_half - 1) / d->pin_half;
	int rc;
	for (size_t i = 0; i < nchunks; i++) {
		int h = (int)(i & 1);
		size_t off = i * d->pin_half;
		size_t len = total - off < d->pin_half ? total - off : d->pin_half;
		if ((rc = pin_wait(d, h, err, errlen)) < 0)
			return rc;
		CU_TRY(nv_drv.cuMemcpyDtoHAsync(d->pin + (size_t)h * d->pin_half, src + off, len,
						d->stream),
		       "cuMemcpyDtoHAsync");
		if ((rc = pin_mark(d, h, err, errlen)) < 0)
			return rc;
		if (i + 1 == nchunks)
			CU_TRY(nv_drv.cuEventRecord(done, d->stream), "cuEventRecord");
		if (i > 0) {
			int hp = h ^ 1;
			size_t poff = (i - 1) * d->pin_half;
			if ((rc = pin_wait(d, hp, err, errlen)) < 0)
				return rc;
			memcpy(out + poff, d->pin + (size_t)hp * d->pin_half, d->pin_half);
		}
	}
	CU_TRY(nv_drv.cuEventSynchronize(done), "cuEventSynchronize");
	uint64_t t0 = now_ns();
	if (nchunks > 0) {
		size_t last = nchunks - 1, off = last * d->pin_half;
		int h = (int)(last & 1);
		if ((rc = pin_wait(d, h, err, errlen)) < 0)
			return rc;
		memcpy(out + off, d->pin + (size_t)h * d->pin_half, total - off);
	}
	*tail_ns = now_ns() - t0;
	return 0;
}

/* After a failure half-way, lets the stream drain so that no copy still
 * reads or writes the pool. */
static void drain(struct cuda_dev *d)
{
	nv_drv.cuStreamSynchronize(d->stream);
	d->pin_busy[0] = d->pin_busy[1] = 0;
}

static int check_kind(enum mfma_dtype dt, bool sparse, char *err, size_t errlen)
{
	int kind = nv_kind_of(dt, sparse);
	if (kind < 0)
		snprintf(err, errlen,
			 "cuda: in_dtype=%s is not supported on the tensor cores (f16, bf16, i8 are)",
			 mfma_dtype_name(dt));
	return kind < 0 ? -ENOTSUP : kind;
}

static size_t a_raw_bytes(uint32_t m, uint32_t k, size_t es, bool sparse)
{
	return (size_t)m * (sparse ? k / 2 : k) * es;
}

static size_t meta_raw_bytes(uint32_t m, uint32_t k)
{
	return (size_t)m * sparse24_meta_words(k) * 4;
}

/* Copies A in (values and canonical meta) and launches the packing. */
static int upload_a(struct cuda_dev *d, int kind, uint32_t m, uint32_t k, const void *a,
		    const uint32_t *meta, char *err, size_t errlen)
{
	const bool sparse = nv_kind_sparse(kind);
	const size_t es = (size_t)nv_kind_esize(kind);
	int rc;
	size_t abytes = a_raw_bytes(m, k, es, sparse);
	if ((rc = dbuf_need(&d->raw_a, abytes, err, errlen, "A", NULL)) < 0)
		return rc;
	if ((rc = stage_h2d(d, d->raw_a.p, abytes, a, 1, abytes, err, errlen)) < 0)
		return rc;
	if (sparse) {
		size_t mbytes = meta_raw_bytes(m, k);
		if ((rc = dbuf_need(&d->raw_meta, mbytes, err, errlen, "A meta", NULL)) < 0)
			return rc;
		if ((rc = stage_h2d(d, d->raw_meta.p, mbytes, meta, 1, mbytes, err, errlen)) < 0)
			return rc;
	}
	return 0;
}

static int launch_pack(struct cuda_dev *d, const struct nv_packed *dst, char *err, size_t errlen)
{
	int rc = nv_launch_pack(&d->mod, d->stream, d->raw_a.p,
				nv_kind_sparse(dst->kind) ? d->raw_meta.p : 0, dst);
	if (rc < 0)
		snprintf(err, errlen, "cuda: launching the A packing kernel failed (%d)", rc);
	return rc;
}

static void cuda_weight_free(void *dev, void *handle)
{
	struct cuda_weight *w = handle;
	(void)dev;
	if (!w)
		return;
	if (w->pk.a)
		nv_drv.cuMemFree(w->pk.a);
	if (w->pk.meta)
		nv_drv.cuMemFree(w->pk.meta);
	free(w);
}

static int cuda_weight_load(void *dev, const struct mfma_weight_host *wh, void **handle,
			    uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct cuda_dev *d = dev;
	if (!d || !wh || !handle || !wh->a || (wh->sparse && !wh->meta) || !wh->m || !wh->k) {
		snprintf(err, errlen, "cuda: weight_load: missing or empty weight");
		return -EINVAL;
	}
	if (wh->sparse && wh->k % 4 != 0) {
		snprintf(err, errlen, "cuda: weight k=%u is not a multiple of 4 (2:4 groups)", wh->k);
		return -EINVAL;
	}
	int kind = check_kind(wh->dtype, wh->sparse, err, errlen);
	if (kind < 0)
		return kind;
	CU_TRY(nv_drv.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent");
	struct cuda_weight *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	w->dtype = wh->dtype;
	w->m = wh->m;
	w->k = wh->k;
	w->sparse = wh->sparse;
	w->pk.kind = kind;
	w->pk.m = wh->m;
	w->pk.k = wh->k;
	int rc;
	CUresult r = nv_drv.cuMemAlloc(&w->pk.a, (size_t)nv_packed_a_bytes(kind, wh->m, wh->k));
	if (r == CUDA_SUCCESS && wh->sparse)
		r = nv_drv.cuMemAlloc(&w->pk.meta, (size_t)nv_packed_meta_bytes(kind, wh->m, wh->k));
	if (r != CUDA_SUCCESS) {
		rc = fail(r, err, errlen, "allocating the weight");
		goto out;
	}
	if ((rc = upload_a(d, kind, wh->m, wh->k, wh->a, wh->meta, err, errlen)) < 0 ||
	    (rc = launch_pack(d, &w->pk, err, errlen)) < 0)
		goto out;
	if ((r = nv_drv.cuStreamSynchronize(d->stream)) != CUDA_SUCCESS) {
		rc = fail(r, err, errlen, "packing the weight");
		goto out;
	}
	d->pin_busy[0] = d->pin_busy[1] = 0;
	*handle = w;
	*dev_bytes = nv_packed_a_bytes(kind, wh->m, wh->k) +
		     (wh->sparse ? nv_packed_meta_bytes(kind, wh->m, wh->k) : 0);
	return 0;
out:
	drain(d);
	cuda_weight_free(d, w);
	return rc;
}

static uint64_t elapsed_ns(CUevent from, CUevent to)
{
	float ms = 0.0f;
	if (nv_drv.cuEventElapsedTime(&ms, from, to) != CUDA_SUCCESS)
		return 0;
	return (uint64_t)((double)ms * 1e6);
}

static int cuda_gemm_body(struct cuda_dev *d, const struct mfma_gemm *g, struct cuda_weight *w,
			  struct backend_timing *t, char *err, size_t errlen)
{
	const bool sparse = w ? w->sparse : g->a_sparse;
	int kind = check_kind(g->in_dtype, sparse, err, errlen);
	if (kind < 0)
		return kind;
	if (g->out_dtype != MFMA_DT_F32 && g->out_dtype != MFMA_DT_F16 &&
	    g->out_dtype != MFMA_DT_BF16 && g->out_dtype != MFMA_DT_I32) {
		snprintf(err, errlen, "cuda: out_dtype=%s is not supported", mfma_dtype_name(g->out_dtype));
		return -EINVAL;
	}
	if ((g->in_dtype == MFMA_DT_I8) != (g->out_dtype == MFMA_DT_I32)) {
		snprintf(err, errlen, "cuda: out_dtype=%s does not go with in_dtype=%s",
			 mfma_dtype_name(g->out_dtype), mfma_dtype_name(g->in_dtype));
		return -EINVAL;
	}
	if (w && (w->m != g->m || w->k != g->k || w->dtype != g->in_dtype)) {
		snprintf(err, errlen, "cuda: the weight is %ux%u %s, the request wants %ux%u %s", w->m,
			 w->k, mfma_dtype_name(w->dtype), g->m, g->k, mfma_dtype_name(g->in_dtype));
		return -EINVAL;
	}
	if (!g->m || !g->n || !g->k || !g->b || !g->d || (!w && !g->a) ||
	    (!w && sparse && !g->a_meta) || (g->beta != 0.0f && !g->c)) {
		snprintf(err, errlen, "cuda: gemm: missing operand or empty size");
		return -EINVAL;
	}
	if (sparse && g->k % 4 != 0) {
		snprintf(err, errlen, "cuda: k=%u is not a multiple of 4 (2:4 groups)", g->k);
		return -EINVAL;
	}
	const uint32_t m = g->m, n = g->n, k = g->k;
	const size_t es = (size_t)nv_kind_esize(kind), os = mfma_dtype_size(g->out_dtype);
	int occ[NV_TILE_COUNT];
	nv_module_occ(&d->mod, kind, occ);
	struct nv_plan plan;
	int rc = nv_plan_make(kind, m, n, k, d->mod.sms, occ, -1, &plan);
	if (rc < 0) {
		snprintf(err, errlen, "cuda: no kernel for %ux%ux%u %s on sm_%d (%d)", m, n, k,
			 nv_kind_name(kind), d->mod.cc, rc);
		return rc;
	}

	/* Device buffers. */
	struct nv_packed pk;
	if (w) {
		pk = w->pk;
	} else {
		memset(&pk, 0, sizeof(pk));
		pk.kind = kind;
		pk.m = m;
		pk.k = k;
		if ((rc = dbuf_need(&d->pack_a, (size_t)nv_packed_a_bytes(kind, m, k), err, errlen,
				    "packed A", NULL)) < 0)
			return rc;
		pk.a = d->pack_a.p;
		if (sparse) {
			if ((rc = dbuf_need(&d->pack_meta, (size_t)nv_packed_meta_bytes(kind, m, k), err,
					    errlen, "packed A meta", NULL)) < 0)
				return rc;
			pk.meta = d->pack_meta.p;
		}
	}
	/* 16-bit B keeps its rows 16-byte aligned for cp.async (ldb a
	 * multiple of 8); 8-bit B goes in as is and is transposed. */
	const size_t ldb = es == 2 ? (size_t)nv_round_up(n, 8) : n;
	const size_t ldbt = (size_t)nv_k_pad(kind, k);
	int grown = 0;
	if ((rc = dbuf_need(&d->b, (size_t)k * ldb * es, err, errlen, "B", NULL)) < 0 ||
	    (es == 1 && (rc = dbuf_need(&d->bt, (size_t)n * ldbt, err, errlen, "B transposed", NULL)) < 0) ||
	    (g->beta != 0.0f && (rc = dbuf_need(&d->c, (size_t)m * n * os, err, errlen, "C", NULL)) < 0) ||
	    (rc = dbuf_need(&d->d, (size_t)m * n * os, err, errlen, "D", NULL)) < 0 ||
	    (rc = dbuf_need(&d->ws, plan.ws_bytes, err, errlen, "split-K workspace", NULL)) < 0 ||
	    (rc = dbuf_need(&d->counters, plan.counters * 4, err, errlen, "split-K counters", &grown)) < 0)
		return rc;
	if (grown)
		CU_TRY(nv_drv.cuMemsetD32Async(d->counters.p, 0, d->counters.cap / 4, d->stream),
		       "cuMemsetD32Async(counters)");

	/* In. */
	CU_TRY(nv_drv.cuEventRecord(d->ev[0], d->stream), "cuEventRecord");
	if (!w && (rc = upload_a(d, kind, m, k, g->a, g->a_meta, err, errlen)) < 0)
		return rc;
	if ((rc = stage_h2d(d, d->b.p, ldb * es, g->b, k, (size_t)n * es, err, errlen)) < 0)
		return rc;
	if (g->beta != 0.0f &&
	    (rc = stage_h2d(d, d->c.p, (size_t)m * n * os, g->c, 1, (size_t)m * n * os, err, errlen)) < 0)
		return rc;
	CU_TRY(nv_drv.cuEventRecord(d->ev[1], d->stream), "cuEventRecord");

	/* Kernels. */
	if (!w && (rc = launch_pack(d, &pk, err, errlen)) < 0)
		return rc;
	struct nv_gemm_params p;
	memset(&p, 0, sizeof(p));
	p.a = pk.a;
	p.meta = pk.meta;
	p.b = d->b.p;
	p.ldb = (int32_t)ldb;
	if (es == 1) {
		if ((rc = nv_launch_transpose_b8(&d->mod, d->stream, d->b.p, (int)k, (int)n, (int)ldb,
						 d->bt.p, (int)ldbt)) < 0) {
			snprintf(err, errlen, "cuda: launching the B transpose failed (%d)", rc);
			return rc;
		}
		p.b = d->bt.p;
		p.ldb = (int32_t)ldbt;
	}
	p.c = g->beta != 0.0f ? d->c.p : 0;
	p.d = d->d.p;
	p.m = (int32_t)m;
	p.n = (int32_t)n;
	p.k = (int32_t)k;
	p.ldc = p.ldd = (int32_t)n;
	p.out_dtype = g->out_dtype;
	p.alpha = g->alpha;
	p.beta = g->beta;
	if ((rc = nv_launch_gemm(&d->mod, &plan, &p, d->ws.p, d->counters.p, d->stream)) < 0) {
		snprintf(err, errlen, "cuda: launching %s failed (%d)", nv_variant_label(kind, plan.tile),
			 rc);
		return rc;
	}
	CU_TRY(nv_drv.cuEventRecord(d->ev[2], d->stream), "cuEventRecord");

	/* Out. */
	uint64_t tail = 0;
	if ((rc = stage_d2h(d, g->d, d->d.p, (size_t)m * n * os, d->ev[3], &tail, err, errlen)) < 0)
		return rc;
	if (t) {
		t->h2d_ns = elapsed_ns(d->ev[0], d->ev[1]);
		t->kernel_ns = elapsed_ns(d->ev[1], d->ev[2]);
		t->d2h_ns = elapsed_ns(d->ev[2], d->ev[3]) + tail;
		t->variant = nv_variant_label(kind, plan.tile);
	}
	return 0;
}

static int cuda_gemm(void *dev, const struct mfma_gemm *g, void *weight, struct backend_timing *t,
		     char *err, size_t errlen)
{
	struct cuda_dev *d = dev;
	if (!d || !g) {
		snprintf(err, errlen, "cuda: gemm: no device or no request");
		return -EINVAL;
	}
	CU_TRY(nv_drv.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent");
	int rc = cuda_gemm_body(d, g, weight, t, err, errlen);
	if (rc < 0)
		drain(d);
	return rc;
}

const struct backend_ops backend_cuda = {
	.name = "cuda",
	.probe = cuda_probe,
	.describe = cuda_describe,
	.open = cuda_open,
	.close = cuda_close,
	.weight_load = cuda_weight_load,
	.weight_free = cuda_weight_free,
	.gemm = cuda_gemm,
};
