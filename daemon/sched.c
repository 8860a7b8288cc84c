/* Devices and their workers: one thread per device owns the device's
 * backend context; a priority queue (priority, then arrival order) feeds
 * it; finished jobs go to one completion list that the loop drains on
 * each uv_async wake (uv_async_send coalesces, so the loop takes the
 * whole list every time). */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "log.h"
#include "frame.h"
#include "sparse24.h"

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void job_free(struct job *j)
{
	if (!j)
		return;
	if (j->req)
		mfma__v1__request__free_unpacked(j->req, NULL);
	free(j->prep_values);
	free(j->prep_meta);
	free(j->d);
	free(j->frame);
	free(j);
}

static bool job_before(const struct job *a, const struct job *b)
{
	return a->prio != b->prio ? a->prio < b->prio : a->seq < b->seq;
}

static int heap_push(struct device *v, struct job *j)
{
	if (v->heap_len == v->heap_cap) {
		size_t ncap = v->heap_cap ? v->heap_cap * 2 : 64;
		struct job **nh = realloc(v->heap, ncap * sizeof(*nh));
		if (!nh)
			return -ENOMEM;
		v->heap = nh;
		v->heap_cap = ncap;
	}
	size_t i = v->heap_len++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!job_before(j, v->heap[p]))
			break;
		v->heap[i] = v->heap[p];
		i = p;
	}
	v->heap[i] = j;
	return 0;
}

static struct job *heap_pop(struct device *v)
{
	if (v->heap_len == 0)
		return NULL;
	struct job *top = v->heap[0];
	struct job *last = v->heap[--v->heap_len];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const struct job *best = last;
		if (l < v->heap_len && job_before(v->heap[l], best)) {
			m = l;
			best = v->heap[l];
		}
		if (r < v->heap_len && job_before(v->heap[r], best))
			m = r;
		if (m == i)
			break;
		v->heap[i] = v->heap[m];
		i = m;
	}
	if (v->heap_len > 0)
		v->heap[i] = last;
	return top;
}

void sched_complete(struct daemon *d, struct job *j)
{
	pthread_mutex_lock(&d->done_mu);
	j->next = d->done;
	d->done = j;
	pthread_mutex_unlock(&d->done_mu);
	uv_async_send(&d->done_async);
}

