/* A batched launch joined in host memory: the parts' B and C gathered
 * side by side into buffers the device keeps, one GEMM over the joined
 * columns, its D scattered back into the parts.  The backends whose GEMM
 * takes whole host matrices batch this way (the CPU, and HIP, whose
 * providers copy B, C and D themselves); CUDA joins on the device
 * (cuda_batch.h).  Pure memory: its unit test builds everywhere.
 *
 * Threading: a struct host_join belongs to one device's worker. */
#ifndef MFMAD_HOST_JOIN_H
#define MFMAD_HOST_JOIN_H

#include <stddef.h>

#include "mfma_gemm.h"

/* B, C and D of the last batch, grown as needed and kept. */
struct host_join {
	void *buf[3];
	size_t cap[3];
};

/* Makes run (the caller's copy of the batched launch g, g->nparts >= 2,
 * its other fields the caller's) one GEMM over the joined columns: B and
 * C (when beta != 0) gathered into j's buffers, run's b, c and d pointed
 * at j's, its parts cleared.  0, or -ENOMEM with err naming the batch. */
int host_join_gather(struct host_join *j, const struct mfma_gemm *g, struct mfma_gemm *run,
		     char *err, size_t errlen);

/* The joined D of run (from host_join_gather) into g's parts' own D. */
void host_join_scatter(const struct mfma_gemm *g, const struct mfma_gemm *run);

/* Frees the buffers; j may be reused (empty) afterwards. */
void host_join_free(struct host_join *j);

#endif
