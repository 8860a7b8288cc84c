/* The device backend interface: one small table of functions per device
 * family (cpu, hip, cuda).  The scheduler and the weight registry are
 * written once against it.
 *
 * Threading: probe() and describe() run on the main thread before the
 * loop starts.  Everything else for one device runs on that device's
 * worker thread, which owns the device's context and streams; a backend
 * never sees two calls for the same device at once.
 *
 * Errors: 0 or a negative errno-style code; on failure the backend writes
 * a human sentence into err (errlen bytes, always NUL-terminated).
 * -ENOTRECOVERABLE, from any call, says the device can run nothing more
 * (a GPU whose context a fault has lost: every later call fails the same
 * way); the daemon then gives it no more work (devices_fault).  Backends
 * never log. */
#ifndef MFMAD_BACKEND_H
#define MFMAD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mfma_gemm.h"
#include "mfmad_build.h"
#include "providers.h"

/* What a measured choice among a device's providers is kept under: the
 * device (its name, driver version, the build of our kernels, the
 * providers it has and the libraries' versions, so that a new driver,
 * build or library is measured again), the weight, the N bucket and the
 * output type. */
struct backend_choice_key {
	char device[192];
	uint32_t m, k;
	uint32_t dtype;  /* enum mfma_dtype of the weight */
	uint32_t sparse; /* 0 or 1 */
	uint32_t n_max;  /* the N bucket's upper bound, inclusive */
	uint32_t out;    /* enum mfma_dtype of the answer */
};

/* The daemon's cache of measured choices (choices.c), which keeps them in
 * the state directory across restarts: a backend asks it before it times
 * the candidates and tells it the order it measured.  Any worker thread;
 * the daemon does the file I/O elsewhere, so these never block on a disk. */
struct backend_choices {
	/* The cached order for key (provider names, comma-separated, fastest
	 * first) into order; 0, or -ENOENT when there is none. */
	int (*get)(void *arg, const struct backend_choice_key *key, char *order, size_t len);
	/* Keeps an order just measured. */
	void (*put)(void *arg, const struct backend_choice_key *key, const char *order);
	void *arg;
};

/* What host memory given to backend_ops.host_register holds: a client's
 * shared-memory region, or the daemon's own frames (request frames read
 * into pinned memory).  A device may move the two differently. */
enum backend_host_use {
	BACKEND_HOST_REGION,
	BACKEND_HOST_FRAMES,
};

struct backend_config {
	int cpu_threads;       /* CPU backend: worker threads for one GEMM, <= 0 = all cores */
	int cpu_devices;       /* CPU backend: how many CPU "devices" (queues) to expose */
	uint64_t pinned_bytes; /* GPU backends: pinned staging pool per device; 0 = the
	                        * backend's default (not configurable yet) */
	struct provider_policy cuda_providers; /* cuda.providers */
	bool cuda_graphs;                      /* cuda.graphs: library launches from CUDA graphs */
	bool cuda_copy_stream;                 /* cuda.copy_stream: a batch's copy in beside the GEMM */
	/* cuda.region_copies: a batch whose parts lie in clients' regions
	 * moves them by the copy engines, its copy in on the copy stream */
	bool cuda_region_copies;
	/* cuda.out_stream: a batch's D split and copied out on a stream of
	 * its own, beside the next batch's GEMM (with the copy stream) */
	bool cuda_out_stream;
	/* cuda.gate: a resident weight's wgmma GEMM launches before its B is
	 * in, B copied on a stream of its own (cuda_dev_copy_in_gated) */
	bool cuda_gate;
	/* cuda.tile_out: a lone GEMM's wgmma kernel copies D into a mapped
	 * region or frame itself (cuda_dev_tile_out) */
	bool cuda_tile_out;
	uint64_t cuda_dma_part_bytes;          /* cuda.dma_parts_kb: mapped parts up to it by DMA */
	uint32_t cuda_served_trial;            /* cuda.served_trial: served launches per candidate */
	/* cuda.pinned_answers_mb: the arena of answer frames each CUDA
	 * device registers (frame_alloc); 0 = none */
	uint64_t cuda_pinned_answer_bytes;
	struct provider_policy hip_providers;  /* hip.providers */
	/* The cache of measured choices, NULL for none; it outlives every
	 * device. */
	const struct backend_choices *choices;
};

