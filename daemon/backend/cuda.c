/* The CUDA backend: NVIDIA GPUs through the driver API, from C.
 *
 * Two layers.  The device layer (cuda_device.c) probes the GPUs and holds
 * what every kernel family shares: context, stream, events, the pinned
 * staging pool, the buffer cache.  The kernel providers (cuda_provider.h)
 * are the families that run on it, in the table below: our kernels and
 * NVIDIA's libraries, opened at run time.  This file is the struct
 * backend_ops the daemon sees: it offers a device when a provider has
 * kernels for it and describes it as the union of its providers.
 *
 * A request that brings its own A goes to the first provider whose
 * supports() accepts it.  A resident weight is packed by every provider
 * that supports it (the device charges the sum), and the choice among
 * them is measured: the first GEMM of an N bucket (and output type) runs
 * on each candidate, timed by the device's events, and the fastest serves
 * that bucket from then on.  The answer's variant names what ran.  When
 * the daemon warms a weight at load (weight_warm, below), the measuring
 * and every provider's per-N plans happen then, off the serving path.
 *
 * The configuration (cuda.providers, struct provider_policy) may exclude
 * providers: they are not attached, not described and never run.  It may
 * pin one: it runs first whatever it supports (requests with their own A
 * and resident weights alike, with no measuring), the others only what it
 * cannot run.  The others still pack a resident weight they support, so
 * that an N or output type the pinned one refuses has a fallback.
 *
 * The measured order of each (weight shape, N bucket, output type) is
 * also handed to the daemon's cache of choices (backend_config.choices),
 * which keeps it in the state directory: a restart finds it there and
 * does not time the candidates again.
 *
 * The measuring times each candidate alone, back to back, while a served
 * request runs between its copies on a GPU that was idle a moment before;
 * on the H200 that ranks two providers whose times lie within 10% in the
 * other order (bench/RESULTS.md).  So the order is then tried as served
 * (cuda.served_trial, served_trial.h): the first served launches of a
 * bucket go to every candidate, a block of launches each as measure()
 * runs them, and when each has run that many times after an untimed
 * first, they take the order of their median kernel times as served from
 * then on (and in the cache).  Every one, not the two or three fastest:
 * on an H100 at a weight held in L2 between requests the back-to-back
 * ranking put the kernel that served fastest third, then fourth
 * (bench/RESULTS.md). */
#include "mfmad_build.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "cuda_batch.h"
#include "cuda_device.h"
#include "cuda_provider.h"
#include "cuda_widths.h"
#include "mfma_clock.h"
#include "mfma_dtype.h"
#include "nv_plan.h"
#include "providers.h"
#include "served_trial.h"

/* The providers, in order of preference for a request with its own A:
 * the first that supports it runs it.  Ours come first there since the
 * libraries would each need their own copy of A per request, the sm_90a
 * wgmma family (2:4 and dense f16/bf16 on sm_90 only) before the mma.sp
 * one since it is faster there at every shape measured (bench/RESULTS.md);
 * resident weights choose by measurement.  To add one (a vendor library, another
 * kernel family), see the steps at the top of cuda_provider.h; its entry
 * goes here. */
static const struct cuda_provider *const providers[] = {
	&cuda_provider_wgmma,
	&cuda_provider_ours,
	&cuda_provider_cublaslt,
	&cuda_provider_cusparselt,
};
#define NPROVIDERS (sizeof(providers) / sizeof(providers[0]))

/* The N buckets of the measured choice are cuda_widths.h's. */
#define NBUCKETS CUDA_NBUCKETS
/* Output types (enum mfma_dtype) a choice is kept for. */
#define NOUT 6
/* Timed runs per candidate after one untimed warm-up (plans, heuristics,
 * lazy module loads); the median counts.  On the serving path every
 * run delays the request that triggered the measuring, so few; at load
 * (weight_warm) nothing waits, and more runs make the choice steadier:
 * at 14336x4096 N=16 the kernels of three providers lie within 25-33 us
 * and five runs picked a different one on different loads. */
#define TIMED_RUNS 5
#define TIMED_RUNS_AT_LOAD 25

/* The configuration's word on the providers (cuda.providers), set at
 * probe, before any device opens, and read-only after. */
static struct provider_policy policy = { .exclude = 0, .prefer = -1 };
/* Served launches per candidate in a bucket's trial (cuda.served_trial,
 * at most BACKEND_TRIAL_MAX); 0: none, the measured order stands.  Set at
 * probe. */
static uint32_t trial_runs = 0;
_Static_assert(SERVED_TRIAL_MAX == BACKEND_TRIAL_CANDIDATES && SERVED_TRIAL_RUNS_MAX == BACKEND_TRIAL_MAX,
	       "a trial's bounds are backend_timing's");
_Static_assert(NPROVIDERS <= SERVED_TRIAL_MAX, "a trial tries every provider");

/* Whether provider i may serve on compute capability cc. */
static int usable_here(size_t i, int cc)
{
	return !provider_excluded(&policy, i) && providers[i]->usable(cc);
}

/* An open device: the device layer and each provider's state on it, and
 * the cache of measured choices with the key part that names the device. */
struct cuda_backend_dev {
	struct cuda_dev *dev;
	void *state[NPROVIDERS];
	struct cuda_batch *batch; /* NULL: the device does not batch */
	const struct backend_choices *choices;
	char fingerprint[sizeof(((struct backend_choice_key *)0)->device)];
	/* Choices measured on this device (the candidates timed). */
	uint64_t measures;
	/* A weight is being warmed: its GEMMs' operands are the warming's
	 * scratch on the device, and run_on ends their copy out itself. */
	bool warming;
};

