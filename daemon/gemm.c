#include "gemm.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "block_list.h"
#include "conn.h"
#include "devices.h"
#include "frame_arena.h"
#include "log.h"
#include "mfma_clock.h"
#include "operand.h"
#include "regions.h"
#include "scheduler.h"
#include "validate.h"
#include "weights.h"

struct gemm_job {
	struct sched_job sj; /* first: the scheduler hands this back */
	struct request r;
	struct request_msg in;  /* owns the bytes the plan points into (its frame's) */
	struct gemm_plan plan;
	struct weight *weight;  /* with a reference, or NULL */
	/* The regions B, C and D are in, each with a reference, or NULL. */
	struct region *rb, *rc, *rd;
	/* With rd: D's region id and offset for the answer, copied here on
	 * the loop.  On the worker the region and the request's message were
	 * two cache misses a job, most of its time laying out a batch's
	 * answers. */
	uint64_t d_region_id, d_offset;
	struct operand_a a;     /* A as the backend takes it, made on the worker */
	struct answer ans;      /* the answer's frame, D written in place */
	size_t in_bytes;        /* counted against limits.max_inflight_mb */
	/* What the worker found. */
	int code;               /* Mfma__V1__Code */
	char msg[512];
	struct backend_timing t;
	uint64_t decode_ns, prep_ns;
	uint32_t batch_requests, batch_columns; /* the launch it ran in */
	bool launch_head;       /* counts the launch (one job of each) */
	uint8_t *frame;         /* the encoded answer when OK */
	size_t frame_len;
	bool sent;              /* written off the loop (conn_send_direct, conn_send_posted) */
	bool finish_on_post;    /* a batch's answer, finished by the post thread */
	bool later;             /* counted by conn_answer_later until the loop sends it */
	bool answered;          /* out of stats.in_flight (count_answer) */
};