struct backend_device_info {
	char name[128];      /* e.g. "AMD Instinct MI300X", "NVIDIA H200", "cpu (2 threads)" */
	char arch[32];       /* e.g. "gfx942", "sm_90", "x86_64" */
	uint64_t mem_total;  /* bytes of device memory (host RAM for the CPU) */
	char variants[1024]; /* kernel variants this device can run, comma-separated */
	/* The kernel providers the device has, comma-separated, each "name",
	 * "name:pinned" or "name:excluded" (providers_describe); "" for a
	 * backend without providers (the CPU). */
	char providers[256];
	/* Input dtypes the device runs, as bits (1u << enum mfma_dtype), for a
	 * dense and for a 2:4 A; 0 means every dtype.  The scheduler routes by
	 * them, so a request never reaches a device without a kernel for it. */
	uint32_t dense_dtypes;
	uint32_t sparse_dtypes;
	/* The device runs batched launches (mfma_gemm.nparts >= 2) on a
	 * resident weight: the daemon batches only for such devices. */
	bool batches;
	/* The device may leave a lone GEMM's launch running
	 * (backend_timing.leave_only): the loop starts GEMMs only on such
	 * devices (limits.loop_start), so that no other pays for a refusal. */
	bool leaves_lone;
};

/* Appends item to the comma-separated list in buf (cap bytes, a C
 * string): whole or not at all, so a list that is full holds the items
 * that fit.  false when it did not fit. */
static inline bool backend_list_add(char *buf, size_t cap, const char *item)
{
	size_t len = strlen(buf), n = strlen(item), sep = len ? 1 : 0;
	if (len + sep + n >= cap)
		return false;
	if (sep)
		buf[len] = ',';
	memcpy(buf + len + sep, item, n + 1);
	return true;
}

#define BACKEND_DTYPE_BIT(t) (1u << (unsigned)(t))
static inline int backend_runs(const struct backend_device_info *info, enum mfma_dtype t,
			       int sparse)
{
	uint32_t mask = sparse ? info->sparse_dtypes : info->dense_dtypes;
	return mask == 0 || (mask & BACKEND_DTYPE_BIT(t)) != 0;
}

/* The most served launches per candidate a trial keeps the times of
 * (cuda.served_trial's bound), and the most candidates a trial serves. */
#define BACKEND_TRIAL_MAX 64
#define BACKEND_TRIAL_CANDIDATES 4

struct backend_timing {
	uint64_t h2d_ns, kernel_ns, d2h_ns;
	/* Host time the launch call took (enqueueing the kernels; a vendor
	 * library's call does its own host work too).  Where it is longer
	 * than the copy in, the GPU waited for it, and kernel_ns includes
	 * the wait.  0 where the backend does not measure it. */
	uint64_t launch_ns;
	/* Host time of a batched launch's gather (its parts' B and C into
	 * the joined matrices) and split (the joined D back to the parts)
	 * calls, beside the launch call; 0 for a launch that is not batched
	 * or a backend that does not measure them. */
	uint64_t gather_ns, split_ns;
	const char *variant; /* static string naming the kernel that ran */
	/* What this GEMM paid for on the serving path: per-N states a
	 * provider made (a library's plan, cuSPARSELt's with its algorithm
	 * search) and measured choices among providers (the candidates
	 * timed).  0 for a backend that has neither. */
	uint32_t plans, measures;
	/* A served trial of a measured choice ended with this GEMM: 0 none,
	 * else enum backend_trial_end; then its trial_n candidates' variants
	 * and the medians of their kernel times as served, fastest first (the
	 * one that leads from now on). */
	uint8_t trial_end;
	uint8_t trial_n;
	const char *trial_variant[BACKEND_TRIAL_CANDIDATES];
	uint64_t trial_median_ns[BACKEND_TRIAL_CANDIDATES];
	/* B's copy ran beside the kernel's start (cuda.gate): h2d_ns is the
	 * copy and kernel_ns only what followed it. */
	bool gated;
	/* The kernel copied D into registered host memory itself
	 * (cuda.tile_out): kernel_ns holds D's crossing, d2h_ns next to
	 * nothing. */
	bool tile_out;
	/* In: the caller lets the launch be left running
	 * (backend_ops.gemm_end): a batched one (nparts >= 2), or a lone one
	 * whose D the device writes straight into registered host memory.
	 * Out: 0, or the launch was left running: its answers' D are not
	 * written yet and the times above not filled until gemm_end with
	 * this timing. */
	bool may_leave;
	/* In, with may_leave: start the launch only if it will be left
	 * running, else return -EAGAIN having done nothing on the device (the
	 * loop thread starts an idle device's lone GEMM this way and must not
	 * wait for one, nor for a measured choice or a served trial). */
	bool leave_only;
	int left;
};

/* Launches a backend with gemm_end lets be left running at once (the
 * scheduler holds two batches and starts a third behind them: a GPU then
 * has the next GEMM queued while the worker waits for the oldest one's
 * copy out). */
#define BACKEND_MAX_LEFT 3

enum backend_trial_end { BACKEND_TRIAL_KEPT = 1, BACKEND_TRIAL_CHANGED = 2 };

/* What weight_warm prepares a resident weight for: the N a GEMM on it
 * may have, from what the daemon batches now (batching.max_columns is
 * live on SIGHUP; widths a later limit adds are planned on first use). */
struct backend_warm {
	bool batching;        /* the daemon batches on this device */
	uint32_t max_columns; /* batching.max_columns */
};

