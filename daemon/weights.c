/* The resident weight registry (loop thread).  A load is prepared once on
 * the libuv threadpool (validate / prune / compress to the canonical 2:4
 * form), then one job per target device makes it resident there; each
 * backend converts to its own register order in weight_load().  Memory
 * is reserved against the per-device budget before any work starts and
 * released when the device copy is freed. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "sparse24.h"

struct weight *weights_find(struct daemon *d, const char *name)
{
	for (struct weight *w = d->weights; w; w = w->next)
		if (strcmp(w->name, name) == 0)
			return w;
	return NULL;
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

static void release_budget(struct daemon *d, struct weight *w, int dev)
{
	struct device *v = &d->dev[dev];
	v->weight_bytes -= w->bytes;
	STATS_SUB(v->st->weight_bytes, w->bytes);
	STATS_SUB(d->stats.weight_bytes, w->bytes);
}

static void weight_destroy(struct daemon *d, struct weight *w)
{
	if (w->unload_pending) {
		server_reply_status(d, w->unload_conn, w->unload_id, MFMA__V1__CODE__OK, "", STATS_UNLOAD,
				    w->unload_arrival);
		if (w->unload_conn)
			conn_unref(w->unload_conn);
		d->inflight--;
		server_check_stopped(d);
	}
	if (w->req)
		mfma__v1__request__free_unpacked(w->req, NULL);
	/* values/meta point into req unless the prep step allocated them. */
	if (w->form == A_DENSE_CHECK || w->form == A_DENSE_PRUNE) {
		free(w->values);
		free(w->meta);
	}
	free(w);
}

/* Queues a free of the device copy on every device that holds one; the
 * struct goes when the last free completes. */
static void weight_release_devices(struct daemon *d, struct weight *w)
{
	int queued = 0;
	for (int i = 0; i < d->ndev; i++) {
		if (w->resident[i]) {
			struct job *j = calloc(1, sizeof(*j));
			if (!j) {
				/* Cannot queue the free: leak the device copy rather than
				 * free it from the wrong thread. */
				log_err("out of memory freeing weight '%s' on device %d", w->name, i);
				continue;
			}
			j->kind = JOB_WEIGHT_FREE;
			j->weight = w;
			j->dev = i;
			j->prio = 0; /* frees first: they return memory */
			w->pending++;
			queued++;
			sched_submit(d, j);
		} else if (w->target[i]) {
			release_budget(d, w, i);
			w->target[i] = false;
		}
	}
	if (queued == 0)
		weight_destroy(d, w);
}

void weight_unref(struct daemon *d, struct weight *w)
{
	if (--w->refs > 0)
		return;
	weight_release_devices(d, w);
}

void weights_free_done(struct daemon *d, struct job *j)
{
	struct weight *w = j->weight;
	w->resident[j->dev] = false;
	w->target[j->dev] = false;
	release_budget(d, w, j->dev);
	job_free(j);
	if (--w->pending == 0)
		weight_destroy(d, w);
}

void weights_fill_info(const struct daemon *d, const struct weight *w, Mfma__V1__WeightInfo *wi,
		       uint32_t *devbuf)
{
	mfma__v1__weight_info__init(wi);
	wi->name = (char *)w->name;
	wi->has_rows = wi->has_cols = wi->has_dtype = wi->has_sparse = wi->has_bytes = 1;
	wi->rows = w->m;
	wi->cols = w->k;
	wi->dtype = (Mfma__V1__DType)w->dtype;
	wi->sparse = w->sparse;
	wi->bytes = w->bytes;
	size_t n = 0;
	for (int i = 0; i < d->ndev; i++)
		if (w->resident[i])
			devbuf[n++] = (uint32_t)i;
	wi->n_devices = n;
	wi->devices = devbuf;
}

