/* The device layer of the CUDA backend (cuda_device.h): NVIDIA GPUs
 * through the driver API, from C, with nothing about any kernel.
 *
 * The driver library is opened at run time (kernels/nvidia/nv_driver.h):
 * without it, or without a GPU, probing finds zero devices.  An open device
 * retains its primary context and works on one stream.  Copies go through
 * a pinned staging pool, split in two halves so that filling one half on
 * the host overlaps the DMA of the other; host memory registered with the
 * device (a client's shared-memory region) is copied from and into
 * directly instead.  Four events per request time the copies in, the
 * kernels and the copy out. */
#include "mfmad_build.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_time.h"
#include "copy_pool.h"
#include "cuda_device.h"
#include "frame_arena.h"
#include "host_ranges.h"
#include "mfma_clock.h"

#define CUDA_MAX_DEVICES 64
#define CUDA_DEFAULT_PINNED (64u << 20)
#define CUDA_MIN_PINNED (2u << 20)

/* What probing learned; read by describe and open. */
struct cuda_slot {
	CUdevice dev;
	int cc;
	char name[128];
	uint64_t mem_total;
};

static struct cuda_slot slots[CUDA_MAX_DEVICES];
static int nslots;

enum { EV_START, EV_IN, EV_KERNEL, EV_OUT, EV_COUNT };

struct cuda_dev {
	struct cuda_slot *slot;
	CUcontext ctx;
	CUstream stream;
	/* Two sets of timing events, so that a launch left running
	 * (cuda_dev_copy_out_leave) keeps its own while the next one records
	 * into the other; set is the one the next marks go to. */
	CUevent ev[CUDA_EVENT_SETS][EV_COUNT];
	int set;
	/* Launches left running and not yet finished (at most two). */
	int left;
	/* A lone launch may be left running (cuda_dev_lone_begin), and the
	 * set its copy out left running in, or -1. */
	bool lone;
	int lone_set;
	/* Host time spent copying the last chunk out of the pool, after the
	 * end event: part of the D2H time. */
	uint64_t out_tail_ns[CUDA_EVENT_SETS];
	/* Host clock when the marks before and after the kernels were
	 * recorded: the launch call's time (backend_timing.launch_ns). */
	uint64_t mark_in_ns[CUDA_EVENT_SETS], mark_kernel_ns[CUDA_EVENT_SETS];
	bool graphs; /* cuda.graphs: cuda_dev_graph_run replays */
	/* Pinned staging pool: two halves, each with the event of the last
	 * copy that used it. */
	unsigned char *pin;
	size_t pin_half;
	CUevent pin_ev[2];
	int pin_busy[2];
	struct cuda_buf scratch[CUDA_SCRATCH_COUNT];
	/* Host ranges registered with cuMemHostRegister (worker thread only). */
	struct host_ranges regs;
	/* Operands already on the device (cuda_dev_on_device). */
	struct cuda_dev_range ondev[CUDA_MAX_ON_DEVICE];
	size_t nondev;
	/* Per-N states the providers made (cuda_dev_count_plan), and whether
	 * a weight is being warmed at load now. */
	uint64_t plans;
	bool warming;
	/* A team for the host side of staged copies (NULL: the worker alone). */
	struct cpu_pool *copies;
	/* Answer frames in registered memory (cuda_dev_frame_alloc); NULL
	 * with cuda.pinned_answers_mb = 0. */
	struct frame_arena *answers;
	/* B's copy ahead of a gated kernel (cuda_dev_copy_in_gated): its
	 * stream, the event it waits on (the device's stream up to the
	 * copy), the word it sets and the last count set; made at the first
	 * gated copy.  gate_on: cuda.gate, and the driver has the stream
	 * write. */
	bool gate_on;
	CUstream gate_stream;
	CUevent gate_ev;
	struct cuda_buf gate_word;
	uint32_t gate_seq;
	/* Whether the launch whose marks went to each event set was gated. */
	bool set_gated[CUDA_EVENT_SETS];
	/* cuda.tile_out: a lone launch's wgmma kernel copies D into mapped
	 * host memory itself (cuda_dev_tile_out); tile_out_dst is that D
	 * while the launch is made (NULL otherwise), and set_tile_out says
	 * which event sets' launches did so. */
	bool tile_out_on;
	void *tile_out_dst;
	bool set_tile_out[CUDA_EVENT_SETS];
	/* The two events of cuda_dev_time, made at its first use, and the
	 * timings it made. */
	CUevent time_ev[2];
	uint64_t timings;
};

int cuda_fail(CUresult r, char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "cuda: %s failed: %s", what, nv_result_str(r));
	return nv_result_errno(r);
}

#define CU_TRY(call, what)                                        \
	do {                                                      \
		CUresult r_ = (call);                             \
		if (r_ != CUDA_SUCCESS)                           \
			return cuda_fail(r_, err, errlen, what);  \
	} while (0)

/* cuInit results that mean "no usable NVIDIA GPU here" rather than a
 * failure of the daemon. */
static int init_means_no_device(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_SYSTEM_NOT_READY:
	case CUDA_ERROR_STUB_LIBRARY:
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
	case CUDA_ERROR_DEVICE_NOT_LICENSED:
	case CUDA_ERROR_OPERATING_SYSTEM:
		return 1;
	default:
		return 0;
	}
}

