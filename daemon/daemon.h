/* The daemon's process-wide state, owned by the loop thread.  Each step
 * of the request path keeps its own state behind its own header:
 *
 *   listen.c   listeners and socket activation
 *   conn.c     one client connection: bytes in and out, backpressure
 *   dispatch.c decode, admission, routing by request kind
 *   reply.c    a request's identity and the replies to it
 *   info.c     ping, status and list, answered on the loop
 *   gemm.c     a GEMM: admission, the work on a device, the answer
 *   weights.c  the resident weight registry
 *   declare.c  the weights the configuration declares (weights.declare)
 *   scheduler.c per-device queues and workers (uv_queue_work shaped)
 *   devices.c  the backends compiled in and the devices they found
 *
 * Threads: the device workers touch only their queue (scheduler.c, under its
 * mutex), their device and the job they run; each device's post thread
 * only the jobs its worker handed it (for a GEMM: the answer's write, under
 * the connection's write lock, conn.c); each reader thread only the job
 * it was handed (a large frame's bytes, read into its connection's buffer
 * and decoded there, readers.c); everything else is the loop's. */
#ifndef MFMAD_DAEMON_H
#define MFMAD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "frame.h"
#include "log.h"
#include "stats.h"

struct choices;
struct conn;
struct declared;
struct device;
struct listeners;
struct readers;
struct sched;
struct weight;

struct frame_arena;

struct daemon {
	uv_loop_t *loop;
	struct mfmad_config cfg;
	struct mfmad_stats stats;
	const char *config_path; /* NULL: defaults only */
	struct mfmad_config cli; /* command-line overrides, re-applied on reload */
	unsigned cli_set;        /* bit mask of CLI_* below */

	struct device *dev;      /* devices.c */
	int ndev;
	struct sched *sched;     /* scheduler.c */
	struct weight *weights;  /* weights.c: the ready weights */
	struct declared *declared; /* declare.c: weights.declare and where each stands */
	/* Called by weights.c when a load of a name has ended, whatever its
	 * outcome (declare.c: a declaration that load held back loads now). */
	void (*load_over)(struct daemon *d, const char *name);
	struct choices *choices; /* choices.c: measured provider choices, NULL without a state dir */
	int state_lock;          /* main.c, state_lock.h: the state directory's lock, -1 for none */
	struct listeners *listeners; /* listen.c */
	struct conn *conns;      /* conn.c: every open connection */
	struct readers *readers; /* readers.c: NULL when limits.reader_threads is 0 */
	/* read_arena.c: request frames in memory the GPUs register; NULL
	 * when limits.pinned_reads_mb is 0. */
	struct frame_arena *read_arena;
	struct frame_mem read_mem;
	uint64_t next_conn_id;

	/* Requests held (reply.c): queued or running work, a load, an unload
	 * waiting for its frees, a frame decoding off the loop. */
	uint64_t inflight;
	/* Of those, the ones whose answer a device worker or post thread has
	 * already written (conn_send_direct, conn_send_posted) while the loop
	 * has not yet released them: the client may send its next request
	 * before that, and admission does not count them. */
	_Atomic uint64_t answered_early;
	uint64_t inflight_bytes; /* GEMMs' and loads' bytes, against limits.max_inflight_mb */
	/* conn.c: the other bytes clients make the daemon hold (read buffers,
	 * answers not yet written, at their real cost); with inflight_bytes
	 * they count against limits.max_memory_mb. */
	uint64_t buffered_bytes;
	uint64_t unsent_bytes;
	uint64_t held_peak;      /* since the last malloc_trim */
	/* regions.c: shared-memory regions of every connection. */
	uint64_t next_region_id;
	uint64_t region_bytes;   /* against limits.max_pinned_mb */
	uint32_t regions;
	uv_timer_t conn_timer;   /* timeouts, reading resumed, memory trimmed */
	uint32_t fd_conn_cap;    /* connections the fd limit allows (listen.c); 0: no cap */
	uint64_t refused[5];     /* connections refused, by enum conn_refusal */
	uint64_t refused_logged_ns[5];
	uint64_t refused_unlogged[5];
	/* Lines a client can cause as fast as it connects, each kind at most
	 * some a second (log_limited): connections closed for what their
	 * clients did (conn.c), weights loaded and unloaded (weights.c). */
	struct log_limit close_log, weight_log;
#define DAEMON_CLOSE_LOG_WHAT "connection(s) closed"
#define DAEMON_WEIGHT_LOG_WHAT "weight load(s) and unload(s)"

	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t grace_timer;
	bool stopping;
	bool grace_expired;
	bool drain_expired; /* answers had their time to be written */
	int exit_code;
	void *metrics;
};

enum {
	CLI_SOCKET = 1u << 0,
	CLI_TCP = 1u << 1,
	CLI_LOG = 1u << 2,
	CLI_THREADS = 1u << 3,
	CLI_METRICS = 1u << 4,
	CLI_BACKENDS = 1u << 5,
	CLI_CPU_DEVICES = 1u << 6,
};

#endif
