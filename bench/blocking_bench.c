/* Blocking GEMMs on a resident weight, one in flight: the library's
 * mfma_gemm path (mfmactl bench uses mfma_gemm_submit/mfma_wait), with D
 * into the caller's buffer or left to the library.  Prints one JSON line:
 * p50 round trip and the mean client (encode, send, wait, decode) and
 * server (queue, kernel, total, prep) timings.  A benchmark, not a test.
 *
 *   blocking_bench ENDPOINT WEIGHT K N REQUESTS [d]
 *
 * WEIGHT is an f32 weight of K columns already resident; with "d" D goes
 * into a buffer of the caller's (mfma_gemm_args.d). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mfma.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: blocking_bench ENDPOINT WEIGHT K N REQUESTS [d]\n");
		return 2;
	}
	uint32_t k = (uint32_t)atoi(argv[3]), n = (uint32_t)atoi(argv[4]);
	int reqs = atoi(argv[5]);
	int with_d = argc > 6 && strcmp(argv[6], "d") == 0;
	if (k == 0 || n == 0 || reqs < 1) {
		fprintf(stderr, "blocking_bench: K, N and REQUESTS must be positive\n");
		return 2;
	}
	mfma_client *c;
	struct mfma_error err;
	if (mfma_connect(argv[1], &c, &err) < 0) {
		fprintf(stderr, "blocking_bench: %s\n", err.message);
		return 1;
	}
	size_t bn = (size_t)k * n;
	float *b = malloc(bn * sizeof(float));
	for (size_t i = 0; i < bn; i++)
		b[i] = (float)((i * 11) % 13) / 13.0f - 0.5f;
	struct mfma_gemm_args g;
	mfma_gemm_args_init(&g);
	g.a.kind = MFMA_OPERAND_WEIGHT;
	g.a.weight = argv[2];
	g.b = (struct mfma_matrix){ k, n, MFMA_TYPE_F32, b, bn * sizeof(float) };
	/* D is M x N f32; M is the weight's: a generous buffer. */
	size_t dcap = (size_t)65536 * n * sizeof(float);
	void *d = with_d ? malloc(dcap) : NULL;
	g.d = d;
	g.d_bytes = with_d ? dcap : 0;
	uint64_t *rtt = calloc((size_t)reqs, sizeof(*rtt));
	double enc = 0, snd = 0, wait = 0, dec = 0, queue = 0, kernel = 0, total = 0, prep = 0;
	for (int i = -2; i < reqs; i++) { /* two warm-up calls */
		struct mfma_gemm_result r;
		if (mfma_gemm(c, &g, &r, &err) < 0) {
			fprintf(stderr, "blocking_bench: %s\n", err.message);
			return 1;
		}
		if (i >= 0) {
			rtt[i] = r.round_trip_ns;
			enc += r.client.encode_ns, snd += r.client.send_ns;
			wait += r.client.wait_ns, dec += r.client.decode_ns;
			queue += r.timing.queue_ns, kernel += r.timing.kernel_ns;
			total += r.timing.total_ns, prep += r.timing.prep_ns;
		}
		mfma_gemm_result_free(&r);
	}
	qsort(rtt, (size_t)reqs, sizeof(*rtt), cmp_u64);
	double us = 1000.0 * reqs;
	printf("{\"n\": %u, \"d_given\": %s, \"p50_us\": %.1f, \"client_us\": {\"encode\": %.1f, "
	       "\"send\": %.1f, \"wait\": %.1f, \"decode\": %.1f}, \"server_us\": {\"queue\": %.1f, "
	       "\"kernel\": %.1f, \"total\": %.1f, \"prep\": %.1f}}\n",
	       n, with_d ? "true" : "false", rtt[reqs / 2] / 1000.0, enc / us, snd / us, wait / us,
	       dec / us, queue / us, kernel / us, total / us, prep / us);
	free(rtt);
	free(b);
	free(d);
	mfma_close(c);
	return 0;
}