/* The measured order of the candidates for one (N bucket, output type):
 * provider indices, fastest first; n == 0 until measured; and its trial. */
struct cuda_rank {
	uint8_t n;
	uint8_t order[NPROVIDERS];
	struct served_trial trial; /* served_trial.h */
};

/* A resident weight: what each provider that took it made of it, and the
 * choice among them per N bucket. */
struct cuda_weight {
	bool have[NPROVIDERS];
	void *packed[NPROVIDERS];
	struct cuda_rank rank[NBUCKETS][NOUT];
	enum mfma_dtype dtype;
	uint32_t m, k;
	bool sparse;
};

static int any_provider_usable(int cc)
{
	for (size_t i = 0; i < NPROVIDERS; i++)
		if (usable_here(i, cc))
			return 1;
	return 0;
}

static int cuda_probe(const struct backend_config *cfg, char *err, size_t errlen)
{
	/* The configuration names providers by providers.c's list, whose
	 * index is the exclude bit: it must be this table, in this order. */
	for (size_t i = 0; i < NPROVIDERS; i++) {
		int rc = providers_check(PROVIDERS_CUDA, i, NPROVIDERS, providers[i]->name, err,
					 errlen);
		if (rc < 0)
			return rc;
	}
	if (cfg) {
		policy = cfg->cuda_providers;
		trial_runs = cfg->cuda_served_trial < BACKEND_TRIAL_MAX ? cfg->cuda_served_trial
									 : BACKEND_TRIAL_MAX;
	}
	return cuda_dev_probe(any_provider_usable, err, errlen);
}

static int cuda_describe(int index, struct backend_device_info *info)
{
	int rc = cuda_slot_describe(index, info);
	if (rc < 0)
		return rc;
	int cc = cuda_slot_cc(index);
	/* A batch joins its parts on the device and runs on whichever
	 * provider the choice names (cuda_batch.h). */
	info->batches = cuda_batch_usable(cc);
	info->leaves_lone = true;
	for (size_t i = 0; i < NPROVIDERS; i++) {
		/* An excluded provider is listed as excluded without asking
		 * usable(), which for a library opens it: excluded is never
		 * loaded.  It adds no variant and no dtype. */
		if (!provider_excluded(&policy, i) && !providers[i]->usable(cc))
			continue;
		providers_describe(&policy, PROVIDERS_CUDA, i, info->providers,
				   sizeof(info->providers));
		if (usable_here(i, cc))
			providers[i]->describe(cc, info);
	}
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
			cuda_batch_close(bd->batch);
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
	/* The device's part of a cached choice's key: a choice measured on
	 * another GPU, driver, daemon version, build of our kernels, provider
	 * set or library version is not this one's. */
	int drv = 0;
	(void)nv_drv.cuDriverGetVersion(&drv);
	struct backend_device_info info;
	int off = snprintf(bd->fingerprint, sizeof(bd->fingerprint), "%s sm_%d driver %d mfmad %s kernels %s:",
			   cuda_slot_describe(index, &info) == 0 ? info.name : "?", cc, drv,
			   MFMAD_VERSION, nv_images_stamp);
	for (size_t i = 0; i < NPROVIDERS; i++) {
		if (!usable_here(i, cc))
			continue;
		if ((rc = providers[i]->attach(bd->dev, &bd->state[i], err, errlen)) < 0) {
			cuda_close(bd);
			return rc;
		}
		const long v = providers[i]->version ? providers[i]->version(bd->state[i]) : 0;
		char ver[24] = "";
		if (v)
			snprintf(ver, sizeof(ver), "@%ld", v);
		if (off > 0 && (size_t)off < sizeof(bd->fingerprint))
			off += snprintf(bd->fingerprint + off, sizeof(bd->fingerprint) - (size_t)off, " %s%s",
					providers[i]->name, ver);
	}
	/* Batched launches need the data-movement kernels; describe said
	 * the device batches only where the build has them (-ENOEXEC: not
	 * for this arch, and the libraries may still serve it). */
	const struct cuda_batch_cfg bc = { .copy_stream = cfg && cfg->cuda_copy_stream,
					   .dma_part = cfg ? cfg->cuda_dma_part_bytes : 0,
					   .region_copies = cfg && cfg->cuda_region_copies,
					   .out_stream = cfg && cfg->cuda_out_stream };
	if ((rc = cuda_batch_open(bd->dev, &bc, &bd->batch, err, errlen)) < 0 &&
	    rc != -ENOEXEC) {
		cuda_close(bd);
		return rc;
	}
	err[0] = '\0';
	bd->choices = cfg ? cfg->choices : NULL;
	*dev = bd;
	return 0;
}

/* What pick asks each provider: the device, the shape. */
struct pick_ask {
	const struct cuda_backend_dev *bd;
	const struct cuda_shape *s;
	int cc;
};

static int pick_ask(size_t i, void *ctx, char *err, size_t errlen)
{
	const struct pick_ask *a = ctx;
	if (!providers[i]->usable(a->cc))
		return 1;
	return providers[i]->supports(a->bd->dev, a->bd->state[i], a->s, err, errlen);
}

/* The first provider attached to the device that supports s (the pinned
 * one first), or NPROVIDERS with the first refusal's code in *rc and its
 * sentence in err. */
