/* The HIP backend: AMD Instinct GPUs through the HIP runtime API, from C.
 *
 * Two layers, as in the CUDA backend.  The device layer (hip_device.c)
 * probes the GPUs and holds what every kernel family shares: the device,
 * its stream, the events, the buffer cache.  The kernel providers
 * (hip_provider.h) are the families that run on it, in the table below.
 * This file is the struct backend_ops the daemon sees: it offers a device
 * when a provider has kernels for its arch, describes it as the union of
 * its providers, and sends each weight and each GEMM to the first provider
 * whose supports() accepts it.  A resident weight stays with the provider
 * that made it, since its device layout is that provider's own.
 *
 * The configuration (hip.providers, struct provider_policy) may exclude a
 * provider (never attached, described or run) or pin one (asked first).
 * With one provider today neither changes much but the status: the HIP
 * backend does not measure a choice yet, so it keeps none in the cache of
 * choices (backend_config.choices); once hipBLASLt / hipSPARSELt are
 * providers it should follow cuda.c's gemm_resident. */
#include "mfmad_build.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "hip_device.h"
#include "hip_provider.h"
#include "host_join.h"
#include "mfma_clock.h"
#include "providers.h"

/* The providers, in order of preference: the first that supports a
 * request runs it.  To add one (a vendor library, another kernel family),
 * see the steps at the top of hip_provider.h; its entry goes here. */
static const struct hip_provider *const providers[] = {
	&hip_provider_ours,
};
#define NPROVIDERS (sizeof(providers) / sizeof(providers[0]))

/* The configuration's word on the providers (hip.providers), set at
 * probe, before any device opens, and read-only after. */
static struct provider_policy policy = { .exclude = 0, .prefer = -1 };

static int usable_here(size_t i, const char *arch)
{
	return !provider_excluded(&policy, i) && providers[i]->usable(arch);
}

/* An open device: the device layer and each provider's state on it. */
struct hip_backend_dev {
	struct hip_dev *dev;
	void *state[NPROVIDERS];
	bool attached[NPROVIDERS]; /* usable on this arch and attached at open */
	struct host_join join; /* a batched launch's joined B, C and D */
};

/* A resident weight: the provider that packed it and what it made. */
struct hip_weight {
	const struct hip_provider *provider;
	void *state;
	void *packed;
	enum mfma_dtype dtype;
	uint32_t m, k;
	bool sparse;
};

static int any_provider_usable(const char *arch)
{
	for (size_t i = 0; i < NPROVIDERS; i++)
		if (usable_here(i, arch))
			return 1;
	return 0;
}

static int hip_probe(const struct backend_config *cfg, char *err, size_t errlen)
{
	/* The configuration names providers by providers.c's list, whose
	 * index is the exclude bit: it must be this table, in this order. */
	for (size_t i = 0; i < NPROVIDERS; i++) {
		int rc = providers_check(PROVIDERS_HIP, i, NPROVIDERS, providers[i]->name, err,
					 errlen);
		if (rc < 0)
			return rc;
	}
	if (cfg)
		policy = cfg->hip_providers;
	return hip_dev_probe(any_provider_usable, err, errlen);
}

static int hip_describe(int index, struct backend_device_info *info)
{
	int rc = hip_slot_describe(index, info);
	if (rc < 0)
		return rc;
	const char *arch = hip_slot_arch(index);
	for (size_t i = 0; i < NPROVIDERS; i++) {
		/* Excluded: listed as such without asking usable(). */
		if (!provider_excluded(&policy, i) && !providers[i]->usable(arch))
			continue;
		providers_describe(&policy, PROVIDERS_HIP, i, info->providers,
				   sizeof(info->providers));
		if (usable_here(i, arch))
			providers[i]->describe(arch, info);
	}
	/* A batched launch is joined in host memory (host_join.h) and runs
	 * as one request of the joined width on any provider. */
	info->batches = true;
	return 0;
}

static void hip_close(void *dev)
{
	struct hip_backend_dev *bd = dev;
	if (!bd)
		return;
	if (bd->dev) {
		char err[8];
		/* The providers free their memory on the device, once
		 * nothing on the stream uses them; their host memory goes
		 * even when the device can no longer be entered. */
		if (hip_dev_enter(bd->dev, err, sizeof(err)) == 0)
			hip_dev_drain(bd->dev);
		for (size_t i = 0; i < NPROVIDERS; i++)
			providers[i]->detach(bd->dev, bd->state[i]);
		hip_dev_close(bd->dev);
	}
	host_join_free(&bd->join);
	free(bd);
}

