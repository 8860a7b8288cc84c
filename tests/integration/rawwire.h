/* The wire protocol by hand for integration tests that need exact frames
 * (ids, priorities, timeouts, out-of-order answers): build f32 matrices,
 * send a Request, read a Response.  Failures end the cmocka test. */
#ifndef MFMA_TEST_RAWWIRE_H
#define MFMA_TEST_RAWWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mfma.pb-c.h"

struct rw_mat {
	Mfma__V1__Matrix m;
	Mfma__V1__Operand op;
	float *data;
};

/* rows x cols f32 with deterministic values from seed. */
void rw_mat_init(struct rw_mat *x, uint32_t rows, uint32_t cols, uint32_t seed);
void rw_mat_free(struct rw_mat *x);

/* req as a LoadWeight of name with A = a and id, its body lw (both the
 * caller's, initialised here). */
void rw_load_request(Mfma__V1__Request *req, Mfma__V1__LoadWeight *lw, uint64_t id,
		     const char *name, Mfma__V1__Operand *a);
void rw_send(int fd, const Mfma__V1__Request *req);
/* g sent on fd as a GEMM request with id. */
void rw_send_gemm_request(int fd, uint64_t id, Mfma__V1__Gemm *g);
/* The n requests' frames in one write, so that the daemon reads them
 * together and handles them in one turn of its loop. */
void rw_send_together(int fd, const Mfma__V1__Request *const *reqs, size_t n);
/* One f32 GEMM on fd, A (m x k, pruned to 2:4 when prune) times B (k x n),
 * with a priority and a timeout where not 0. */
void rw_send_gemm(int fd, uint64_t id, uint32_t m, uint32_t n, uint32_t k, bool prune,
		  uint32_t prio, uint64_t timeout_us);
/* Asks on fd until device 0 runs a request (a long GEMM sent before); the
 * test fails when none starts within some 10 s. */
void rw_wait_running(int fd);
/* The next response (freed by the caller with mfma__v1__response__free_unpacked). */
Mfma__V1__Response *rw_read(int fd, int timeout_ms);

#endif