static size_t pick(const struct cuda_backend_dev *bd, const struct cuda_shape *s, int *rc,
		   char *err, size_t errlen)
{
	struct pick_ask a = { .bd = bd, .s = s, .cc = cuda_dev_cc(bd->dev) };
	snprintf(err, errlen, "cuda: no kernel provider on sm_%d runs %s %s", a.cc,
		 mfma_dtype_name(s->in), s->sparse ? "2:4" : "dense");
	return providers_pick(&policy, NPROVIDERS, pick_ask, &a, rc, err, errlen);
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
	for (size_t i = 0; i < NPROVIDERS; i++)
		if (w->have[i])
			providers[i]->weight_free(bd ? bd->dev : NULL, bd ? bd->state[i] : NULL,
						  w->packed[i]);
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
				      .sparse = wh->sparse, .resident = true };
	int rc;
	(void)pick(bd, &s, &rc, err, errlen);
	if (rc < 0)
		return rc;
	if ((rc = cuda_dev_enter(bd->dev, err, errlen)) < 0)
		return rc;
	struct cuda_weight *w = calloc(1, sizeof(*w));
	if (!w) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	*w = (struct cuda_weight){ .dtype = wh->dtype, .m = wh->m, .k = wh->k, .sparse = wh->sparse };
	/* Every candidate packs its own copy.  One that fails (a library
	 * refusing the shape, memory) drops out; the weight fails only when
	 * none has it, with the first failure's reason. */
	int cc = cuda_dev_cc(bd->dev), first_rc = 0, packed = 0;
	uint64_t total = 0;
	for (size_t i = 0; i < NPROVIDERS; i++) {
		char why[256];
		char *e = first_rc ? why : err;
		size_t elen = first_rc ? sizeof(why) : errlen;
		if (!usable_here(i, cc) ||
		    providers[i]->supports(bd->dev, bd->state[i], &s, why, sizeof(why)) < 0)
			continue;
		uint64_t bytes = 0;
		rc = providers[i]->weight_pack(bd->dev, bd->state[i], wh, &w->packed[i], &bytes, e,
					       elen);
		if (rc < 0) {
			cuda_dev_drain(bd->dev);
			if (!first_rc)
				first_rc = rc;
			continue;
		}
		w->have[i] = true;
		total += bytes;
		packed++;
	}
	if (!packed) {
		free(w);
		return first_rc ? first_rc : -ENOTSUP;
	}
	if ((rc = cuda_dev_sync(bd->dev, "packing the weight", err, errlen)) < 0) {
		cuda_dev_drain(bd->dev);
		cuda_weight_free(bd, w);
		return rc;
	}
	*handle = w;
	*dev_bytes = total;
	return 0;
}

/* Runs g on provider i and fills t; on failure the stream is drained.  A
 * batched launch is one GEMM over its parts joined on the device.  When
 * `leave` says it may be, a batch whose copy out the device makes itself,
 * and a lone GEMM whose D goes by DMA into registered host memory, are
 * left running (t->left, cuda_gemm_end), their times filled there. */
static int run_on(struct cuda_backend_dev *bd, size_t i, const struct mfma_gemm *g, void *packed,
		  bool leave, struct backend_timing *t, char *err, size_t errlen)
{
	const char *variant = NULL;
	struct mfma_gemm one;
	const bool batch = g->nparts > 1;
	const bool lone = !batch && leave;
	int left = batch && leave;
	int lone_set = -1;
	int rc = 0;
	t->gather_ns = t->split_ns = 0;
	if (batch) {
		uint64_t t0 = mfma_clock_ns();
		rc = cuda_batch_in(bd->batch, bd->dev, g, &one, err, errlen);
		t->gather_ns = mfma_clock_ns() - t0;
	}
	if (rc == 0) {
		if (lone)
			cuda_dev_lone_begin(bd->dev);
		rc = providers[i]->launch(bd->dev, bd->state[i], batch ? &one : g, packed, &variant,
					  err, errlen);
		if (lone)
			lone_set = cuda_dev_lone_end(bd->dev);
	}
	if (rc == 0 && batch) {
		uint64_t t0 = mfma_clock_ns();
		rc = cuda_batch_out(bd->batch, bd->dev, g, &left, err, errlen);
		t->split_ns = mfma_clock_ns() - t0;
	} else if (rc == 0 && bd->warming)
		/* D stayed on the device: record the end and wait, as a
		 * batch's split does, so that the events are complete. */
		rc = cuda_dev_copy_out_end(bd->dev, NULL, err, errlen);
	if (rc < 0) {
		if (batch)
			cuda_batch_abort(bd->batch, bd->dev);
		/* Whatever the provider enqueued before failing may still read
		 * the pinned pool or write device buffers: wait for it. */
		cuda_dev_drain(bd->dev);
		if (lone_set >= 0) {
			char why[64];
			cuda_dev_finish(bd->dev, lone_set, t, why, sizeof(why));
		}
		return rc;
	}
	t->variant = variant;
	t->left = batch ? left : lone_set + 1;
	if (!t->left)
		cuda_dev_timing(bd->dev, t);
	return 0;
}

/* Times each candidate (cand[0..ncand)) on g and fills r with those that
 * ran, fastest first.  Each candidate runs in a block of its own: one
 * untimed warm-up, then `runs` timed runs back to back, the median
 * counting.  Blocks, not turns, because that is how a provider serves:
 * request after request on its own copy of the weight, most of which the
 * L2 cache still holds from the last (in turns every run started with
 * another provider's weight there).  On the H200 this picked the same
 * providers as turns did at the shapes measured, where cuSPARSELt alone
 * beats the wgmma kernels the choice serves (bench/RESULTS.md: why is not
 * established).  Every run writes the full answer into g->d; *last is the
 * candidate that ran last, with its timing in *t.  0, or the first
 * candidate's error when none ran. */