static void job_fail(struct gemm_job *j, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void job_fail(struct gemm_job *j, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(j->msg, sizeof(j->msg), fmt, ap);
	va_end(ap);
	j->code = code;
}

/* The loop thread's freed jobs, reused by the next requests: it makes
 * and frees them in bursts of hundreds (block_list.h). */
static _Thread_local struct block_list jobs_kept;

static struct gemm_job *job_new(void)
{
	struct gemm_job *j = block_list_take(&jobs_kept);
	if (j)
		memset(j, 0, sizeof(*j));
	else
		j = calloc(1, sizeof(*j));
	return j;
}

static void job_release(struct gemm_job *j)
{
	if (!block_list_keep(&jobs_kept, j, BLOCK_LIST_KEPT))
		free(j);
}

static void job_free(struct gemm_job *j)
{
	request_msg_free(&j->in);
	operand_a_free(&j->a);
	answer_free(&j->ans);
	frame_arena_free(j->frame);
	job_release(j);
}

/* Time in the device's queue: from arrival to the worker's start, less an
 * off-loop decode (reported as preparation). */
static uint64_t queue_ns(const struct gemm_job *j)
{
	return j->sj.start_ns - j->r.arrival_ns - j->decode_ns;
}

/* ---- the device's worker ---- */

/* Lays out the answer's frame and points D into it, so the backend writes
 * the result where the answer needs it: in the device's own memory for
 * answer frames when it has some free (its copy lands there directly),
 * else on the heap. */
static bool start_answer(struct device *v, struct gemm_job *j)
{
	const struct mfma_gemm *g = &j->plan.g;
	/* D in a region: the backend writes it there (plan.g.d points into
	 * it already) and the answer only names it. */
	int rc = j->rd ? answer_start_region(&j->ans, j->r.id, g->m, g->n, g->out_dtype,
					     j->d_region_id, j->d_offset)
		       : answer_start(&j->ans, j->r.id, g->m, g->n, g->out_dtype,
				      v->ops->frame_alloc, v->bdev);
	if (rc < 0) {
		job_fail(j, MFMA__V1__CODE__RESOURCE_EXHAUSTED,
			 "out of host memory for a %zu-byte result", j->plan.d_bytes);
		return false;
	}
	if (!j->rd)
		j->plan.g.d = j->ans.frame + j->ans.d_at;
	return true;
}

/* Counts a GEMM answered (its device's and the daemon's counters), on
 * the worker or the post thread that finishes the answer, before it can
 * be sent: the worker or a post thread may write it to the client before
 * the loop hears of the job, and a client that has its answer must find
 * it counted in the status it asks for next.  It leaves the device's
 * in-flight count first, so that no status counts it twice, and the
 * daemon's count of requests not yet answered (mfmad_in_flight_requests),
 * which a client holding every answer must find at zero. */
static void count_answer(struct device *v, struct gemm_job *j, uint64_t total_ns)
{
	struct mfmad_stats *s = &v->d->stats;
	sched_landed(v, &j->sj);
	STATS_ADD(v->st->completed, 1);
	STATS_ADD(v->st->gated, j->t.gated);
	STATS_ADD(v->st->tile_out, j->t.tile_out);
	/* A batch's parts share their launch's times: the device's count
	 * takes them once (the daemon's, per request, below, each time). */
	if (j->launch_head) {
		STATS_ADD(v->st->launch_ns, j->t.launch_ns);
		STATS_ADD(v->st->kernel_ns, j->t.kernel_ns);
	}
	STATS_ADD(s->gemm_queue_ns, queue_ns(j));
	STATS_ADD(s->gemm_h2d_ns, j->t.h2d_ns);
	STATS_ADD(s->gemm_kernel_ns, j->t.kernel_ns);
	STATS_ADD(s->gemm_d2h_ns, j->t.d2h_ns);
	STATS_ADD(s->gemm_total_ns, total_ns);
	STATS_ADD(s->gemm_flops, (uint64_t)mfma_gemm_flops(&j->plan.g));
	/* Counted once the answer is made, not when its frame was laid out:
	 * a batch retried alone lays each frame out twice. */
	if (!j->rd)
		STATS_ADD(s->answer_frames[j->ans.carved ? STATS_FRAME_PINNED : STATS_FRAME_HEAP], 1);
	reply_count_ok(v->d, &j->r);
	if (!j->answered)
		STATS_SUB(s->in_flight, 1);
	j->answered = true;
}

/* Finishes the answer off the loop (on the worker, or for a batch on the
 * post thread), so the loop only writes it.  On the worker the caller
 * counts it to the worker's answers phase. */
static void finish_answer(struct device *v, struct gemm_job *j)
{
	Mfma__V1__Timing tm = MFMA__V1__TIMING__INIT;
	Mfma__V1__DeviceRef dr = MFMA__V1__DEVICE_REF__INIT;
	tm.has_queue_ns = tm.has_h2d_ns = tm.has_kernel_ns = tm.has_d2h_ns = tm.has_total_ns = 1;
	tm.has_prep_ns = 1;
	tm.queue_ns = queue_ns(j);
	tm.h2d_ns = j->t.h2d_ns;
	tm.kernel_ns = j->t.kernel_ns;
	tm.d2h_ns = j->t.d2h_ns;
	tm.total_ns = mfma_clock_ns() - j->r.arrival_ns;
	tm.prep_ns = j->decode_ns + j->prep_ns;
	tm.has_batch_requests = tm.has_batch_columns = 1;
	tm.batch_requests = j->batch_requests;
	tm.batch_columns = j->batch_columns;
	dr.has_index = 1;
	dr.index = (uint32_t)v->index;
	dr.backend = (char *)v->ops->name;
	dr.arch = v->info.arch;
	int rc = answer_finish(&j->ans, &tm, &dr, j->t.variant ? j->t.variant : "");
	if (rc < 0) {
		job_fail(j, MFMA__V1__CODE__RESOURCE_EXHAUSTED,
			 "cannot encode the answer of a %zu-byte result (%d)", j->plan.d_bytes, rc);
		return;
	}
	j->frame_len = j->ans.len;
	j->frame = answer_take(&j->ans);
	count_answer(v, j, tm.total_ns);
	/* Straight to the client from here when nothing is queued ahead of
	 * it, it ran alone and no request waits for this device: the loop
	 * then only releases it, and the client has it a thread wake-up
	 * sooner.  A batch's answers and those made under load go to the
	 * post thread (hand_off), so the worker goes back to the device at
	 * once (on the H200, N=8 x 64 in flight, sending each batch's
	 * answers here cut the rate from 105k to 38-58k requests a second: a
	 * batch empties the queue, so "nothing waits" alone did not keep
	 * them off the worker). */
	if (j->frame && j->r.conn && j->batch_requests == 1 && STATS_GET(v->st->queued) == 0 &&
	    conn_send_direct(j->r.conn, j->frame, j->frame_len)) {
		j->frame = NULL;
		j->sent = true;
	}
}

/* What a launch of n columns on weight w paid for on the serving path
 * (plans, measured choices) and the served trial it ended, counted; a
 * trial's end is logged with each candidate's time. */
static void observe_launch(struct daemon *d, const struct weight *w, uint64_t n,
			   const struct backend_timing *t)
{
	stats_observe_planning(&d->stats, t->plans, t->measures);
	if (!t->trial_end)
		return;
	stats_observe_trial(&d->stats, t->trial_end == BACKEND_TRIAL_CHANGED);
	char rest[256] = "";
	const size_t n_end = t->trial_n < BACKEND_TRIAL_CANDIDATES ? t->trial_n : BACKEND_TRIAL_CANDIDATES;
	for (size_t i = 2, at = 0; i < n_end && at < sizeof(rest); i++) {
		int len = snprintf(rest + at, sizeof(rest) - at, ", then %s (%.1f us)",
				   t->trial_variant[i] ? t->trial_variant[i] : "?", t->trial_median_ns[i] / 1e3);
		at += len > 0 ? (size_t)len : 0;
	}
	log_info("weight '%s': served trial at N=%llu %s %s (median kernel %.1f us) over %s (%.1f us)%s",
		 w ? w->name : "?", (unsigned long long)n,
		 t->trial_end == BACKEND_TRIAL_CHANGED ? "changed the lead to" : "kept",
		 t->trial_variant[0] ? t->trial_variant[0] : "?", t->trial_median_ns[0] / 1e3,
		 t->trial_variant[1] ? t->trial_variant[1] : "?", t->trial_median_ns[1] / 1e3, rest);
}

static void hand_off(struct gemm_job *j);

/* j fails UNAVAILABLE because v takes no work (it failed to open, or lost
 * its context), saying which. */
static void fail_down(struct gemm_job *j, const struct device *v)
{
	char why[600];
	devices_why_down(v, why, sizeof(why));
	job_fail(j, MFMA__V1__CODE__UNAVAILABLE, "%s", why);
}

/* The end of a lone GEMM's launch that returned rc (err its message):
 * its answer made, or its failure; counted to the worker's answers phase
 * where `phases` (not for the loop's start: its time is not the
 * worker's). */
static void lone_done(struct device *v, struct gemm_job *j, int rc, const char *err,
		      bool phases)
{
	if (rc < 0) {
		/* The device is done with the frame (a failed GEMM drains its
		 * stream): its arena space goes back now, not with the job. */
		answer_free(&j->ans);
		if (devices_fault(v, rc, err)) {
			fail_down(j, v);
			return;
		}
		job_fail(j, MFMA__V1__CODE__INTERNAL, "device %d (%s %s): %s", v->index, v->ops->name,
			 v->info.arch, err[0] ? err : strerror(-rc));
		return;
	}
	j->code = MFMA__V1__CODE__OK;
	stats_observe_batch(&v->d->stats, 1);
	int was = phases ? devices_phase(v, STATS_WORKER_ANSWERS) : STATS_WORKER_IDLE;
	finish_answer(v, j);
	if (phases)
		devices_phase(v, was);
}

/* Worker: the end of a lone GEMM the loop left running (launch_one). */
static void gemm_lone_finish(struct device *v, struct sched_job **sjs, size_t n)
{
	(void)n;
	struct gemm_job *j = (struct gemm_job *)sjs[0];
	char err[400] = "";
	int was = devices_phase(v, STATS_WORKER_WAIT);
	int rc = v->ops->gemm_end(v->bdev, &j->t, err, sizeof(err));
	devices_phase(v, was);
	lone_done(v, j, rc, err, true);
	hand_off(j);
}

/* Runs j alone (on the worker, or for sched_run_inline on the loop); or,
 * `start`, starts it on the loop thread (sched_start_inline) only if the
 * backend leaves its launch running (then gemm_lone_finish ends it on the
 * worker), else does nothing and says -EAGAIN in j's status. */
static void launch_one(struct device *v, struct gemm_job *j, bool start)
{
	struct mfma_gemm *g = &j->plan.g;
	j->batch_requests = 1;
	j->batch_columns = g->n;
	j->launch_head = true;
	void *handle = NULL;
	if (j->weight) {
		handle = j->weight->handle[v->index];
		g->a_sparse = j->weight->sparse;
	} else {
		uint64_t t0 = mfma_clock_ns();
		int rc = operand_prepare_a(j->plan.a_form, g->in_dtype, g->m, g->k, g->a, g->a_meta,
					   &j->a, j->msg, sizeof(j->msg));
		j->prep_ns = mfma_clock_ns() - t0;
		if (rc < 0) {
			j->code = rc == -ENOMEM ? MFMA__V1__CODE__RESOURCE_EXHAUSTED
						: MFMA__V1__CODE__INVALID_ARGUMENT;
			return;
		}
		g->a = j->a.values;
		g->a_meta = j->a.meta;
		g->a_sparse = j->a.sparse;
	}
	if (!start_answer(v, j))
		return;
	char err[400] = "";
	j->t.plans = j->t.measures = 0;
	j->t.trial_end = 0;
	j->t.gated = false;
	j->t.tile_out = false;
	/* Otherwise a lone launch is always waited for. */
	j->t.may_leave = j->t.leave_only = start;
	/* The worker's phases are the worker's: the loop's start is not one. */
	int was = start ? STATS_WORKER_IDLE : devices_phase(v, STATS_WORKER_LAUNCH);
	int rc = v->ops->gemm(v->bdev, g, handle, &j->t, err, sizeof(err));
	if (!start)
		devices_phase(v, was);
	if (rc == -EAGAIN && start) {
		answer_free(&j->ans);
		j->sj.status = -EAGAIN;
		return;
	}
	observe_launch(v->d, j->weight, g->n, &j->t);
	if (rc == 0 && j->t.left) {
		j->sj.finish = gemm_lone_finish;
		return;
	}
	lone_done(v, j, rc, err, !start);
}

static void run_one(struct device *v, struct sched_job *sj)
{
	launch_one(v, (struct gemm_job *)sj, false);
}

static void gemm_start(struct device *v, struct sched_job *sj)
{
	launch_one(v, (struct gemm_job *)sj, true);
}

/* Post thread: writes the answers of n jobs on one connection, in
 * order, with one write for those it can (what the socket does not take,
 * or a TLS connection's, is left to the loop). */
static void send_posted(struct gemm_job **js, size_t n)
{
	if (!n)
		return;
	uint8_t *frames[SCHED_POST_RUN];
	size_t lens[SCHED_POST_RUN];
	for (size_t i = 0; i < n; i++) {
		frames[i] = js[i]->frame;
		lens[i] = js[i]->frame_len;
	}
	size_t taken = conn_send_posted(js[0]->r.conn, frames, lens, n);
	for (size_t i = 0; i < n; i++) {
		if (i < taken) {
			js[i]->frame = NULL;
			js[i]->sent = true;
		} else {
			js[i]->later = true;
		}
	}
}

/* Post thread: the answers to one connection (the jobs' post key) that a
 * device's runs finished, in order; a batch's answers are finished here
 * first (their encoding and counting: on the H200 a batch's answers were
 * a fifth of the worker's time at N=1).  The worker posted them
 * (hand_off, finish_batch), so no direct send overtakes them meanwhile.
 * One whose encoding failed goes to the loop, which answers the failure,
 * after those before it. */
static void gemm_post(struct device *v, struct sched_job **sjs, size_t n)
{
	_Static_assert(SCHED_POST_RUN <= CONN_SEND_MANY, "a post run fits one write");
	struct gemm_job *ready[SCHED_POST_RUN];
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct gemm_job *j = (struct gemm_job *)sjs[i];
		if (j->finish_on_post)
			finish_answer(v, j);
		if (j->code == MFMA__V1__CODE__OK && j->frame) {
			ready[k++] = j;
			continue;
		}
		send_posted(ready, k);
		k = 0;
		conn_posted_later(j->r.conn);
		j->later = true;
	}
	send_posted(ready, k);
}

