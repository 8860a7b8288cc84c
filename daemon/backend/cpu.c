/* The CPU backend: always built, the default where no GPU is found, and
 * the reference the GPU backends are tested against.  A "device" here is
 * a queue with its own worker; several may share the cores.  Each device
 * keeps a pool of threads (kernels/cpu/cpu_pool.h) from open to close,
 * and its GEMMs run on it: no thread is created per request. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cpu_gemm.h"
#include "cpu_pool.h"
#include "frame_arena.h"
#include "host_join.h"
#include "host_memory.h"
#include "mfma_clock.h"
#include "sparse24.h"

struct cpu_dev {
	struct cpu_pool *pool;
	/* Answer frames carved as a GPU's are (CPU_ARENA_ENV), else NULL. */
	struct frame_arena *answers;
	struct host_join join; /* a batched launch's joined B, C and D */
	/* CPU_LEAVE_ENV: batched launches reported as left running. */
	bool leave;
	/* Of the launches left running, oldest first (bit 0), those that were
	 * lone GEMMs: they end in the order they started. */
	unsigned left_lone;
	int left; /* of those, not yet ended */
	/* CPU_FAIL_BATCHES_ENV: every batched launch fails once it has run. */
	bool fail_batches;
	/* CPU_FAIL_LONE_ENV: every lone launch left running fails at its end. */
	bool fail_lone;
	/* CPU_LOAD_MS_ENV: every weight load's wait, ms. */
	unsigned load_ms;
	/* CPU_LOSE_ENV: GEMMs this device runs before it is lost (-1:
	 * never), and those asked so far (the loop's inline ones too). */
	long lose_after;
	_Atomic long gemms;
};

struct cpu_weight {
	struct mfma_weight_host h;
	void *a;
	uint32_t *meta;
};

static int cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static int cpu_threads_for(const struct backend_config *cfg)
{
	if (cfg->cpu_threads > 0)
		return cfg->cpu_threads;
	int per = cores() / (cfg->cpu_devices > 0 ? cfg->cpu_devices : 1);
	return per > 0 ? per : 1;
}

/* The CPU devices probe found: they share the host's memory. */
static int probed_devices = 1;

static int cpu_probe(const struct backend_config *cfg, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	probed_devices = cfg->cpu_devices > 0 ? cfg->cpu_devices : 1;
	return probed_devices;
}

static void cpu_model(char *buf, size_t len)
{
	snprintf(buf, len, "cpu");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[256];
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "model name", 10) == 0) {
			char *p = strchr(line, ':');
			if (p) {
				p++;
				while (*p == ' ')
					p++;
				p[strcspn(p, "\n")] = '\0';
				snprintf(buf, len, "%s", p);
			}
			break;
		}
	}
	fclose(f);
}

/* A testing aid, not a setting: the CPU has no use for an arena of answer
 * frames (it writes D into the frame wherever the frame is), but with one
 * the daemon's handling of frames carved from an arena (freed on the loop
 * and post threads, sealed for TLS, dropped with a closing connection,
 * falling back to the heap when full) runs, under the sanitizers too,
 * where there is no GPU.  MiB per device; unset or 0: none. */
#define CPU_ARENA_ENV "MFMAD_TEST_CPU_ANSWER_ARENA_MB"
/* A testing aid too: with "1", a batched launch the daemon lets be left
 * running (batching.overlap) is reported so, though the CPU has done it
 * (it has no device to run behind it), so that the daemon's worker starts
 * the next batch before it finishes this one, as with a GPU, under the
 * sanitizers where there is none; and a lone GEMM the loop thread starts
 * on an idle device (backend_timing.leave_only) runs there and is
 * reported left running, so that the worker finishes it as it finishes a
 * GPU's.  Without it such a start is refused (-EAGAIN): the CPU has no
 * device to run behind the loop. */
#define CPU_LEAVE_ENV "MFMAD_TEST_CPU_LEAVE"
/* A testing aid too: with "1", every batched launch fails after it has
 * run and written its parts' D (at its end when it was left running), as
 * a GPU's may fail part-way, so that the daemon's retry of each request
 * alone (its answer made afresh) runs where there is no GPU. */
