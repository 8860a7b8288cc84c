/* The daemon's shared state.  The loop thread owns everything here except
 * what a struct says otherwise: a device's queue (its mutex) and the
 * completion list (done_mu), which the workers touch too. */
#ifndef MFMAD_DAEMON_H
#define MFMAD_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "backend.h"
#include "config.h"
#include "mfma.pb-c.h"
#include "stats.h"
#include "validate.h"

struct daemon;
struct conn;
struct weight;

enum job_kind { JOB_GEMM, JOB_WEIGHT_LOAD, JOB_WEIGHT_FREE };

struct job {
	enum job_kind kind;
	struct job *next;   /* completion list */
	struct conn *conn;  /* holds a reference; NULL for internal jobs */
	uint64_t id;        /* the client's request id */
	uint64_t arrival_ns, start_ns, deadline_ns;
	uint32_t prio;
	uint64_t seq;
	int dev;
	Mfma__V1__Request *req; /* owned */
	struct gemm_plan plan;
	struct weight *weight;  /* holds a reference */
	void *prep_values;      /* 2:4 form of a dense A, made on the worker */
	uint32_t *prep_meta;
	void *d;                /* output, plan.d_bytes */
	size_t in_bytes;        /* counted against limits.max_inflight_mb */
	/* Result. */
	int code; /* Mfma__V1__Code */
	char msg[512];
	struct backend_timing t;
	uint64_t decode_ns; /* off-loop decode of a large frame */
	uint64_t prep_ns;
	uint64_t queue_ns, total_ns;
	uint8_t *frame;     /* the encoded answer, header included (GEMM, OK) */
	size_t frame_len;
};

struct device {
	struct daemon *d;
	int index;              /* daemon-wide */
	int bindex;             /* within its backend */
	const struct backend_ops *ops;
	struct backend_device_info info;
	void *bdev;             /* worker thread only */
	struct stats_device *st;
	uint64_t budget;        /* weight bytes allowed */
	uint64_t weight_bytes;  /* loop-owned accounting (st mirrors it) */

	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job **heap;
	size_t heap_len, heap_cap;
	bool stop;
	int open_rc;            /* 1 while opening, then 0 or <0 */
	char open_err[256];
};

enum weight_state { WEIGHT_LOADING, WEIGHT_READY, WEIGHT_DEAD };

struct weight {
	struct weight *next;
	char name[128];
	uint32_t m, k;
	enum mfma_dtype dtype;
	bool sparse;
	uint64_t bytes;           /* host-format bytes, per device */
	enum weight_state state;
	int refs;                 /* registry + jobs; loop thread only */
	void *handle[STATS_MAX_DEVICES];
	bool resident[STATS_MAX_DEVICES];
	bool target[STATS_MAX_DEVICES];
	/* While loading. */
	Mfma__V1__Request *req;
	enum a_form form;
	void *values;             /* canonical host data, freed once resident everywhere */
	uint32_t *meta;
	int pending;
	int code;
	char msg[512];
	struct conn *conn;        /* who asked, with a reference */
	uint64_t req_id;
	uint64_t arrival_ns;
	uv_work_t work;
	/* An unload is answered once the device copies are freed, so that
	 * "unloaded" means the memory is back in the budget. */
	bool unload_pending;
	struct conn *unload_conn;
	uint64_t unload_id;
	uint64_t unload_arrival;
};

struct listener {
	union {
		uv_pipe_t pipe;
		uv_tcp_t tcp;
		uv_stream_t stream;
		uv_handle_t handle;
	} h;
	struct daemon *d;
	char what[160];
	bool activated; /* inherited from systemd: do not unlink the path */
	char path[108];
};

struct daemon {
	uv_loop_t *loop;
	struct mfmad_config cfg;
	struct mfmad_stats stats;
	const char *config_path; /* NULL: defaults only */
	struct mfmad_config cli; /* command-line overrides, re-applied on reload */
	unsigned cli_set;        /* bit mask of CLI_* below */

	struct device *dev;
	int ndev;

	struct weight *weights;

	struct listener lst[8];
	int nlst;

	struct conn *conns;
	uint64_t next_conn_id;
	uint64_t inflight;
	uint64_t inflight_bytes;
	uint64_t seq;
	unsigned pick_rr;

	pthread_mutex_t done_mu;
	struct job *done;
	uv_async_t done_async;

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

uint64_t now_ns(void);

/* sched.c: devices and their workers. */
int sched_start(struct daemon *d, char *err, size_t errlen);
/* Joins the workers after they ran what was queued; sched_free() then
 * releases the device table (after the last completions are drained). */
void sched_stop(struct daemon *d);
void sched_free(struct daemon *d);
void sched_submit(struct daemon *d, struct job *j);
/* Fails every queued (not started) job with UNAVAILABLE; used at the end
 * of the shutdown grace period. */
void sched_cancel_queued(struct daemon *d, const char *why);
/* The least loaded usable device among those with ok[i] set (NULL: all),
 * or -1. */
int sched_pick(struct daemon *d, const bool *ok);
void sched_complete(struct daemon *d, struct job *j); /* worker side */
void job_free(struct job *j);

/* weights.c: the registry (loop thread). */
struct weight *weights_find(struct daemon *d, const char *name);
void weights_handle_load(struct daemon *d, struct conn *c, Mfma__V1__Request *req, uint64_t arrival);
void weights_handle_unload(struct daemon *d, struct conn *c, Mfma__V1__Request *req, uint64_t arrival);
void weights_fill_info(const struct daemon *d, const struct weight *w, Mfma__V1__WeightInfo *wi,
		       uint32_t *devbuf);
void weights_load_done(struct daemon *d, struct job *j);
void weights_free_done(struct daemon *d, struct job *j);
void weight_unref(struct daemon *d, struct weight *w);
void weights_destroy(struct daemon *d);

/* server.c: listeners, connections, dispatch (loop thread). */
int server_listen(struct daemon *d, char *err, size_t errlen);
void server_close_listeners(struct daemon *d);
void server_drain_completions(uv_async_t *a);
void server_close_all(struct daemon *d);
void conn_unref(struct conn *c);
void conn_ref(struct conn *c);
/* Sends a response without a body: code and message. */
void server_reply_status(struct daemon *d, struct conn *c, uint64_t id, int code, const char *msg,
			 enum stats_kind kind, uint64_t arrival);
void server_reply(struct daemon *d, struct conn *c, Mfma__V1__Response *resp, enum stats_kind kind,
		  uint64_t arrival);
void server_check_stopped(struct daemon *d);
/* Applies a new limits.max_frame_mb to every open connection. */
void server_set_frame_limit(struct daemon *d, uint64_t bytes);
enum stats_result stats_result_of(int code);

#endif