/* The worker is done with j.  An answer it did not send itself goes to
 * the device's post thread, which writes it while the worker goes back to
 * the device (a batch's 30-odd answers, written here or on the loop, held
 * the device or bounded the rate: bench/RESULTS.md); a failure's answer
 * the loop makes.  Until one of them has sent it, no later answer on the
 * connection goes out directly ahead of it. */
static void hand_off(struct gemm_job *j)
{
	if (j->sent || !j->r.conn)
		return;
	if (j->code == MFMA__V1__CODE__OK && j->frame) {
		conn_answer_posted(j->r.conn);
		j->sj.post = gemm_post;
		j->finish_on_post = false;
		return;
	}
	conn_answer_later(j->r.conn);
	j->later = true;
}

static void gemm_work(struct device *v, struct sched_job *sj)
{
	run_one(v, sj);
	hand_off((struct gemm_job *)sj);
}

/* A batched launch failed (at its start or its end): each of its GEMMs
 * runs alone, its answer made afresh. */
static void retry_alone(struct device *v, struct sched_job **sjs, size_t n)
{
	STATS_ADD(v->d->stats.batches_retried, 1);
	for (size_t i = 0; i < n; i++) {
		struct gemm_job *j = (struct gemm_job *)sjs[i];
		answer_free(&j->ans);
		j->code = MFMA__V1__CODE__OK;
		gemm_work(v, sjs[i]);
	}
}