#define CPU_FAIL_BATCHES_ENV "MFMAD_TEST_CPU_FAIL_BATCHES"
/* A testing aid too: with "1" (and CPU_LEAVE_ENV), a lone GEMM the loop
 * started and left running fails at its end, as a GPU's kernel fault
 * surfaces there, so that the daemon's answer to it (and its serving of
 * everyone else) runs where there is no GPU. */
#define CPU_FAIL_LONE_ENV "MFMAD_TEST_CPU_FAIL_LONE"
/* A testing aid too: milliseconds every weight load waits before it
 * copies, as a large weight's copy to a GPU takes, so that what the
 * daemon does while a weight is loading (a reload, an unload, another
 * load of the name) runs where there is no GPU.  Unset or 0: none. */
#define CPU_LOAD_MS_ENV "MFMAD_TEST_CPU_LOAD_MS"
/* A testing aid too: "D:N", CPU device D (of cpu.devices) loses its
 * "context" after N GEMMs: every GEMM and weight load after them fails
 * with -ENOTRECOVERABLE, as every call on a GPU does once a fault has lost
 * its context, so that the daemon's handling of a lost device
 * (devices_fault) is tested on any machine. */
#define CPU_LOSE_ENV "MFMAD_TEST_CPU_LOSE"

/* CPU_LOSE_ENV for device index: after how many GEMMs, or -1. */
static long lose_after_for(int index)
{
	const char *e = getenv(CPU_LOSE_ENV);
	char *end;
	if (!e)
		return -1;
	long dev = strtol(e, &end, 10);
	if (end == e || *end != ':' || dev != index)
		return -1;
	return strtol(end + 1, NULL, 10);
}

/* Whether the device is lost (CPU_LOSE_ENV), counting a GEMM asked when
 * `gemm`; err says so. */
static bool cpu_lost(struct cpu_dev *c, bool gemm, char *err, size_t errlen)
{
	if (c->lose_after < 0)
		return false;
	long n = gemm ? atomic_fetch_add(&c->gemms, 1) : atomic_load(&c->gemms);
	if (n < c->lose_after)
		return false;
	snprintf(err, errlen, "cpu: the device's context is lost (%s)", CPU_LOSE_ENV);
	return true;
}

static bool env_on(const char *name)
{
	const char *e = getenv(name);
	return e && strcmp(e, "1") == 0;
}

static int cpu_describe(int index, struct backend_device_info *info)
{
	(void)index;
	char model[96];
	struct utsname u;
	memset(info, 0, sizeof(*info));
	cpu_model(model, sizeof(model));
	snprintf(info->name, sizeof(info->name), "%s, %d cores", model, cores());
	snprintf(info->arch, sizeof(info->arch), "%.31s", uname(&u) == 0 ? u.machine : "cpu");
	/* Each device's share of what the process may use: the machine's
	 * memory, or its control group's limit where that is lower (so that
	 * the weight budget taken from it refuses a weight the cgroup would
	 * kill the daemon for). */
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
	info->mem_total = host_memory_usable(phys, "") / (uint64_t)probed_devices;
	info->batches = true;
	info->leaves_lone = env_on(CPU_LEAVE_ENV);
	snprintf(info->variants, sizeof(info->variants),
		 "cpu.sgemm.f32,cpu.sgemm.f16,cpu.sgemm.bf16,cpu.i8,"
		 "cpu.sp24.f32,cpu.sp24.f16,cpu.sp24.bf16,cpu.sp24.i8");
	return 0;
}

static int open_answers(struct cpu_dev *c, char *err, size_t errlen)
{
	const char *e = getenv(CPU_ARENA_ENV);
	unsigned long mb = e ? strtoul(e, NULL, 10) : 0;
	if (mb == 0)
		return 0;
	int rc = frame_arena_create((size_t)mb << 20, &c->answers);
	if (rc < 0)
		snprintf(err, errlen, "%s=%s: cannot make the arena (%s)", CPU_ARENA_ENV, e,
			 strerror(-rc));
	return rc;
}

