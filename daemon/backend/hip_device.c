/* The device layer of the HIP backend (hip_device.h): AMD GPUs through
 * the HIP runtime API, from C, with nothing about any kernel.
 *
 * At probe time every device's gcnArchName is cut at the first ':' and
 * offered to the providers; devices of an arch no provider has kernels
 * for are left out.  An open device works on one stream; events around
 * the copies and the kernel give the timing.  Copies from host memory go
 * through the runtime's own staging, or straight from memory registered
 * with hipHostRegister (a client's shared-memory region). */
#include "mfmad_build.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_time.h"
#include "hip_device.h"

#define HIP_MAX_DEVICES 64

/* What probing learned; read by describe and open. */
struct hip_slot {
	int ordinal; /* HIP device number */
	char arch[32];
	char name[128];
	uint64_t mem_total;
};

static struct hip_slot slots[HIP_MAX_DEVICES];
static int nslots;

enum { EV_START, EV_IN, EV_KERNEL, EV_OUT, EV_COUNT };

struct hip_dev {
	struct hip_slot *slot;
	hipStream_t stream;
	hipEvent_t ev[EV_COUNT];
	bool timed; /* the events hold a whole request */
	struct hip_buf scratch[HIP_SCRATCH_COUNT];
};

int hip_fail(hipError_t e, char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "hip: %s failed: %s (%s)", what, hipGetErrorString(e),
		 hipGetErrorName(e));
	switch (e) {
	case hipErrorOutOfMemory:
		return -ENOMEM;
	/* The context is lost: every later call in it fails the same way. */
	case hipErrorIllegalAddress:
	case hipErrorLaunchFailure:
	case hipErrorLaunchTimeOut:
	case hipErrorAssert:
	case hipErrorECCNotCorrectable:
		return -ENOTRECOVERABLE;
	default:
		return -EIO;
	}
}

int hip_dev_probe(hip_usable_fn usable, char *err, size_t errlen)
{
	nslots = 0;
	int count = 0;
	hipError_t e = hipGetDeviceCount(&count);
	/* No GPU, or no amdgpu driver: a machine without AMD devices, not a
	 * fault. */
	if (e == hipErrorNoDevice || e == hipErrorInsufficientDriver)
		return 0;
	if (e != hipSuccess)
		return hip_fail(e, err, errlen, "hipGetDeviceCount");
	for (int i = 0; i < count && nslots < HIP_MAX_DEVICES; i++) {
		hipDeviceProp_t p;
		e = hipGetDeviceProperties(&p, i);
		if (e != hipSuccess)
			return hip_fail(e, err, errlen, "hipGetDeviceProperties");
		struct hip_slot *s = &slots[nslots];
		memset(s, 0, sizeof(*s));
		p.gcnArchName[sizeof(p.gcnArchName) - 1] = '\0';
		snprintf(s->arch, sizeof(s->arch), "%.*s", (int)strcspn(p.gcnArchName, ":"),
			 p.gcnArchName);
		if (!usable(s->arch))
			continue;
		s->ordinal = i;
		p.name[sizeof(p.name) - 1] = '\0';
		snprintf(s->name, sizeof(s->name), "%.127s", p.name);
		s->mem_total = p.totalGlobalMem;
		nslots++;
	}
	if (nslots == 0 && count > 0)
		snprintf(err, errlen, "hip: %d device(s), none of an arch with kernels in this build",
			 count);
	return nslots;
}

const char *hip_slot_arch(int index)
{
	return index >= 0 && index < nslots ? slots[index].arch : NULL;
}

int hip_slot_describe(int index, struct backend_device_info *info)
{
	if (index < 0 || index >= nslots || !info)
		return -EINVAL;
	const struct hip_slot *s = &slots[index];
	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", s->name);
	snprintf(info->arch, sizeof(info->arch), "%s", s->arch);
	info->mem_total = s->mem_total;
	return 0;
}

void hip_buf_free(struct hip_buf *b)
{
	if (b->p)
		(void)hipFree(b->p);
	b->p = NULL;
	b->cap = 0;
}

int hip_buf_need(struct hip_buf *b, size_t size, const char *what, char *err, size_t errlen)
{
	if (size <= b->cap)
		return 0;
	hip_buf_free(b);
	hipError_t e = hipMalloc(&b->p, size);
	if (e != hipSuccess) {
		b->p = NULL;
		snprintf(err, errlen, "hip: cannot allocate %zu bytes of device memory for %s: %s",
			 size, what, hipGetErrorString(e));
		return e == hipErrorOutOfMemory ? -ENOMEM : -EIO;
	}
	b->cap = size;
	return 0;
}

struct hip_buf *hip_dev_scratch(struct hip_dev *d, enum hip_scratch which)
{
	return &d->scratch[which];
}

const char *hip_dev_arch(const struct hip_dev *d)
{
	return d->slot->arch;
}

hipStream_t hip_dev_stream(const struct hip_dev *d)
{
	return d->stream;
}

int hip_dev_enter(struct hip_dev *d, char *err, size_t errlen)
{
	hipError_t e = hipSetDevice(d->slot->ordinal);
	return e == hipSuccess ? 0 : hip_fail(e, err, errlen, "hipSetDevice");
}