/* A batched launch done, with times t: each GEMM's answer handed to the
 * post thread to finish and write (gemm_post), or finished here
 * when it has no connection. */
static void finish_batch(struct device *v, struct sched_job **sjs, size_t n,
			 const struct backend_timing *t)
{
	uint64_t cols = 0;
	for (size_t i = 0; i < n; i++)
		cols += ((struct gemm_job *)sjs[i])->plan.g.n;
	stats_observe_batch(&v->d->stats, n);
	int was = devices_phase(v, STATS_WORKER_ANSWERS);
	for (size_t i = 0; i < n; i++) {
		struct gemm_job *j = (struct gemm_job *)sjs[i];
		j->t = *t;
		j->batch_requests = (uint32_t)n;
		j->batch_columns = (uint32_t)cols;
		j->launch_head = i == 0;
		j->code = MFMA__V1__CODE__OK;
		if (j->r.conn) {
			conn_answer_posted(j->r.conn);
			j->sj.post = gemm_post;
			j->finish_on_post = true;
			continue;
		}
		finish_answer(v, j);
		hand_off(j);
	}
	devices_phase(v, was);
}

static void gemm_batch_finish(struct device *v, struct sched_job **sjs, size_t n);

/* n >= 2 GEMMs on one resident weight with the same dtypes and scalars
 * (their batch keys are equal): one launch over their columns side by
 * side, each with its own D, timing and answer.  When the launch fails,
 * each request is tried alone, so one bad request fails only itself. */
