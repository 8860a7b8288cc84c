/* The one monotonic clock of the project, in nanoseconds.  Arrival,
 * queue, copy and kernel times, deadlines and client round trips are all
 * read from it, so any two of them can be subtracted. */
#ifndef MFMA_CLOCK_H
#define MFMA_CLOCK_H

#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline uint64_t mfma_clock_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef __cplusplus
}
#endif

#endif
