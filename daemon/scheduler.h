/* Per-device queues and their worker threads, in the shape of libuv's
 * uv_queue_work: a job carries its own work callback, run on the device's
 * worker, and its own done callback, run on the loop.  The scheduler
 * knows nothing of what a job is.
 *
 * Order: a queue hands out the job with the smallest key, where
 *   key = enqueue time + priority x limits.priority_aging_ms,
 * so priority 1 goes first, and a job waiting one aging step longer
 * overtakes a job one priority level higher: nothing starves.  Jobs with
 * a deadline leave the queue when it passes (a timer on the loop), and a
 * job whose deadline passed is never run.
 *
 * Batching: jobs with equal batch keys may share one run.  When a worker
 * takes such a job, it takes with it the queued jobs of the same key, in
 * queue order, while their costs add up to at most the configured limit
 * (the first job always goes), and hands them all to the job's batch
 * callback.  With a queue delay configured, a batch that is not full waits
 * that long past its first job's arrival for more.  The scheduler knows
 * the key's bytes only, not what they mean. */
#ifndef MFMAD_SCHEDULER_H
#define MFMAD_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon.h"
#include "heap.h"

struct device;
struct sched_job;

/* Worker thread; the job's device is v. */
typedef void (*sched_work_fn)(struct device *v, struct sched_job *j);
/* Loop thread.  status: 0 when work ran; -ETIMEDOUT when the deadline
 * passed before it started; -ECANCELED when sched_cancel_queued took it;
 * -ENODEV when the device failed to open; -ENOMEM when it could not be
 * queued.  The job belongs to the callback. */
typedef void (*sched_done_fn)(struct daemon *d, struct sched_job *j, int status);

/* Equal keys (all three fields) may share a run; p NULL: runs alone. */
struct sched_batch_key {
	const void *p;
	uint64_t a, b;
};

/* Worker thread: runs n >= 2 jobs of one key together (each keeps its own
 * done callback and status). */
typedef void (*sched_batch_fn)(struct device *v, struct sched_job **jobs, size_t n);

/* Post thread: n >= 1 jobs of one post key and one post callback, in
 * the order they finished (so that their answers may go out together). */
typedef void (*sched_post_fn)(struct device *v, struct sched_job **jobs, size_t n);

/* The most jobs one batch takes. */
#define SCHED_MAX_BATCH 256
/* The most jobs a post thread takes at once (and so hands one post
 * callback). */
#define SCHED_POST_RUN 64
/* Post threads per device at most (limits.post_threads). */
#define SCHED_MAX_POST CONFIG_POST_THREADS_MAX

struct sched_job {
	struct heap_node node;  /* the queue's order (private) */
	struct sched_job *next; /* completion list (private) */
	sched_work_fn work;
	sched_done_fn done;
	int dev;
	int status;
	uint32_t prio;          /* 0 = before any request (internal work) */
	uint64_t deadline_ns;   /* 0 = none */
	uint64_t enqueue_ns, start_ns;
	bool cancelable;        /* a client request: cancelled at the end of the grace period */
	struct sched_batch_key batch;
	uint32_t batch_cost;    /* against the batch limit (a GEMM: its columns) */
	sched_batch_fn batch_work;
	/* Set by the work or batch callback (reset before each run) when the
	 * job has more to do off the loop before its done callback: it runs
	 * on the device's post thread, in the order the jobs finished, while
	 * the worker goes back to its device.  The post thread calls it once
	 * for the jobs of one key (and one callback) among those it took
	 * together, up to SCHED_POST_RUN of them at a time. */
	sched_post_fn post;
	/* Which of the device's post threads runs it (modulo their number):
	 * jobs of one key keep their order (a GEMM: its connection's id). */
	uint64_t post_key;
	/* Set by a batch callback (on the batch's first job, reset before
	 * each run) when its launch was left running on the device: the
	 * worker takes and starts the next jobs first, then calls it on the
	 * same jobs to finish the launch (finishing at once when nothing else
	 * is queued, and always before a job that is not such a batch). */
	sched_batch_fn finish;
	bool taken;             /* picked for a batch (private) */
	bool landed;            /* out of the device's in-flight count (private) */
};

/* The queue's order of a job queued at enqueue_ns with priority prio.
 * Without aging a priority level is worth 2^50 ns (13 days) of waiting:
 * strict priority in practice.  Saturates instead of wrapping. */