static void gemm_batch_work(struct device *v, struct sched_job **sjs, size_t n)
{
	struct gemm_job *head = (struct gemm_job *)sjs[0];
	struct mfma_gemm_part *parts = calloc(n, sizeof(*parts));
	struct mfma_gemm g = head->plan.g;
	uint64_t cols = 0;
	bool ok = parts != NULL;
	for (size_t i = 0; i < n && ok; i++) {
		struct gemm_job *j = (struct gemm_job *)sjs[i];
		ok = start_answer(v, j);
		if (ok) {
			parts[i] = (struct mfma_gemm_part){ .b = j->plan.g.b, .c = j->plan.g.c,
							    .d = j->plan.g.d, .n = j->plan.g.n };
			cols += j->plan.g.n;
		}
	}
	char err[400] = "";
	int rc = -ENOMEM;
	/* The launch may be left running when the worker can start the next
	 * batch behind it (batching.overlap, a backend with gemm_end). */
	struct backend_timing t = { .may_leave = v->ops->gemm_end && sched_overlap(v->d) };
	if (ok && cols <= UINT32_MAX) {
		g.n = (uint32_t)cols;
		g.nparts = (uint32_t)n;
		g.parts = parts;
		g.b = g.c = g.d = NULL;
		g.a_sparse = head->weight->sparse;
		int was = devices_phase(v, STATS_WORKER_LAUNCH);
		rc = v->ops->gemm(v->bdev, &g, head->weight->handle[v->index], &t, err, sizeof(err));
		devices_phase(v, was);
		observe_launch(v->d, head->weight, cols, &t);
		STATS_ADD(v->st->gather_ns, t.gather_ns);
		STATS_ADD(v->st->split_ns, t.split_ns);
	}
	free(parts);
	if (rc < 0) {
		retry_alone(v, sjs, n);
		return;
	}
	if (t.left) {
		/* The worker finishes it once the next batch has started. */
		STATS_ADD(v->d->stats.batches_left, 1);
		head->t = t;
		sjs[0]->finish = gemm_batch_finish;
		return;
	}
	finish_batch(v, sjs, n, &t);
}

/* The launch left running by gemm_batch_work: its end, then the answers. */
static void gemm_batch_finish(struct device *v, struct sched_job **sjs, size_t n)
{
	struct gemm_job *head = (struct gemm_job *)sjs[0];
	struct backend_timing t = head->t;
	char err[400] = "";
	int was = devices_phase(v, STATS_WORKER_WAIT);
	int rc = v->ops->gemm_end(v->bdev, &t, err, sizeof(err));
	devices_phase(v, was);
	if (rc < 0) {
		retry_alone(v, sjs, n);
		return;
	}
	finish_batch(v, sjs, n, &t);
}

/* ---- the loop ---- */

static void release_regions(struct daemon *d, struct gemm_job *j)
{
	struct region *rs[] = { j->rb, j->rc, j->rd };
	for (size_t i = 0; i < 3; i++)
		if (rs[i])
			regions_unref(d, rs[i]);
	j->rb = j->rc = j->rd = NULL;
}