int cuda_dev_probe(cuda_usable_fn usable, char *err, size_t errlen)
{
	nslots = 0;
	int rc = nv_driver_open(err, errlen);
	if (rc == -ENOENT)
		return 0; /* no driver: no devices (err says so) */
	if (rc < 0)
		return rc;
	CUresult r = nv_drv.cuInit(0);
	if (r != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuda: no usable device: cuInit: %s", nv_result_str(r));
		return init_means_no_device(r) ? 0 : nv_result_errno(r);
	}
	int count = 0;
	CU_TRY(nv_drv.cuDeviceGetCount(&count), "cuDeviceGetCount");
	for (int i = 0; i < count && nslots < CUDA_MAX_DEVICES; i++) {
		struct cuda_slot *s = &slots[nslots];
		struct nv_device_attrs at;
		size_t mem = 0;
		char why[200];
		CU_TRY(nv_drv.cuDeviceGet(&s->dev, i), "cuDeviceGet");
		int rc = nv_device_attrs(s->dev, &at, why, sizeof(why));
		if (rc < 0) {
			snprintf(err, errlen, "cuda: %s", why);
			return rc;
		}
		s->cc = at.cc;
		if (!usable(s->cc))
			continue;
		CU_TRY(nv_drv.cuDeviceGetName(s->name, (int)sizeof(s->name), s->dev), "cuDeviceGetName");
		CU_TRY(nv_drv.cuDeviceTotalMem(&mem, s->dev), "cuDeviceTotalMem");
		s->mem_total = mem;
		nslots++;
	}
	if (nslots == 0)
		snprintf(err, errlen, "cuda: %d device(s), none sm_80+ with kernels built for it", count);
	return nslots;
}

int cuda_dev_count(void)
{
	return nslots;
}

int cuda_slot_cc(int index)
{
	return index >= 0 && index < nslots ? slots[index].cc : 0;
}

int cuda_slot_describe(int index, struct backend_device_info *info)
{
	if (index < 0 || index >= nslots || !info)
		return -EINVAL;
	const struct cuda_slot *s = &slots[index];
	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", s->name);
	snprintf(info->arch, sizeof(info->arch), "sm_%d", s->cc);
	info->mem_total = s->mem_total;
	return 0;
}

void cuda_buf_free(struct cuda_buf *b)
{
	if (b->p)
		nv_drv.cuMemFree(b->p);
	b->p = 0;
	b->cap = 0;
}

int cuda_buf_need(struct cuda_buf *b, size_t size, const char *what, int *grown, char *err,
		  size_t errlen)
{
	if (grown)
		*grown = 0;
	if (size == 0 || size <= b->cap)
		return 0;
	/* Work left running (a batch whose answers are collected later, a
	 * copy on another stream) may still read the old buffer: cuMemFree
	 * of cuMemAlloc's memory waits for the device's streams (the CUDA
	 * programming guide: cudaMalloc and cudaFree "cause the GPU to
	 * synchronize across all executing CUDA streams"; only the
	 * stream-ordered allocator's memory is freed without it). */
	cuda_buf_free(b);
	CUresult r = nv_drv.cuMemAlloc(&b->p, size);
	if (r != CUDA_SUCCESS) {
		b->p = 0;
		snprintf(err, errlen, "cuda: allocating %zu bytes for %s failed: %s", size, what,
			 nv_result_str(r));
		return nv_result_errno(r);
	}
	b->cap = size;
	if (grown)
		*grown = 1;
	return 0;
}

struct cuda_buf *cuda_dev_scratch(struct cuda_dev *d, enum cuda_scratch which)
{
	return &d->scratch[which];
}

CUdevice cuda_dev_device(const struct cuda_dev *d)
{
	return d->slot->dev;
}

int cuda_dev_cc(const struct cuda_dev *d)
{
	return d->slot->cc;
}

CUstream cuda_dev_stream(const struct cuda_dev *d)
{
	return d->stream;
}

void cuda_dev_count_plan(struct cuda_dev *d)
{
	d->plans++;
}

uint64_t cuda_dev_plans(const struct cuda_dev *d)
{
	return d->plans;
}

void cuda_dev_set_warming(struct cuda_dev *d, bool on)
{
	d->warming = on;
}

bool cuda_dev_warming(const struct cuda_dev *d)
{
	return d->warming;
}

uint64_t cuda_dev_timings(const struct cuda_dev *d)
{
	return d->timings;
}

int cuda_dev_enter(struct cuda_dev *d, char *err, size_t errlen)
{
	CU_TRY(nv_drv.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent");
	return 0;
}

void cuda_dev_close(struct cuda_dev *d)
{
	if (!d)
		return;
	if (d->ctx) {
		nv_drv.cuCtxSetCurrent(d->ctx);
		if (d->stream)
			nv_drv.cuStreamSynchronize(d->stream);
		for (int i = 0; i < CUDA_SCRATCH_COUNT; i++)
			cuda_buf_free(&d->scratch[i]);
		for (int s = 0; s < CUDA_EVENT_SETS; s++)
			for (int i = 0; i < EV_COUNT; i++)
				if (d->ev[s][i])
					nv_drv.cuEventDestroy(d->ev[s][i]);
		for (int i = 0; i < 2; i++)
			if (d->pin_ev[i])
				nv_drv.cuEventDestroy(d->pin_ev[i]);
		if (d->gate_stream) {
			nv_drv.cuStreamSynchronize(d->gate_stream);
			nv_drv.cuStreamDestroy(d->gate_stream);
		}
		if (d->gate_ev)
			nv_drv.cuEventDestroy(d->gate_ev);
		for (int i = 0; i < 2; i++)
			if (d->time_ev[i])
				nv_drv.cuEventDestroy(d->time_ev[i]);
		cuda_buf_free(&d->gate_word);
		if (d->pin)
			nv_drv.cuMemFreeHost(d->pin);
		if (d->stream)
			nv_drv.cuStreamDestroy(d->stream);
		for (size_t i = 0; i < d->regs.n; i++)
			if (d->regs.v[i].owned)
				nv_drv.cuMemHostUnregister((void *)d->regs.v[i].base);
		nv_drv.cuDevicePrimaryCtxRelease(d->slot->dev);
	}
	/* After the stream's last copy and the unregistration: answers
	 * still queued on sockets keep the memory, plain now, until they
	 * are written. */
	frame_arena_close(d->answers);
	cpu_pool_destroy(d->copies);
	host_ranges_free(&d->regs);
	free(d);
}

/* ---- registered host memory ---- */

int cuda_dev_host_register(struct cuda_dev *d, void *p, size_t len, bool region, char *err,
			   size_t errlen)
{
	if (host_ranges_overlap(&d->regs, (uintptr_t)p, len)) {
		snprintf(err, errlen, "cuda: %zu bytes at %p overlap host memory registered already",
			 len, p);
		return -EEXIST;
	}
	/* Portable: every device's context sees the pages as pinned.  The
	 * device that registers them first owns the registration; the
	 * others are told the range is registered (or mapped) already, and
	 * copy from it all the same.  Mapped too, so that kernels can read
	 * and write the pages across the bus (a batched launch's parts:
	 * cuda_dev_mapped). */
	CUresult r = nv_drv.cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE |
							      CU_MEMHOSTREGISTER_DEVICEMAP);
	bool owned = r == CUDA_SUCCESS;
	if (r != CUDA_SUCCESS && r != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED &&
	    r != CUDA_ERROR_ALREADY_MAPPED)
		return cuda_fail(r, err, errlen, "cuMemHostRegister");
	/* Without a device address (a range some other part of the process
	 * registered unmapped) the DMA copies still serve. */
	CUdeviceptr dp = 0;
	bool mapped = nv_drv.cuMemHostGetDevicePointer(&dp, p, 0) == CUDA_SUCCESS;
	const struct host_range h = { (uintptr_t)p, len, owned, mapped, region,
				      (uint64_t)dp - (uint64_t)(uintptr_t)p };
	int rc = host_ranges_add(&d->regs, &h);
	if (rc < 0) {
		if (owned)
			nv_drv.cuMemHostUnregister(p);
		snprintf(err, errlen, "cuda: %s registering host memory",
			 rc == -ENOMEM ? "out of memory" : "a bad range");
		return rc;
	}
	return 0;
}

