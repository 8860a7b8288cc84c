#include "weights.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices.h"
#include "log.h"
#include "mfma_clock.h"
#include "scheduler.h"
#include "sparse24.h"
#include "validate.h"
#include "weights_store.h"

/* One device's part of a load or a free. */
struct weight_job {
	struct sched_job sj; /* first: the scheduler hands this back */
	struct weight *w;
	void *handle;
	uint64_t dev_bytes;
	int rc;
	char err[400];
	/* Warming after the load (backend_ops.weight_warm), decided on the
	 * loop when the job is queued: the batching then in force. */
	bool warm;
	struct backend_warm warm_for;
	struct backend_warm_report warm_rep;
	int warm_rc;
	uint64_t warm_ns;
	char warm_err[400];
};

/* A client can load and unload a tiny weight in a loop: those lines are
 * written at most this many a second (log_limited). */
#define WEIGHT_LOG_BURST 20
#define log_weight(d, ...)                                                                \
	log_limited(&(d)->weight_log, WEIGHT_LOG_BURST, LOG_LVL_INFO, DAEMON_WEIGHT_LOG_WHAT, \
		    __VA_ARGS__)

static struct weight *find_any(struct daemon *d, const char *name, enum weight_state state)
{
	for (struct weight *w = d->weights; w; w = w->next)
		if (w->state == state && strcmp(w->name, name) == 0)
			return w;
	return NULL;
}

struct weight *weights_find(struct daemon *d, const char *name)
{
	return find_any(d, name, WEIGHT_READY);
}

bool weights_loading(struct daemon *d, const char *name)
{
	return find_any(d, name, WEIGHT_LOADING) != NULL && !weights_find(d, name);
}

bool weights_load_under_way(struct daemon *d, const char *name)
{
	return find_any(d, name, WEIGHT_LOADING) != NULL;
}

static void unlink_weight(struct daemon *d, struct weight *w)
{
	for (struct weight **p = &d->weights; *p; p = &(*p)->next) {
		if (*p == w) {
			*p = w->next;
			w->next = NULL;
			return;
		}
	}
}

static void charge(struct daemon *d, struct weight *w, int dev, uint64_t bytes)
{
	struct device *v = &d->dev[dev];
	v->weight_bytes += bytes;
	STATS_ADD(v->st->weight_bytes, bytes);
	STATS_ADD(d->stats.weight_bytes, bytes);
	w->charged[dev] += bytes;
}

static void release_budget(struct daemon *d, struct weight *w, int dev)
{
	struct device *v = &d->dev[dev];
	uint64_t bytes = w->charged[dev];
	v->weight_bytes -= bytes;
	STATS_SUB(v->st->weight_bytes, bytes);
	STATS_SUB(d->stats.weight_bytes, bytes);
	w->charged[dev] = 0;
	w->target[dev] = false;
}

static void weight_destroy(struct daemon *d, struct weight *w)
{
	if (w->unload_pending) {
		reply_status(d, &w->unload, MFMA__V1__CODE__OK, "%s", "");
		request_release(d, &w->unload);
	}
	operand_a_free(&w->a);
	if (w->req)
		mfma__v1__request__free_unpacked(w->req, NULL);
	free(w);
}

static void free_work(struct device *v, struct sched_job *sj)
{
	struct weight_job *j = (struct weight_job *)sj;
	v->ops->weight_free(v->bdev, j->w->handle[v->index]);
}

static void free_done(struct daemon *d, struct sched_job *sj, int status)
{
	struct weight_job *j = (struct weight_job *)sj;
	struct weight *w = j->w;
	if (status < 0)
		log_err("weight '%s': the free of its copy on device %d could not run (%s); its "
			"memory stays allocated", w->name, sj->dev, strerror(-status));
	w->resident[sj->dev] = false;
	w->handle[sj->dev] = NULL;
	release_budget(d, w, sj->dev);
	free(j);
	if (--w->pending == 0)
		weight_destroy(d, w);
}

/* Queues a free of the device copy on every device that holds one; the
 * struct goes when the last free completes. */
