/* The CUDA backend: NVIDIA GPUs through the driver API, from C.
 *
 * Two layers.  The device layer (cuda_device.c) probes the GPUs and holds
 * what every kernel family shares: context, stream, events, the pinned
 * staging pool, the buffer cache.  The kernel providers (cuda_provider.h)
 * are the families that run on it, in the table below.  This file is the
 * struct backend_ops the daemon sees: it offers a device when a provider
 * has kernels for it, describes it as the union of its providers, and
 * sends each weight and each GEMM to the first provider whose supports()
 * accepts it.  A resident weight stays with the provider that packed it,
 * since the packed layout is that provider's own. */
#include "mfmad_build.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_device.h"
#include "cuda_provider.h"

/* The providers, in order of preference: the first that supports a
 * request runs it.  To add one (a vendor library, another kernel family),
 * see the steps at the top of cuda_provider.h; its entry goes here. */
static const struct cuda_provider *const providers[] = {
	&cuda_provider_ours,
};
#define NPROVIDERS (sizeof(providers) / sizeof(providers[0]))

/* An open device: the device layer and each provider's state on it. */
struct cuda_backend_dev {
	struct cuda_dev *dev;
	void *state[NPROVIDERS];
};

/* A resident weight: the provider that packed it and what it made. */
struct cuda_weight {
	const struct cuda_provider *provider;
	void *state;
	void *packed;
	enum mfma_dtype dtype;
	uint32_t m, k;
	bool sparse;
};

static int any_provider_usable(int cc)
{
	for (size_t i = 0; i < NPROVIDERS; i++)
		if (providers[i]->usable(cc))
			return 1;
	return 0;
}

static int cuda_probe(const struct backend_config *cfg, char *err, size_t errlen)
{
	(void)cfg;
	return cuda_dev_probe(any_provider_usable, err, errlen);
}

static int cuda_describe(int index, struct backend_device_info *info)
{
	int rc = cuda_slot_describe(index, info);
	if (rc < 0)
		return rc;
	int cc = cuda_slot_cc(index);
	for (size_t i = 0; i < NPROVIDERS; i++)
		if (providers[i]->usable(cc))
			providers[i]->describe(cc, info);
	return 0;
}

static void cuda_close(void *dev)
{
	struct cuda_backend_dev *bd = dev;
	if (!bd)
		return;
	if (bd->dev) {
		char err[8];
		/* The providers free their buffers in the device's context,
		 * once nothing on the stream uses them. */
		if (cuda_dev_enter(bd->dev, err, sizeof(err)) == 0) {
			cuda_dev_drain(bd->dev);
			for (size_t i = 0; i < NPROVIDERS; i++)
				providers[i]->detach(bd->dev, bd->state[i]);
		}
		cuda_dev_close(bd->dev);
	}
	free(bd);
}

static int cuda_open(int index, const struct backend_config *cfg, void **dev, char *err,
		     size_t errlen)
{
	if (!dev) {
		snprintf(err, errlen, "cuda: open: nowhere to put the device");
		return -EINVAL;
	}
	struct cuda_backend_dev *bd = calloc(1, sizeof(*bd));
	if (!bd) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	int rc = cuda_dev_open(index, cfg, &bd->dev, err, errlen);
	if (rc < 0) {
		free(bd);
		return rc;
	}
	int cc = cuda_dev_cc(bd->dev);
	for (size_t i = 0; i < NPROVIDERS; i++) {
		if (!providers[i]->usable(cc))
			continue;
		if ((rc = providers[i]->attach(bd->dev, &bd->state[i], err, errlen)) < 0) {
			cuda_close(bd);
			return rc;
		}
	}
	*dev = bd;
	return 0;
}

/* The first provider attached to the device that supports s, or NULL with
 * the first refusal's code in *rc and its sentence in err. */
static size_t pick(const struct cuda_backend_dev *bd, const struct cuda_shape *s, int *rc,
		   char *err, size_t errlen)
{
	int cc = cuda_dev_cc(bd->dev);
	*rc = -ENOTSUP;
	snprintf(err, errlen, "cuda: no kernel provider on sm_%d runs %s %s", cc,
		 mfma_dtype_name(s->in), s->sparse ? "2:4" : "dense");
	bool refused = false;
	for (size_t i = 0; i < NPROVIDERS; i++) {
		if (!providers[i]->usable(cc))
			continue;
		char why[256];
		int r = providers[i]->supports(bd->dev, bd->state[i], s, refused ? why : err,
					       refused ? sizeof(why) : errlen);
		if (r == 0) {
			*rc = 0;
			return i;
		}
		if (!refused)
			*rc = r;
		refused = true;
	}
	return NPROVIDERS;
}