static void fail_job(struct job *j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_job(struct job *j, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(j->msg, sizeof(j->msg), fmt, ap);
	va_end(ap);
	j->code = code;
}

/* Turns a dense or wire-sparse A into what the backend takes, on the
 * worker: the O(M*K) content checks live here (see validate.h). */
static int prepare_a(struct job *j)
{
	struct mfma_gemm *g = &j->plan.g;
	size_t row, grp;
	int rc;
	if (j->plan.a_form == A_SPARSE) {
		rc = sparse24_meta_check(g->a_meta, g->m, g->k, &row, &grp);
		if (rc < 0) {
			unsigned nib = sparse24_nibble(g->a_meta + row * sparse24_meta_words(g->k), grp);
			fail_job(j, MFMA__V1__CODE__INVALID_ARGUMENT,
				 "a.sparse.meta: row %zu group %zu has index nibble 0x%x, which is not "
				 "an ordered pair i0 < i1",
				 row, grp, nib);
			return -EINVAL;
		}
		return 0;
	}
	if (j->plan.a_form != A_DENSE_CHECK && j->plan.a_form != A_DENSE_PRUNE)
		return 0;
	size_t es = mfma_dtype_size(g->in_dtype);
	j->prep_values = malloc((size_t)g->m * (g->k / 2) * es);
	j->prep_meta = malloc((size_t)g->m * sparse24_meta_words(g->k) * 4);
	if (!j->prep_values || !j->prep_meta) {
		fail_job(j, MFMA__V1__CODE__RESOURCE_EXHAUSTED,
			 "out of host memory compressing a %ux%u A", g->m, g->k);
		return -ENOMEM;
	}
	if (j->plan.a_form == A_DENSE_CHECK) {
		rc = sparse24_compress(g->a, g->in_dtype, g->m, g->k, j->prep_values, j->prep_meta, &row,
				       &grp);
		if (rc < 0) {
			fail_job(j, MFMA__V1__CODE__INVALID_ARGUMENT,
				 "a is not 2:4 (VALIDATE_24): row %zu, columns %zu..%zu have more than "
				 "two non-zeros",
				 row, grp * 4, grp * 4 + 3);
			return rc;
		}
	} else {
		sparse24_prune(g->a, g->in_dtype, g->m, g->k, j->prep_values, j->prep_meta);
	}
	g->a = j->prep_values;
	g->a_meta = j->prep_meta;
	g->a_sparse = true;
	return 0;
}

/* Encodes the answer here on the worker, so that copying a large result
 * into its frame costs this device's thread, not the loop every
 * connection shares.  The loop only writes the frame. */
static void pack_gemm_answer(struct device *v, struct job *j)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	Mfma__V1__GemmResult gr = MFMA__V1__GEMM_RESULT__INIT;
	Mfma__V1__Matrix dm = MFMA__V1__MATRIX__INIT;
	Mfma__V1__Timing tm = MFMA__V1__TIMING__INIT;
	Mfma__V1__DeviceRef dr = MFMA__V1__DEVICE_REF__INIT;
	dm.has_rows = dm.has_cols = dm.has_dtype = dm.has_data = 1;
	dm.rows = j->plan.g.m;
	dm.cols = j->plan.g.n;
	dm.dtype = (Mfma__V1__DType)j->plan.g.out_dtype;
	dm.data.len = j->plan.d_bytes;
	dm.data.data = j->d;
	j->queue_ns = j->start_ns - j->arrival_ns - j->decode_ns;
	j->total_ns = now_ns() - j->arrival_ns;
	tm.has_queue_ns = tm.has_h2d_ns = tm.has_kernel_ns = tm.has_d2h_ns = tm.has_total_ns = 1;
	tm.has_prep_ns = 1;
	tm.queue_ns = j->queue_ns;
	tm.h2d_ns = j->t.h2d_ns;
	tm.kernel_ns = j->t.kernel_ns;
	tm.d2h_ns = j->t.d2h_ns;
	tm.total_ns = j->total_ns;
	tm.prep_ns = j->decode_ns + j->prep_ns;
	dr.has_index = 1;
	dr.index = (uint32_t)v->index;
	dr.backend = (char *)v->ops->name;
	dr.arch = v->info.arch;
	gr.d = &dm;
	gr.timing = &tm;
	gr.device = &dr;
	gr.variant = (char *)(j->t.variant ? j->t.variant : "");
	st.has_code = 1;
	st.code = MFMA__V1__CODE__OK;
	resp.has_id = 1;
	resp.id = j->id;
	resp.status = &st;
	resp.body_case = MFMA__V1__RESPONSE__BODY_GEMM;
	resp.gemm = &gr;
	size_t n = mfma__v1__response__get_packed_size(&resp);
	j->frame = n <= UINT32_MAX ? malloc(FRAME_HEADER_SIZE + n) : NULL;
	if (!j->frame) {
		fail_job(j, MFMA__V1__CODE__RESOURCE_EXHAUSTED,
			 "out of host memory for a %zu-byte answer", n);
		return;
	}
	frame_header_put(j->frame, (uint32_t)n);
	mfma__v1__response__pack(&resp, j->frame + FRAME_HEADER_SIZE);
	j->frame_len = FRAME_HEADER_SIZE + n;
	/* The result lives in the frame now. */
	free(j->d);
	j->d = NULL;
}

static void run_gemm(struct device *v, struct job *j)
{
	if (j->deadline_ns && j->start_ns > j->deadline_ns) {
		fail_job(j, MFMA__V1__CODE__DEADLINE_EXCEEDED,
			 "timeout of %" PRIu64 " us passed while queued (waited %" PRIu64 " us)",
			 (j->deadline_ns - j->arrival_ns) / 1000, (j->start_ns - j->arrival_ns) / 1000);
		return;
	}
	uint64_t t0 = now_ns();
	int rc = prepare_a(j);
	j->prep_ns = now_ns() - t0;
	if (rc < 0)
		return;
	j->d = malloc(j->plan.d_bytes ? j->plan.d_bytes : 1);
	if (!j->d) {
		fail_job(j, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of host memory for a %zu-byte result",
			 j->plan.d_bytes);
		return;
	}
	j->plan.g.d = j->d;
	void *handle = NULL;
	if (j->weight) {
		handle = j->weight->handle[v->index];
		j->plan.g.a_sparse = j->weight->sparse;
	}
	char err[400] = "";
	rc = v->ops->gemm(v->bdev, &j->plan.g, handle, &j->t, err, sizeof(err));
	if (rc < 0) {
		fail_job(j, MFMA__V1__CODE__INTERNAL, "device %d (%s %s): %s", v->index, v->ops->name,
			 v->info.arch, err[0] ? err : strerror(-rc));
		return;
	}
	j->code = MFMA__V1__CODE__OK;
	pack_gemm_answer(v, j);
}