static void release_devices(struct daemon *d, struct weight *w)
{
	for (int i = 0; i < d->ndev; i++) {
		if (!w->resident[i]) {
			if (w->target[i])
				release_budget(d, w, i);
			continue;
		}
		struct weight_job *j = calloc(1, sizeof(*j));
		if (!j) {
			/* Cannot queue the free: leak the device copy rather than
			 * free it from the wrong thread. */
			log_err("out of memory freeing weight '%s' on device %d", w->name, i);
			continue;
		}
		j->w = w;
		j->sj.prio = 0; /* frees first: they return memory */
		w->pending++;
		sched_submit(d, i, &j->sj, free_work, free_done);
	}
	if (w->pending == 0)
		weight_destroy(d, w);
}

void weights_ref(struct weight *w)
{
	w->refs++;
}

void weights_unref(struct daemon *d, struct weight *w)
{
	if (--w->refs > 0)
		return;
	release_devices(d, w);
}

/* Takes a weight out of service: requests already queued keep it
 * through their references. */
static void retire(struct daemon *d, struct weight *w)
{
	unlink_weight(d, w);
	if (w->state == WEIGHT_READY)
		STATS_SUB(d->stats.weights, 1);
	w->state = WEIGHT_DEAD;
	weights_unref(d, w);
}

static void fill_info(const struct daemon *d, const struct weight *w, Mfma__V1__WeightInfo *wi,
		      uint32_t *devbuf)
{
	mfma__v1__weight_info__init(wi);
	wi->name = (char *)w->name;
	wi->has_rows = wi->has_cols = wi->has_dtype = wi->has_sparse = wi->has_bytes = 1;
	wi->rows = w->m;
	wi->cols = w->k;
	wi->dtype = (Mfma__V1__DType)w->dtype;
	wi->sparse = w->sparse;
	wi->bytes = w->host_bytes;
	size_t n = 0;
	for (int i = 0; i < d->ndev; i++)
		if (w->resident[i])
			devbuf[n++] = (uint32_t)i;
	wi->n_devices = n;
	wi->devices = devbuf;
	wi->has_requests = wi->has_launches = 1;
	wi->requests = w->requests;
	wi->launches = w->launches;
}

int weights_list(const struct daemon *d, struct weight_list *l)
{
	size_t nw = 0;
	for (const struct weight *w = d->weights; w; w = w->next)
		nw += w->state == WEIGHT_READY;
	l->n = 0;
	l->info = calloc(nw ? nw : 1, sizeof(*l->info));
	l->ptrs = calloc(nw ? nw : 1, sizeof(*l->ptrs));
	l->devs = calloc(nw ? nw : 1, sizeof(*l->devs));
	if (!l->info || !l->ptrs || !l->devs) {
		weights_list_free(l);
		return -ENOMEM;
	}
	for (const struct weight *w = d->weights; w; w = w->next) {
		if (w->state != WEIGHT_READY)
			continue;
		fill_info(d, w, &l->info[l->n], l->devs[l->n]);
		l->ptrs[l->n] = &l->info[l->n];
		l->n++;
	}
	return 0;
}

void weights_list_free(struct weight_list *l)
{
	free(l->info);
	free(l->ptrs);
	free(l->devs);
	memset(l, 0, sizeof(*l));
}

/* ---- loading ---- */