static void cuda_weight_free(void *dev, void *handle)
{
	struct cuda_backend_dev *bd = dev;
	struct cuda_weight *w = handle;
	if (!w)
		return;
	char err[8];
	if (bd)
		(void)cuda_dev_enter(bd->dev, err, sizeof(err));
	w->provider->weight_free(bd ? bd->dev : NULL, w->state, w->packed);
	free(w);
}

static int cuda_weight_load(void *dev, const struct mfma_weight_host *wh, void **handle,
			    uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct cuda_backend_dev *bd = dev;
	if (!bd || !wh || !handle || !dev_bytes || !wh->a || (wh->sparse && !wh->meta) || !wh->m ||
	    !wh->k) {
		snprintf(err, errlen, "cuda: weight_load: missing or empty weight");
		return -EINVAL;
	}
	if (wh->sparse && wh->k % 4 != 0) {
		snprintf(err, errlen, "cuda: weight k=%u is not a multiple of 4 (2:4 groups)", wh->k);
		return -EINVAL;
	}
	const struct cuda_shape s = { .m = wh->m, .k = wh->k, .in = wh->dtype, .out = MFMA_DT_NONE,
				      .sparse = wh->sparse };
	int rc;
	size_t i = pick(bd, &s, &rc, err, errlen);
	if (rc < 0)
		return rc;
	if ((rc = cuda_dev_enter(bd->dev, err, errlen)) < 0)
		return rc;
	struct cuda_weight *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	*w = (struct cuda_weight){ .provider = providers[i], .state = bd->state[i],
				   .dtype = wh->dtype, .m = wh->m, .k = wh->k, .sparse = wh->sparse };
	uint64_t bytes = 0;
	rc = w->provider->weight_pack(bd->dev, w->state, wh, &w->packed, &bytes, err, errlen);
	if (rc < 0) {
		cuda_dev_drain(bd->dev);
		free(w);
		return rc;
	}
	if ((rc = cuda_dev_sync(bd->dev, "packing the weight", err, errlen)) < 0) {
		cuda_dev_drain(bd->dev);
		cuda_weight_free(bd, w);
		return rc;
	}
	*handle = w;
	*dev_bytes = bytes;
	return 0;
}

static int cuda_gemm(void *dev, const struct mfma_gemm *g, void *weight, struct backend_timing *t,
		     char *err, size_t errlen)
{
	struct cuda_backend_dev *bd = dev;
	const struct cuda_weight *w = weight;
	if (!bd || !g) {
		snprintf(err, errlen, "cuda: gemm: no device or no request");
		return -EINVAL;
	}
	/* The weight, when there is one, is A: its sparsity is the request's. */
	struct mfma_gemm run = *g;
	if (w)
		run.a_sparse = w->sparse;
	const struct cuda_shape s = { .m = g->m, .n = g->n, .k = g->k, .in = g->in_dtype,
				      .out = g->out_dtype, .sparse = run.a_sparse };
	const struct cuda_provider *p;
	void *state;
	int rc;
	if (w) {
		p = w->provider;
		state = w->state;
		if ((rc = p->supports(bd->dev, state, &s, err, errlen)) < 0)
			return rc;
	} else {
		size_t i = pick(bd, &s, &rc, err, errlen);
		if (rc < 0)
			return rc;
		p = providers[i];
		state = bd->state[i];
	}
	if (w && (w->m != g->m || w->k != g->k || w->dtype != g->in_dtype)) {
		snprintf(err, errlen, "cuda: the weight is %ux%u %s, the request wants %ux%u %s", w->m,
			 w->k, mfma_dtype_name(w->dtype), g->m, g->k, mfma_dtype_name(g->in_dtype));
		return -EINVAL;
	}
	if (!g->m || !g->n || !g->k || !g->b || !g->d || (!w && !g->a) ||
	    (!w && run.a_sparse && !g->a_meta) || (g->beta != 0.0f && !g->c)) {
		snprintf(err, errlen, "cuda: gemm: missing operand or empty size");
		return -EINVAL;
	}
	if (run.a_sparse && g->k % 4 != 0) {
		snprintf(err, errlen, "cuda: k=%u is not a multiple of 4 (2:4 groups)", g->k);
		return -EINVAL;
	}
	if ((rc = cuda_dev_enter(bd->dev, err, errlen)) < 0)
		return rc;
	const char *variant = NULL;
	rc = p->launch(bd->dev, state, &run, w ? w->packed : NULL, &variant, err, errlen);
	if (rc < 0) {
		/* Whatever the provider enqueued before failing may still read
		 * the pinned pool or write device buffers: wait for it. */
		cuda_dev_drain(bd->dev);
		return rc;
	}
	if (t) {
		cuda_dev_timing(bd->dev, t);
		t->variant = variant;
	}
	return 0;
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