static int hip_open(int index, const struct backend_config *cfg, void **dev, char *err,
		     size_t errlen)
{
	if (!dev) {
		snprintf(err, errlen, "hip: open: nowhere to put the device");
		return -EINVAL;
	}
	struct hip_backend_dev *bd = calloc(1, sizeof(*bd));
	if (!bd) {
		snprintf(err, errlen, "hip: out of host memory");
		return -ENOMEM;
	}
	(void)cfg;
	int rc = hip_dev_open(index, &bd->dev, err, errlen);
	if (rc < 0) {
		free(bd);
		return rc;
	}
	const char *arch = hip_dev_arch(bd->dev);
	for (size_t i = 0; i < NPROVIDERS; i++) {
		if (!usable_here(i, arch))
			continue;
		if ((rc = providers[i]->attach(bd->dev, &bd->state[i], err, errlen)) < 0) {
			hip_close(bd);
			return rc;
		}
		bd->attached[i] = true;
	}
	*dev = bd;
	return 0;
}

/* What pick asks each provider: the device, the shape. */
struct pick_ask {
	const struct hip_backend_dev *bd;
	const struct hip_shape *s;
};

static int pick_ask(size_t i, void *ctx, char *err, size_t errlen)
{
	const struct pick_ask *a = ctx;
	/* Asked at open (usable() reads the code object's symbols): not on
	 * every GEMM. */
	if (!a->bd->attached[i])
		return 1;
	return providers[i]->supports(a->bd->dev, a->bd->state[i], a->s, err, errlen);
}

/* The first provider attached to the device that supports s (the pinned
 * one first), or NPROVIDERS with the first refusal's code in *rc and its
 * sentence in err. */
static size_t pick(const struct hip_backend_dev *bd, const struct hip_shape *s, int *rc,
		   char *err, size_t errlen)
{
	struct pick_ask a = { .bd = bd, .s = s };
	snprintf(err, errlen, "hip: no kernel provider on %s runs %s %s", hip_dev_arch(bd->dev),
		 mfma_dtype_name(s->in), s->sparse ? "2:4" : "dense");
	return providers_pick(&policy, NPROVIDERS, pick_ask, &a, rc, err, errlen);
}

static void hip_weight_free(void *dev, void *handle)
{
	struct hip_backend_dev *bd = dev;
	struct hip_weight *w = handle;
	if (!w)
		return;
	char err[8];
	if (bd)
		(void)hip_dev_enter(bd->dev, err, sizeof(err));
	w->provider->weight_free(bd ? bd->dev : NULL, w->state, w->packed);
	free(w);
}

static int hip_weight_load(void *dev, const struct mfma_weight_host *wh, void **handle,
			    uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct hip_backend_dev *bd = dev;
	if (!bd || !wh || !handle || !dev_bytes || !wh->a || (wh->sparse && !wh->meta)) {
		snprintf(err, errlen, "hip: weight_load: missing weight");
		return -EINVAL;
	}
	const struct hip_shape s = { .m = wh->m, .k = wh->k, .in = wh->dtype, .out = MFMA_DT_NONE,
				      .sparse = wh->sparse };
	int rc;
	size_t i = pick(bd, &s, &rc, err, errlen);
	if (rc < 0)
		return rc;
	if ((rc = hip_dev_enter(bd->dev, err, errlen)) < 0)
		return rc;
	struct hip_weight *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(err, errlen, "hip: out of host memory");
		return -ENOMEM;
	}
	*w = (struct hip_weight){ .provider = providers[i], .state = bd->state[i],
				   .dtype = wh->dtype, .m = wh->m, .k = wh->k, .sparse = wh->sparse };
	uint64_t bytes = 0;
	rc = w->provider->weight_pack(bd->dev, w->state, wh, &w->packed, &bytes, err, errlen);
	if (rc < 0) {
		hip_dev_drain(bd->dev);
		free(w);
		return rc;
	}
	if ((rc = hip_dev_sync(bd->dev, "uploading the weight", err, errlen)) < 0) {
		hip_dev_drain(bd->dev);
		hip_weight_free(bd, w);
		return rc;
	}
	*handle = w;
	*dev_bytes = bytes;
	return 0;
}

