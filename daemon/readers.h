/* Reader threads (limits.reader_threads): a small pool that reads the
 * rest of a large frame from its socket off the loop, runs the job's own
 * work on the bytes (the frame's decode), and hands the job back to the
 * loop.  The pool knows nothing of connections or frames, in the manner of
 * uv_queue_work: a job names a descriptor, where its bytes go and how many,
 * what to run once they are in, and what the loop does afterwards.
 *
 * A reader never waits long on one job: once it has waited READERS_WAIT_MS
 * in all for bytes that do not come, it ends the job with -EAGAIN and
 * whatever came so far, so a client that stalls mid-frame costs a reader
 * that long and no more (the loop then reads the rest as it always has,
 * under limits.read_timeout_ms).  The loop must leave the descriptor open
 * and the destination alone until the job's done callback has run. */
#ifndef MFMAD_READERS_H
#define MFMAD_READERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

/* How long, in all, a reader waits for the bytes of one job. */
#define READERS_WAIT_MS 20

struct readers;

struct reader_job {
	int fd;          /* a non-blocking stream socket */
	bool unix_fds;   /* a Unix socket: a descriptor that comes ends the job (-EPROTO) */
	uint8_t *dst;    /* the bytes go here */
	size_t need;     /* this many */
	size_t got;      /* out: how many came (all of them when status is 0) */
	/* out: 0, every byte came (run has run); -EAGAIN, the wait ran out;
	 * -EPIPE, the peer closed; -EPROTO, a descriptor came with the
	 * bytes (closed); -ECANCELED, the pool is stopping; or the read's
	 * own negative errno. */
	int status;
	/* Reader thread, once every byte came. */
	void (*run)(struct reader_job *j);
	/* Loop thread, after run (or instead of it, on failure). */
	void (*done)(struct reader_job *j);
	struct reader_job *next; /* the pool's */
	atomic_bool cancel;      /* readers_cancel */
};

/* Starts n threads ("mfmad-read0"...) and the loop's wake-up; n 0 starts
 * nothing and leaves *out NULL.  0 or a negative errno code. */
int readers_start(uv_loop_t *loop, unsigned n, struct readers **out);

/* Loop: queues a job; the readers take jobs in the order they came. */
void readers_submit(struct readers *r, struct reader_job *j);

/* Loop: the job's bytes are no longer wanted (its connection closed): a
 * reader that has not taken it yet, or waits for its bytes, ends it with
 * -ECANCELED rather than wait.  Its done callback still runs. */
void readers_cancel(struct reader_job *j);

/* Loop: jobs submitted whose done callback has not run yet (0 for NULL). */
unsigned readers_pending(const struct readers *r);

/* Loop, at shutdown: ends every job (those not finished with -ECANCELED),
 * joins the threads and runs the done callbacks left.  NULL is fine. */
void readers_stop(struct readers *r);

/* After the loop has closed its handles (uv_walk, uv_run): frees the pool.
 * NULL is fine. */
void readers_free(struct readers *r);

#endif