static void finish_load(struct daemon *d, struct weight *w)
{
	struct conn *c = w->conn;
	w->conn = NULL;
	d->inflight--;
	if (w->code != MFMA__V1__CODE__OK) {
		log_debug("load of weight '%s' failed: %s", w->name, w->msg);
		server_reply_status(d, c, w->req_id, w->code, w->msg, STATS_LOAD, w->arrival_ns);
		if (c)
			conn_unref(c);
		unlink_weight(d, w);
		w->state = WEIGHT_DEAD;
		weight_unref(d, w);
		server_check_stopped(d);
		return;
	}
	/* Every device has its own copy now; the host one can go. */
	mfma__v1__request__free_unpacked(w->req, NULL);
	w->req = NULL;
	if (w->form == A_DENSE_CHECK || w->form == A_DENSE_PRUNE) {
		free(w->values);
		free(w->meta);
	}
	w->values = NULL;
	w->meta = NULL;
	w->state = WEIGHT_READY;
	STATS_ADD(d->stats.weights, 1);
	log_info("weight '%s' loaded: %ux%u %s %s, %" PRIu64 " bytes per device", w->name, w->m, w->k,
		 mfma_dtype_name(w->dtype), w->sparse ? "2:4" : "dense", w->bytes);

	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__LoadWeightResult res = MFMA__V1__LOAD_WEIGHT_RESULT__INIT;
	Mfma__V1__WeightInfo wi;
	uint32_t devs[STATS_MAX_DEVICES];
	weights_fill_info(d, w, &wi, devs);
	res.weight = &wi;
	resp.id = w->req_id;
	resp.has_id = 1;
	resp.body_case = MFMA__V1__RESPONSE__BODY_LOAD_WEIGHT;
	resp.load_weight = &res;
	server_reply(d, c, &resp, STATS_LOAD, w->arrival_ns);
	if (c)
		conn_unref(c);
	server_check_stopped(d);
}

void weights_load_done(struct daemon *d, struct job *j)
{
	struct weight *w = j->weight;
	if (j->code == MFMA__V1__CODE__OK) {
		w->resident[j->dev] = true;
	} else {
		if (w->code == MFMA__V1__CODE__OK) {
			w->code = j->code;
			snprintf(w->msg, sizeof(w->msg), "%s", j->msg);
		}
		release_budget(d, w, j->dev);
		w->target[j->dev] = false;
	}
	job_free(j);
	if (--w->pending == 0)
		finish_load(d, w);
}

/* Threadpool: the O(M*K) part of a load. */
static void prep_work(uv_work_t *req)
{
	struct weight *w = req->data;
	const Mfma__V1__Operand *op = w->req->load_weight->a;
	size_t es = mfma_dtype_size(w->dtype);
	size_t row, grp;
	if (w->form == A_SPARSE) {
		w->values = op->sparse->values.data;
		w->meta = (uint32_t *)(void *)op->sparse->meta.data;
		if (sparse24_meta_check(w->meta, w->m, w->k, &row, &grp) < 0) {
			w->code = MFMA__V1__CODE__INVALID_ARGUMENT;
			snprintf(w->msg, sizeof(w->msg),
				 "a.sparse.meta: row %zu group %zu has an index nibble that is not an "
				 "ordered pair i0 < i1",
				 row, grp);
		}
		return;
	}
	if (w->form == A_DENSE) {
		w->values = op->dense->data.data;
		return;
	}
	w->values = malloc((size_t)w->m * (w->k / 2) * es);
	w->meta = malloc((size_t)w->m * sparse24_meta_words(w->k) * 4);
	if (!w->values || !w->meta) {
		w->code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		snprintf(w->msg, sizeof(w->msg), "out of host memory compressing weight '%s'", w->name);
		return;
	}
	if (w->form == A_DENSE_PRUNE) {
		sparse24_prune(op->dense->data.data, w->dtype, w->m, w->k, w->values, w->meta);
	} else if (sparse24_compress(op->dense->data.data, w->dtype, w->m, w->k, w->values, w->meta,
				     &row, &grp) < 0) {
		w->code = MFMA__V1__CODE__INVALID_ARGUMENT;
		snprintf(w->msg, sizeof(w->msg),
			 "a is not 2:4 (VALIDATE_24): row %zu, columns %zu..%zu have more than two "
			 "non-zeros",
			 row, grp * 4, grp * 4 + 3);
	}
}