/* Points B, C and D at the regions the request names, each checked
 * against its region and holding a reference; D may overlap neither B
 * nor C (the kernels read those while they write D). */
static int use_regions(struct conn *c, struct gemm_job *j, char *err, size_t errlen)
{
	struct gemm_plan *pl = &j->plan;
	void *p;
	int rc = 0;
	if (pl->b_region && (rc = regions_use(c, pl->b_region, pl->b_bytes, "b", &j->rb, &p, err,
					      errlen)) == 0)
		pl->g.b = p;
	if (rc == 0 && pl->c_region &&
	    (rc = regions_use(c, pl->c_region, pl->c_bytes, "c", &j->rc, &p, err, errlen)) == 0)
		pl->g.c = p;
	if (rc == 0 && pl->d_region &&
	    (rc = regions_use(c, pl->d_region, pl->d_bytes, "d", &j->rd, &p, err, errlen)) == 0) {
		pl->g.d = p;
		j->d_region_id = regions_id(j->rd);
		j->d_offset = pl->d_region->offset;
	}
	if (rc == 0 && j->rd) {
		const bool over_b = regions_overlap(j->rd, pl->g.d, pl->d_bytes, j->rb, pl->g.b,
						    pl->b_bytes);
		if (over_b ||
		    regions_overlap(j->rd, pl->g.d, pl->d_bytes, j->rc, pl->g.c, pl->c_bytes)) {
			const struct region *in = over_b ? j->rb : j->rc;
			snprintf(err, errlen,
				 "d (region %" PRIu64 ", offset %" PRIu64 ", %zu bytes) overlaps %s "
				 "(region %" PRIu64 "%s); the result must go to bytes the inputs do "
				 "not use",
				 j->d_region_id, j->d_offset, pl->d_bytes,
				 over_b ? "b" : "c", regions_id(in),
				 in != j->rd ? ", the same memfd" : "");
			rc = -EINVAL;
		}
	}
	return rc;
}