static void run_weight_load(struct device *v, struct job *j)
{
	struct weight *w = j->weight;
	struct mfma_weight_host h = {
		.m = w->m, .k = w->k, .dtype = w->dtype, .sparse = w->sparse,
		.a = w->values, .meta = w->meta,
	};
	char err[400] = "";
	void *handle = NULL;
	uint64_t dev_bytes = 0;
	int rc = v->ops->weight_load(v->bdev, &h, &handle, &dev_bytes, err, sizeof(err));
	if (rc < 0) {
		fail_job(j, rc == -ENOMEM ? MFMA__V1__CODE__RESOURCE_EXHAUSTED : MFMA__V1__CODE__INTERNAL,
			 "device %d (%s %s): %s", v->index, v->ops->name, v->info.arch,
			 err[0] ? err : strerror(-rc));
		return;
	}
	/* Only this device's worker writes this slot; the loop reads it after
	 * the completion, which the completion list's mutex orders. */
	w->handle[v->index] = handle;
	j->code = MFMA__V1__CODE__OK;
}

static void *worker_main(void *arg)
{
	struct device *v = arg;
	char err[256] = "";
	int rc = v->ops->open(v->bindex, &(struct backend_config){
					       .cpu_threads = v->d->cfg.cpu_threads,
					       .cpu_devices = v->d->cfg.cpu_devices,
				       },
			      &v->bdev, err, sizeof(err));
	pthread_mutex_lock(&v->mu);
	v->open_rc = rc < 0 ? rc : 0;
	snprintf(v->open_err, sizeof(v->open_err), "%s", err);
	pthread_cond_broadcast(&v->cv);
	pthread_mutex_unlock(&v->mu);

	for (;;) {
		pthread_mutex_lock(&v->mu);
		while (v->heap_len == 0 && !v->stop)
			pthread_cond_wait(&v->cv, &v->mu);
		struct job *j = heap_pop(v);
		pthread_mutex_unlock(&v->mu);
		if (!j)
			break; /* stop, queue empty */
		STATS_SUB(v->st->queued, 1);
		STATS_ADD(v->st->in_flight, 1);
		j->start_ns = now_ns();
		if (v->open_rc < 0) {
			fail_job(j, MFMA__V1__CODE__UNAVAILABLE, "device %d (%s) failed to start: %s",
				 v->index, v->ops->name, v->open_err);
		} else {
			switch (j->kind) {
			case JOB_GEMM: run_gemm(v, j); break;
			case JOB_WEIGHT_LOAD: run_weight_load(v, j); break;
			case JOB_WEIGHT_FREE:
				v->ops->weight_free(v->bdev, j->weight->handle[v->index]);
				j->code = MFMA__V1__CODE__OK;
				break;
			}
		}
		STATS_SUB(v->st->in_flight, 1);
		if (j->kind == JOB_GEMM) {
			if (j->code == MFMA__V1__CODE__OK) {
				STATS_ADD(v->st->completed, 1);
				STATS_ADD(v->st->kernel_ns, j->t.kernel_ns);
			} else {
				STATS_ADD(v->st->failed, 1);
			}
		}
		sched_complete(v->d, j);
	}
	if (v->bdev)
		v->ops->close(v->bdev);
	v->bdev = NULL;
	return NULL;
}

/* The backends compiled in, in the order devices are numbered. */
static const struct backend_ops *const gpu_backends[] = {
#ifdef MFMAD_HAVE_CUDA
	&backend_cuda,
#endif
#ifdef MFMAD_HAVE_HIP
	&backend_hip,
#endif
	NULL,
};