static void finish_load(struct daemon *d, struct weight *w)
{
	/* The prepared host copy has served every device. */
	operand_a_free(&w->a);
	mfma__v1__request__free_unpacked(w->req, NULL);
	w->req = NULL;
	d->inflight_bytes -= w->held;
	w->held = 0;
	struct weight *old = w->replaces;
	w->replaces = NULL;
	char dir[400];
	bool persisting = w->load.conn && wstore_dir(d, dir, sizeof(dir));
	bool stored = persisting &&
		      wstore_finish(dir, w->name, w->code == MFMA__V1__CODE__OK, w->stored);
	if (w->code != MFMA__V1__CODE__OK) {
		log_debug("load of weight '%s' failed: %s", w->name, w->msg);
		if (w->done)
			w->done(d, w->done_arg, w->code, w->msg);
		reply_status(d, &w->load, w->code, "%s", w->msg);
		request_release(d, &w->load);
		if (old) /* it keeps serving */
			weights_unref(d, old);
		char name[sizeof(w->name)];
		snprintf(name, sizeof(name), "%s", w->name);
		retire(d, w);
		if (d->load_over)
			d->load_over(d, name);
		return;
	}
	if (old) {
		if (old->state == WEIGHT_READY)
			retire(d, old);
		weights_unref(d, old);
	}
	w->state = WEIGHT_READY;
	STATS_ADD(d->stats.weights, 1);
	char warmed[128] = "";
	if (w->warm_ns)
		snprintf(warmed, sizeof(warmed), " (warming %.1f ms: %u plans made, %u choices measured)",
			 w->warm_ns / 1e6, w->warm_plans, w->warm_measures);
	log_weight(d, "weight '%s' %s: %ux%u %s %s, %" PRIu64
		   " bytes per device (host form), in %.1f ms%s",
		 w->name, old ? "replaced" : "loaded", w->m, w->k, mfma_dtype_name(w->dtype),
		 w->sparse ? "2:4" : "dense", w->host_bytes,
		 (mfma_clock_ns() - w->load_start_ns) / 1e6, warmed);
	if (w->done)
		w->done(d, w->done_arg, w->code, "");

	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__LoadWeightResult res = MFMA__V1__LOAD_WEIGHT_RESULT__INIT;
	Mfma__V1__WeightInfo wi;
	uint32_t devs[STATS_MAX_DEVICES];
	fill_info(d, w, &wi, devs);
	res.weight = &wi;
	res.has_stored = persisting;
	res.stored = stored;
	resp.body_case = MFMA__V1__RESPONSE__BODY_LOAD_WEIGHT;
	resp.load_weight = &res;
	reply(d, &w->load, &resp);
	request_release(d, &w->load);
	if (d->load_over)
		d->load_over(d, w->name);
}

static void fail_load(struct weight *w, int code, const char *msg)
{
	if (w->code != MFMA__V1__CODE__OK)
		return; /* the first failure is the one reported */
	w->code = code;
	snprintf(w->msg, sizeof(w->msg), "%s", msg);
}

static void load_work(struct device *v, struct sched_job *sj)
{
	struct weight_job *j = (struct weight_job *)sj;
	const struct weight *w = j->w;
	struct mfma_weight_host h = {
		.m = w->m, .k = w->k, .dtype = w->dtype, .sparse = w->a.sparse,
		.a = w->a.values, .meta = w->a.meta,
	};
	j->rc = v->ops->weight_load(v->bdev, &h, &j->handle, &j->dev_bytes, j->err, sizeof(j->err));
	devices_fault(v, j->rc, j->err);
	if (j->rc < 0 || !j->warm || !v->ops->weight_warm)
		return;
	/* The weight is resident whatever the warming does: a failure is
	 * logged (load_done) and its widths are planned on first use. */
	uint64_t t0 = mfma_clock_ns();
	j->warm_rc = v->ops->weight_warm(v->bdev, j->handle, &j->warm_for, &j->warm_rep,
					 j->warm_err, sizeof(j->warm_err));
	j->warm_ns = mfma_clock_ns() - t0;
	devices_fault(v, j->warm_rc, j->warm_err);
}

/* Loop: what the warming of j did, in the stats and the weight. */
static void note_warm(struct daemon *d, struct weight *w, const struct weight_job *j, int dev)
{
	if (!j->warm || !d->dev[dev].ops->weight_warm)
		return;
	STATS_ADD(d->stats.plans_load, j->warm_rep.plans);
	STATS_ADD(d->stats.measures_load, j->warm_rep.measures);
	w->warm_plans += j->warm_rep.plans;
	w->warm_measures += j->warm_rep.measures;
	if (j->warm_ns > w->warm_ns)
		w->warm_ns = j->warm_ns;
	if (j->warm_rc < 0)
		log_warn("weight '%s': warming on device %d failed after %.1f ms (%u plans made, %u "
			 "choices measured): %s; it serves, and the widths not warmed are planned on "
			 "their first GEMM", w->name, dev, j->warm_ns / 1e6, j->warm_rep.plans,
			 j->warm_rep.measures, j->warm_err[0] ? j->warm_err : strerror(-j->warm_rc));
	else if (j->warm_rep.widths_left)
		log_info("weight '%s': device %d warmed %u widths; %u wider ones that "
			 "batching.max_columns allows are planned on their first GEMM", w->name, dev,
			 j->warm_rep.widths, j->warm_rep.widths_left);
}