static void gemm_done(struct daemon *d, struct sched_job *sj, int status)
{
	struct gemm_job *j = (struct gemm_job *)sj;
	struct device *v = &d->dev[sj->dev];
	switch (status) {
	case 0:
		break;
	case -ETIMEDOUT:
		job_fail(j, MFMA__V1__CODE__DEADLINE_EXCEEDED,
			 "timeout of %" PRIu64 " us passed while queued (waited %" PRIu64 " us)",
			 (sj->deadline_ns - j->r.arrival_ns) / 1000,
			 (sj->start_ns - j->r.arrival_ns) / 1000);
		break;
	case -ECANCELED:
		job_fail(j, MFMA__V1__CODE__UNAVAILABLE,
			 "shutting down: the grace period ended before this request ran");
		break;
	case -ENODEV:
		fail_down(j, v);
		break;
	default:
		job_fail(j, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory queueing the request");
		break;
	}
	if (j->code == MFMA__V1__CODE__OK) {
		if (j->weight) {
			j->weight->requests++;
			j->weight->launches += j->launch_head;
		}
		/* Counted on the worker or post thread already (count_answer). */
		if (j->sent)
			reply_sent(&j->r);
		else
			reply_encoded(&j->r, j->frame, j->frame_len);
		j->frame = NULL;
	} else {
		/* Failures in the device's queue (a deadline passed, cancelled
		 * at shutdown) count against it too, as they always have; the
		 * metric's help and mfmad(8) say so. */
		STATS_ADD(v->st->failed, 1);
		reply_status(d, &j->r, j->code, "%s", j->msg);
	}
	/* Queued now: later answers may go out directly again. */
	if (j->later)
		conn_answer_sent(j->r.conn);
	/* Written already: admission stops leaving it out with its release. */
	if (j->sent)
		conn_early_released(j->r.conn);
	d->inflight_bytes -= j->in_bytes;
	if (!j->answered)
		STATS_SUB(d->stats.in_flight, 1);
	if (j->weight)
		weights_unref(d, j->weight);
	release_regions(d, j);
	request_release(d, &j->r);
	job_free(j);
}

/* GEMMs on the same resident weight with the same output dtype and the
 * same alpha and beta (so with C exactly when the others have it) can
 * share a launch. */
static void set_batch_key(struct gemm_job *j)
{
	const struct mfma_gemm *g = &j->plan.g;
	uint32_t alpha, beta;
	memcpy(&alpha, &g->alpha, sizeof(alpha));
	memcpy(&beta, &g->beta, sizeof(beta));
	j->sj.batch = (struct sched_batch_key){ .p = j->weight, .a = (uint64_t)g->out_dtype,
						.b = (uint64_t)alpha << 32 | beta };
	j->sj.batch_cost = g->n;
	j->sj.batch_work = gemm_batch_work;
}

/* The device for a validated GEMM, or -1 with the refusal in code/err. */
static int choose_device(struct daemon *d, const Mfma__V1__Gemm *g, const struct weight *w,
			 const struct gemm_plan *plan, int *code, char *err, size_t errlen)
{
	enum mfma_dtype in = plan->g.in_dtype;
	bool sparse = plan->g.a_sparse;
	bool ok[STATS_MAX_DEVICES];
	for (int i = 0; i < d->ndev; i++)
		ok[i] = (!w || w->resident[i]) && backend_runs(&d->dev[i].info, in, sparse);
	if (!devices_any_runs(d, in, sparse)) {
		*code = MFMA__V1__CODE__UNAVAILABLE;
		snprintf(err, errlen,
			 "no device here runs %s GEMMs with a %s A (see mfmactl status for each "
			 "device's variants; cpu.enabled = true adds the CPU, which runs every dtype)",
			 mfma_dtype_name(in), sparse ? "2:4" : "dense");
		return -1;
	}
	if (g->has_device && g->device >= 0) {
		*code = MFMA__V1__CODE__INVALID_ARGUMENT;
		if (g->device >= d->ndev) {
			snprintf(err, errlen, "device=%d does not exist (devices 0..%d, or -1 for any)",
				 g->device, d->ndev - 1);
			return -1;
		}
		if (ok[g->device] && !devices_up(&d->dev[g->device])) {
			*code = MFMA__V1__CODE__UNAVAILABLE;
			devices_why_down(&d->dev[g->device], err, errlen);
			return -1;
		}
		if (!ok[g->device]) {
			const struct device *v = &d->dev[g->device];
			if (w && !w->resident[g->device])
				snprintf(err, errlen, "weight '%s' is not resident on device %d", w->name,
					 g->device);
			else
				snprintf(err, errlen,
					 "device %d (%s %s) has no kernel for %s GEMMs with a %s A",
					 g->device, v->ops->name, v->info.arch, mfma_dtype_name(in),
					 sparse ? "2:4" : "dense");
			return -1;
		}
		return g->device;
	}
	int dev = sched_pick(d, ok);
	if (dev < 0) {
		*code = MFMA__V1__CODE__UNAVAILABLE;
		snprintf(err, errlen, "no usable device can run this request");
		for (int i = 0; i < d->ndev; i++)
			if (ok[i] && !devices_up(&d->dev[i])) {
				size_t n = (size_t)snprintf(err, errlen, "no usable device can run "
							    "this request: ");
				if (n < errlen)
					devices_why_down(&d->dev[i], err + n, errlen - n);
				break;
			}
	}
	return dev;
}

/* A GEMM small enough to cost less than waking the device's worker runs
 * on the loop (sched_run_inline), on a backend that allows it, when the
 * device is idle: cpu.inline_max_flops (0: never).  Not one that may
 * share a launch while batching is on: a burst of them would each find
 * the device idle and run alone, where queued they share launches. */
static bool run_inline(struct daemon *d, int dev, struct gemm_job *j)
{
	const struct device *v = &d->dev[dev];
	uint64_t max = d->cfg.cpu_inline_max_flops;
	if (!v->ops->gemm_inline || !max || mfma_gemm_flops(&j->plan.g) > (double)max)
		return false;
	if (j->sj.batch.p && d->cfg.batch_enabled)
		return false;
	return sched_run_inline(d, dev, &j->sj, run_one, gemm_done);
}

/* A lone GEMM on a resident weight whose device is idle: the loop starts
 * its launch (sched_start_inline, limits.loop_start) and the device's
 * worker, woken meanwhile, waits for its end and answers, so that the
 * worker's wake-up overlaps the copies and the kernel instead of preceding
 * them.  The backend starts it only where nothing needs to be waited for
 * on the loop: D by DMA into registered memory (a region or a pinned
 * answer frame), the weight's choice for the N bucket made and out of its
 * trial.  Only while no other request is unanswered: under load the loop,
 * which reads every request, is kept to that (on the H200, starts whenever
 * the device was idle took N=1 x 256 in flight over regions from 181-185k
 * to 160-166k requests a second); a client with one request at a time is
 * the case it serves.  While it runs the device is not idle, so requests
 * that arrive meanwhile queue and batch behind it as they would behind the
 * worker's own launch. */
static bool start_on_loop(struct daemon *d, int dev, struct gemm_job *j)
{
	const struct device *v = &d->dev[dev];
	if (!d->cfg.loop_start || !v->info.leaves_lone || !j->weight ||
	    conn_daemon_unanswered(d) > 1)
		return false;
	return sched_start_inline(d, dev, &j->sj, gemm_start, gemm_done);
}

void gemm_handle(struct daemon *d, const struct request *r, struct request_msg *m,
		 uint64_t decode_ns)
{
	const Mfma__V1__Gemm *g = m->req->gemm;
	char err[512];
	struct validate_limits lim = { .max_dim = d->cfg.max_dim,
				       .max_out_bytes = d->cfg.max_frame_bytes };
	struct weight *w = NULL;
	struct weight_shape ws;
	int code = MFMA__V1__CODE__INVALID_ARGUMENT;
	struct gemm_job *j = NULL;

	if (g->a && g->a->kind_case == MFMA__V1__OPERAND__KIND_WEIGHT && g->a->weight) {
		w = weights_find(d, g->a->weight);
		if (!w && weights_loading(d, g->a->weight)) {
			code = MFMA__V1__CODE__UNAVAILABLE;
			snprintf(err, sizeof(err), "weight '%s' is still loading", g->a->weight);
			goto fail;
		}
		if (!w) {
			code = MFMA__V1__CODE__NOT_FOUND;
			snprintf(err, sizeof(err), "weight '%s' is not loaded", g->a->weight);
			goto fail;
		}
		ws = (struct weight_shape){ .m = w->m, .k = w->k, .dtype = w->dtype, .sparse = w->sparse };
	}
	j = job_new();
	if (!j) {
		code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	if (validate_gemm(g, &lim, w ? &ws : NULL, &j->plan, err, sizeof(err)) < 0)
		goto fail;
	if (j->plan.b_region || j->plan.c_region || j->plan.d_region) {
		if (!r->conn || !conn_is_unix(r->conn)) {
			code = MFMA__V1__CODE__FAILED_PRECONDITION;
			snprintf(err, sizeof(err),
				 "b, c or d names a region, and regions need the Unix socket "
				 "(this connection is TCP): send the matrices' bytes instead");
			goto fail;
		}
		int rc = use_regions(r->conn, j, err, sizeof(err));
		if (rc < 0) {
			code = rc == -ENOENT ? MFMA__V1__CODE__NOT_FOUND
					     : MFMA__V1__CODE__INVALID_ARGUMENT;
			goto fail;
		}
	}
	/* Bytes in a region are the client's memory, not the daemon's: only
	 * what the frame carries and the answer holds count.  Matrices left
	 * in the frame are held as the frame's whole buffer, and whatever the
	 * decode copied out of it besides. */
	const size_t held_msg = request_msg_held_bytes(m);
	size_t held_in = held_msg > j->plan.in_bytes ? held_msg : j->plan.in_bytes;
	j->in_bytes = held_in + (j->rd ? 0 : j->plan.d_bytes);
	/* Answers count until written (conn.c's unsent_bytes), not only
	 * until computed. */
	if (request_over_inflight(d, r, j->in_bytes, "one", err, sizeof(err))) {
		code = MFMA__V1__CODE__RESOURCE_EXHAUSTED;
		goto fail;
	}
	int dev = choose_device(d, g, w, &j->plan, &code, err, sizeof(err));
	if (dev < 0)
		goto fail;

	j->r = *r;
	request_hold(d, &j->r);
	d->inflight_bytes += j->in_bytes;
	STATS_ADD(d->stats.in_flight, 1);
	j->in = *m;
	*m = (struct request_msg){ 0 };
	j->decode_ns = decode_ns;
	uint64_t timeout_us = g->timeout_us ? g->timeout_us : d->cfg.default_timeout_ms * 1000;
	j->sj.deadline_ns = timeout_us ? r->arrival_ns + timeout_us * 1000 : 0;
	j->sj.prio = g->priority ? g->priority : d->cfg.default_priority;
	j->sj.cancelable = true;
	/* One post thread per connection: its answers keep their order. */
	j->sj.post_key = j->r.conn ? conn_id(j->r.conn) : 0;
	if (w) {
		j->weight = w;
		weights_ref(w);
		if (d->dev[dev].info.batches)
			set_batch_key(j);
	}
	if (!run_inline(d, dev, j) && !start_on_loop(d, dev, j))
		sched_submit(d, dev, &j->sj, gemm_work, gemm_done);
	return;
fail:
	if (j)
		release_regions(d, j);
	job_release(j);
	reply_status(d, r, code, "%s", err);
	request_msg_free(m);
}