static int measure(struct cuda_backend_dev *bd, struct cuda_weight *w, const size_t *cand,
		   size_t ncand, const struct mfma_gemm *g, int runs, struct cuda_rank *r,
		   size_t *last, struct backend_timing *t, char *err, size_t errlen)
{
	uint64_t best[NPROVIDERS];
	int rcs[NPROVIDERS];
	int first_rc = 0;
	if (runs > TIMED_RUNS_AT_LOAD)
		runs = TIMED_RUNS_AT_LOAD;
	bd->measures++;
	for (size_t c = 0; c < ncand; c++) {
		size_t i = cand[c];
		uint64_t times[TIMED_RUNS_AT_LOAD];
		int ntimes = 0;
		rcs[i] = 0;
		for (int run = 0; run <= runs && rcs[i] == 0; run++) {
			char why[256];
			char *e = first_rc ? why : err;
			size_t elen = first_rc ? sizeof(why) : errlen;
			int rc = run_on(bd, i, g, w->packed[i], false, t, e, elen);
			if (rc < 0) {
				rcs[i] = rc;
				if (!first_rc)
					first_rc = rc;
				break;
			}
			*last = i;
			if (run > 0)
				times[ntimes++] = t->kernel_ns;
		}
		best[i] = ntimes ? served_trial_median(times, (size_t)ntimes) : UINT64_MAX;
	}
	/* Insertion by time keeps r sorted. */
	r->n = 0;
	for (size_t c = 0; c < ncand; c++) {
		size_t i = cand[c];
		if (rcs[i] < 0)
			continue;
		size_t at = r->n;
		while (at > 0 && best[r->order[at - 1]] > best[i]) {
			r->order[at] = r->order[at - 1];
			at--;
		}
		r->order[at] = (uint8_t)i;
		r->n++;
	}
	return r->n ? 0 : first_rc;
}

/* The key of w's choice for N bucket b and output type out. */
static void choice_key(const struct cuda_backend_dev *bd, const struct cuda_weight *w, size_t b,
		       size_t out, struct backend_choice_key *k)
{
	memset(k, 0, sizeof(*k));
	snprintf(k->device, sizeof(k->device), "%s", bd->fingerprint);
	k->m = w->m;
	k->k = w->k;
	k->dtype = (uint32_t)w->dtype;
	k->sparse = w->sparse;
	k->n_max = cuda_bucket_max[b];
	k->out = (uint32_t)out;
}

/* Fills r from the cache when it holds an order of exactly these
 * candidates (a provider gone or come since, or one that failed when it
 * was measured, means measuring again). */