static int hip_gemm(void *dev, const struct mfma_gemm *g, void *weight, struct backend_timing *t,
		     char *err, size_t errlen)
{
	struct hip_backend_dev *bd = dev;
	const struct hip_weight *w = weight;
	if (!bd || !g) {
		snprintf(err, errlen, "hip: gemm: no device or no request");
		return -EINVAL;
	}
	/* The weight, when there is one, is A: its sparsity is the request's. */
	struct mfma_gemm run = *g;
	if (w)
		run.a_sparse = w->sparse;
	/* A batched launch (a resident weight's requests side by side) is
	 * validated like one request of the joined width; its columns are
	 * joined in host memory only once a provider takes it. */
	const struct hip_shape s = { .m = g->m, .n = g->n, .k = g->k, .in = g->in_dtype,
				      .out = g->out_dtype, .sparse = run.a_sparse };
	const struct hip_provider *p;
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
		snprintf(err, errlen, "hip: the weight is %ux%u %s, the request wants %ux%u %s", w->m,
			 w->k, mfma_dtype_name(w->dtype), g->m, g->k, mfma_dtype_name(g->in_dtype));
		return -EINVAL;
	}
	if ((rc = hip_dev_enter(bd->dev, err, errlen)) < 0)
		return rc;
	uint64_t gather_ns = 0;
	if (g->nparts > 1) {
		const uint64_t g0 = mfma_clock_ns();
		if ((rc = host_join_gather(&bd->join, g, &run, err, errlen)) < 0)
			return rc;
		gather_ns = mfma_clock_ns() - g0;
	}
	const char *variant = NULL;
	rc = p->launch(bd->dev, state, &run, w ? w->packed : NULL, &variant, err, errlen);
	if (rc < 0) {
		/* Whatever the provider enqueued before failing may still read
		 * the caller's memory or write device buffers: wait for it on
		 * every error path, as the CUDA backend does (before this, a
		 * failure after the first copy returned with the copy pending,
		 * and it could land in memory freed meanwhile). */
		hip_dev_drain(bd->dev);
		return rc;
	}
	/* The launch ends with D copied out and the stream waited for
	 * (hip_dev_copy_out): the joined D is the host's to split. */
	uint64_t split_ns = 0;
	if (g->nparts > 1) {
		const uint64_t s0 = mfma_clock_ns();
		host_join_scatter(g, &run);
		split_ns = mfma_clock_ns() - s0;
	}
	if (t) {
		hip_dev_timing(bd->dev, t);
		t->variant = variant;
		t->gather_ns = gather_ns;
		t->split_ns = split_ns;
		t->left = 0;
	}
	return 0;
}

/* A client's region, or the daemon's frames (use: moved alike here):
 * copies from and into it go without staging.  The handle is the address
 * itself. */
static int hip_host_register(void *dev, void *p, size_t len, enum backend_host_use use,
			     void **handle, char *err, size_t errlen)
{
	(void)use;
	struct hip_backend_dev *bd = dev;
	int rc = hip_dev_enter(bd->dev, err, errlen);
	if (rc == 0 && (rc = hip_dev_host_register(bd->dev, p, len, err, errlen)) == 0)
		*handle = p;
	return rc;
}

static void hip_host_unregister(void *dev, void *handle)
{
	struct hip_backend_dev *bd = dev;
	char err[128];
	if (handle && hip_dev_enter(bd->dev, err, sizeof(err)) == 0)
		hip_dev_host_unregister(bd->dev, handle);
}

const struct backend_ops backend_hip = {
	.name = "hip",
	.probe = hip_probe,
	.describe = hip_describe,
	.open = hip_open,
	.close = hip_close,
	.weight_load = hip_weight_load,
	.weight_free = hip_weight_free,
	/* No weight_warm: our HIP kernels choose their tile per launch from a pure plan; nothing is made per N (no vendor library provider yet). */
	.weight_warm = NULL,
	.gemm = hip_gemm,
	.host_register = hip_host_register,
	.host_unregister = hip_host_unregister,
};