/* What a warming did. */
struct backend_warm_report {
	uint32_t widths;      /* N widths prepared, each for every output type */
	uint32_t widths_left; /* widths past the backend's bound, left to the serving path */
	uint32_t plans;       /* per-N states made */
	uint32_t measures;    /* choices measured (the others came from the cache) */
};

struct backend_ops {
	const char *name; /* "cpu", "hip", "cuda" */
	/* A digest of the GPU kernels built in (cuda: nv_images_stamp, which
	 * the key of its cached choices carries), NULL for none: what
	 * mfmad --version prints beside the backend. */
	const char *kernels;
	/* Whether the loop thread may run a small GEMM of this backend's
	 * itself (sched_run_inline: only while the device's worker waits with
	 * nothing running, so still one thread at a time): a device of plain
	 * host memory, with no context bound to its worker thread (the CPU). */
	bool gemm_inline;

	/* Number of devices (0 when the runtime or the hardware is absent,
	 * which is not an error), or a negative code with err filled. */
	int (*probe)(const struct backend_config *cfg, char *err, size_t errlen);
	int (*describe)(int index, struct backend_device_info *info);

	/* Worker thread from here on. */
	int (*open)(int index, const struct backend_config *cfg, void **dev, char *err,
		    size_t errlen);
	void (*close)(void *dev);

	/* Makes a weight resident, converting the canonical 2:4 format to the
	 * device's own order once; *handle is passed back to gemm().
	 * *dev_bytes is what the copy really occupies on the device (its
	 * packed layout, padding included): the registry charges that, not
	 * the host-format size, to the device's weight budget. */
	int (*weight_load)(void *dev, const struct mfma_weight_host *w, void **handle,
			   uint64_t *dev_bytes, char *err, size_t errlen);
	void (*weight_free)(void *dev, void *handle);
	/* Optional (NULL: the backend has nothing to prepare per N, as the
	 * CPU and HIP backends today).  Right after weight_load, off the
	 * serving path: makes the measured choice and every per-N state the
	 * weight's GEMMs would make on first use, for the N in warm and
	 * every output type, on the device's own scratch operands.  A
	 * failure part-way leaves the weight usable (what is not prepared is
	 * made on first use, as without warming) and says why in err; rep
	 * counts what was done either way. */
	int (*weight_warm)(void *dev, void *handle, const struct backend_warm *warm,
			   struct backend_warm_report *rep, char *err, size_t errlen);

	/* Runs one GEMM: copies in, launches, copies out, synchronises, and
	 * fills the timing.  When weight is not NULL it is a handle from
	 * weight_load and replaces g->a / g->a_meta / g->a_sparse. */
	int (*gemm)(void *dev, const struct mfma_gemm *g, void *weight, struct backend_timing *t,
		    char *err, size_t errlen);
	/* Optional (NULL: gemm never leaves a launch running).  Waits for the
	 * launch gemm left running (t->left) and fills t's times; a failure
	 * there (a kernel fault) fails the launch as gemm would have.  The
	 * caller may have up to BACKEND_MAX_LEFT launches left running at
	 * once, finishes them in the order they started, and with that many
	 * left finishes the oldest before it starts one more: the device's
	 * next launches then run behind those left running, with no wait on
	 * the host between them. */
	int (*gemm_end)(void *dev, struct backend_timing *t, char *err, size_t errlen);

	/* Registers host memory [p, p + len) (a client's shared-memory
	 * region mapped by the daemon, or the daemon's frames: use) with the
	 * device's runtime, so that copies from and into it are DMA with no
	 * staging copy; *handle goes back to host_unregister, which is called
	 * before the memory is unmapped and only once no GEMM uses it.  NULL
	 * for a device that reads any host memory alike (the CPU). */
	int (*host_register)(void *dev, void *p, size_t len, enum backend_host_use use,
			     void **handle, char *err, size_t errlen);
	void (*host_unregister)(void *dev, void *handle);

	/* Optional (NULL: answers are malloc'ed, as on HIP; the CPU's says
	 * NULL unless a testing aid gives it an arena, cpu.c).  Memory for a
	 * GEMM's answer frame of len bytes that the device copies D into
	 * directly (host memory it registered, no staging copy), with the
	 * byte at offset `at` (D's first) aligned for its copies:
	 * frame_arena_alloc on the device's arena.  NULL when it has none
	 * free now: the daemon then uses malloc, never waits.  The frame is
	 * freed with frame_arena_free on any thread, after close() too
	 * (answers still queued on sockets outlive the device), which is why
	 * there is no frame_free here. */
	void *(*frame_alloc)(void *dev, size_t len, size_t at);
};

extern const struct backend_ops backend_cpu;
#ifdef MFMAD_HAVE_HIP
extern const struct backend_ops backend_hip;
#endif
#ifdef MFMAD_HAVE_CUDA
extern const struct backend_ops backend_cuda;
#endif

#endif
