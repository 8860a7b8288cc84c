/* The device layer of the HIP backend: what every kernel provider on an
 * AMD GPU shares.  Probing, the device, one stream, the timing events and
 * the device buffer cache live in hip_device.c; a provider
 * (hip_provider.h) sees only this API.
 *
 * Threading: hip_dev_probe and the hip_slot_* readers run on the main
 * thread before the loop starts; everything on a struct hip_dev runs on
 * that device's worker thread.
 *
 * Errors: 0 or a negative errno-style code, with a sentence in err. */
#ifndef MFMAD_HIP_DEVICE_H
#define MFMAD_HIP_DEVICE_H

#include <hip/hip_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* ---- Probing (main thread) ---- */

/* Whether some provider has kernels for the gfx arch ("gfx942": the
 * device's gcnArchName cut at the first ':').  Devices no provider serves
 * (a Radeon next to the Instincts) are not offered. */
typedef int (*hip_usable_fn)(const char *arch);

/* The devices usable() accepts: their count (0 without a GPU or without
 * the amdgpu driver, which is not an error), or a negative code. */
int hip_dev_probe(hip_usable_fn usable, char *err, size_t errlen);
/* The arch of device index, NULL out of range. */
const char *hip_slot_arch(int index);
/* Name, arch and memory of device index; the providers add the variants
 * and dtypes.  -EINVAL for an index out of range. */
int hip_slot_describe(int index, struct backend_device_info *info);

/* ---- An open device (its worker thread) ---- */

struct hip_dev;

int hip_dev_open(int index, struct hip_dev **dev, char *err, size_t errlen);
/* Waits for the stream, then frees everything.  Accepts NULL. */
void hip_dev_close(struct hip_dev *d);

const char *hip_dev_arch(const struct hip_dev *d);
hipStream_t hip_dev_stream(const struct hip_dev *d);
/* Makes the device current on the calling thread (hipSetDevice). */
int hip_dev_enter(struct hip_dev *d, char *err, size_t errlen);

/* Fills err from a failed runtime call and returns its errno. */
int hip_fail(hipError_t e, char *err, size_t errlen, const char *what);

/* Device memory that grows as needed and is kept (contents are not kept
 * when it grows).  A provider keeps the buffers only it understands in
 * its own per-device state; the operand buffers any provider may use are
 * the device's (hip_dev_scratch). */
struct hip_buf {
	void *p;
	size_t cap;
};
int hip_buf_need(struct hip_buf *b, size_t size, const char *what, char *err, size_t errlen);
void hip_buf_free(struct hip_buf *b);

enum hip_scratch {
	HIP_SCRATCH_A,    /* A as the request sent it */
	HIP_SCRATCH_META, /* its 2:4 meta, in the kernel's form */
	HIP_SCRATCH_B,
	HIP_SCRATCH_C,
	HIP_SCRATCH_D,
	HIP_SCRATCH_COUNT
};
struct hip_buf *hip_dev_scratch(struct hip_dev *d, enum hip_scratch which);

/* Registers host memory [p, p + len) with the runtime (hipHostRegister),
 * so that copies from and into it are DMA with no staging; unregistering
 * waits for the copies queued on the device's stream. */
int hip_dev_host_register(struct hip_dev *d, void *p, size_t len, char *err, size_t errlen);
void hip_dev_host_unregister(struct hip_dev *d, void *p);

/* size bytes of host src into b (grown to hold them), asynchronously on
 * the stream; what names the operand in errors. */
int hip_dev_copy_in(struct hip_dev *d, struct hip_buf *b, const void *src, size_t size,
		    const char *what, char *err, size_t errlen);

/* The timing of one request: the provider records START before its first
 * copy in, IN after its last, KERNEL after its kernel; the copy out
 * records the end and waits for it. */
enum hip_mark { HIP_MARK_START, HIP_MARK_IN, HIP_MARK_KERNEL };
int hip_dev_mark(struct hip_dev *d, enum hip_mark mark, char *err, size_t errlen);

/* D to the host, then waits for the stream: the last step of a GEMM.  A
 * kernel fault surfaces here, on the request that caused it. */
int hip_dev_copy_out(struct hip_dev *d, void *dst, const void *src, size_t bytes, char *err,
		     size_t errlen);

/* h2d, kernel and d2h times of the request just copied out; zeros for a
 * request that copied nothing out (an empty product). */
void hip_dev_timing(struct hip_dev *d, struct backend_timing *t);

/* Waits for the stream after work that ends on the device. */
int hip_dev_sync(struct hip_dev *d, const char *what, char *err, size_t errlen);

/* After a failure half-way, waits for whatever was enqueued, so that no
 * copy still reads the caller's memory or writes a buffer about to be
 * freed. */
void hip_dev_drain(struct hip_dev *d);

#endif
