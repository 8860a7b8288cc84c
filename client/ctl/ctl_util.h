/* Pure helpers of mfmactl: parsing option values, formatting numbers for
 * people, percentiles, random matrices.  No I/O, so the unit tests can
 * pin every one of them down. */
#ifndef MFMA_CTL_UTIL_H
#define MFMA_CTL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mfma_dtype.h"

/* Each returns 0, or -EINVAL with a sentence in err that names the option
 * (`what`, e.g. "--shape") and the value that was wrong. */
int ctl_parse_u64(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out,
		  char *err, size_t errlen);
int ctl_parse_int(const char *what, const char *s, int min, int max, int *out, char *err,
		  size_t errlen);
int ctl_parse_float(const char *what, const char *s, float *out, char *err, size_t errlen);
/* "RxC" (also "R,C"), each 1 .. 2^31. */
int ctl_parse_shape(const char *what, const char *s, uint32_t *rows, uint32_t *cols, char *err,
		    size_t errlen);
/* A dtype name out of an allowed set (a bit mask of 1 << MFMA_DT_*). */
int ctl_parse_dtype(const char *what, const char *s, unsigned allowed, enum mfma_dtype *out,
		    char *err, size_t errlen);
#define CTL_DT_BIT(t) (1u << (t))
#define CTL_DT_INPUTS (CTL_DT_BIT(MFMA_DT_F32) | CTL_DT_BIT(MFMA_DT_F16) | \
		       CTL_DT_BIT(MFMA_DT_BF16) | CTL_DT_BIT(MFMA_DT_I8))
#define CTL_DT_OUTPUTS (CTL_DT_BIT(MFMA_DT_F32) | CTL_DT_BIT(MFMA_DT_F16) | \
			CTL_DT_BIT(MFMA_DT_BF16) | CTL_DT_BIT(MFMA_DT_I32))

/* How mfmactl sends a dense A: as it is, flagged for the daemon to check
 * or prune, or compressed to the canonical 2:4 form on the client. */
enum ctl_sparse { CTL_SPARSE_NONE, CTL_SPARSE_VALIDATE, CTL_SPARSE_PRUNE, CTL_SPARSE_PACKED };
int ctl_parse_sparse(const char *what, const char *s, enum ctl_sparse *out, char *err,
		     size_t errlen);

/* Text for a terminal: n bytes of in into out (room for n + 1), each
 * control character but newline and tab (C0, DEL, and C1 written in
 * UTF-8 as 0xC2 0x80..0x9F) replaced by '?', so that a string from the
 * daemon cannot move the cursor, clear the screen or set the window's
 * title.  NUL-terminates out; returns the bytes written before the NUL
 * (n: nothing is inserted). */
size_t ctl_printable(const char *in, size_t n, char *out);

/* "1.50 GiB", "512 B" */
void ctl_format_bytes(uint64_t bytes, char *buf, size_t len);
/* "850 ns", "12.3 us", "4.56 ms", "1.23 s" */
void ctl_format_ns(uint64_t ns, char *buf, size_t len);
/* "3d 04h 05m 06s", "5m 06s", "42s" */
void ctl_format_uptime(uint64_t ns, char *buf, size_t len);

/* The p-th percentile (0..100) of n sorted values, nearest rank. */
uint64_t ctl_percentile(const uint64_t *sorted, size_t n, double p);
void ctl_sort_u64(uint64_t *v, size_t n);

/* Of a round trip, what neither side accounts for: the client's wait (last
 * byte sent to the answer read) less the server's total (frame arrived to
 * answer queued) -- the socket both ways and the wake-ups.  0 when the
 * server's figure is the larger (clocks of one machine, but not one
 * instant). */
uint64_t ctl_unexplained_ns(uint64_t client_wait_ns, uint64_t server_total_ns);

/* Dense-equivalent GFLOP/s of an m x n x k GEMM that took ns. */
double ctl_gflops(uint64_t m, uint64_t n, uint64_t k, uint64_t ns);

/* splitmix64: small, seedable, good enough for test data. */
static inline uint64_t ctl_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Fills a rows x cols matrix of dtype t with random values that are
 * never zero: floats of magnitude 1/16 to 1 with a random sign (far from
 * anything that rounds to 0 in f16 or bf16), integers from -127 to 127
 * (i8) or -1000 to 1000 (i32) without 0.
 * With sparse24 (cols a multiple of 4), every group of 4 along a row
 * keeps 2 random positions (any of the 6 pairs) and zeroes the others. */
int ctl_random_matrix(void *data, enum mfma_dtype t, uint32_t rows, uint32_t cols, bool sparse24,
		      uint64_t seed);

/* Tolerance of the relative Frobenius error for a GEMM with these input
 * and output types: the looser of the two (f32 1e-5, f16/bf16 1e-2);
 * 0 (exact) when both are integers. */
double ctl_tolerance(enum mfma_dtype in, enum mfma_dtype out);

/* Whether a relative error rel passes --check's tolerance (an exact match
 * where the tolerance is 0: integer output). */
bool ctl_within_tolerance(double rel, double tolerance);

/* The worse of two relative errors, a non-finite one (an answer holding NaN
 * or infinity) counting as infinite: --check's worst error never hides an
 * answer whose error could not be measured. */
double ctl_worse_error(double worst, double rel);

#endif