static enum backend_enable enable_of(const struct mfmad_config *c, const struct backend_ops *b)
{
	if (strcmp(b->name, "hip") == 0)
		return c->hip;
	if (strcmp(b->name, "cuda") == 0)
		return c->cuda;
	return c->cpu;
}

static int add_devices(struct daemon *d, const struct backend_ops *b, int count)
{
	for (int i = 0; i < count; i++) {
		if (d->ndev >= STATS_MAX_DEVICES)
			return 0;
		struct device *v = &d->dev[d->ndev];
		memset(v, 0, sizeof(*v));
		v->d = d;
		v->index = d->ndev;
		v->bindex = i;
		v->ops = b;
		if (b->describe(i, &v->info) < 0)
			snprintf(v->info.name, sizeof(v->info.name), "%s device %d", b->name, i);
		v->st = &d->stats.dev[v->index];
		snprintf(v->st->backend, sizeof(v->st->backend), "%s", b->name);
		snprintf(v->st->arch, sizeof(v->st->arch), "%s", v->info.arch);
		snprintf(v->st->name, sizeof(v->st->name), "%s", v->info.name);
		v->st->mem_total = v->info.mem_total;
		v->budget = d->cfg.weight_budget_bytes ? d->cfg.weight_budget_bytes
						       : v->info.mem_total / 4 * 3;
		d->ndev++;
	}
	return 0;
}

int sched_start(struct daemon *d, char *err, size_t errlen)
{
	struct backend_config bc = { .cpu_threads = d->cfg.cpu_threads, .cpu_devices = d->cfg.cpu_devices };
	d->dev = calloc(STATS_MAX_DEVICES, sizeof(*d->dev));
	if (!d->dev)
		return -ENOMEM;
	int gpus = 0;
	for (const struct backend_ops *const *b = gpu_backends; *b; b++) {
		enum backend_enable en = enable_of(&d->cfg, *b);
		if (en == BACKEND_OFF)
			continue;
		char berr[256] = "";
		int n = (*b)->probe(&bc, berr, sizeof(berr));
		if (n < 0) {
			if (en == BACKEND_ON) {
				snprintf(err, errlen, "%s backend: %s", (*b)->name, berr);
				return n;
			}
			log_warn("%s backend unavailable: %s", (*b)->name, berr);
			continue;
		}
		if (n == 0) {
			if (en == BACKEND_ON) {
				snprintf(err, errlen, "%s backend is enabled but found no device", (*b)->name);
				return -ENODEV;
			}
			log_info("%s backend: no device", (*b)->name);
			continue;
		}
		log_info("%s backend: %d device(s)", (*b)->name, n);
		add_devices(d, *b, n);
		gpus += n;
	}
#ifndef MFMAD_HAVE_HIP
	if (d->cfg.hip == BACKEND_ON) {
		snprintf(err, errlen, "hip.enabled = true but this mfmad was built without the hip backend");
		return -ENOTSUP;
	}
#endif
#ifndef MFMAD_HAVE_CUDA
	if (d->cfg.cuda == BACKEND_ON) {
		snprintf(err, errlen, "cuda.enabled = true but this mfmad was built without the cuda backend");
		return -ENOTSUP;
	}
#endif
	if (d->cfg.cpu == BACKEND_ON || (d->cfg.cpu == BACKEND_AUTO && gpus == 0)) {
		char berr[256] = "";
		int n = backend_cpu.probe(&bc, berr, sizeof(berr));
		if (n < 0) {
			snprintf(err, errlen, "cpu backend: %s", berr);
			return n;
		}
		add_devices(d, &backend_cpu, n);
	}
	if (d->ndev == 0) {
		snprintf(err, errlen, "no device to serve on (cpu.enabled = false and no GPU found)");
		return -ENODEV;
	}
	d->stats.ndevices = d->ndev;
	/* The budget is per device; status and /metrics show the total,
	 * beside the total of weight bytes held on all devices. */
	for (int i = 0; i < d->ndev; i++)
		STATS_ADD(d->stats.weight_budget, d->dev[i].budget);

	for (int i = 0; i < d->ndev; i++) {
		struct device *v = &d->dev[i];
		pthread_mutex_init(&v->mu, NULL);
		pthread_cond_init(&v->cv, NULL);
		v->open_rc = 1;
		if (pthread_create(&v->thread, NULL, worker_main, v) != 0) {
			snprintf(err, errlen, "cannot start the worker thread of device %d", i);
			return -EAGAIN;
		}
		v->started = true;
	}
	/* Wait for every device to open, so READY means the devices are up. */
	int usable = 0;
	for (int i = 0; i < d->ndev; i++) {
		struct device *v = &d->dev[i];
		pthread_mutex_lock(&v->mu);
		while (v->open_rc == 1)
			pthread_cond_wait(&v->cv, &v->mu);
		pthread_mutex_unlock(&v->mu);
		if (v->open_rc < 0)
			log_err("device %d (%s %s) failed to open: %s", i, v->ops->name, v->info.arch,
				v->open_err);
		else
			usable++;
		log_info("device %d: %s %s \"%s\", %" PRIu64 " MiB, weight budget %" PRIu64
			 " MiB, variants: %s",
			 i, v->ops->name, v->info.arch, v->info.name, v->info.mem_total >> 20,
			 v->budget >> 20, v->info.variants[0] ? v->info.variants : "-");
	}
	if (usable == 0) {
		snprintf(err, errlen, "no device could be opened");
		return -ENODEV;
	}
	return 0;
}