static void prep_done(uv_work_t *req, int status)
{
	struct weight *w = req->data;
	struct daemon *d = w->work.loop->data;
	if (status < 0 && w->code == MFMA__V1__CODE__OK) {
		w->code = MFMA__V1__CODE__INTERNAL;
		snprintf(w->msg, sizeof(w->msg), "weight preparation failed: %s", uv_strerror(status));
	}
	if (w->code != MFMA__V1__CODE__OK) {
		for (int i = 0; i < d->ndev; i++)
			if (w->target[i]) {
				release_budget(d, w, i);
				w->target[i] = false;
			}
		finish_load(d, w);
		return;
	}
	int n = 0;
	for (int i = 0; i < d->ndev; i++)
		n += w->target[i];
	w->pending = n;
	for (int i = 0; i < d->ndev; i++) {
		if (!w->target[i])
			continue;
		struct job *j = calloc(1, sizeof(*j));
		if (!j) {
			w->code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
			snprintf(w->msg, sizeof(w->msg), "out of memory queueing the load");
			release_budget(d, w, i);
			w->target[i] = false;
			if (--w->pending == 0)
				finish_load(d, w);
			continue;
		}
		j->kind = JOB_WEIGHT_LOAD;
		j->weight = w;
		j->dev = i;
		j->prio = 0;
		j->arrival_ns = w->arrival_ns;
		sched_submit(d, j);
	}
}