void cuda_dev_host_unregister(struct cuda_dev *d, void *p)
{
	struct host_range h;
	if (!host_ranges_remove(&d->regs, (uintptr_t)p, &h))
		return;
	/* Copies from or into it may still be queued on the stream. */
	if (d->gate_stream)
		nv_drv.cuStreamSynchronize(d->gate_stream);
	nv_drv.cuStreamSynchronize(d->stream);
	if (h.owned)
		nv_drv.cuMemHostUnregister(p);
}

bool cuda_dev_registered(const struct cuda_dev *d, const void *p, size_t len)
{
	return host_ranges_find(&d->regs, p, len) != NULL;
}

bool cuda_dev_mapped(const struct cuda_dev *d, const void *p, size_t len, CUdeviceptr *dp,
		     bool *region)
{
	const struct host_range *r = host_ranges_find(&d->regs, p, len);
	if (!r || !r->mapped)
		return false;
	*dp = (CUdeviceptr)((uint64_t)(uintptr_t)p + r->dev_off);
	*region = r->region;
	return true;
}

/* The arena of answer frames: mapped, then registered as a client's
 * region is (portable and mapped, so that a batch's kernel writes its
 * parts of D into the frames across the bus), and owned by the device,
 * which unregisters it at close. */
static int open_answers(struct cuda_dev *d, uint64_t bytes, char *err, size_t errlen)
{
	int rc = frame_arena_create((size_t)bytes, &d->answers);
	if (rc < 0) {
		snprintf(err, errlen,
			 "cuda: cannot map %llu MiB for answer frames (%s); cuda.pinned_answers_mb = 0 "
			 "turns them off",
			 (unsigned long long)(bytes >> 20), strerror(-rc));
		return rc;
	}
	char why[200];
	rc = cuda_dev_host_register(d, frame_arena_base(d->answers), frame_arena_bytes(d->answers),
				    false, why, sizeof(why));
	if (rc < 0) {
		snprintf(err, errlen,
			 "%s (registering %llu MiB for answer frames; cuda.pinned_answers_mb = 0 turns "
			 "them off)",
			 why, (unsigned long long)(bytes >> 20));
		frame_arena_close(d->answers);
		d->answers = NULL;
	}
	return rc;
}

void *cuda_dev_frame_alloc(struct cuda_dev *d, size_t len, size_t at)
{
	return d->answers ? frame_arena_alloc(d->answers, len, at) : NULL;
}

struct frame_arena *cuda_dev_answers(const struct cuda_dev *d)
{
	return d->answers;
}