static void *cpu_frame_alloc(void *dev, size_t len, size_t at)
{
	struct cpu_dev *c = dev;
	return c->answers ? frame_arena_alloc(c->answers, len, at) : NULL;
}

static int cpu_open(int index, const struct backend_config *cfg, void **dev, char *err,
		    size_t errlen)
{
	struct cpu_dev *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	int threads = cpu_threads_for(cfg);
	/* Process-wide, and the same for every CPU device: their share, or
	 * with cpu.threads left at 0, OPENBLAS_NUM_THREADS where it is set
	 * and smaller (as OpenBLAS itself would take it). */
	int blas = threads;
	const char *env = getenv("OPENBLAS_NUM_THREADS");
	long want = cfg->cpu_threads <= 0 && env ? strtol(env, NULL, 10) : 0;
	if (want > 0 && want < blas)
		blas = (int)want;
	cpu_gemm_set_blas_threads(blas);
	c->pool = cpu_pool_create((unsigned)threads);
	if (!c->pool) {
		free(c);
		snprintf(err, errlen, "out of memory for a pool of %d threads", threads);
		return -ENOMEM;
	}
	c->leave = env_on(CPU_LEAVE_ENV);
	c->fail_batches = env_on(CPU_FAIL_BATCHES_ENV);
	c->fail_lone = env_on(CPU_FAIL_LONE_ENV);
	const char *lms = getenv(CPU_LOAD_MS_ENV);
	c->load_ms = lms ? (unsigned)strtoul(lms, NULL, 10) : 0;
	c->lose_after = lose_after_for(index);
	int rc = open_answers(c, err, errlen);
	if (rc < 0) {
		cpu_pool_destroy(c->pool);
		free(c);
		return rc;
	}
	*dev = c;
	return 0;
}

static void cpu_close(void *dev)
{
	struct cpu_dev *c = dev;
	if (!c)
		return;
	cpu_pool_destroy(c->pool);
	host_join_free(&c->join);
	/* Answers still queued keep its memory until they are written. */
	frame_arena_close(c->answers);
	free(c);
}

/* The weight is copied: the registry frees its host copy once every
 * device holds one, exactly as for a GPU. */