void sched_submit(struct daemon *d, struct job *j)
{
	struct device *v = &d->dev[j->dev];
	j->seq = d->seq++;
	STATS_ADD(v->st->queued, 1);
	pthread_mutex_lock(&v->mu);
	int rc = heap_push(v, j);
	if (rc == 0)
		pthread_cond_signal(&v->cv);
	pthread_mutex_unlock(&v->mu);
	if (rc < 0) {
		STATS_SUB(v->st->queued, 1);
		fail_job(j, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory queueing the request");
		sched_complete(d, j);
	}
}

void sched_cancel_queued(struct daemon *d, const char *why)
{
	for (int i = 0; i < d->ndev; i++) {
		struct device *v = &d->dev[i];
		pthread_mutex_lock(&v->mu);
		/* Keep internal jobs (weight frees): they release device memory. */
		size_t keep = 0;
		struct job *cancel = NULL;
		for (size_t k = 0; k < v->heap_len; k++) {
			struct job *j = v->heap[k];
			if (j->kind == JOB_GEMM) {
				j->next = cancel;
				cancel = j;
			} else {
				v->heap[keep++] = j;
			}
		}
		v->heap_len = 0;
		for (size_t k = 0; k < keep; k++)
			heap_push(v, v->heap[k]);
		pthread_mutex_unlock(&v->mu);
		while (cancel) {
			struct job *j = cancel;
			cancel = j->next;
			STATS_SUB(v->st->queued, 1);
			fail_job(j, MFMA__V1__CODE__UNAVAILABLE, "%s", why);
			sched_complete(d, j);
		}
	}
}

int sched_pick(struct daemon *d, const bool *ok)
{
	int best = -1;
	uint64_t best_load = UINT64_MAX;
	/* Ties go round-robin, so idle devices share a trickle of requests. */
	unsigned start = d->pick_rr++;
	for (int n = 0; n < d->ndev; n++) {
		int i = (int)((start + (unsigned)n) % (unsigned)d->ndev);
		struct device *v = &d->dev[i];
		if ((ok && !ok[i]) || v->open_rc < 0)
			continue;
		uint64_t load = STATS_GET(v->st->queued) + STATS_GET(v->st->in_flight);
		if (load < best_load) {
			best = i;
			best_load = load;
		}
	}
	return best;
}

void sched_stop(struct daemon *d)
{
	for (int i = 0; i < d->ndev; i++) {
		struct device *v = &d->dev[i];
		if (!v->started)
			continue;
		pthread_mutex_lock(&v->mu);
		v->stop = true;
		pthread_cond_broadcast(&v->cv);
		pthread_mutex_unlock(&v->mu);
		pthread_join(v->thread, NULL);
		v->started = false;
		pthread_mutex_destroy(&v->mu);
		pthread_cond_destroy(&v->cv);
		free(v->heap);
		v->heap = NULL;
	}
}

void sched_free(struct daemon *d)
{
	free(d->dev);
	d->dev = NULL;
	d->ndev = 0;
}