static bool rank_from_cache(const struct cuda_backend_dev *bd, const struct backend_choice_key *k,
			    const size_t *cand, size_t ncand, struct cuda_rank *r)
{
	char order[128];
	if (!bd->choices || bd->choices->get(bd->choices->arg, k, order, sizeof(order)) < 0)
		return false;
	struct cuda_rank nr = { .n = 0 };
	bool seen[NPROVIDERS] = { false };
	char *save = NULL;
	for (char *t = strtok_r(order, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t i = 0;
		while (i < NPROVIDERS && strcmp(providers[i]->name, t) != 0)
			i++;
		bool is_cand = false;
		for (size_t c = 0; c < ncand; c++)
			is_cand = is_cand || cand[c] == i;
		if (i == NPROVIDERS || !is_cand || seen[i])
			return false;
		seen[i] = true;
		nr.order[nr.n++] = (uint8_t)i;
	}
	if (nr.n != ncand)
		return false;
	*r = nr;
	return true;
}

static void rank_to_cache(const struct cuda_backend_dev *bd, const struct backend_choice_key *k,
			  const struct cuda_rank *r)
{
	char order[128] = "";
	size_t off = 0;
	if (!bd->choices)
		return;
	for (size_t j = 0; j < r->n && off < sizeof(order); j++) {
		int n = snprintf(order + off, sizeof(order) - off, "%s%s", j ? "," : "",
				 providers[r->order[j]]->name);
		if (n < 0)
			return;
		off += (size_t)n;
	}
	if (off < sizeof(order))
		bd->choices->put(bd->choices->arg, k, order);
}

/* The candidates for s on w: the providers holding the weight that run
 * the shape, in table order, into cand (*ncand of them); 0, or the first
 * refusal's code with its sentence in err when there is none. */
static int candidates(const struct cuda_backend_dev *bd, const struct cuda_weight *w,
		      const struct cuda_shape *s, size_t *cand, size_t *ncand, char *err,
		      size_t errlen)
{
	int rc = -ENOTSUP;
	bool refused = false;
	*ncand = 0;
	for (size_t i = 0; i < NPROVIDERS; i++) {
		if (!w->have[i])
			continue;
		char why[256];
		int r = providers[i]->supports(bd->dev, bd->state[i], s, refused ? why : err,
					      refused ? sizeof(why) : errlen);
		if (r == 0) {
			cand[(*ncand)++] = i;
		} else if (!refused) {
			rc = r;
			refused = true;
		}
	}
	return *ncand ? 0 : rc;
}

/* Fills w's order for g's N bucket and output type when it has none: the
 * pinned provider, else the cache's order, else measured now on g with
 * runs timed runs each (handed to the cache).  *answered: g->d holds the
 * winner's answer (its timing in *t), so that g need not run again. */
static int rank_fill(struct cuda_backend_dev *bd, struct cuda_weight *w, const size_t *cand,
		     size_t ncand, const struct mfma_gemm *g, int runs, bool *answered,
		     struct backend_timing *t, char *err, size_t errlen)
{
	size_t b = cuda_bucket_of(g->n), out = g->out_dtype < NOUT ? g->out_dtype : 0;
	struct cuda_rank *r = &w->rank[b][out];
	bool pinned = false;
	*answered = false;
	for (size_t c = 0; c < ncand; c++)
		pinned = pinned || (int)cand[c] == policy.prefer;
	if (r->n == 0 && pinned) {
		/* A pin is an order of one: nothing to measure; the table's
		 * order follows where it cannot make the shape at launch. */
		r->order[0] = (uint8_t)policy.prefer;
		r->n = 1;
	} else if (ncand > 1 && r->n == 0) {
		struct backend_choice_key key;
		choice_key(bd, w, b, out, &key);
		if (!rank_from_cache(bd, &key, cand, ncand, r)) {
			size_t last = NPROVIDERS;
			int rc = measure(bd, w, cand, ncand, g, runs, r, &last, t, err, errlen);
			if (rc < 0)
				return rc;
			rank_to_cache(bd, &key, r);
			*answered = last == r->order[0];
		}
	}
	return 0;
}

/* Which slot of r's measured order this served launch tries
 * (served_trial_slot): the leader's block first, then the runner-up's,
 * and so on down the measured order; -1 once the trial is over or when
 * there is nothing to try (one candidate, a pin, the trial off).  Blocks,
 * not turns: in turns each launch follows another provider's, and on the
 * H200 our wgmma kernel at 14336 x 192 x 4096 served in turns took a
 * median 51 us, request after request a mean 34 us; cuSPARSELt 44-46
 * against 41 (bench/RESULTS.md): the trial chose by which kernel minds
 * following another, not by which serves faster. */
static int trial_slot(const struct cuda_rank *r)
{
	return served_trial_slot(&r->trial, r->n, trial_runs);
}

/* Counts a served launch of r's candidate `slot` (its kernel time and
 * variant in t), the first of each block untimed (it follows another
 * candidate, or the measuring): for a launch made before its B was in,
 * cuda.gate, the part after B's copy, which is the same copy whichever
 * candidate runs; not h2d + kernel, since a batch's h2d counts its wait
 * for the batch before it: bench/RESULTS.md, "The gate".  When each has
 * run trial_runs times, the trial's candidates take the order of their
 * medians (the cache learns it when it changed), and t says how the trial
 * ended (t->trial_end, enum backend_trial_end; the candidates and their
 * medians, fastest first). */
static void trial_note(const struct cuda_backend_dev *bd, const struct cuda_weight *w, size_t b, size_t out,
		       struct cuda_rank *r, int slot, struct backend_timing *t)
{
	struct served_trial_end end;
	if (!served_trial_note(&r->trial, r->n, trial_runs, slot, t->kernel_ns, t->variant, &end))
		return;
	uint8_t was[SERVED_TRIAL_MAX];
	bool moved = false;
	t->trial_n = end.n;
	for (unsigned j = 0; j < end.n; j++) {
		was[j] = r->order[j];
		t->trial_variant[j] = r->trial.variant[end.slot[j]];
		t->trial_median_ns[j] = end.median_ns[j];
		moved = moved || end.slot[j] != j;
	}
	for (unsigned j = 0; j < end.n; j++)
		r->order[j] = was[end.slot[j]];
	t->trial_end = end.slot[0] == 0 ? BACKEND_TRIAL_KEPT : BACKEND_TRIAL_CHANGED;
	if (!moved)
		return;
	struct backend_choice_key key;
	choice_key(bd, w, b, out, &key);
	rank_to_cache(bd, &key, r);
}

/* Whether provider i is one of cand[0..ncand). */
static bool is_candidate(size_t i, const size_t *cand, size_t ncand)
{
	for (size_t c = 0; c < ncand; c++)
		if (cand[c] == i)
			return true;
	return false;
}

/* The provider gemm_resident runs first when no trial is on: the measured
 * order's first candidate, else the candidates' own first. */
static size_t first_choice(const struct cuda_rank *r, const size_t *cand, size_t ncand)
{
	for (size_t j = 0; j < r->n; j++)
		for (size_t c = 0; c < ncand; c++)
			if (cand[c] == r->order[j])
				return cand[c];
	return cand[0];
}

/* Whether a lone GEMM on w started now would be left running (cuda_gemm
 * has checked that an event set is free): its D goes by DMA into
 * registered host memory, and its N bucket's choice is made and out of its
 * served trial (nothing to measure or to time), while the device is not
 * warming, and the provider that runs it has its plan for this shape (a
 * cuSPARSELt search, 25-100 ms, would stall the loop thread and every
 * connection with it: the worker makes it). */
static bool leaves_lone(struct cuda_backend_dev *bd, const struct cuda_weight *w,
			const struct mfma_gemm *g, const size_t *cand, size_t ncand)
{
	const size_t b = cuda_bucket_of(g->n), out = g->out_dtype < NOUT ? g->out_dtype : 0;
	const struct cuda_rank *r = &w->rank[b][out];
	const size_t dbytes = (size_t)g->m * g->n * mfma_dtype_size(g->out_dtype);
	if (g->nparts >= 2 || bd->warming || (r->n == 0 && ncand != 1) || trial_slot(r) >= 0 ||
	    !cuda_dev_registered(bd->dev, g->d, dbytes))
		return false;
	const size_t i = first_choice(r, cand, ncand);
	return !providers[i]->planned || providers[i]->planned(bd->state[i], g, w->packed[i]);
}

/* A GEMM on a resident weight: the pinned provider when it runs the
 * shape, else the measured choice for its N bucket, from the cache of
 * choices or measured now if this is the bucket's first GEMM (and the
 * weight was not warmed at load). */
static int gemm_resident(struct cuda_backend_dev *bd, struct cuda_weight *w,
			 const struct mfma_gemm *g, const struct cuda_shape *s,
			 struct backend_timing *t, char *err, size_t errlen)
{
	size_t cand[NPROVIDERS], ncand = 0;
	int rc = candidates(bd, w, s, cand, &ncand, err, errlen);
	if (rc < 0)
		return rc;
	if (t->leave_only && !leaves_lone(bd, w, g, cand, ncand))
		return -EAGAIN;
	if ((rc = cuda_dev_enter(bd->dev, err, errlen)) < 0)
		return rc;
	bool answered = false;
	const uint64_t measures0 = bd->measures;
	if ((rc = rank_fill(bd, w, cand, ncand, g, TIMED_RUNS, &answered, t, err, errlen)) < 0)
		return rc;
	/* The answer is the winner's, so that the variant is true. */
	if (answered)
		return 0;
	const size_t b = cuda_bucket_of(g->n), out = g->out_dtype < NOUT ? g->out_dtype : 0;
	struct cuda_rank *r = &w->rank[b][out];
	/* The measured order first (the candidate the trial tries first
	 * when it is not the leader), then the table's; a candidate that
	 * cannot make this very shape (-ENOTSUP at launch) or lacks the
	 * memory for it (-ENOMEM) passes to the next.  A GEMM that measured
	 * is no part of the trial, nor is a batch (two or more requests
	 * joined): it runs the measured order.  A batched load keeps the GPU
	 * busy, as the measure's launches back to back do, and the trial is
	 * about a lone request's launch.  Counted, a batched load on a
	 * weight fresh from its load was largely trial launches: on a
	 * 16384x16384 2:4 weight, one request in 7 was served by cuBLASLt's
	 * dense kernel, slower than our wgmma kernel and cuSPARSELt in every
	 * trial logged on a 2:4 weight (bench/RESULTS.md).  Its widths vary
	 * within a bucket, too.  A trial's lone launch may now follow a
	 * batch's: it is timed so, as it serves in such a load. */
	int slot = bd->measures == measures0 && g->nparts < 2 ? trial_slot(r) : -1;
	/* A trial candidate that is no candidate of this GEMM (cuSPARSELt at
	 * an N not a multiple of 8, in a bucket measured at 16) ends the
	 * trial with the order kept, as one that refuses at launch does:
	 * else the trial waits on it for as long as the bucket serves such
	 * shapes, and none of its lone GEMMs is left running meanwhile. */
	if (slot >= 0 && !is_candidate(r->order[slot], cand, ncand)) {
		r->trial.over = true;
		slot = -1;
	}
	size_t order[2 * NPROVIDERS + 1], norder = 0;
	if (slot > 0)
		order[norder++] = r->order[slot];
	for (size_t j = 0; j < r->n; j++)
		order[norder++] = r->order[j];
	for (size_t c = 0; c < ncand; c++)
		order[norder++] = cand[c];
	bool tried[NPROVIDERS] = { false };
	int first_rc = 0;
	for (size_t j = 0; j < norder; j++) {
		size_t i = order[j];
		if (!is_candidate(i, cand, ncand) || tried[i])
			continue;
		tried[i] = true;
		char why[256];
		char *e = first_rc ? why : err;
		size_t elen = first_rc ? sizeof(why) : errlen;
		/* Left running only where nothing needs its time now: not
		 * while a trial counts it, nor a GEMM that measured. */
		const bool leave = t->may_leave && slot < 0 && bd->measures == measures0 &&
				   !bd->warming;
		rc = run_on(bd, i, g, w->packed[i], leave, t, e, elen);
		if (rc == 0 && slot >= 0 && i == r->order[slot])
			trial_note(bd, w, b, out, r, slot, t);
		else if (rc < 0 && slot >= 0 && i == r->order[slot])
			/* It cannot make every shape of the bucket, or failed:
			 * no trial, or each GEMM of the bucket would try it
			 * again for the weight's life. */
			r->trial.over = true;
		/* One that cannot make this very shape, or has not the memory
		 * for it (its workspace, scratch for a new width), passes to
		 * the next; a device's error is the request's. */
		if (rc != -ENOTSUP && rc != -ENOMEM)
			return rc;
		if (!first_rc)
			first_rc = rc;
	}
	return first_rc;
}

static int cuda_gemm(void *dev, const struct mfma_gemm *g, void *weight, struct backend_timing *t,
		     char *err, size_t errlen)
{
	struct cuda_backend_dev *bd = dev;
	struct cuda_weight *w = weight;
	if (!bd || !g) {
		snprintf(err, errlen, "cuda: gemm: no device or no request");
		return -EINVAL;
	}
	/* The weight, when there is one, is A: its sparsity is the request's. */
	struct mfma_gemm run = *g;
	if (w)
		run.a_sparse = w->sparse;
	/* A batch's GEMM is over its joined width. */
	const struct cuda_shape s = { .m = g->m,
				      .n = g->nparts > 1 ? cuda_batch_width(g->n) : g->n,
				      .k = g->k, .in = g->in_dtype, .out = g->out_dtype,
				      .sparse = run.a_sparse, .resident = w != NULL };
	if (w && (w->m != g->m || w->k != g->k || w->dtype != g->in_dtype)) {
		snprintf(err, errlen, "cuda: the weight is %ux%u %s, the request wants %ux%u %s", w->m,
			 w->k, mfma_dtype_name(w->dtype), g->m, g->k, mfma_dtype_name(g->in_dtype));
		return -EINVAL;
	}
	if (!g->m || !g->n || !g->k || (g->nparts < 2 && (!g->b || !g->d)) || (!w && !g->a) ||
	    (!w && run.a_sparse && !g->a_meta) || (g->nparts < 2 && g->beta != 0.0f && !g->c)) {
		snprintf(err, errlen, "cuda: gemm: missing operand or empty size");
		return -EINVAL;
	}
	if (g->nparts > 1 && (!w || !bd->batch)) {
		snprintf(err, errlen, "cuda: a batched launch of %u parts needs %s", g->nparts,
			 w ? "the batch kernels, which this build lacks for this GPU"
			   : "a resident weight");
		return -EINVAL;
	}
	if (run.a_sparse && g->k % 4 != 0) {
		snprintf(err, errlen, "cuda: k=%u is not a multiple of 4 (2:4 groups)", g->k);
		return -EINVAL;
	}
	struct backend_timing local = { 0 };
	if (!t)
		t = &local;
	t->left = 0;
	/* Only a resident weight's GEMM starts to be left running, and not
	 * while it would have to wait for one left running before. */
	if (t->leave_only &&
	    (!t->may_leave || !w || cuda_dev_left_running(bd->dev) >= CUDA_EVENT_SETS))
		return -EAGAIN;
	if (cuda_dev_left_running(bd->dev) >= CUDA_EVENT_SETS) {
		snprintf(err, errlen, "cuda: gemm: %d launches left running; finish one first "
			 "(gemm_end)", cuda_dev_left_running(bd->dev));
		return -EBUSY;
	}
	int rc;
	/* What this GEMM paid for on the serving path: plans the providers
	 * made and choices measured. */
	const uint64_t plans0 = cuda_dev_plans(bd->dev), measures0 = bd->measures;
	t->trial_end = 0;
	if (w) {
		rc = gemm_resident(bd, w, &run, &s, t, err, errlen);
	} else {
		size_t i = pick(bd, &s, &rc, err, errlen);
		if (rc == 0)
			rc = cuda_dev_enter(bd->dev, err, errlen);
		if (rc == 0)
			rc = run_on(bd, i, &run, NULL, false, t, err, errlen);
	}
	t->plans = (uint32_t)(cuda_dev_plans(bd->dev) - plans0);
	t->measures = (uint32_t)(bd->measures - measures0);
	return rc;
}

/* Warming a resident weight at load (backend_ops.weight_warm): for each
 * width the weight will meet (cuda_warm_widths: the N buckets'
 * representatives and, when the daemon batches, every joined width up to
 * batching.max_columns) and each output type the input dtype allows, the
 * bucket's measured choice is made (from the cache when it has it, else
 * timed with TIMED_RUNS_AT_LOAD runs) and every candidate runs the width
 * once, which makes its per-N state (cuSPARSELt's plan with its search,
 * cuBLASLt's heuristic) as the first GEMM of that width would on the
 * serving path.  The operands are the warming's own scratch on the device,
 * B zeros: no client's memory.  What is made stays with the weight (a
 * cuSPARSELt plan made while warming is never replaced).  Widths past
 * CUDA_WARM_MAX_WIDTHS, and those a larger max_columns adds after a
 * reload, are made on first use as without warming.
 *
 * One GEMM of width n and output type out on w, its B and D the scratch
 * (b, d): the bucket's choice made if n is its representative, then every
 * candidate run once.  A candidate that refuses the width at launch
 * (-ENOTSUP) is passed over, as the serving path passes to the next. */
static int warm_width(struct cuda_backend_dev *bd, struct cuda_weight *w, uint32_t n,
		      enum mfma_dtype out, CUdeviceptr b, CUdeviceptr d, char *err, size_t errlen)
{
	const struct cuda_shape s = { .m = w->m, .n = n, .k = w->k, .in = w->dtype, .out = out,
				      .sparse = w->sparse, .resident = true };
	const struct mfma_gemm g = { .m = w->m, .n = n, .k = w->k, .in_dtype = w->dtype,
				     .out_dtype = out, .alpha = 1.0f, .beta = 0.0f,
				     .a_sparse = w->sparse, .b = (const void *)(uintptr_t)b,
				     .d = (void *)(uintptr_t)d };
	size_t cand[NPROVIDERS], ncand = 0;
	char why[256];
	/* A width no provider holding the weight runs is nothing to warm. */
	if (candidates(bd, w, &s, cand, &ncand, why, sizeof(why)) < 0)
		return 0;
	struct backend_timing t;
	bool answered = false;
	int rc;
	if (n == cuda_bucket_rep(cuda_bucket_of(n)) &&
	    (rc = rank_fill(bd, w, cand, ncand, &g, TIMED_RUNS_AT_LOAD, &answered, &t, err,
			    errlen)) < 0)
		return rc;
	for (size_t c = 0; c < ncand; c++) {
		rc = run_on(bd, cand[c], &g, w->packed[cand[c]], false, &t, err, errlen);
		if (rc < 0 && rc != -ENOTSUP)
			return rc;
	}
	err[0] = '\0';
	return 0;
}

static int cuda_weight_warm(void *dev, void *handle, const struct backend_warm *warm,
			    struct backend_warm_report *rep, char *err, size_t errlen)
{
	struct cuda_backend_dev *bd = dev;
	struct cuda_weight *w = handle;
	if (!bd || !w || !warm || !rep) {
		snprintf(err, errlen, "cuda: weight_warm: no device, weight or widths");
		return -EINVAL;
	}
	memset(rep, 0, sizeof(*rep));
	uint32_t widths[CUDA_WARM_MAX_WIDTHS];
	size_t all = cuda_warm_widths(warm->batching && bd->batch, warm->max_columns, widths,
				      CUDA_WARM_MAX_WIDTHS);
	size_t nw = all < CUDA_WARM_MAX_WIDTHS ? all : CUDA_WARM_MAX_WIDTHS;
	rep->widths_left = (uint32_t)(all - nw);
	int rc = cuda_dev_enter(bd->dev, err, errlen);
	if (rc < 0)
		return rc;
	/* The scratch operands, for the widest width and the widest output
	 * type: what a batch of that width takes anyway.  Freed at the end. */
	const uint32_t wmax = widths[nw - 1];
	const size_t bbytes = (size_t)w->k * wmax * mfma_dtype_size(w->dtype);
	const size_t dbytes = (size_t)w->m * wmax * sizeof(float);
	struct cuda_buf b = { 0 }, d = { 0 };
	const uint64_t plans0 = cuda_dev_plans(bd->dev), measures0 = bd->measures;
	CUresult r;
	if ((rc = cuda_buf_need(&b, bbytes, "the warming's B", NULL, err, errlen)) < 0 ||
	    (rc = cuda_buf_need(&d, dbytes, "the warming's D", NULL, err, errlen)) < 0)
		goto out;
	/* Zeros: no NaN or infinity to slow a kernel or trip a library. */
	if ((r = nv_drv.cuMemsetD8Async(b.p, 0, bbytes, cuda_dev_stream(bd->dev))) != CUDA_SUCCESS) {
		rc = cuda_fail(r, err, errlen, "cuMemsetD8Async(the warming's B)");
		goto out;
	}
	const struct cuda_dev_range on[] = { { b.p, bbytes }, { d.p, dbytes } };
	cuda_dev_on_device(bd->dev, on, 2);
	cuda_dev_set_warming(bd->dev, true);
	bd->warming = true;
	for (int out = MFMA_DT_F32; out <= MFMA_DT_I32 && rc == 0; out++) {
		if (!mfma_out_dtype_ok(w->dtype, (enum mfma_dtype)out))
			continue;
		for (size_t i = 0; i < nw && rc == 0; i++)
			rc = warm_width(bd, w, widths[i], (enum mfma_dtype)out, b.p, d.p, err, errlen);
	}
	if (rc == 0)
		rep->widths = (uint32_t)nw;
	bd->warming = false;
	cuda_dev_set_warming(bd->dev, false);
	cuda_dev_on_device(bd->dev, NULL, 0);
out:
	cuda_dev_drain(bd->dev);
	cuda_buf_free(&b);
	cuda_buf_free(&d);
	rep->plans = (uint32_t)(cuda_dev_plans(bd->dev) - plans0);
	rep->measures = (uint32_t)(bd->measures - measures0);
	return rc;
}

/* A client's region, or the daemon's frames: the device copies from and
 * into it directly.  The handle is the address itself. */
static int cuda_host_register(void *dev, void *p, size_t len, enum backend_host_use use,
			      void **handle, char *err, size_t errlen)
{
	struct cuda_backend_dev *bd = dev;
	int rc = cuda_dev_enter(bd->dev, err, errlen);
	if (rc == 0 && (rc = cuda_dev_host_register(bd->dev, p, len, use == BACKEND_HOST_REGION,
						    err, errlen)) == 0)
		*handle = p;
	return rc;
}

static void cuda_host_unregister(void *dev, void *handle)
{
	struct cuda_backend_dev *bd = dev;
	char err[128];
	if (handle && cuda_dev_enter(bd->dev, err, sizeof(err)) == 0)
		cuda_dev_host_unregister(bd->dev, handle);
}

/* An answer frame in the device's registered arena: the copy out of a
 * single GEMM is then one DMA into it, and a batch's split writes each
 * part there with its kernel (cuda_batch.c, as for regions), where D
 * otherwise went through the staging pool and a host copy per answer. */
static int cuda_gemm_end(void *dev, struct backend_timing *t, char *err, size_t errlen)
{
	struct cuda_backend_dev *bd = dev;
	if (!bd || !t || t->left <= 0) {
		snprintf(err, errlen, "cuda: gemm_end: no launch left running");
		return -EINVAL;
	}
	int rc = cuda_dev_enter(bd->dev, err, errlen);
	if (rc == 0)
		rc = cuda_dev_finish(bd->dev, t->left - 1, t, err, errlen);
	t->left = 0;
	return rc;
}

static void *cuda_frame_alloc(void *dev, size_t len, size_t at)
{
	struct cuda_backend_dev *bd = dev;
	return cuda_dev_frame_alloc(bd->dev, len, at);
}

int cuda_lib_open(const char *const *names, size_t nnames, const char *env,
		  const struct cuda_lib_sym *syms, size_t nsyms, char *path, size_t pathlen,
		  char *err, size_t errlen)
{
	void *lib = NULL;
	const char *e = env ? getenv(env) : NULL;
	for (size_t i = 0; i < nnames && !lib; i++)
		if ((lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)))
			snprintf(path, pathlen, "%s", names[i]);
	if (!lib && e && *e) {
		struct stat st;
		if (stat(e, &st) == 0 && S_ISDIR(st.st_mode))
			snprintf(path, pathlen, "%s/%s", e, names[0]);
		else
			snprintf(path, pathlen, "%s", e);
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	if (!lib) {
		const char *why = dlerror();
		snprintf(err, errlen, "cuda: %s not found (%s)%s%s%s", names[0], why ? why : "?",
			 env ? "; set " : "", env ? env : "", env ? " to its file or folder" : "");
		path[0] = '\0';
		return -ENOENT;
	}
	for (size_t i = 0; i < nsyms; i++) {
		void *p = dlsym(lib, syms[i].name);
		if (!p) {
			snprintf(err, errlen, "cuda: %s has no %s", path, syms[i].name);
			return -ENOSYS;
		}
		memcpy(syms[i].fn, &p, sizeof(p));
	}
	return 0;
}

const struct backend_ops backend_cuda = {
	.name = "cuda",
	.kernels = nv_images_stamp,
	.probe = cuda_probe,
	.describe = cuda_describe,
	.open = cuda_open,
	.close = cuda_close,
	.weight_load = cuda_weight_load,
	.weight_free = cuda_weight_free,
	.weight_warm = cuda_weight_warm,
	.gemm = cuda_gemm,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.frame_alloc = cuda_frame_alloc,
	.gemm_end = cuda_gemm_end,
};
