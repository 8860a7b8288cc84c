/* Per-device queues and workers.  Each device has a worker thread that
 * owns the device, and a heap (heap.c) under a mutex that feeds it;
 * finished jobs go on one completion list that the loop drains on each
 * uv_async wake (uv_async_send coalesces, so the loop takes the whole
 * list every time).  A finished job with a post callback goes first to
 * one of its device's post threads (each a FIFO under its own mutex; the
 * job's post_key picks which, so the jobs of one connection keep their
 * order), which runs the callbacks in order and then completes the jobs:
 * the work that follows a launch (for a GEMM, writing its answers to the
 * sockets) then neither holds the device's worker nor falls on the one
 * loop thread. */
#include "scheduler.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices.h"
#include "log.h"
#include "mfma_clock.h"
#include "thread_name.h"

struct queue {
	struct sched *s;
	struct device *v;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct heap heap;
	bool stop;
	bool opened; /* devices_open returned */
	/* The worker waits for a job with nothing of its own running or left
	 * running (under mu): sched_run_inline may use its device meanwhile. */
	bool parked;
	/* A job the loop started on the parked worker's device and left
	 * running (sched_start_inline), for the worker to finish (under mu). */
	struct sched_job *loop_started;
	/* Counts pushes, so that a polling worker sees new work without the
	 * mutex. */
	_Atomic uint64_t pushes;
	struct poster *post; /* npost of them */
	unsigned npost;
};

/* A post thread and its FIFO (jobs linked through next). */
struct poster {
	struct queue *q;
	unsigned index;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct sched_job *head, *tail;
	bool stop;
};

struct sched {
	struct daemon *d;
	struct queue *q; /* one per device */
	int nq;
	pthread_mutex_t done_mu;
	struct sched_job *done;
	uv_async_t done_async;
	uv_timer_t deadline_timer;
	uint64_t timer_at; /* the deadline the timer is set for; 0 = idle */
	uint64_t seq;
	unsigned pick_rr;
	/* Batching limits: the loop writes them, the workers read them. */
	_Atomic bool batch_on;
	_Atomic bool batch_overlap;
	_Atomic uint32_t batch_max;
	_Atomic uint64_t batch_delay_ns;
	/* How long an idle worker polls for the next job before it sleeps. */
	_Atomic uint64_t poll_ns;
};

/* The node is the job's first member. */
static struct sched_job *job_of(struct heap_node *n)
{
	return (struct sched_job *)(void *)n;
}

/* Hands n jobs to the loop, for their done callbacks in this order. */
static void complete_many(struct sched *s, struct sched_job **jobs, size_t n)
{
	pthread_mutex_lock(&s->done_mu);
	for (size_t i = 0; i < n; i++) {
		jobs[i]->next = s->done;
		s->done = jobs[i];
	}
	pthread_mutex_unlock(&s->done_mu);
	uv_async_send(&s->done_async);
}

static void complete(struct sched *s, struct sched_job *j)
{
	complete_many(s, &j, 1);
}

/* ---- batches (worker side, under the queue's mutex) ---- */

static bool same_key(const struct sched_batch_key *x, const struct sched_batch_key *y)
{
	return x->p == y->p && x->a == y->a && x->b == y->b;
}