static void load_done(struct daemon *d, struct sched_job *sj, int status)
{
	struct weight_job *j = (struct weight_job *)sj;
	struct weight *w = j->w;
	struct device *v = &d->dev[sj->dev];
	char msg[512];
	if (status == 0 && j->rc == 0) {
		w->handle[sj->dev] = j->handle;
		w->resident[sj->dev] = true;
		/* The reservation was the host size; charge what the device holds. */
		release_budget(d, w, sj->dev);
		w->target[sj->dev] = true;
		charge(d, w, sj->dev, j->dev_bytes);
		note_warm(d, w, j, sj->dev);
	} else {
		int code = MFMA__V1__CODE__INTERNAL;
		if (status == -ENODEV || (status == 0 && j->rc == -ENOTRECOVERABLE)) {
			code = MFMA__V1__CODE__UNAVAILABLE;
			devices_why_down(v, msg, sizeof(msg));
		} else if (status < 0) {
			code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
			snprintf(msg, sizeof(msg), "out of memory queueing the load");
		} else {
			if (j->rc == -ENOMEM)
				code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
			snprintf(msg, sizeof(msg), "device %d (%s %s): %s", v->index, v->ops->name,
				 v->info.arch, j->err[0] ? j->err : strerror(-j->rc));
		}
		fail_load(w, code, msg);
		release_budget(d, w, sj->dev);
	}
	free(j);
	if (--w->pending == 0)
		finish_load(d, w);
}

/* Threadpool: the O(M*K) part of a load. */
static void prep_work(uv_work_t *req)
{
	struct weight *w = req->data;
	const Mfma__V1__Operand *op = w->req->load_weight->a;
	const void *a = op->kind_case == MFMA__V1__OPERAND__KIND_SPARSE ? op->sparse->values.data
									 : op->dense->data.data;
	const uint32_t *meta = op->kind_case == MFMA__V1__OPERAND__KIND_SPARSE
				       ? (const uint32_t *)(const void *)op->sparse->meta.data
				       : NULL;
	char err[sizeof(w->msg)];
	int rc = operand_prepare_a(w->form, w->dtype, w->m, w->k, a, meta, &w->a, err, sizeof(err));
	/* A client's load is stored here, off the loop (a restore's already
	 * is); the loop keeps the file once the weight is resident. */
	const struct daemon *d = w->work.loop->data;
	char dir[400];
	if (rc == 0 && w->load.conn && wstore_dir(d, dir, sizeof(dir))) {
		size_t es = mfma_dtype_size(w->dtype);
		const Mfma__V1__LoadWeight *lw = w->req->load_weight;
		struct wstore_weight sw = {
			.m = w->m, .k = w->k, .dtype = w->dtype, .sparse = w->a.sparse,
			.device = lw->has_device && lw->device >= 0 ? lw->device : -1,
			.values = (void *)w->a.values, .meta = (void *)w->a.meta,
			.values_bytes = w->a.sparse ? sparse24_values_bytes(w->m, w->k, es)
						    : (size_t)w->m * w->k * es,
			.meta_bytes = w->a.sparse ? sparse24_meta_bytes(w->m, w->k) : 0,
			.min_free = d->cfg.persist_min_free_bytes,
		};
		snprintf(sw.name, sizeof(sw.name), "%s", w->name);
		w->stored = wstore_write(dir, &sw) == 0;
	}
	if (rc < 0)
		fail_load(w, rc == -ENOMEM ? MFMA__V1__CODE__RESOURCE_EXHAUSTED
					   : MFMA__V1__CODE__INVALID_ARGUMENT,
			  err);
}