static int cpu_weight_load(void *dev, const struct mfma_weight_host *w, void **handle,
			   uint64_t *dev_bytes, char *err, size_t errlen)
{
	struct cpu_dev *c = dev;
	if (c->load_ms) {
		struct timespec ts = { c->load_ms / 1000, (long)(c->load_ms % 1000) * 1000000L };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (cpu_lost(c, false, err, errlen))
		return -ENOTRECOVERABLE;
	size_t es = mfma_dtype_size(w->dtype);
	size_t abytes = w->sparse ? sparse24_values_bytes(w->m, w->k, es)
				  : sparse24_operand_bytes(w->m, w->k, es, 0);
	size_t mbytes = w->sparse ? sparse24_meta_bytes(w->m, w->k) : 0;
	struct cpu_weight *cw = calloc(1, sizeof(*cw));
	if (cw)
		cw->a = malloc(abytes);
	if (cw && mbytes)
		cw->meta = malloc(mbytes);
	if (!cw || !cw->a || (mbytes && !cw->meta)) {
		if (cw) {
			free(cw->a);
			free(cw->meta);
		}
		free(cw);
		snprintf(err, errlen, "out of host memory for a %zu-byte weight", abytes + mbytes);
		return -ENOMEM;
	}
	memcpy(cw->a, w->a, abytes);
	if (mbytes)
		memcpy(cw->meta, w->meta, mbytes);
	cw->h = *w;
	cw->h.a = cw->a;
	cw->h.meta = cw->meta;
	*handle = cw;
	*dev_bytes = abytes + mbytes;
	return 0;
}

static void cpu_weight_free(void *dev, void *handle)
{
	(void)dev;
	struct cpu_weight *cw = handle;
	if (!cw)
		return;
	free(cw->a);
	free(cw->meta);
	free(cw);
}

static int cpu_gemm(void *dev, const struct mfma_gemm *g, void *weight, struct backend_timing *t,
		    char *err, size_t errlen)
{
	struct cpu_dev *c = dev;
	const bool leave = t->may_leave && c->leave;
	if (t->leave_only && !leave)
		return -EAGAIN;
	if (cpu_lost(c, true, err, errlen))
		return -ENOTRECOVERABLE;
	/* A batched launch is one GEMM over the parts' columns joined. */
	struct mfma_gemm run = *g;
	t->gather_ns = t->split_ns = 0;
	if (g->nparts > 1) {
		uint64_t g0 = mfma_clock_ns();
		int rc = host_join_gather(&c->join, g, &run, err, errlen);
		if (rc < 0)
			return rc;
		t->gather_ns = mfma_clock_ns() - g0;
	}
	if (weight) {
		const struct cpu_weight *cw = weight;
		run.a = cw->h.a;
		run.a_meta = cw->h.meta;
		run.a_sparse = cw->h.sparse;
	}
	/* Host memory is the device memory: nothing to copy. */
	t->h2d_ns = 0;
	t->d2h_ns = 0;
	uint64_t t0 = mfma_clock_ns();
	int rc = cpu_gemm_run_pool(&run, c->pool, &t->variant);
	t->kernel_ns = mfma_clock_ns() - t0;
	t->launch_ns = 0;
	t->left = 0;
	if (rc < 0)
		snprintf(err, errlen, "cpu GEMM failed: %s", strerror(-rc));
	else if (g->nparts > 1) {
		uint64_t s0 = mfma_clock_ns();
		host_join_scatter(g, &run);
		t->split_ns = mfma_clock_ns() - s0;
	}
	if (rc == 0 && (g->nparts > 1 || t->leave_only) && leave) {
		if (c->left >= BACKEND_MAX_LEFT) {
			/* The daemon's side of the contract, checked. */
			snprintf(err, errlen, "cpu: %d launches left running are not ended",
				 c->left);
			return -EBUSY;
		}
		if (g->nparts <= 1)
			c->left_lone |= 1u << c->left;
		t->left = ++c->left;
		return rc;
	}
	if (rc == 0 && g->nparts > 1 && c->fail_batches) {
		snprintf(err, errlen, "cpu: batched launch failed (%s)", CPU_FAIL_BATCHES_ENV);
		return -EIO;
	}
	return rc;
}

static int cpu_gemm_end(void *dev, struct backend_timing *t, char *err, size_t errlen)
{
	struct cpu_dev *c = dev;
	if (t->left <= 0 || c->left <= 0) {
		snprintf(err, errlen, "cpu: gemm_end: no launch left running");
		return -EINVAL;
	}
	c->left--;
	t->left = 0; /* its times were filled when it ran */
	const bool lone = c->left_lone & 1u;
	c->left_lone >>= 1;
	if (lone && c->fail_lone) {
		snprintf(err, errlen, "cpu: lone launch failed at its end (%s)", CPU_FAIL_LONE_ENV);
		return -EIO;
	}
	if (c->fail_batches && !lone) {
		snprintf(err, errlen, "cpu: batched launch failed at its end (%s)",
			 CPU_FAIL_BATCHES_ENV);
		return -EIO;
	}
	return 0;
}

const struct backend_ops backend_cpu = {
	.name = "cpu",
	.gemm_inline = true,
	.probe = cpu_probe,
	.describe = cpu_describe,
	.open = cpu_open,
	.close = cpu_close,
	.weight_load = cpu_weight_load,
	.weight_free = cpu_weight_free,
	/* No weight_warm: the CPU runs every N with the same loop, nothing is planned per N. */
	.weight_warm = NULL,
	.gemm = cpu_gemm,
	.gemm_end = cpu_gemm_end,
	.frame_alloc = cpu_frame_alloc,
};