static int in_queue_order(const void *x, const void *y)
{
	const struct heap_node *a = &(*(struct sched_job *const *)x)->node;
	const struct heap_node *b = &(*(struct sched_job *const *)y)->node;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static bool not_taken(struct heap_node *n, void *arg)
{
	(void)arg;
	return !job_of(n)->taken;
}

static void left_in_batch(struct heap_node *n, void *arg)
{
	(void)n;
	(void)arg;
}

/* Queued jobs a batch looks through without a malloc under the mutex. */
#define TAKE_ON_STACK 512

/* Appends to jobs[*n] the queued jobs of jobs[0]'s key, in queue order,
 * while the cost stays within max (jobs whose deadline passed are left
 * for the deadline timer).  (Taking them in the heap's order when all fit
 * saved the sort's instructions on the CPU backend, about 800 a job for a
 * batch of 40, with no rate moved; it was undone when an H200 run of that
 * build was slower at N=8 x 64, a slowdown later found to be the client's
 * (bench/RESULTS.md).  Doing without the sort again is open, to be
 * measured on the H200.) */
static void take_batch(struct queue *q, struct sched_job **jobs, size_t *n, uint32_t *cost,
		       uint32_t max, uint64_t now)
{
	struct sched_job *on_stack[TAKE_ON_STACK];
	struct sched_job **cand = q->heap.len <= TAKE_ON_STACK
					  ? on_stack
					  : malloc(q->heap.len * sizeof(*cand));
	if (!cand)
		return; /* no batch this time: the job runs alone */
	size_t nc = 0;
	for (size_t i = 0; i < q->heap.len; i++) {
		struct sched_job *j = job_of(q->heap.v[i]);
		if (same_key(&j->batch, &jobs[0]->batch) && (!j->deadline_ns || j->deadline_ns > now))
			cand[nc++] = j;
	}
	qsort(cand, nc, sizeof(*cand), in_queue_order);
	bool took = false;
	for (size_t i = 0; i < nc && *n < SCHED_MAX_BATCH; i++) {
		if (*cost + cand[i]->batch_cost > max)
			break;
		*cost += cand[i]->batch_cost;
		cand[i]->taken = true;
		jobs[(*n)++] = cand[i];
		took = true;
	}
	if (cand != on_stack)
		free(cand);
	if (took)
		heap_filter(&q->heap, not_taken, left_in_batch, NULL);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/* Waking a sleeping thread costs 10-40 us (a futex wake and the
 * scheduler's latency); a worker that polls for a while after its last
 * job takes the next one at once.  Called and returns with the mutex
 * held; returns when a job was pushed or the window passed. */
static void poll_for_work(struct queue *q, uint64_t window_ns)
{
	uint64_t seen = atomic_load_explicit(&q->pushes, memory_order_acquire);
	pthread_mutex_unlock(&q->mu);
	uint64_t until = mfma_clock_ns() + window_ns;
	for (unsigned i = 0;; i++) {
		if (atomic_load_explicit(&q->pushes, memory_order_acquire) != seen)
			break;
		/* Read the clock every 64 pauses only: it costs more than one.
		 * Then also yield: a thread that waits for this core (the loop
		 * with a request, a local client) runs now instead of after the
		 * whole window; on a 2-core machine with the client and the
		 * loop spinning too, round trips went from 30 to 350 us
		 * without it (bench/RESULTS.md).  With no one waiting the
		 * yield returns at once. */
		if ((i & 63) == 63) {
			if (mfma_clock_ns() >= until)
				break;
			sched_yield();
		}
		cpu_relax();
	}
	pthread_mutex_lock(&q->mu);
}

/* A batch whose launch was left running (sched_job.finish): its jobs, and
 * those of them that ran. */
struct held_batch {
	struct sched_job *jobs[SCHED_MAX_BATCH], *runs[SCHED_MAX_BATCH];
	size_t n, nrun;
};

/* The launches a worker holds left running, oldest first: one fewer than
 * a backend lets be left running, so that the worker starts the next
 * batch behind them before it waits for the oldest (on a GPU the next
 * GEMM is then queued while the oldest one's copy out runs). */
#define SCHED_MAX_HELD (BACKEND_MAX_LEFT - 1)
struct held {
	struct held_batch b[SCHED_MAX_HELD];
	size_t first, count;
};

/* Holds a launch left running: n jobs, nrun of them run (count <
 * SCHED_MAX_HELD). */
static void held_push(struct held *h, struct sched_job *const *jobs, size_t n,
		      struct sched_job *const *runs, size_t nrun)
{
	struct held_batch *b = &h->b[(h->first + h->count) % SCHED_MAX_HELD];
	memcpy(b->jobs, jobs, n * sizeof(*jobs));
	memcpy(b->runs, runs, nrun * sizeof(*runs));
	b->n = n;
	b->nrun = nrun;
	h->count++;
}

/* Takes the next job and, when it batches, its companions: how many.
 * Without wait, 0 at once when nothing is queued.  A job the loop started
 * while the worker waited becomes a held launch of h (wait is only set
 * when h is empty). */
static size_t next_jobs(struct queue *q, struct sched_job **jobs, bool wait, struct held *h)
{
	struct sched *s = q->s;
	pthread_mutex_lock(&q->mu);
	uint64_t poll = atomic_load_explicit(&s->poll_ns, memory_order_relaxed);
	q->parked = wait;
	if (wait && q->heap.len == 0 && !q->loop_started && !q->stop && poll)
		poll_for_work(q, poll);
	while (wait && q->heap.len == 0 && !q->loop_started && !q->stop)
		pthread_cond_wait(&q->cv, &q->mu);
	if (q->loop_started) {
		held_push(h, &q->loop_started, 1, &q->loop_started, 1);
		q->loop_started = NULL;
	}
	struct heap_node *top = heap_pop(&q->heap);
	q->parked = false;
	size_t n = 0;
	if (top) {
		jobs[n++] = job_of(top);
		bool on = atomic_load_explicit(&s->batch_on, memory_order_relaxed);
		if (on && jobs[0]->batch.p && jobs[0]->batch_work) {
			uint32_t max = atomic_load_explicit(&s->batch_max, memory_order_relaxed);
			uint32_t cost = jobs[0]->batch_cost;
			take_batch(q, jobs, &n, &cost, max, mfma_clock_ns());
			/* Wait for more only while the batch is not full, up to the
			 * delay past the first job's arrival, and only while the
			 * device has nothing else to do: not with other work queued
			 * (it may be more urgent, and the device would idle), not
			 * with a held launch to finish (its answers would wait), not
			 * when a taken job's deadline comes before the delay ends
			 * (it would expire waiting: it runs now), and not once a
			 * reload has shortened the delay or turned batching off. */
			while (cost < max && n < SCHED_MAX_BATCH && !q->stop && q->heap.len == 0 &&
			       h->count == 0 && atomic_load_explicit(&s->batch_on, memory_order_relaxed)) {
				uint64_t delay = atomic_load_explicit(&s->batch_delay_ns,
								      memory_order_relaxed);
				uint64_t until = jobs[0]->enqueue_ns + delay;
				if (!delay || mfma_clock_ns() >= until)
					break;
				bool due = false;
				for (size_t i = 0; i < n && !due; i++)
					due = jobs[i]->deadline_ns && jobs[i]->deadline_ns < until;
				if (due)
					break;
				struct timespec ts = { .tv_sec = (time_t)(until / 1000000000u),
						       .tv_nsec = (long)(until % 1000000000u) };
				pthread_cond_timedwait(&q->cv, &q->mu, &ts);
				take_batch(q, jobs, &n, &cost, max, mfma_clock_ns());
			}
		}
	}
	pthread_mutex_unlock(&q->mu);
	return n;
}

/* The jobs a run finished: those with more to do go to the post thread
 * (in flight until it has run them), the others complete now.  The post
 * thread starts before the worker and stops after it (sched_start,
 * sched_stop), so it is there for every run. */
static void post_or_complete(struct queue *q, struct sched_job **jobs, size_t n)
{
	int was = devices_phase(q->v, STATS_WORKER_ANSWERS);
	/* Each poster's share of the jobs, linked in order, then handed over
	 * under its mutex once. */
	struct sched_job *head[SCHED_MAX_POST] = { NULL }, *tail[SCHED_MAX_POST] = { NULL };
	for (size_t i = 0; i < n; i++) {
		struct sched_job *j = jobs[i];
		if (j->post) {
			unsigned k = (unsigned)(j->post_key % q->npost);
			j->next = NULL;
			if (tail[k])
				tail[k]->next = j;
			else
				head[k] = j;
			tail[k] = j;
			continue;
		}
		sched_landed(q->v, j);
		complete(q->s, j);
	}
	for (unsigned k = 0; k < q->npost; k++) {
		struct poster *p = &q->post[k];
		if (!head[k])
			continue;
		pthread_mutex_lock(&p->mu);
		if (p->tail)
			p->tail->next = head[k];
		else
			p->head = head[k];
		p->tail = tail[k];
		pthread_cond_signal(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	devices_phase(q->v, was);
}

/* Finishes the oldest held launch and hands its jobs on. */
static void finish_oldest(struct queue *q, struct held *h)
{
	struct held_batch *b = &h->b[h->first];
	h->first = (h->first + 1) % SCHED_MAX_HELD;
	h->count--;
	b->runs[0]->finish(q->v, b->runs, b->nrun);
	post_or_complete(q, b->jobs, b->n);
}

/* Finishes every held launch, oldest first. */
static void finish_held(struct queue *q, struct held *h)
{
	while (h->count)
		finish_oldest(q, h);
}

static void *worker_main(void *arg)
{
	struct queue *q = arg;
	struct device *v = q->v;
	thread_name("mfmad-dev%d", v->index);
	devices_open(v);
	pthread_mutex_lock(&q->mu);
	q->opened = true;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);

	struct sched_job *jobs[SCHED_MAX_BATCH], *runs[SCHED_MAX_BATCH];
	struct held held = { .count = 0 };
	for (;;) {
		devices_phase(v, STATS_WORKER_IDLE);
		size_t n = next_jobs(q, jobs, held.count == 0, &held);
		devices_phase(v, STATS_WORKER_PREPARE);
		if (n == 0 && held.count) {
			/* Nothing to start behind them: finish the oldest now. */
			finish_oldest(q, &held);
			continue;
		}
		if (n == 0)
			break; /* stopping, and the queue is empty */
		uint64_t now = mfma_clock_ns();
		size_t nrun = 0;
		STATS_SUB(v->st->queued, n);
		STATS_ADD(v->st->in_flight, n);
		for (size_t i = 0; i < n; i++) {
			struct sched_job *j = jobs[i];
			j->start_ns = now;
			j->taken = false;
			j->landed = false;
			j->status = 0;
			j->post = NULL;
			j->finish = NULL;
			/* A device that lost its context still runs what is
			 * queued: its GEMMs fail at once, saying so, and the
			 * frees and unregistrations release what they hold. */
			if (v->open_rc < 0)
				j->status = -ENODEV;
			else if (j->deadline_ns && now > j->deadline_ns)
				j->status = -ETIMEDOUT;
			else
				runs[nrun++] = j;
		}
		/* Those left running finish before a job that cannot run
		 * behind them.  A batch that can starts behind them; then,
		 * with every place taken, the oldest finishes.  A batch that
		 * was not left running finishes after them (the answers of
		 * a connection go out in the order their launches started). */
		if (nrun <= 1)
			finish_held(q, &held);
		if (nrun == 1)
			runs[0]->work(v, runs[0]);
		else if (nrun > 1)
			runs[0]->batch_work(v, runs, nrun);
		if (nrun > 1 && runs[0]->finish) {
			while (held.count >= SCHED_MAX_HELD)
				finish_oldest(q, &held);
			held_push(&held, jobs, n, runs, nrun);
			continue;
		}
		finish_held(q, &held);
		post_or_complete(q, jobs, n);
	}
	devices_close(v);
	return NULL;
}

/* Runs the post callbacks of n jobs taken together: once for the jobs of
 * each key and callback, in their order (a GEMM's: the answers to one
 * connection, written in one call), completing each group after its
 * callback. */
static void run_posts(struct queue *q, struct sched_job **run, size_t n)
{
	struct sched_job *group[SCHED_POST_RUN];
	bool grouped[SCHED_POST_RUN] = { false };
	for (size_t i = 0; i < n; i++) {
		if (grouped[i])
			continue;
		size_t k = 0;
		for (size_t m = i; m < n; m++) {
			if (!grouped[m] && run[m]->post_key == run[i]->post_key &&
			    run[m]->post == run[i]->post) {
				grouped[m] = true;
				group[k++] = run[m];
			}
		}
		group[0]->post(q->v, group, k);
		/* Back to the loop group by group: what a full socket left for
		 * the loop to write goes out without waiting for the others. */
		for (size_t g = 0; g < k; g++)
			sched_landed(q->v, group[g]);
		complete_many(q->s, group, k);
	}
}

/* Runs the post callbacks of the jobs handed over, SCHED_POST_RUN at a
 * time, in the order they came. */
static void *post_main(void *arg)
{
	struct poster *p = arg;
	struct queue *q = p->q;
	/* "mfmad-post0" (device 0's first), "mfmad-post0.1" (its second). */
	if (p->index)
		thread_name("mfmad-post%d.%u", q->v->index, p->index);
	else
		thread_name("mfmad-post%d", q->v->index);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->head && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		struct sched_job *list = p->head;
		if (!list)
			break; /* stopping, and nothing is left */
		p->head = p->tail = NULL;
		pthread_mutex_unlock(&p->mu);
		while (list) {
			struct sched_job *run[SCHED_POST_RUN];
			size_t n = 0;
			for (; list && n < SCHED_POST_RUN; list = list->next)
				run[n++] = list;
			run_posts(q, run, n);
		}
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

void sched_drain(struct daemon *d)
{
	struct sched *s = d->sched;
	if (!s)
		return;
	pthread_mutex_lock(&s->done_mu);
	struct sched_job *list = s->done;
	s->done = NULL;
	pthread_mutex_unlock(&s->done_mu);
	/* The list is newest first; answer in completion order. */
	struct sched_job *rev = NULL;
	while (list) {
		struct sched_job *n = list->next;
		list->next = rev;
		rev = list;
		list = n;
	}
	while (rev) {
		struct sched_job *j = rev;
		rev = j->next;
		j->done(d, j, j->status);
	}
}

static void on_done_async(uv_async_t *a)
{
	sched_drain(a->data);
}

/* ---- deadlines ---- */

struct taken {
	uint64_t now;
	struct sched_job *list;
};

static bool not_expired(struct heap_node *n, void *arg)
{
	const struct taken *e = arg;
	const struct sched_job *j = job_of(n);
	return j->deadline_ns == 0 || j->deadline_ns > e->now;
}

static void take_job(struct heap_node *n, void *arg)
{
	struct taken *e = arg;
	struct sched_job *j = job_of(n);
	j->next = e->list;
	e->list = j;
}

static void arm_deadline_timer(struct sched *s, uint64_t deadline);

/* Takes every queued job that keep() refuses off every queue and hands
 * it to its done callback with status (loop thread). */
static void take_queued(struct sched *s, bool (*keep)(struct heap_node *n, void *arg),
			struct taken *e, int status)
{
	for (int i = 0; i < s->nq; i++) {
		struct queue *q = &s->q[i];
		e->list = NULL;
		pthread_mutex_lock(&q->mu);
		heap_filter(&q->heap, keep, take_job, e);
		pthread_mutex_unlock(&q->mu);
		while (e->list) {
			struct sched_job *j = e->list;
			e->list = j->next;
			STATS_SUB(q->v->st->queued, 1);
			j->start_ns = e->now;
			j->done(s->d, j, status);
		}
	}
}

static uint64_t earliest_deadline(struct sched *s)
{
	uint64_t best = 0;
	for (int i = 0; i < s->nq; i++) {
		struct queue *q = &s->q[i];
		pthread_mutex_lock(&q->mu);
		for (size_t k = 0; k < q->heap.len; k++) {
			uint64_t dl = job_of(q->heap.v[k])->deadline_ns;
			if (dl && (!best || dl < best))
				best = dl;
		}
		pthread_mutex_unlock(&q->mu);
	}
	return best;
}

/* Answers the queued jobs whose deadline passed with -ETIMEDOUT, so a
 * client hears of it when it happens, not when the device gets to it. */
static void on_deadline(uv_timer_t *t)
{
	struct sched *s = t->data;
	s->timer_at = 0;
	struct taken e = { .now = mfma_clock_ns(), .list = NULL };
	take_queued(s, not_expired, &e, -ETIMEDOUT);
	uint64_t next = earliest_deadline(s);
	if (next)
		arm_deadline_timer(s, next);
}

static void arm_deadline_timer(struct sched *s, uint64_t deadline)
{
	if (s->timer_at && s->timer_at <= deadline)
		return;
	uint64_t now = mfma_clock_ns();
	/* libuv timers count milliseconds: round up, so the timer never fires
	 * before the deadline it serves. */
	uint64_t ms = deadline > now ? (deadline - now + 999999) / 1000000 : 0;
	s->timer_at = deadline;
	uv_timer_start(&s->deadline_timer, on_deadline, ms, 0);
}

/* ---- the loop's side ---- */

void sched_submit(struct daemon *d, int dev, struct sched_job *j, sched_work_fn work,
		  sched_done_fn done)
{
	struct sched *s = d->sched;
	struct queue *q = &s->q[dev];
	j->work = work;
	j->done = done;
	j->dev = dev;
	j->status = 0;
	j->enqueue_ns = mfma_clock_ns();
	j->node.key = sched_order_key(j->enqueue_ns, j->prio, d->cfg.priority_aging_ms);
	j->node.seq = s->seq++;
	STATS_ADD(q->v->st->queued, 1);
	pthread_mutex_lock(&q->mu);
	int rc = heap_push(&q->heap, &j->node);
	if (rc == 0) {
		atomic_fetch_add_explicit(&q->pushes, 1, memory_order_release);
		pthread_cond_signal(&q->cv);
	}
	pthread_mutex_unlock(&q->mu);
	if (rc < 0) {
		STATS_SUB(q->v->st->queued, 1);
		j->status = -ENOMEM;
		complete(s, j);
		return;
	}
	if (j->deadline_ns)
		arm_deadline_timer(s, j->deadline_ns);
}

/* Whether the loop may use q's device now (under mu): its worker waits
 * for work with nothing queued, running or left running, not even a job
 * the loop started that the worker has not taken yet. */
static bool idle_for_loop(const struct queue *q)
{
	return q->parked && !q->heap.len && !q->loop_started && !q->stop && q->opened &&
	       devices_up(q->v);
}

/* The scheduling fields of a job the loop runs or starts itself. */
static void take_on_loop(struct sched_job *j, int dev, sched_done_fn done)
{
	j->done = done;
	j->dev = dev;
	j->status = 0;
	j->enqueue_ns = j->start_ns = mfma_clock_ns();
	j->taken = false;
	j->landed = false;
	j->post = NULL;
	j->finish = NULL;
}

bool sched_start_inline(struct daemon *d, int dev, struct sched_job *j, sched_work_fn start,
			sched_done_fn done)
{
	struct sched *s = d->sched;
	struct queue *q = &s->q[dev];
	struct device *v = q->v;
	pthread_mutex_lock(&q->mu);
	/* As for sched_run_inline: the parked worker cannot leave next_jobs
	 * while this holds the mutex.  A request whose deadline passed goes
	 * to the queue, which answers it. */
	if (!idle_for_loop(q) || (j->deadline_ns && mfma_clock_ns() > j->deadline_ns)) {
		pthread_mutex_unlock(&q->mu);
		return false;
	}
	take_on_loop(j, dev, done);
	STATS_ADD(v->st->in_flight, 1);
	start(v, j);
	if (j->status == -EAGAIN) {
		/* Not started: nothing was done on the device. */
		j->status = 0;
		STATS_SUB(v->st->in_flight, 1);
		pthread_mutex_unlock(&q->mu);
		return false;
	}
	STATS_ADD(v->st->loop_starts, 1);
	if (j->finish) {
		/* Left running: the worker takes it as its held launch. */
		q->loop_started = j;
		atomic_fetch_add_explicit(&q->pushes, 1, memory_order_release);
		pthread_cond_signal(&q->cv);
		pthread_mutex_unlock(&q->mu);
		return true;
	}
	pthread_mutex_unlock(&q->mu);
	sched_landed(v, j);
	done(d, j, j->status);
	return true;
}

bool sched_run_inline(struct daemon *d, int dev, struct sched_job *j, sched_work_fn work,
		      sched_done_fn done)
{
	struct sched *s = d->sched;
	struct queue *q = &s->q[dev];
	struct device *v = q->v;
	pthread_mutex_lock(&q->mu);
	/* Only the loop queues, and it is here: an empty queue stays empty
	 * until the run ends, and a parked worker cannot leave next_jobs
	 * without the mutex this run holds. */
	if (!idle_for_loop(q)) {
		pthread_mutex_unlock(&q->mu);
		return false;
	}
	take_on_loop(j, dev, done);
	j->work = work;
	STATS_ADD(v->st->in_flight, 1);
	STATS_ADD(v->st->inline_runs, 1);
	/* As on the worker: a request whose deadline passed is never run. */
	if (j->deadline_ns && j->start_ns > j->deadline_ns)
		j->status = -ETIMEDOUT;
	else
		work(v, j);
	pthread_mutex_unlock(&q->mu);
	sched_landed(v, j);
	done(d, j, j->status);
	return true;
}

void sched_landed(struct device *v, struct sched_job *j)
{
	if (j->landed)
		return;
	j->landed = true;
	STATS_SUB(v->st->in_flight, 1);
}

void sched_set_overlap(struct daemon *d, bool on)
{
	if (d->sched)
		atomic_store_explicit(&d->sched->batch_overlap, on, memory_order_relaxed);
}

bool sched_overlap(const struct daemon *d)
{
	return d->sched && atomic_load_explicit(&d->sched->batch_overlap, memory_order_relaxed);
}

void sched_set_batching(struct daemon *d, bool enabled, uint32_t max_cost, uint64_t delay_ns)
{
	struct sched *s = d->sched;
	atomic_store_explicit(&s->batch_on, enabled, memory_order_relaxed);
	atomic_store_explicit(&s->batch_max, max_cost, memory_order_relaxed);
	atomic_store_explicit(&s->batch_delay_ns, delay_ns, memory_order_relaxed);
	/* A worker waiting out the old delay for a batch looks again. */
	for (int i = 0; i < s->nq; i++) {
		pthread_mutex_lock(&s->q[i].mu);
		pthread_cond_broadcast(&s->q[i].cv);
		pthread_mutex_unlock(&s->q[i].mu);
	}
}

void sched_set_poll(struct daemon *d, uint64_t poll_ns)
{
	atomic_store_explicit(&d->sched->poll_ns, poll_ns, memory_order_relaxed);
}

static void rekey(struct heap_node *n, void *arg)
{
	const struct sched_job *j = job_of(n);
	n->key = sched_order_key(j->enqueue_ns, j->prio, *(const uint64_t *)arg);
}

void sched_set_aging(struct daemon *d, uint64_t aging_ms)
{
	struct sched *s = d->sched;
	for (int i = 0; i < s->nq; i++) {
		struct queue *q = &s->q[i];
		pthread_mutex_lock(&q->mu);
		heap_rekey(&q->heap, rekey, &aging_ms);
		pthread_mutex_unlock(&q->mu);
	}
}

static bool not_cancelable(struct heap_node *n, void *arg)
{
	(void)arg;
	return !job_of(n)->cancelable;
}

void sched_cancel_queued(struct daemon *d)
{
	struct taken e = { .now = mfma_clock_ns(), .list = NULL };
	take_queued(d->sched, not_cancelable, &e, -ECANCELED);
}

int sched_pick(struct daemon *d, const bool *ok)
{
	struct sched *s = d->sched;
	int best = -1;
	uint64_t best_load = UINT64_MAX;
	unsigned start = s->pick_rr++;
	for (int n = 0; n < d->ndev; n++) {
		int i = (int)((start + (unsigned)n) % (unsigned)d->ndev);
		struct device *v = &d->dev[i];
		if ((ok && !ok[i]) || !devices_up(v))
			continue;
		uint64_t load = STATS_GET(v->st->queued) + STATS_GET(v->st->in_flight);
		if (load < best_load) {
			best = i;
			best_load = load;
		}
	}
	return best;
}

int sched_start(struct daemon *d, char *err, size_t errlen)
{
	struct sched *s = calloc(1, sizeof(*s));
	if (s)
		s->q = calloc((size_t)d->ndev, sizeof(*s->q));
	if (!s || !s->q) {
		free(s);
		snprintf(err, errlen, "out of memory starting the device queues");
		return -ENOMEM;
	}
	d->sched = s;
	s->d = d;
	pthread_mutex_init(&s->done_mu, NULL);
	uv_async_init(d->loop, &s->done_async, on_done_async);
	s->done_async.data = d;
	uv_timer_init(d->loop, &s->deadline_timer);
	s->deadline_timer.data = s;
	for (int i = 0; i < d->ndev; i++) {
		struct queue *q = &s->q[i];
		q->s = s;
		q->v = &d->dev[i];
		pthread_mutex_init(&q->mu, NULL);
		/* The batch delay waits against the one (monotonic) clock. */
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&q->cv, &ca);
		pthread_condattr_destroy(&ca);
		s->nq++;
		q->npost = d->cfg.post_threads;
		q->post = calloc(q->npost, sizeof(*q->post));
		if (!q->post) {
			q->npost = 0;
			snprintf(err, errlen, "out of memory for the post threads of device %d", i);
			return -ENOMEM;
		}
		for (unsigned k = 0; k < q->npost; k++) {
			struct poster *p = &q->post[k];
			p->q = q;
			p->index = k;
			pthread_mutex_init(&p->mu, NULL);
			pthread_cond_init(&p->cv, NULL);
		}
		/* Before the worker: it hands jobs over from its first run. */
		for (unsigned k = 0; k < q->npost; k++) {
			if (pthread_create(&q->post[k].thread, NULL, post_main, &q->post[k]) != 0) {
				snprintf(err, errlen, "cannot start post thread %u of device %d", k,
					 i);
				return -EAGAIN;
			}
			q->post[k].started = true;
		}
		if (pthread_create(&q->thread, NULL, worker_main, q) != 0) {
			snprintf(err, errlen, "cannot start the worker thread of device %d", i);
			return -EAGAIN;
		}
		q->started = true;
	}
	/* Wait for every device to open, so READY means the devices are up. */
	int usable = 0;
	for (int i = 0; i < s->nq; i++) {
		struct queue *q = &s->q[i];
		pthread_mutex_lock(&q->mu);
		while (!q->opened)
			pthread_cond_wait(&q->cv, &q->mu);
		pthread_mutex_unlock(&q->mu);
		devices_report(q->v);
		usable += q->v->open_rc == 0;
	}
	if (usable == 0) {
		snprintf(err, errlen, "no device could be opened");
		return -ENODEV;
	}
	return 0;
}

/* Tells a thread waiting on cv under mu to stop (*stop), and joins it. */
static void stop_thread(pthread_mutex_t *mu, pthread_cond_t *cv, bool *stop, pthread_t thread)
{
	pthread_mutex_lock(mu);
	*stop = true;
	pthread_cond_broadcast(cv);
	pthread_mutex_unlock(mu);
	pthread_join(thread, NULL);
}

void sched_stop(struct daemon *d)
{
	struct sched *s = d->sched;
	if (!s)
		return;
	for (int i = 0; i < s->nq; i++) {
		struct queue *q = &s->q[i];
		if (!q->started)
			continue;
		stop_thread(&q->mu, &q->cv, &q->stop, q->thread);
		q->started = false;
	}
	/* The workers are gone: what they posted is all there will be. */
	for (int i = 0; i < s->nq; i++) {
		for (unsigned k = 0; k < s->q[i].npost; k++) {
			struct poster *p = &s->q[i].post[k];
			if (!p->started)
				continue;
			stop_thread(&p->mu, &p->cv, &p->stop, p->thread);
			p->started = false;
		}
	}
}

void sched_free(struct daemon *d)
{
	struct sched *s = d->sched;
	if (!s)
		return;
	for (int i = 0; i < s->nq; i++) {
		pthread_mutex_destroy(&s->q[i].mu);
		pthread_cond_destroy(&s->q[i].cv);
		for (unsigned k = 0; k < s->q[i].npost; k++) {
			pthread_mutex_destroy(&s->q[i].post[k].mu);
			pthread_cond_destroy(&s->q[i].post[k].cv);
		}
		free(s->q[i].post);
		heap_free(&s->q[i].heap);
	}
	pthread_mutex_destroy(&s->done_mu);
	free(s->q);
	free(s);
	d->sched = NULL;
}