static void prep_done(uv_work_t *req, int status)
{
	struct weight *w = req->data;
	struct daemon *d = w->work.loop->data;
	if (status < 0) {
		char msg[128];
		snprintf(msg, sizeof(msg), "weight preparation failed: %s", uv_strerror(status));
		fail_load(w, MFMA__V1__CODE__INTERNAL, msg);
	}
	struct weight_job *jobs[STATS_MAX_DEVICES] = { 0 };
	for (int i = 0; i < d->ndev && w->code == MFMA__V1__CODE__OK; i++) {
		if (w->target[i] && !(jobs[i] = calloc(1, sizeof(*jobs[i]))))
			fail_load(w, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory queueing the load");
	}
	if (w->code != MFMA__V1__CODE__OK) {
		for (int i = 0; i < d->ndev; i++) {
			free(jobs[i]);
			release_budget(d, w, i);
		}
		finish_load(d, w);
		return;
	}
	for (int i = 0; i < d->ndev; i++)
		w->pending += jobs[i] != NULL;
	for (int i = 0; i < d->ndev; i++) {
		if (!jobs[i])
			continue;
		jobs[i]->w = w;
		jobs[i]->sj.prio = 0;
		jobs[i]->warm = d->cfg.cuda_warmup;
		jobs[i]->warm_for = (struct backend_warm){
			.batching = d->cfg.batch_enabled && d->dev[i].info.batches,
			.max_columns = d->cfg.batch_max_columns,
		};
		sched_submit(d, i, &jobs[i]->sj, load_work, load_done);
	}
}

/* Reserves the host size of w on every device it goes to; 0, or the code
 * of the refusal with its sentence in err. */
static int reserve(struct daemon *d, struct weight *w, int want_dev, char *err, size_t errlen)
{
	int ntarget = 0;
	for (int i = 0; i < d->ndev; i++) {
		struct device *v = &d->dev[i];
		if ((want_dev >= 0 && want_dev != i) || !devices_runs(v, w->dtype, w->sparse))
			continue;
		if (v->weight_bytes + w->host_bytes > v->budget) {
			snprintf(err, errlen,
				 "weight '%s' needs %" PRIu64 " bytes on device %d, which has %" PRIu64
				 " of its %" PRIu64 "-byte weight budget left%s",
				 w->name, w->host_bytes, i, v->budget - v->weight_bytes, v->budget,
				 w->replaces ? " (the weight it replaces serves until the new one is "
					       "resident, so both must fit)"
					     : "");
			return MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		}
		w->target[i] = true;
		ntarget++;
	}
	if (ntarget == 0) {
		snprintf(err, errlen,
			 "no usable device runs %s GEMMs with a %s A, so weight '%s' has nowhere to go",
			 mfma_dtype_name(w->dtype), w->sparse ? "2:4" : "dense", w->name);
		return MFMA__V1__CODE__UNAVAILABLE;
	}
	for (int i = 0; i < d->ndev; i++)
		if (w->target[i])
			charge(d, w, i, w->host_bytes);
	return MFMA__V1__CODE__OK;
}

/* The name belongs to weights.declare (the configuration is the truth). */
static bool is_declared(const struct daemon *d, const char *name)
{
	for (uint32_t i = 0; name && i < d->cfg.ndeclared; i++)
		if (strcmp(d->cfg.declared[i].name, name) == 0)
			return true;
	return false;
}

/* What a client's load holds until it is answered: the decode's copy of
 * A, and the 2:4 copy that a check or a prune makes of it. */
static uint64_t load_held_bytes(const Mfma__V1__LoadWeight *lw, const struct weight *w)
{
	const Mfma__V1__Operand *op = lw->a;
	uint64_t n = op->kind_case == MFMA__V1__OPERAND__KIND_SPARSE
			     ? (uint64_t)op->sparse->values.len + op->sparse->meta.len
			     : (uint64_t)op->dense->data.len;
	if (w->form == A_DENSE_CHECK || w->form == A_DENSE_PRUNE)
		n += w->host_bytes;
	return n;
}

static void start_load(struct daemon *d, const struct request *r, Mfma__V1__Request *req,
		       weights_done_fn done, void *done_arg)
{
	const Mfma__V1__LoadWeight *lw = req->load_weight;
	char err[512];
	int code = MFMA__V1__CODE__INVALID_ARGUMENT;
	struct validate_limits lim = { .max_dim = d->cfg.max_dim, .max_out_bytes = UINT64_MAX };
	enum a_form form;
	uint32_t m, k;
	enum mfma_dtype dt;
	struct weight *w = NULL, *old = NULL;

	if (validate_load_weight(lw, &lim, d->ndev, &form, &m, &k, &dt, err, sizeof(err)) < 0)
		goto fail;
	if (r->conn && is_declared(d, lw->name)) {
		code = MFMA__V1__CODE__ALREADY_EXISTS;
		snprintf(err, sizeof(err), "weight '%s' is declared in the daemon's configuration "
			 "(weights.declare), which decides what it holds: change the file or the "
			 "declaration and reload the daemon (SIGHUP)", lw->name);
		goto fail;
	}
	if (find_any(d, lw->name, WEIGHT_LOADING)) {
		code = MFMA__V1__CODE__UNAVAILABLE;
		snprintf(err, sizeof(err), "weight '%s' is still loading", lw->name);
		goto fail;
	}
	old = weights_find(d, lw->name);
	if (old && !lw->replace) {
		code = MFMA__V1__CODE__ALREADY_EXISTS;
		snprintf(err, sizeof(err),
			 "weight '%s' is already loaded (load it with replace set, as mfmactl "
			 "load --replace does, to swap it)",
			 lw->name);
		goto fail;
	}
	/* A new name counts against weights.max_count (a replace takes the
	 * old one's place; the declared weights are the operator's). */
	uint32_t held = 0;
	for (const struct weight *x = d->weights; x; x = x->next)
		held++;
	if (r->conn && !old && held >= d->cfg.weight_max_count) {
		code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		snprintf(err, sizeof(err),
			 "the daemon holds %u weights, loaded or loading (weights.max_count = %u): "
			 "unload one first", held, d->cfg.weight_max_count);
		goto fail;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	snprintf(w->name, sizeof(w->name), "%s", lw->name);
	w->m = m;
	w->k = k;
	w->dtype = dt;
	w->form = form;
	w->sparse = form != A_DENSE;
	w->host_bytes = sparse24_operand_bytes(m, k, mfma_dtype_size(dt), w->sparse);
	w->replaces = old;
	w->done = done;
	w->done_arg = done_arg;
	/* A client's load counts what it holds in flight, as a GEMM's
	 * operands do (limits.max_inflight_mb, and limits.max_memory_mb for
	 * the next request): uncounted, loads queued behind a long GEMM held
	 * their matrices beyond every memory limit. */
	if (r->conn) {
		w->held = load_held_bytes(lw, w);
		if (request_over_inflight(d, r, w->held, "load", err, sizeof(err))) {
			code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
			goto fail;
		}
	}
	code = reserve(d, w, lw->has_device ? lw->device : -1, err, sizeof(err));
	if (code != MFMA__V1__CODE__OK)
		goto fail;
	if (old)
		weights_ref(old);
	w->state = WEIGHT_LOADING;
	w->load_start_ns = mfma_clock_ns();
	w->refs = 1;
	w->req = req;
	w->code = MFMA__V1__CODE__OK;
	w->load = *r;
	request_hold(d, &w->load);
	d->inflight_bytes += w->held;
	w->next = d->weights;
	d->weights = w;
	w->work.data = w;
	int rc = uv_queue_work(d->loop, &w->work, prep_work, prep_done);
	if (rc < 0) {
		snprintf(err, sizeof(err), "cannot queue the weight preparation: %s", uv_strerror(rc));
		fail_load(w, MFMA__V1__CODE__INTERNAL, err);
		prep_done(&w->work, 0);
	}
	return;
fail:
	free(w);
	if (done)
		done(d, done_arg, code, err);
	reply_status(d, r, code, "%s", err);
	mfma__v1__request__free_unpacked(req, NULL);
}

void weights_handle_load(struct daemon *d, const struct request *r, Mfma__V1__Request *req)
{
	start_load(d, r, req, NULL, NULL);
}

void weights_load_internal(struct daemon *d, Mfma__V1__Request *req, weights_done_fn done,
			   void *arg)
{
	struct request r;
	request_init(&r, NULL, 0, mfma_clock_ns(), STATS_LOAD);
	start_load(d, &r, req, done, arg);
}

bool weights_unload_internal(struct daemon *d, const char *name)
{
	struct weight *w = weights_find(d, name);
	if (!w)
		return false;
	log_weight(d, "weight '%s' unloaded", w->name);
	retire(d, w);
	return true;
}

void weights_handle_unload(struct daemon *d, const struct request *r, Mfma__V1__Request *req)
{
	const char *name = req->unload_weight->name;
	char err[512];
	struct weight *w = name ? weights_find(d, name) : NULL;
	if (validate_weight_name(name, err, sizeof(err)) < 0) {
		reply_status(d, r, MFMA__V1__CODE__INVALID_ARGUMENT, "%s", err);
	} else if (is_declared(d, name)) {
		reply_status(d, r, MFMA__V1__CODE__INVALID_ARGUMENT,
			     "weight '%s' is declared in the daemon's configuration (weights.declare): "
			     "remove the declaration and reload the daemon (SIGHUP) to unload it", name);
	} else if (w && find_any(d, name, WEIGHT_LOADING)) {
		/* Unloading the old version would not stop the new one: the
		 * name would be back, with a success said to the unload. */
		reply_status(d, r, MFMA__V1__CODE__UNAVAILABLE,
			     "weight '%s' is being replaced (a load with replace is under way): "
			     "unload it once that load is answered", name);
	} else if (w) {
		log_weight(d, "weight '%s' unloaded", w->name);
		char dir[400];
		if (wstore_dir(d, dir, sizeof(dir)))
			wstore_remove(dir, w->name);
		w->unload = *r;
		request_hold(d, &w->unload);
		w->unload_pending = true;
		retire(d, w);
	} else if (find_any(d, name, WEIGHT_LOADING)) {
		reply_status(d, r, MFMA__V1__CODE__UNAVAILABLE, "weight '%s' is still loading", name);
	} else {
		/* A stored weight that was not restored (over the budget now,
		 * its device gone) is not loaded, but its file would be read
		 * again at every start: an unload of the name removes it. */
		char dir[400];
		if (wstore_dir(d, dir, sizeof(dir)) && wstore_remove(dir, name)) {
			log_weight(d, "weight '%s' was not loaded: its stored file removed", name);
			reply_status(d, r, MFMA__V1__CODE__OK, "%s", "");
		} else {
			reply_status(d, r, MFMA__V1__CODE__NOT_FOUND, "weight '%s' is not loaded",
				     name);
		}
	}
	mfma__v1__request__free_unpacked(req, NULL);
}

void weights_destroy(struct daemon *d)
{
	/* Loading weights finish on their own (their jobs hold them). */
	struct weight *w = d->weights;
	while (w) {
		struct weight *next = w->next;
		if (w->state == WEIGHT_READY)
			retire(d, w);
		w = next;
	}
}

/* ---- restoring the stored weights at start ---- */

Mfma__V1__Request *weights_load_request(const char *name, uint32_t rows, uint32_t cols,
					enum mfma_dtype t, void *values, size_t values_len, void *meta,
					size_t meta_len)
{
	Mfma__V1__Request *req = calloc(1, sizeof(*req));
	Mfma__V1__LoadWeight *lw = calloc(1, sizeof(*lw));
	Mfma__V1__Operand *op = calloc(1, sizeof(*op));
	Mfma__V1__Matrix *dense = meta ? NULL : calloc(1, sizeof(*dense));
	Mfma__V1__Sparse24 *sp = meta ? calloc(1, sizeof(*sp)) : NULL;
	char *copy = strdup(name);
	if (!req || !lw || !op || (!dense && !sp) || !copy) {
		free(req);
		free(lw);
		free(op);
		free(dense);
		free(sp);
		free(copy);
		return NULL;
	}
	mfma__v1__request__init(req);
	mfma__v1__load_weight__init(lw);
	mfma__v1__operand__init(op);
	if (sp) {
		mfma__v1__sparse24__init(sp);
		sp->has_rows = sp->has_cols = sp->has_dtype = sp->has_values = sp->has_meta = 1;
		sp->rows = rows;
		sp->cols = cols;
		sp->dtype = (Mfma__V1__DType)t;
		sp->values = (ProtobufCBinaryData){ values_len, values };
		sp->meta = (ProtobufCBinaryData){ meta_len, meta };
		op->kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
		op->sparse = sp;
	} else {
		mfma__v1__matrix__init(dense);
		dense->has_rows = dense->has_cols = dense->has_dtype = dense->has_data = 1;
		dense->rows = rows;
		dense->cols = cols;
		dense->dtype = (Mfma__V1__DType)t;
		dense->data = (ProtobufCBinaryData){ values_len, values };
		op->kind_case = MFMA__V1__OPERAND__KIND_DENSE;
		op->dense = dense;
	}
	lw->name = copy;
	lw->a = op;
	req->body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
	req->load_weight = lw;
	return req;
}

struct restore {
	struct daemon *d;
	char names[64][128];
	int asked;
};

/* A stored weight's load ended: why it failed, at warning level (a load
 * with no client is otherwise answered to no one, logged at debug).  arg:
 * its name, or NULL past the names kept. */
static void restored(struct daemon *d, void *arg, int code, const char *msg)
{
	(void)d;
	if (code != MFMA__V1__CODE__OK)
		log_warn("stored weight '%s' could not be loaded again: %s",
			 arg ? (const char *)arg : "(one of many)", msg);
}

static bool any_loading(const struct daemon *d)
{
	for (const struct weight *w = d->weights; w; w = w->next)
		if (w->state == WEIGHT_LOADING)
			return true;
	return false;
}

/* One stored weight: loaded as if a client had sent it, and resident (or
 * failed) before the next file is read, so that restoring holds one
 * weight's copies at a time, not every file's at once. */
static int restore_one(void *arg, struct wstore_weight *w)
{
	struct restore *ctx = arg;
	if (ctx->d->stopping)
		return 1; /* a SIGTERM while starting: no more */
	if (is_declared(ctx->d, w->name)) {
		char dir[400];
		log_notice("stored weight '%s' is also declared in weights.declare: the declaration "
			   "wins, the stored copy is removed", w->name);
		if (wstore_dir(ctx->d, dir, sizeof(dir)))
			wstore_remove(dir, w->name);
		return 0;
	}
	/* The request takes the file's buffers: the weight is held once while
	 * it loads, not again as a packed and an unpacked request. */
	Mfma__V1__Request *req = weights_load_request(w->name, w->m, w->k, w->dtype, w->values,
						      w->values_bytes, w->sparse ? w->meta : NULL,
						      w->meta_bytes);
	if (!req)
		return -ENOMEM;
	/* Where the client put it: on every device, a weight loaded onto one
	 * takes the room of the others' (and may not fit beside them). */
	if (w->device >= 0) {
		req->load_weight->has_device = 1;
		req->load_weight->device = w->device;
	}
	w->values = NULL;
	if (w->sparse)
		w->meta = NULL;
	char *name = NULL;
	if (ctx->asked < 64) {
		name = ctx->names[ctx->asked++];
		snprintf(name, sizeof(ctx->names[0]), "%s", w->name);
	}
	weights_load_internal(ctx->d, req, restored, name);
	while (any_loading(ctx->d))
		uv_run(ctx->d->loop, UV_RUN_ONCE);
	return 0;
}

int weights_restore(struct daemon *d)
{
	char dir[400];
	if (!wstore_dir(d, dir, sizeof(dir)))
		return 0;
	struct restore ctx = { .d = d, .asked = 0 };
	uint64_t max_budget = 0;
	for (int i = 0; i < d->ndev; i++)
		if (d->dev[i].budget > max_budget)
			max_budget = d->dev[i].budget;
	wstore_each(dir, max_budget, restore_one, &ctx);
	int asked = ctx.asked;
	char (*names)[128] = ctx.names;
	/* Before READY=1 and before the listeners: a client never sees a
	 * weight it loaded before the restart missing. */
	while (any_loading(d))
		uv_run(d->loop, UV_RUN_ONCE);
	int back = 0;
	for (int i = 0; i < asked; i++)
		back += weights_find(d, names[i]) != NULL;
	if (asked)
		log_notice("restored %d of %d stored weight(s) from %s", back, asked, dir);
	return back;
}
