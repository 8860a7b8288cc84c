/* Process-wide counters, written by the loop and the device workers with
 * relaxed atomics and read by `mfmactl status`, the systemd STATUS= line
 * and the /metrics endpoint (which runs on its own thread). */
#ifndef MFMAD_STATS_H
#define MFMAD_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define STATS_MAX_DEVICES 32

/* Why a request ended; the label of mfmad_requests_total{result=...}. */
enum stats_result {
	STATS_OK,
	STATS_INVALID,     /* INVALID_ARGUMENT */
	STATS_NOT_FOUND,
	STATS_EXISTS,
	STATS_BUSY,        /* RESOURCE_EXHAUSTED */
	STATS_UNAVAILABLE, /* shutting down, no device */
	STATS_DEADLINE,
	STATS_INTERNAL,    /* device / kernel failure */
	STATS_MALFORMED,   /* undecodable frame */
	STATS_NRESULTS
};

/* What a request asked for; STATS_OTHER counts frames that were not a
 * decodable request of a known type. */
enum stats_kind {
	STATS_GEMM,
	STATS_LOAD,
	STATS_UNLOAD,
	STATS_LIST,
	STATS_STATUS,
	STATS_PING,
	STATS_REGION,  /* register_region and unregister_region */
	STATS_OTHER,
	STATS_NKINDS
};

/* Upper bounds (ns) of the request latency histogram buckets; +Inf is implied. */
#define STATS_LATENCY_BUCKETS 14
static const uint64_t stats_latency_le_ns[STATS_LATENCY_BUCKETS] = {
	10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000,
	5000000, 10000000, 25000000, 100000000, 1000000000, 10000000000ull,
};

/* Requests per GEMM launch (a launch runs one request, or a batch). */
#define STATS_BATCH_BUCKETS 9
static const uint64_t stats_batch_le[STATS_BATCH_BUCKETS] = { 1, 2, 4, 8, 16, 32, 64, 128, 256 };

/* Where a GEMM answer's frame was laid out: a device's pinned arena (the
 * device copied D into it directly) or the heap. */
enum stats_frame_memory { STATS_FRAME_PINNED, STATS_FRAME_HEAP, STATS_FRAME_N };

/* Where a device's worker thread spends its time
 * (mfmad_device_worker_seconds_total{phase=...}): waiting for work (its
 * poll included); preparing (taking the jobs, laying out their answers,
 * a one-off A's preparation, a weight's load); in the backend's GEMM call
 * (a launch not left running is waited for inside it); waiting for a
 * launch left running to end; finishing answers (timing, encoding,
 * counting, handing them to the post threads). */
enum stats_worker_phase {
	STATS_WORKER_IDLE,
	STATS_WORKER_PREPARE,
	STATS_WORKER_LAUNCH,
	STATS_WORKER_WAIT,
	STATS_WORKER_ANSWERS,
	STATS_WORKER_NPHASES
};
/* Their label values on /metrics. */
static const char *const stats_worker_phase_names[STATS_WORKER_NPHASES] = {
	"idle", "prepare", "launch", "wait", "answers",
};

struct stats_device {
	char backend[16];
	char arch[32];
	char name[128];
	uint64_t mem_total;
	_Atomic uint64_t queued;       /* waiting in the device queue */
	_Atomic uint64_t in_flight;    /* being run by the worker */
	_Atomic uint64_t completed;
	_Atomic uint64_t inline_runs;  /* of those, run on the loop thread (sched_run_inline) */
	_Atomic uint64_t loop_starts;  /* started by the loop thread (sched_start_inline) */
	_Atomic uint64_t gated;        /* launched before their B was in (backend_timing.gated) */
	_Atomic uint64_t tile_out;     /* D copied out by the kernel (backend_timing.tile_out) */
	_Atomic uint64_t failed;
	_Atomic uint64_t up;           /* takes work: opened, and its context not lost since */
	_Atomic uint64_t weight_bytes; /* resident weights on this device */
	_Atomic uint64_t kernel_ns;    /* cumulative */
	_Atomic uint64_t launch_ns;    /* cumulative host time of the launch calls, per launch */
	_Atomic uint64_t worker_ns[STATS_WORKER_NPHASES]; /* cumulative, by phase, when each ends */
	/* The phase running and since when (0: none yet), and a sequence
	 * number, odd while the worker changes them: stats_worker_read. */
	_Atomic uint64_t worker_seq, worker_since_ns;
	_Atomic int worker_phase;
	/* Host time of batched launches' gather and split calls (in the
	 * worker's launch phase). */
	_Atomic uint64_t gather_ns, split_ns;
};