static inline uint64_t sched_order_key(uint64_t enqueue_ns, uint32_t prio, uint64_t aging_ms)
{
	uint64_t step = aging_ms ? aging_ms * 1000000ull : 1ull << 50;
	if (prio && step > (UINT64_MAX - enqueue_ns) / prio)
		return UINT64_MAX;
	return enqueue_ns + (uint64_t)prio * step;
}

/* Starts one worker and one post thread per device and waits until each has opened its
 * device; fails when none could. */
int sched_start(struct daemon *d, char *err, size_t errlen);
/* Fills in the job's scheduling fields and queues it on device dev.
 * Set prio, deadline_ns and cancelable first. */
void sched_submit(struct daemon *d, int dev, struct sched_job *j, sched_work_fn work,
		  sched_done_fn done);
/* Loop thread: runs j on the calling thread at once, instead of queueing
 * it, when device dev's worker waits for work with nothing queued, running
 * or left running: work, then done with status 0, counted as a worker's
 * run is (in flight, start time, landed) and in the device's inline_runs.
 * The worker cannot start a job meanwhile (the run holds its queue's
 * mutex), so a backend whose devices are plain host memory (the CPU's)
 * is used by one thread at a time as always; the loop serves no one else
 * until the run ends, so the caller keeps it to work far cheaper than a
 * thread wake-up.  false: nothing was done (the caller queues j). */
bool sched_run_inline(struct daemon *d, int dev, struct sched_job *j, sched_work_fn work,
		      sched_done_fn done);
/* Loop thread: starts j on the calling thread when device dev is idle as
 * sched_run_inline needs it, for a device that can leave a launch
 * running: start(v, j) runs under the queue's mutex and either leaves the
 * launch running and sets j->finish (the worker, woken, takes j as a
 * launch left running: it finishes j with j->finish, or starts a job
 * queued meanwhile first, then j's post callback and done run as for a
 * queued job), or runs it to its end or failure (done runs now, on this
 * thread, with status 0), or does nothing and sets j->status to -EAGAIN
 * (false: the caller queues j).  The worker's wake-up then overlaps the
 * device's work instead of coming before it.  Counted in the device's
 * loop_starts and, like a worker's run, in flight until it lands.  false
 * also when the device is not idle or j's deadline passed. */
bool sched_start_inline(struct daemon *d, int dev, struct sched_job *j, sched_work_fn start,
			sched_done_fn done);
/* Batching limits, from the configuration (at start and on reload):
 * enabled, the largest total cost of a batch, and how long a batch that
 * is not full may wait for more (0: batch only what is already queued). */
void sched_set_batching(struct daemon *d, bool enabled, uint32_t max_cost, uint64_t delay_ns);
/* Whether a batch callback may leave its launch running (batching.overlap;
 * any thread). */
void sched_set_overlap(struct daemon *d, bool on);
bool sched_overlap(const struct daemon *d);
/* Called by a work, batch or finish callback on the worker when the
 * device is done with j, before its answer can reach the client: j leaves
 * the device's in-flight count then, not when its post callback has run,
 * so that a job counted completed is never also counted in flight. */
void sched_landed(struct device *v, struct sched_job *j);
/* How long an idle worker polls for work before it sleeps; 0 = never
 * polls (loop thread, any time). */
void sched_set_poll(struct daemon *d, uint64_t poll_ns);
/* Orders the queued jobs again by limits.priority_aging_ms as it is now
 * (a job's place is fixed when it is queued: without this, a reload that
 * changes the aging would leave the jobs queued before it ordered by the
 * old one, those queued under strict priority behind everything after). */
void sched_set_aging(struct daemon *d, uint64_t aging_ms);

/* Answers every queued cancelable job with -ECANCELED. */
void sched_cancel_queued(struct daemon *d);
/* The least loaded open device among those with ok[i] set (NULL: all),
 * or -1; ties go round-robin. */
int sched_pick(struct daemon *d, const bool *ok);
/* Runs the done callbacks of finished jobs (the loop does on each wake;
 * shutdown calls it once more after sched_stop). */
void sched_drain(struct daemon *d);
/* Joins the workers after they ran what was queued, then the post
 * threads after they ran what the workers left them. */
void sched_stop(struct daemon *d);
void sched_free(struct daemon *d);

#endif
