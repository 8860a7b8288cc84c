/* Event times of the GPU backends.  Not part of the daemon's interface
 * (backend.h); shared by cuda_device.c and hip_device.c. */
#ifndef MFMAD_BACKEND_TIME_H
#define MFMAD_BACKEND_TIME_H

#include <stdint.h>

/* Milliseconds between two GPU events, as the runtimes report them (a
 * float), to nanoseconds.  The runtimes can report a negative time (events
 * recorded out of order, or on a device whose clock moved) and nothing
 * stops a NaN; converting either to an unsigned integer is undefined in C,
 * so they read 0, and a time past what 64 bits of nanoseconds hold reads
 * UINT64_MAX. */
static inline uint64_t backend_event_ns(float ms)
{
	if (!(ms > 0.0f))
		return 0;
	double ns = (double)ms * 1e6;
	if (ns >= 18446744073709551616.0) /* 2^64 */
		return UINT64_MAX;
	return (uint64_t)ns;
}

#endif