struct mfmad_stats {
	uint64_t start_ns; /* CLOCK_MONOTONIC at start */
	_Atomic int ready; /* listening and devices up */
	/* CLOCK_MONOTONIC of the event loop's last tick (conn.c, every 100 ms;
	 * 0 before the first): /healthz fails when it is stale. */
	_Atomic uint64_t loop_beat_ns;
	_Atomic int stopping;
	_Atomic uint64_t requests[STATS_NKINDS][STATS_NRESULTS];
	_Atomic uint64_t gemm_queue_ns, gemm_h2d_ns, gemm_kernel_ns, gemm_d2h_ns, gemm_total_ns;
	_Atomic uint64_t gemm_flops; /* dense-equivalent, for GFLOP/s */
	/* Requests per GEMM launch: batch_count is the launches (executions),
	 * batch_sum the requests they answered; the difference is batching's. */
	_Atomic uint64_t batch_bucket[STATS_BATCH_BUCKETS + 1];
	_Atomic uint64_t batch_sum, batch_count;
	/* Per-N plans the device backends made (cuSPARSELt's with its
	 * algorithm search, cuBLASLt's heuristic) and choices among providers
	 * measured: at weight load (warming) and on the serving path (a
	 * GEMM's first of its width, which the queue behind it waits for). */
	_Atomic uint64_t plans_load, plans_serving, measures_load, measures_serving;
	/* Served trials of measured choices that ended keeping the measured
	 * order, and changing it. */
	_Atomic uint64_t trials_kept, trials_changed;
	/* A GEMM frame's large matrices (WIRE_SPLIT_MIN_BYTES and more): left
	 * in the frame the daemon read, or copied out by the decode (one not
	 * at an aligned offset: a client without Request.pad). */
	_Atomic uint64_t matrices_in_place, matrices_copied;
	/* Frames whose body a reader thread read and decoded (readers.h). */
	_Atomic uint64_t reader_frames;
	/* GEMM answer frames with D in them, by where they were laid out. */
	_Atomic uint64_t answer_frames[STATS_FRAME_N];
	/* Batched launches left running while the worker started the next
	 * (batching.overlap). */
	_Atomic uint64_t batches_left;
	/* Batched launches that failed (at their start or their end), each of
	 * whose requests then ran alone. */
	_Atomic uint64_t batches_retried;
	/* GEMM request frames whose matrices stayed in them, by where the
	 * frame was read. */
	_Atomic uint64_t request_frames[STATS_FRAME_N];
	_Atomic uint64_t latency_bucket[STATS_LATENCY_BUCKETS + 1];
	_Atomic uint64_t latency_sum_ns, latency_count;
	_Atomic uint64_t connections_open, connections_total;
	/* TLS listeners: handshakes completed, and failed (bad or missing
	 * certificate, a plaintext client, a handshake past the read timeout). */
	_Atomic uint64_t tls_handshakes_ok, tls_handshakes_failed;
	_Atomic uint64_t in_flight;
	_Atomic uint64_t weight_bytes, weight_budget, weights;
	_Atomic uint64_t declared_pending; /* declared weights not resident: not ready */
	int ndevices;
	struct stats_device dev[STATS_MAX_DEVICES];
};

#define STATS_ADD(field, v) atomic_fetch_add_explicit(&(field), (v), memory_order_relaxed)
#define STATS_SUB(field, v) atomic_fetch_sub_explicit(&(field), (v), memory_order_relaxed)
#define STATS_GET(field) atomic_load_explicit(&(field), memory_order_relaxed)

/* Worker: its phase becomes phase at now (mfma_clock_ns); the time of the
 * one that ends added to its count.  Returns the phase that ended. */
static inline int stats_worker_switch(struct stats_device *st, int phase, uint64_t now)
{
	uint64_t seq = atomic_load_explicit(&st->worker_seq, memory_order_relaxed);
	atomic_store_explicit(&st->worker_seq, seq + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	int was = atomic_load_explicit(&st->worker_phase, memory_order_relaxed);
	uint64_t since = STATS_GET(st->worker_since_ns);
	if (since && now > since)
		STATS_ADD(st->worker_ns[was], now - since);
	atomic_store_explicit(&st->worker_phase, phase, memory_order_relaxed);
	atomic_store_explicit(&st->worker_since_ns, now, memory_order_relaxed);
	atomic_store_explicit(&st->worker_seq, seq + 2, memory_order_release);
	return was;
}

/* Any thread: the worker's time by phase up to now (mfma_clock_ns), the
 * running phase's share so far included (read as one snapshot, so that
 * nothing is counted twice and each count only grows from one reading to
 * the next with a later now). */
static inline void stats_worker_read(const struct stats_device *st, uint64_t now,
				     uint64_t ns[STATS_WORKER_NPHASES])
{
	for (;;) {
		uint64_t s1 = atomic_load_explicit(&st->worker_seq, memory_order_acquire);
		for (int p = 0; p < STATS_WORKER_NPHASES; p++)
			ns[p] = STATS_GET(st->worker_ns[p]);
		int phase = atomic_load_explicit(&st->worker_phase, memory_order_relaxed);
		uint64_t since = STATS_GET(st->worker_since_ns);
		atomic_thread_fence(memory_order_acquire);
		if (s1 % 2 || atomic_load_explicit(&st->worker_seq, memory_order_relaxed) != s1)
			continue;
		if (since && now > since)
			ns[phase] += now - since;
		return;
	}
}

static inline void stats_observe_latency(struct mfmad_stats *s, uint64_t ns)
{
	int b = 0;
	while (b < STATS_LATENCY_BUCKETS && ns > stats_latency_le_ns[b])
		b++;
	STATS_ADD(s->latency_bucket[b], 1);
	STATS_ADD(s->latency_sum_ns, ns);
	STATS_ADD(s->latency_count, 1);
}

/* What a GEMM paid for on the serving path (backend_timing). */
static inline void stats_observe_planning(struct mfmad_stats *s, uint32_t plans, uint32_t measures)
{
	if (plans)
		STATS_ADD(s->plans_serving, plans);
	if (measures)
		STATS_ADD(s->measures_serving, measures);
}

/* A served trial of a choice ended, the measured order kept or changed. */
static inline void stats_observe_trial(struct mfmad_stats *s, bool changed)
{
	if (changed)
		STATS_ADD(s->trials_changed, 1);
	else
		STATS_ADD(s->trials_kept, 1);
}

static inline void stats_observe_batch(struct mfmad_stats *s, uint64_t requests)
{
	int b = 0;
	while (b < STATS_BATCH_BUCKETS && requests > stats_batch_le[b])
		b++;
	STATS_ADD(s->batch_bucket[b], 1);
	STATS_ADD(s->batch_sum, requests);
	STATS_ADD(s->batch_count, 1);
}

#endif
