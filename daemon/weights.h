/* The resident weight registry (loop thread).  A load is prepared once
 * on the libuv threadpool (check / compress / prune to the canonical 2:4
 * form, operand.h), then one job per target device makes it resident
 * there (each backend converts to its own order).  A weight is reserved
 * against each device's budget at its host size before any work starts,
 * then charged what the device really allocated.
 *
 * A replace is atomic: the old weight serves until the new one is
 * resident on every device it went to, and stays if the load fails. */
#ifndef MFMAD_WEIGHTS_H
#define MFMAD_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon.h"
#include "mfma.pb-c.h"
#include "operand.h"
#include "reply.h"

enum weight_state { WEIGHT_LOADING, WEIGHT_READY, WEIGHT_DEAD };

/* The outcome of a load the daemon asked for itself: code is the wire's
 * Code (OK or the refusal), msg its sentence. */
typedef void (*weights_done_fn)(struct daemon *d, void *arg, int code, const char *msg);

struct weight {
	struct weight *next;
	char name[128];
	uint32_t m, k;
	enum mfma_dtype dtype;
	bool sparse;
	uint64_t host_bytes;                   /* the canonical form */
	uint64_t charged[STATS_MAX_DEVICES];   /* against each device's budget */
	enum weight_state state;
	int refs;                              /* registry + jobs + a replacement */
	void *handle[STATS_MAX_DEVICES];       /* the backend's, per device */
	bool resident[STATS_MAX_DEVICES];
	bool target[STATS_MAX_DEVICES];
	int pending;                           /* device jobs not done yet */
	uint64_t requests, launches;           /* GEMMs answered, and their launches */
	/* The load's start (mfma_clock_ns), and its warming's longest time
	 * on a device and plans made on all (backend_ops.weight_warm), for
	 * the log line that says what the load cost. */
	uint64_t load_start_ns, warm_ns;
	uint32_t warm_plans, warm_measures;

	/* While loading. */
	struct request load;
	Mfma__V1__Request *req;                /* owns the bytes a points into */
	enum a_form form;
	struct operand_a a;
	uint64_t held;                         /* a client's load: in the daemon's inflight_bytes */
	struct weight *replaces;               /* with a reference */
	bool stored;                           /* wstore_write wrote its file */
	int code;
	char msg[512];
	uv_work_t work;

	/* A load the daemon made itself (a declared weight): told the
	 * outcome, with the message a client would have been sent. */
	weights_done_fn done;
	void *done_arg;

	/* An unload is answered once the device copies are freed, so that
	 * "unloaded" means the memory is back in the budget. */
	bool unload_pending;
	struct request unload;
};

/* A ready weight by name, or NULL. */
struct weight *weights_find(struct daemon *d, const char *name);
/* Whether a first load of this name is under way. */
bool weights_loading(struct daemon *d, const char *name);
/* Whether any load of this name is under way (a first one or a replace). */
bool weights_load_under_way(struct daemon *d, const char *name);
void weights_ref(struct weight *w);
void weights_unref(struct daemon *d, struct weight *w);

/* Take the request (and free it). */
void weights_handle_load(struct daemon *d, const struct request *r, Mfma__V1__Request *req);
void weights_handle_unload(struct daemon *d, const struct request *r, Mfma__V1__Request *req);

/* A LoadWeight the daemon makes itself, every part malloc'd as a decoded
 * one's (weights_load_internal frees it): name, and an A of rows x cols of
 * t, dense from values (values_len bytes) or, with meta, 2:4 from values
 * and meta.  It takes values and meta; NULL when out of memory (they are
 * then still the caller's). */
Mfma__V1__Request *weights_load_request(const char *name, uint32_t rows, uint32_t cols,
					enum mfma_dtype t, void *values, size_t values_len, void *meta,
					size_t meta_len);

/* A load the daemon makes itself (declare.c): req is a LoadWeight it owns
 * and hands over, done is called once with the outcome (possibly before
 * this returns).  Not stored in the state directory. */
void weights_load_internal(struct daemon *d, Mfma__V1__Request *req, weights_done_fn done,
			   void *arg);
/* Takes a ready weight out of service without a client's request (its
 * device copies go when the GEMMs holding it finish); false when no ready
 * weight has that name. */
bool weights_unload_internal(struct daemon *d, const char *name);

/* The ready weights as wire messages, for status and list replies. */
struct weight_list {
	size_t n;
	Mfma__V1__WeightInfo *info;
	Mfma__V1__WeightInfo **ptrs;
	uint32_t (*devs)[STATS_MAX_DEVICES];
};
int weights_list(const struct daemon *d, struct weight_list *l);
void weights_list_free(struct weight_list *l);

/* At start, before the listeners: loads every weight kept in the state
 * directory (weights_store.h) and runs the loop until each is resident or
 * has failed (a failure is logged, the daemon starts anyway).  A stored
 * weight whose name is declared (weights.declare) is not loaded and its
 * file is removed: the declaration wins.  Returns how many were restored. */
int weights_restore(struct daemon *d);

/* Shutdown: drops every weight; their device frees are queued. */
void weights_destroy(struct daemon *d);

#endif