void weights_handle_load(struct daemon *d, struct conn *c, Mfma__V1__Request *req, uint64_t arrival)
{
	const Mfma__V1__LoadWeight *lw = req->load_weight;
	char err[512];
	int code = MFMA__V1__CODE__INVALID_ARGUMENT;
	struct validate_limits lim = { .max_dim = d->cfg.max_dim, .max_out_bytes = UINT64_MAX };
	enum a_form form;
	uint32_t m, k;
	enum mfma_dtype dt;
	struct weight *w = NULL;

	if (validate_weight_name(lw->name, err, sizeof(err)) < 0)
		goto fail;
	if (validate_operand(lw->a, &lim, "a", &form, &m, &k, &dt, err, sizeof(err)) < 0)
		goto fail;
	if (dt == MFMA_DT_I32) {
		snprintf(err, sizeof(err), "a.dtype=i32 is not an input type (f32, f16, bf16, i8)");
		goto fail;
	}
	if (lw->has_device && (lw->device < -1 || lw->device >= d->ndev)) {
		snprintf(err, sizeof(err), "device=%d does not exist (devices 0..%d, or -1 for all)",
			 lw->device, d->ndev - 1);
		goto fail;
	}
	struct weight *old = weights_find(d, lw->name);
	if (old) {
		if (!lw->replace) {
			code = MFMA__V1__CODE__ALREADY_EXISTS;
			snprintf(err, sizeof(err), "weight '%s' is already loaded (set replace to swap it)",
				 lw->name);
			goto fail;
		}
		if (old->state != WEIGHT_READY) {
			code = MFMA__V1__CODE__UNAVAILABLE;
			snprintf(err, sizeof(err), "weight '%s' is still loading", lw->name);
			goto fail;
		}
		/* Requests already queued keep the old copy through their reference. */
		unlink_weight(d, old);
		old->state = WEIGHT_DEAD;
		STATS_SUB(d->stats.weights, 1);
		weight_unref(d, old);
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
	size_t es = mfma_dtype_size(dt);
	w->bytes = w->sparse ? (uint64_t)m * (k / 2) * es + (uint64_t)m * sparse24_meta_words(k) * 4
			     : (uint64_t)m * k * es;
	int ntarget = 0;
	for (int i = 0; i < d->ndev; i++) {
		bool want = lw->device < 0 || lw->device == i;
		if (!want || d->dev[i].open_rc < 0 || !backend_runs(&d->dev[i].info, dt, w->sparse))
			continue;
		struct device *v = &d->dev[i];
		if (v->weight_bytes + w->bytes > v->budget) {
			code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
			snprintf(err, sizeof(err),
				 "weight '%s' needs %" PRIu64 " bytes on device %d, which has %" PRIu64
				 " of its %" PRIu64 "-byte weight budget left",
				 w->name, w->bytes, i, v->budget - v->weight_bytes, v->budget);
			goto fail;
		}
		w->target[i] = true;
		ntarget++;
	}
	if (ntarget == 0) {
		code = MFMA__V1__CODE__UNAVAILABLE;
		snprintf(err, sizeof(err), "no usable device runs %s GEMMs with a %s A, so weight '%s' "
			 "has nowhere to go", mfma_dtype_name(dt), w->sparse ? "2:4" : "dense", w->name);
		goto fail;
	}
	for (int i = 0; i < d->ndev; i++) {
		if (!w->target[i])
			continue;
		d->dev[i].weight_bytes += w->bytes;
		STATS_ADD(d->dev[i].st->weight_bytes, w->bytes);
		STATS_ADD(d->stats.weight_bytes, w->bytes);
	}
	w->state = WEIGHT_LOADING;
	w->refs = 1;
	w->req = req;
	w->req_id = req->id;
	w->arrival_ns = arrival;
	w->code = MFMA__V1__CODE__OK;
	w->conn = c;
	if (c)
		conn_ref(c);
	w->next = d->weights;
	d->weights = w;
	d->inflight++;
	w->work.data = w;
	int rc = uv_queue_work(d->loop, &w->work, prep_work, prep_done);
	if (rc < 0) {
		w->code = MFMA__V1__CODE__INTERNAL;
		snprintf(w->msg, sizeof(w->msg), "cannot queue the weight preparation: %s", uv_strerror(rc));
		prep_done(&w->work, 0);
	}
	return;
fail:
	if (w)
		free(w);
	server_reply_status(d, c, req->id, code, err, STATS_LOAD, arrival);
	mfma__v1__request__free_unpacked(req, NULL);
}

void weights_handle_unload(struct daemon *d, struct conn *c, Mfma__V1__Request *req, uint64_t arrival)
{
	const char *name = req->unload_weight->name;
	char err[512];
	struct weight *w = name ? weights_find(d, name) : NULL;
	if (validate_weight_name(name, err, sizeof(err)) < 0) {
		server_reply_status(d, c, req->id, MFMA__V1__CODE__INVALID_ARGUMENT, err, STATS_UNLOAD,
				    arrival);
	} else if (!w) {
		snprintf(err, sizeof(err), "weight '%s' is not loaded", name);
		server_reply_status(d, c, req->id, MFMA__V1__CODE__NOT_FOUND, err, STATS_UNLOAD, arrival);
	} else if (w->state != WEIGHT_READY) {
		snprintf(err, sizeof(err), "weight '%s' is still loading", name);
		server_reply_status(d, c, req->id, MFMA__V1__CODE__UNAVAILABLE, err, STATS_UNLOAD,
				    arrival);
	} else {
		unlink_weight(d, w);
		w->state = WEIGHT_DEAD;
		STATS_SUB(d->stats.weights, 1);
		log_info("weight '%s' unloaded", w->name);
		w->unload_conn = c;
		if (c)
			conn_ref(c);
		w->unload_pending = true;
		w->unload_id = req->id;
		w->unload_arrival = arrival;
		d->inflight++;
		weight_unref(d, w);
	}
	mfma__v1__request__free_unpacked(req, NULL);
}

void weights_destroy(struct daemon *d)
{
	while (d->weights) {
		struct weight *w = d->weights;
		unlink_weight(d, w);
		w->state = WEIGHT_DEAD;
		weight_unref(d, w);
	}
}