void hip_dev_close(struct hip_dev *d)
{
	if (!d)
		return;
	(void)hipSetDevice(d->slot->ordinal);
	if (d->stream)
		(void)hipStreamSynchronize(d->stream);
	for (int i = 0; i < HIP_SCRATCH_COUNT; i++)
		hip_buf_free(&d->scratch[i]);
	for (int i = 0; i < EV_COUNT; i++)
		if (d->ev[i])
			(void)hipEventDestroy(d->ev[i]);
	if (d->stream)
		(void)hipStreamDestroy(d->stream);
	free(d);
}

int hip_dev_open(int index, struct hip_dev **dev, char *err, size_t errlen)
{
	if (index < 0 || index >= nslots) {
		snprintf(err, errlen, "hip: no device %d (probe found %d)", index, nslots);
		return -EINVAL;
	}
	struct hip_dev *d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	d->slot = &slots[index];
	int rc = hip_dev_enter(d, err, errlen);
	if (rc < 0)
		goto out;
	hipError_t e = hipStreamCreate(&d->stream);
	if (e != hipSuccess) {
		d->stream = NULL;
		rc = hip_fail(e, err, errlen, "hipStreamCreate");
		goto out;
	}
	for (int i = 0; i < EV_COUNT; i++) {
		e = hipEventCreate(&d->ev[i]);
		if (e != hipSuccess) {
			d->ev[i] = NULL;
			rc = hip_fail(e, err, errlen, "hipEventCreate");
			goto out;
		}
	}
	*dev = d;
	return 0;
out:
	hip_dev_close(d);
	return rc;
}

int hip_dev_copy_in(struct hip_dev *d, struct hip_buf *b, const void *src, size_t size,
		    const char *what, char *err, size_t errlen)
{
	int rc = hip_buf_need(b, size ? size : 1, what, err, errlen);
	if (rc < 0)
		return rc;
	if (!size)
		return 0;
	hipError_t e = hipMemcpyAsync(b->p, src, size, hipMemcpyHostToDevice, d->stream);
	if (e != hipSuccess) {
		snprintf(err, errlen, "hip: copying %s (%zu bytes) to the device failed: %s", what, size,
			 hipGetErrorString(e));
		return -EIO;
	}
	return 0;
}

int hip_dev_host_register(struct hip_dev *d, void *p, size_t len, char *err, size_t errlen)
{
	(void)d;
	hipError_t e = hipHostRegister(p, len, hipHostRegisterDefault);
	return e == hipSuccess ? 0 : hip_fail(e, err, errlen, "hipHostRegister");
}

void hip_dev_host_unregister(struct hip_dev *d, void *p)
{
	/* Copies from or into it may still be queued on the stream. */
	(void)hipStreamSynchronize(d->stream);
	(void)hipHostUnregister(p);
}

int hip_dev_mark(struct hip_dev *d, enum hip_mark mark, char *err, size_t errlen)
{
	static const int ev_of[] = { [HIP_MARK_START] = EV_START, [HIP_MARK_IN] = EV_IN,
				     [HIP_MARK_KERNEL] = EV_KERNEL };
	if (mark == HIP_MARK_START)
		d->timed = false;
	hipError_t e = hipEventRecord(d->ev[ev_of[mark]], d->stream);
	return e == hipSuccess ? 0 : hip_fail(e, err, errlen, "hipEventRecord");
}

int hip_dev_copy_out(struct hip_dev *d, void *dst, const void *src, size_t bytes, char *err,
		     size_t errlen)
{
	hipError_t e = hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, d->stream);
	if (e != hipSuccess)
		return hip_fail(e, err, errlen, "hipMemcpyAsync (D to the host)");
	if ((e = hipEventRecord(d->ev[EV_OUT], d->stream)) != hipSuccess)
		return hip_fail(e, err, errlen, "hipEventRecord");
	if ((e = hipEventSynchronize(d->ev[EV_OUT])) != hipSuccess)
		return hip_fail(e, err, errlen, "running the GEMM");
	d->timed = true;
	return 0;
}

static uint64_t elapsed_ns(hipEvent_t from, hipEvent_t to)
{
	float ms = 0.0f;
	if (hipEventElapsedTime(&ms, from, to) != hipSuccess)
		return 0;
	return backend_event_ns(ms);
}

void hip_dev_timing(struct hip_dev *d, struct backend_timing *t)
{
	if (!d->timed) {
		t->h2d_ns = t->kernel_ns = t->d2h_ns = t->launch_ns = 0;
		return;
	}
	t->h2d_ns = elapsed_ns(d->ev[EV_START], d->ev[EV_IN]);
	t->kernel_ns = elapsed_ns(d->ev[EV_IN], d->ev[EV_KERNEL]);
	t->d2h_ns = elapsed_ns(d->ev[EV_KERNEL], d->ev[EV_OUT]);
	t->launch_ns = 0;
}

int hip_dev_sync(struct hip_dev *d, const char *what, char *err, size_t errlen)
{
	hipError_t e = hipStreamSynchronize(d->stream);
	return e == hipSuccess ? 0 : hip_fail(e, err, errlen, what);
}

void hip_dev_drain(struct hip_dev *d)
{
	(void)hipStreamSynchronize(d->stream);
	d->timed = false;
}