int cuda_dev_open(int index, const struct backend_config *cfg, struct cuda_dev **dev, char *err,
		  size_t errlen)
{
	if (index < 0 || index >= nslots || !dev) {
		snprintf(err, errlen, "cuda: device index %d out of range (0..%d)", index, nslots - 1);
		return -EINVAL;
	}
	struct cuda_dev *d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "cuda: out of host memory");
		return -ENOMEM;
	}
	d->slot = &slots[index];
	int rc;
	CUresult r = nv_drv.cuDevicePrimaryCtxRetain(&d->ctx, d->slot->dev);
	if (r != CUDA_SUCCESS) {
		d->ctx = NULL;
		rc = cuda_fail(r, err, errlen, "cuDevicePrimaryCtxRetain");
		goto out;
	}
	if ((r = nv_drv.cuCtxSetCurrent(d->ctx)) != CUDA_SUCCESS) {
		rc = cuda_fail(r, err, errlen, "cuCtxSetCurrent");
		goto out;
	}
	if ((r = nv_drv.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		rc = cuda_fail(r, err, errlen, "cuStreamCreate");
		goto out;
	}
	for (int s = 0; s < CUDA_EVENT_SETS; s++)
		for (int i = 0; i < EV_COUNT; i++)
			if ((r = nv_drv.cuEventCreate(&d->ev[s][i], CU_EVENT_DEFAULT)) !=
			    CUDA_SUCCESS) {
				rc = cuda_fail(r, err, errlen, "cuEventCreate");
				goto out;
			}
	for (int i = 0; i < 2; i++)
		if ((r = nv_drv.cuEventCreate(&d->pin_ev[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
			rc = cuda_fail(r, err, errlen, "cuEventCreate");
			goto out;
		}
	d->graphs = cfg && cfg->cuda_graphs;
	d->gate_on = cfg && cfg->cuda_gate && nv_drv.cuStreamWriteValue32;
	d->tile_out_on = cfg && cfg->cuda_tile_out;
	size_t pinned = cfg && cfg->pinned_bytes ? (size_t)cfg->pinned_bytes : CUDA_DEFAULT_PINNED;
	if (pinned < CUDA_MIN_PINNED)
		pinned = CUDA_MIN_PINNED;
	void *pin = NULL;
	if ((r = nv_drv.cuMemHostAlloc(&pin, pinned, 0)) != CUDA_SUCCESS) {
		rc = cuda_fail(r, err, errlen, "cuMemHostAlloc (pinned staging pool)");
		goto out;
	}
	d->pin = pin;
	d->pin_half = pinned / 2 / 256 * 256;
	/* Without a team (out of memory) the copies run on the worker alone. */
	d->copies = cpu_pool_create(copy_pool_threads_for(sysconf(_SC_NPROCESSORS_ONLN)));
	if (cfg && cfg->cuda_pinned_answer_bytes &&
	    (rc = open_answers(d, cfg->cuda_pinned_answer_bytes, err, errlen)) < 0)
		goto out;
	*dev = d;
	return 0;
out:
	cuda_dev_close(d);
	return rc;
}

/* Waits until half h of the pool is free again. */
static int pin_wait(struct cuda_dev *d, int h, char *err, size_t errlen)
{
	if (!d->pin_busy[h])
		return 0;
	d->pin_busy[h] = 0;
	CU_TRY(nv_drv.cuEventSynchronize(d->pin_ev[h]), "cuEventSynchronize(staging)");
	return 0;
}

static int pin_mark(struct cuda_dev *d, int h, char *err, size_t errlen)
{
	CU_TRY(nv_drv.cuEventRecord(d->pin_ev[h], d->stream), "cuEventRecord(staging)");
	d->pin_busy[h] = 1;
	return 0;
}

/* ---- operands already on the device ---- */

void cuda_dev_on_device(struct cuda_dev *d, const struct cuda_dev_range *r, size_t n)
{
	d->nondev = n < CUDA_MAX_ON_DEVICE ? n : CUDA_MAX_ON_DEVICE;
	for (size_t i = 0; i < d->nondev; i++)
		d->ondev[i] = r[i];
}

/* Whether [p, p + len) lies inside one of the operands on the device. */
static bool on_device(const struct cuda_dev *d, const void *p, size_t len)
{
	uint64_t a = (uint64_t)(uintptr_t)p;
	for (size_t i = 0; i < d->nondev; i++)
		if (a >= d->ondev[i].p && len <= d->ondev[i].len && a - d->ondev[i].p <= d->ondev[i].len - len)
			return true;
	return false;
}

static void chunk_copy(struct cuda_dev *d, cuda_give_fn give, cuda_take_fn take, void *arg,
		       size_t off, unsigned char *p, size_t len);

/* give for a contiguous host source (arg). */
static void give_from(void *arg, size_t off, unsigned char *dst, size_t len)
{
	memcpy(dst, (const unsigned char *)arg + off, len);
}

/* A copy in that needs no staging (src registered, or on the device),
 * on stream st; with zero_gap, the gap after each row zero-filled. */
static int direct_copy_in(CUstream st, CUdeviceptr dst, size_t dpitch, const void *src, bool dev_src,
			  bool zero_gap, size_t rows, size_t row_bytes, char *err, size_t errlen)
{
	if (dev_src && dpitch == row_bytes) {
		CU_TRY(nv_drv.cuMemcpyDtoDAsync(dst, (CUdeviceptr)(uintptr_t)src, rows * row_bytes, st),
		       "cuMemcpyDtoDAsync(operand on the device)");
		return 0;
	}
	if (dpitch == row_bytes) {
		CU_TRY(nv_drv.cuMemcpyHtoDAsync(dst, src, rows * row_bytes, st), "cuMemcpyHtoDAsync(registered)");
		return 0;
	}
	if (zero_gap)
		CU_TRY(nv_drv.cuMemsetD8Async(dst, 0, rows * dpitch, st), "cuMemsetD8Async");
	CU_TRY(nv_copy_rows_in(dst, dpitch, dev_src ? NULL : src, dev_src ? (CUdeviceptr)(uintptr_t)src : 0,
			       row_bytes, row_bytes, rows, st),
	       "cuMemcpy2DAsync(registered)");
	return 0;
}

/* The largest B a kernel waits for at its gate.  The kernel gives up
 * (traps, which loses the context) when B is not in 2 s after it starts
 * waiting: a copy of this much is in well before that on any link a GPU
 * runs on, and a larger one gains nothing from the gate (its few
 * microseconds are lost in the copy). */
#define GATE_MAX_BYTES ((size_t)64 << 20)

int cuda_dev_copy_in_gated(struct cuda_dev *d, CUdeviceptr dst, size_t dpitch, const void *src, size_t rows,
			   size_t row_bytes, CUdeviceptr *gate, uint32_t *seq, char *err, size_t errlen)
{
	if (!d->gate_on || rows * dpitch > GATE_MAX_BYTES || on_device(d, src, rows * row_bytes) ||
	    !cuda_dev_registered(d, src, rows * row_bytes))
		return -EAGAIN;
	if (!d->gate_stream) {
		/* Made on the first gated copy.  What cannot be made now
		 * leaves this request to the ungated copy (-EAGAIN, as for B
		 * off registered memory) and is tried again by the next; what
		 * was made is kept, never made twice. */
		if (cuda_buf_need(&d->gate_word, 4, "the gate word", NULL, err, errlen) < 0 ||
		    nv_drv.cuMemsetD32Async(d->gate_word.p, d->gate_seq, 1, d->stream) != CUDA_SUCCESS)
			return -EAGAIN;
		if (!d->gate_ev && nv_drv.cuEventCreate(&d->gate_ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
			d->gate_ev = NULL;
			return -EAGAIN;
		}
		if (nv_drv.cuStreamCreate(&d->gate_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
			d->gate_stream = NULL;
			return -EAGAIN;
		}
	}
	/* After the device's stream so far: the kernels before this one
	 * may still read dst (and the word's first value is set there). */
	CU_TRY(nv_drv.cuEventRecord(d->gate_ev, d->stream), "cuEventRecord(gate)");
	CU_TRY(nv_drv.cuStreamWaitEvent(d->gate_stream, d->gate_ev, 0), "cuStreamWaitEvent(gate)");
	int rc = direct_copy_in(d->gate_stream, dst, dpitch, src, false, false, rows, row_bytes, err, errlen);
	if (rc < 0 || (rc = cuda_dev_mark_on(d, CUDA_MARK_IN, d->gate_stream, err, errlen)) < 0)
		return rc;
	/* The default flags put a memory barrier before the write: B is in
	 * device memory by the time a kernel sees the new count. */
	CU_TRY(nv_drv.cuStreamWriteValue32(d->gate_stream, d->gate_word.p, d->gate_seq + 1, 0),
	       "cuStreamWriteValue32(gate)");
	*gate = d->gate_word.p;
	*seq = ++d->gate_seq;
	d->set_gated[d->set] = true;
	return 0;
}

static int copy_in(struct cuda_dev *d, CUdeviceptr dst, size_t dpitch, const void *src, size_t rows,
		   size_t row_bytes, bool zero_gap, char *err, size_t errlen)
{
	const unsigned char *s = src;
	int rc, h = 0;
	bool dev_src = on_device(d, src, rows * row_bytes);
	if (dev_src || cuda_dev_registered(d, src, rows * row_bytes))
		return direct_copy_in(d->stream, dst, dpitch, src, dev_src, zero_gap, rows, row_bytes, err,
				      errlen);
	if (dpitch == row_bytes) {
		size_t total = rows * row_bytes;
		for (size_t off = 0; off < total; off += d->pin_half, h ^= 1) {
			size_t len = total - off < d->pin_half ? total - off : d->pin_half;
			if ((rc = pin_wait(d, h, err, errlen)) < 0)
				return rc;
			unsigned char *p = d->pin + (size_t)h * d->pin_half;
			chunk_copy(d, give_from, NULL, (void *)(uintptr_t)s, off, p, len);
			CU_TRY(nv_drv.cuMemcpyHtoDAsync(dst + off, p, len, d->stream), "cuMemcpyHtoDAsync");
			if ((rc = pin_mark(d, h, err, errlen)) < 0)
				return rc;
		}
		return 0;
	}
	/* Zero-filled gaps are staged with the rows (the gaps cross the bus);
	 * otherwise only the rows are staged, and cross row by row. */
	const size_t spitch = zero_gap ? dpitch : row_bytes;
	size_t per = d->pin_half / spitch;
	if (per == 0) {
		snprintf(err, errlen, "cuda: a row of %zu bytes does not fit the pinned pool (%zu bytes)",
			 spitch, d->pin_half);
		return -E2BIG;
	}
	for (size_t r0 = 0; r0 < rows; r0 += per, h ^= 1) {
		size_t n = rows - r0 < per ? rows - r0 : per;
		if ((rc = pin_wait(d, h, err, errlen)) < 0)
			return rc;
		unsigned char *p = d->pin + (size_t)h * d->pin_half;
		if (zero_gap) {
			for (size_t i = 0; i < n; i++) {
				memcpy(p + i * dpitch, s + (r0 + i) * row_bytes, row_bytes);
				memset(p + i * dpitch + row_bytes, 0, dpitch - row_bytes);
			}
			CU_TRY(nv_drv.cuMemcpyHtoDAsync(dst + r0 * dpitch, p, n * dpitch, d->stream),
			       "cuMemcpyHtoDAsync");
		} else {
			/* The pool is pinned: its chunk goes as a registered
			 * source's would. */
			chunk_copy(d, give_from, NULL, (void *)(uintptr_t)s, r0 * row_bytes, p, n * row_bytes);
			if ((rc = direct_copy_in(d->stream, dst + r0 * dpitch, dpitch, p, false, false, n, row_bytes,
						 err, errlen)) < 0)
				return rc;
		}
		if ((rc = pin_mark(d, h, err, errlen)) < 0)
			return rc;
	}
	return 0;
}

int cuda_dev_copy_in(struct cuda_dev *d, CUdeviceptr dst, size_t dpitch, const void *src,
		     size_t rows, size_t row_bytes, char *err, size_t errlen)
{
	return copy_in(d, dst, dpitch, src, rows, row_bytes, true, err, errlen);
}

int cuda_dev_copy_rows_in(struct cuda_dev *d, CUdeviceptr dst, size_t dpitch, const void *src, size_t rows,
			  size_t row_bytes, char *err, size_t errlen)
{
	return copy_in(d, dst, dpitch, src, rows, row_bytes, false, err, errlen);
}

/* One chunk of a staged copy, cut into slices for the copy pool: the
 * host side of the chunk at off (give into, or take out of, pinned p). */
struct chunk_job {
	cuda_give_fn give;
	cuda_take_fn take;
	void *arg;
	size_t off;
	unsigned char *p;
};

static void chunk_slice(void *job, size_t at, size_t len)
{
	const struct chunk_job *c = job;
	if (c->give)
		c->give(c->arg, c->off + at, c->p + at, len);
	else
		c->take(c->arg, c->off + at, c->p + at, len);
}

/* give (or take) over len bytes of chunk off at p, on the worker and the
 * device's copy helpers. */
static void chunk_copy(struct cuda_dev *d, cuda_give_fn give, cuda_take_fn take, void *arg,
		       size_t off, unsigned char *p, size_t len)
{
	struct chunk_job c = { .give = give, .take = take, .arg = arg, .off = off, .p = p };
	copy_pool_run(d->copies, chunk_slice, &c, len);
}

int cuda_dev_copy_in_with(struct cuda_dev *d, CUdeviceptr dst, size_t bytes, cuda_give_fn give,
			  void *arg, char *err, size_t errlen)
{
	int rc, h = 0;
	for (size_t off = 0; off < bytes; off += d->pin_half, h ^= 1) {
		size_t len = bytes - off < d->pin_half ? bytes - off : d->pin_half;
		if ((rc = pin_wait(d, h, err, errlen)) < 0)
			return rc;
		unsigned char *p = d->pin + (size_t)h * d->pin_half;
		chunk_copy(d, give, NULL, arg, off, p, len);
		CU_TRY(nv_drv.cuMemcpyHtoDAsync(dst + off, p, len, d->stream), "cuMemcpyHtoDAsync");
		if ((rc = pin_mark(d, h, err, errlen)) < 0)
			return rc;
	}
	return 0;
}

void cuda_graph_free(struct cuda_graph *g)
{
	for (unsigned i = 0; g && i < CUDA_GRAPH_SLOTS; i++) {
		if (g->slot[i].exec)
			nv_drv.cuGraphExecDestroy(g->slot[i].exec);
		g->slot[i].exec = NULL;
	}
}

/* Past this many graphs made, one for more than a quarter of the calls
 * turns the graph off: each costs a capture and an instantiation, more
 * than the launch calls it saves. */
#define GRAPH_REMAKES_FREE 8

/* Captures fn into a graph (*out), or returns false with the stream out
 * of capture and nothing enqueued. */
static bool graph_make(struct cuda_dev *d, CUgraphExec *out, cuda_enqueue_fn fn, void *arg)
{
	char why[256];
	CUgraph graph = NULL;
	CUgraphExec exec = NULL;
	/* Thread-local: the capture concerns this worker's calls only. */
	if (nv_drv.cuStreamBeginCapture(d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS)
		return false;
	int rc = fn(arg, d->stream, why, sizeof(why));
	CUresult r = nv_drv.cuStreamEndCapture(d->stream, &graph);
	if (rc == 0 && r == CUDA_SUCCESS && graph &&
	    nv_drv.cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS)
		exec = NULL;
	if (graph)
		nv_drv.cuGraphDestroy(graph);
	*out = exec;
	return exec != NULL;
}

int cuda_dev_graph_run(struct cuda_dev *d, struct cuda_graph *g, const uint64_t *key, size_t n,
		       cuda_enqueue_fn fn, void *arg, char *err, size_t errlen)
{
	if (!d->graphs)
		return fn(arg, d->stream, err, errlen);
	if (g->off)
		return fn(arg, d->stream, err, errlen);
	uint64_t k[CUDA_GRAPH_KEY] = { 0 };
	memcpy(k, key, (n < CUDA_GRAPH_KEY ? n : CUDA_GRAPH_KEY) * sizeof(*key));
	g->runs++;
	unsigned at = 0;
	while (at < CUDA_GRAPH_SLOTS &&
	       (!g->slot[at].exec || memcmp(g->slot[at].key, k, sizeof(k)) != 0))
		at++;
	if (at == CUDA_GRAPH_SLOTS) {
		CUgraphExec exec = NULL;
		g->made++;
		if ((g->made > GRAPH_REMAKES_FREE && g->made * 4 > g->runs) ||
		    !graph_make(d, &exec, fn, arg)) {
			cuda_graph_free(g);
			g->off = true;
			return fn(arg, d->stream, err, errlen);
		}
		at = g->next;
		g->next = (g->next + 1) % CUDA_GRAPH_SLOTS;
		if (g->slot[at].exec)
			nv_drv.cuGraphExecDestroy(g->slot[at].exec);
		g->slot[at].exec = exec;
		memcpy(g->slot[at].key, k, sizeof(k));
	}
	CU_TRY(nv_drv.cuGraphLaunch(g->slot[at].exec, d->stream), "cuGraphLaunch");
	return 0;
}

int cuda_dev_copy_in_end(struct cuda_dev *d, CUdeviceptr c, const void *hc, size_t bytes, char *err,
			 size_t errlen)
{
	int rc;
	if (hc && (rc = cuda_dev_copy_in(d, c, bytes, hc, 1, bytes, err, errlen)) < 0)
		return rc;
	return cuda_dev_mark(d, CUDA_MARK_IN, err, errlen);
}

int cuda_dev_mark(struct cuda_dev *d, enum cuda_mark mark, char *err, size_t errlen)
{
	return cuda_dev_mark_on(d, mark, d->stream, err, errlen);
}

int cuda_dev_mark_on(struct cuda_dev *d, enum cuda_mark mark, CUstream s, char *err,
		     size_t errlen)
{
	static const int ev_of[] = { [CUDA_MARK_START] = EV_START, [CUDA_MARK_IN] = EV_IN,
				     [CUDA_MARK_KERNEL] = EV_KERNEL };
	if (mark == CUDA_MARK_START) {
		d->set_gated[d->set] = false;
		d->set_tile_out[d->set] = false;
		d->tile_out_dst = NULL;
	}
	/* A batched launch recorded its start before gathering its parts. */
	if (mark == CUDA_MARK_START && d->nondev)
		return 0;
	CU_TRY(nv_drv.cuEventRecord(d->ev[d->set][ev_of[mark]], s), "cuEventRecord");
	if (mark == CUDA_MARK_IN)
		d->mark_in_ns[d->set] = mfma_clock_ns();
	else if (mark == CUDA_MARK_KERNEL)
		d->mark_kernel_ns[d->set] = mfma_clock_ns();
	return 0;
}

/* bytes from src to host dst through the pool; the copy of chunk i out of
 * the pool overlaps the DMA of chunk i + 1.  Records the end event after
 * the last DMA and keeps the host time spent after it. */
static void take_into(void *arg, size_t off, const unsigned char *src, size_t len)
{
	memcpy((unsigned char *)arg + off, src, len);
}

int cuda_dev_out_buffer(struct cuda_dev *d, void *dst, size_t bytes, CUdeviceptr *out, char *err,
			size_t errlen)
{
	if (dst && on_device(d, dst, bytes)) {
		*out = (CUdeviceptr)(uintptr_t)dst;
		return 0;
	}
	struct cuda_buf *b = &d->scratch[CUDA_SCRATCH_D];
	int rc = cuda_buf_need(b, bytes, "D", NULL, err, errlen);
	if (rc == 0)
		*out = b->p;
	return rc;
}

CUdeviceptr cuda_dev_tile_out(struct cuda_dev *d, void *dst, size_t bytes)
{
	CUdeviceptr dp;
	bool region;
	/* The kernel's smallest store is 2 bytes: a D at an odd address (a
	 * client's region offset may be any) would be a misaligned store,
	 * which faults and loses the context.  DMA copies it out. */
	if (!d->tile_out_on || !d->lone || !dst || (uintptr_t)dst % 2 != 0 ||
	    !cuda_dev_mapped(d, dst, bytes, &dp, &region))
		return 0;
	d->tile_out_dst = dst;
	d->set_tile_out[d->set] = true;
	return dp;
}

int cuda_dev_copy_out(struct cuda_dev *d, void *dst, CUdeviceptr src, size_t bytes, char *err,
		      size_t errlen)
{
	if (src == (CUdeviceptr)(uintptr_t)dst && on_device(d, dst, bytes))
		return 0; /* the kernels wrote the batch's joined D in place */
	if (on_device(d, dst, bytes)) {
		/* The batched launch splits and copies D out after this, and
		 * ends the copy out itself. */
		CU_TRY(nv_drv.cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, d->stream),
		       "cuMemcpyDtoDAsync(result on the device)");
		return 0;
	}
	if (cuda_dev_registered(d, dst, bytes)) {
		/* With tile out the kernels copied D there themselves. */
		if (d->tile_out_dst != dst)
			CU_TRY(nv_drv.cuMemcpyDtoHAsync(dst, src, bytes, d->stream),
			       "cuMemcpyDtoHAsync(registered)");
		d->tile_out_dst = NULL;
		if (d->lone && d->lone_set < 0)
			return cuda_dev_copy_out_leave(d, NULL, &d->lone_set, err, errlen);
		return cuda_dev_copy_out_end(d, NULL, err, errlen);
	}
	return cuda_dev_copy_out_with(d, src, bytes, take_into, dst, err, errlen);
}

static void timing_of(struct cuda_dev *d, int s, struct backend_timing *t);

int cuda_dev_copy_out_end(struct cuda_dev *d, CUstream s, char *err, size_t errlen)
{
	CU_TRY(nv_drv.cuEventRecord(d->ev[d->set][EV_OUT], s ? s : d->stream), "cuEventRecord");
	CU_TRY(nv_drv.cuEventSynchronize(d->ev[d->set][EV_OUT]), "cuEventSynchronize");
	d->out_tail_ns[d->set] = 0;
	return 0;
}

int cuda_dev_copy_out_leave(struct cuda_dev *d, CUstream s, int *set, char *err, size_t errlen)
{
	if (d->left >= CUDA_EVENT_SETS) {
		snprintf(err, errlen, "cuda: %d launches left running are not finished yet",
			 d->left);
		return -EBUSY;
	}
	CU_TRY(nv_drv.cuEventRecord(d->ev[d->set][EV_OUT], s ? s : d->stream), "cuEventRecord");
	d->out_tail_ns[d->set] = 0;
	*set = d->set;
	d->set = (d->set + 1) % CUDA_EVENT_SETS;
	d->left++;
	return 0;
}

int cuda_dev_finish(struct cuda_dev *d, int set, struct backend_timing *t, char *err,
		    size_t errlen)
{
	if (set < 0 || set >= CUDA_EVENT_SETS || d->left <= 0) {
		snprintf(err, errlen, "cuda: no launch left running in event set %d", set);
		return -EINVAL;
	}
	d->left--;
	CU_TRY(nv_drv.cuEventSynchronize(d->ev[set][EV_OUT]), "cuEventSynchronize");
	timing_of(d, set, t);
	return 0;
}

int cuda_dev_left_running(const struct cuda_dev *d)
{
	return d->left;
}

void cuda_dev_lone_begin(struct cuda_dev *d)
{
	d->lone = true;
	d->lone_set = -1;
}

int cuda_dev_lone_end(struct cuda_dev *d)
{
	d->lone = false;
	return d->lone_set;
}

int cuda_dev_copy_out_with(struct cuda_dev *d, CUdeviceptr src, size_t bytes, cuda_take_fn take,
			   void *arg, char *err, size_t errlen)
{
	size_t nchunks = (bytes + d->pin_half - 1) / d->pin_half;
	int rc;
	for (size_t i = 0; i < nchunks; i++) {
		int h = (int)(i & 1);
		size_t off = i * d->pin_half;
		size_t len = bytes - off < d->pin_half ? bytes - off : d->pin_half;
		if ((rc = pin_wait(d, h, err, errlen)) < 0)
			return rc;
		CU_TRY(nv_drv.cuMemcpyDtoHAsync(d->pin + (size_t)h * d->pin_half, src + off, len,
						d->stream),
		       "cuMemcpyDtoHAsync");
		if ((rc = pin_mark(d, h, err, errlen)) < 0)
			return rc;
		if (i + 1 == nchunks)
			CU_TRY(nv_drv.cuEventRecord(d->ev[d->set][EV_OUT], d->stream),
			       "cuEventRecord");
		if (i > 0) {
			int hp = h ^ 1;
			size_t poff = (i - 1) * d->pin_half;
			if ((rc = pin_wait(d, hp, err, errlen)) < 0)
				return rc;
			chunk_copy(d, NULL, take, arg, poff, d->pin + (size_t)hp * d->pin_half,
				   d->pin_half);
		}
	}
	CU_TRY(nv_drv.cuEventSynchronize(d->ev[d->set][EV_OUT]), "cuEventSynchronize");
	uint64_t t0 = mfma_clock_ns();
	if (nchunks > 0) {
		size_t last = nchunks - 1, off = last * d->pin_half;
		int h = (int)(last & 1);
		if ((rc = pin_wait(d, h, err, errlen)) < 0)
			return rc;
		chunk_copy(d, NULL, take, arg, off, d->pin + (size_t)h * d->pin_half, bytes - off);
	}
	d->out_tail_ns[d->set] = mfma_clock_ns() - t0;
	return 0;
}

/* The time between two events that have completed, in *ns. */
static CUresult event_ns(CUevent from, CUevent to, uint64_t *ns)
{
	float ms = 0.0f;
	CUresult r = nv_drv.cuEventElapsedTime(&ms, from, to);
	*ns = r == CUDA_SUCCESS ? backend_event_ns(ms) : 0;
	return r;
}

/* event_ns, 0 where the driver cannot say. */
static uint64_t elapsed_ns(CUevent from, CUevent to)
{
	uint64_t ns;
	(void)event_ns(from, to, &ns);
	return ns;
}

/* cuda_dev_time's runs, enqueued one after the other (captured into one
 * graph where the stream can be). */
struct time_runs {
	cuda_enqueue_fn fn;
	void *arg;
	int runs;
};

static int enqueue_runs(void *arg, CUstream s, char *err, size_t errlen)
{
	const struct time_runs *t = arg;
	for (int i = 0; i < t->runs; i++) {
		int rc = t->fn(t->arg, s, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The runs are one graph's launch where they can be captured: enqueued
 * one by one, a library call's 20-60 us of host time would leave the GPU
 * waiting between the kernels of a skinny shape, and the time would be the
 * host's. */
int cuda_dev_time(struct cuda_dev *d, cuda_enqueue_fn fn, void *arg, int runs, uint64_t *ns,
		  char *err, size_t errlen)
{
	for (int i = 0; i < 2; i++)
		if (!d->time_ev[i])
			CU_TRY(nv_drv.cuEventCreate(&d->time_ev[i], CU_EVENT_DEFAULT), "cuEventCreate");
	if (runs < 1)
		runs = 1;
	int rc = fn(arg, d->stream, err, errlen);
	if (rc < 0)
		return rc;
	struct time_runs t = { fn, arg, runs };
	CUgraphExec exec = NULL;
	if (graph_make(d, &exec, enqueue_runs, &t)) {
		/* Once untimed: a graph's first launch uploads it. */
		CUresult r = nv_drv.cuGraphLaunch(exec, d->stream);
		if (r == CUDA_SUCCESS)
			r = nv_drv.cuEventRecord(d->time_ev[0], d->stream);
		if (r == CUDA_SUCCESS)
			r = nv_drv.cuGraphLaunch(exec, d->stream);
		if (r == CUDA_SUCCESS)
			r = nv_drv.cuEventRecord(d->time_ev[1], d->stream);
		nv_drv.cuGraphExecDestroy(exec);
		if (r != CUDA_SUCCESS)
			return cuda_fail(r, err, errlen, "timing a graph's launch");
	} else {
		CU_TRY(nv_drv.cuEventRecord(d->time_ev[0], d->stream), "cuEventRecord");
		if ((rc = enqueue_runs(&t, d->stream, err, errlen)) < 0)
			return rc;
		CU_TRY(nv_drv.cuEventRecord(d->time_ev[1], d->stream), "cuEventRecord");
	}
	CU_TRY(nv_drv.cuEventSynchronize(d->time_ev[1]), "cuEventSynchronize");
	uint64_t total;
	CU_TRY(event_ns(d->time_ev[0], d->time_ev[1], &total), "cuEventElapsedTime");
	d->timings++;
	*ns = total / (uint64_t)runs;
	return 0;
}

/* The times of the launch whose marks went to event set s. */
static void timing_of(struct cuda_dev *d, int s, struct backend_timing *t)
{
	const CUevent *ev = d->ev[s];
	t->h2d_ns = elapsed_ns(ev[EV_START], ev[EV_IN]);
	t->kernel_ns = elapsed_ns(ev[EV_IN], ev[EV_KERNEL]);
	t->d2h_ns = elapsed_ns(ev[EV_KERNEL], ev[EV_OUT]) + d->out_tail_ns[s];
	t->gated = d->set_gated[s];
	t->tile_out = d->set_tile_out[s];
	t->launch_ns = d->mark_kernel_ns[s] > d->mark_in_ns[s]
			       ? d->mark_kernel_ns[s] - d->mark_in_ns[s]
			       : 0;
}

void cuda_dev_timing(struct cuda_dev *d, struct backend_timing *t)
{
	timing_of(d, d->set, t);
}

int cuda_dev_sync(struct cuda_dev *d, const char *what, char *err, size_t errlen)
{
	CU_TRY(nv_drv.cuStreamSynchronize(d->stream), what);
	d->pin_busy[0] = d->pin_busy[1] = 0;
	return 0;
}

void cuda_dev_drain(struct cuda_dev *d)
{
	if (d->gate_stream)
		nv_drv.cuStreamSynchronize(d->gate_stream);
	nv_drv.cuStreamSynchronize(d->stream);
	d->pin_busy[0] = d->pin_busy[1] = 0;
}
