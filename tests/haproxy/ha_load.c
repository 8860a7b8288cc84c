/* ha_load: drives GEMMs through an endpoint (a list, or a balancer given
 * twice so that the client reconnects to it) from several threads, each
 * with its own blocking client, and checks every answer against the
 * product computed here.  Runs until the file STOPFILE exists (or SECONDS
 * pass), then prints one line:
 *   requests=N ok=N errors=N wrong=N wall_s=S requests_per_s=R
 * and exits 0 only when at least one request was made and every request
 * was answered correctly.
 *
 *   ha_load ENDPOINT THREADS SECONDS STOPFILE
 *
 * The inputs are small integers in f32, so the product is exact and the
 * check is equality. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mfma.h"

#define M 32
#define K 64
#define N 16

static const char *endpoint, *stopfile;
static double seconds;
static atomic_ulong requests, ok, errors, wrong;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1u;
	float a[M * K], b[K * N], want[M * N];
	mfma_client *c = NULL;
	struct mfma_error e;
	if (mfma_connect(endpoint, &c, &e) < 0) {
		fprintf(stderr, "ha_load: connect %s: %s\n", endpoint, e.message);
		atomic_fetch_add(&errors, 1);
		return NULL;
	}
	mfma_set_timeout(c, 10000);
	double end = now_s() + seconds;
	while (now_s() < end && access(stopfile, F_OK) != 0) {
		for (int i = 0; i < M * K; i++)
			a[i] = (float)((int)(rand_r(&seed) % 7) - 3);
		for (int i = 0; i < K * N; i++)
			b[i] = (float)((int)(rand_r(&seed) % 7) - 3);
		for (int i = 0; i < M; i++)
			for (int j = 0; j < N; j++) {
				float s = 0;
				for (int k = 0; k < K; k++)
					s += a[i * K + k] * b[k * N + j];
				want[i * N + j] = s;
			}
		struct mfma_gemm_args g = MFMA_GEMM_ARGS_INIT;
		g.a.kind = MFMA_OPERAND_DENSE;
		g.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a, sizeof(a) };
		g.b = (struct mfma_matrix){ K, N, MFMA_TYPE_F32, b, sizeof(b) };
		g.out_dtype = MFMA_TYPE_F32;
		struct mfma_gemm_result r;
		atomic_fetch_add(&requests, 1);
		if (mfma_gemm(c, &g, &r, &e) < 0) {
			fprintf(stderr, "ha_load: gemm via %s: %s\n", mfma_endpoint(c), e.message);
			atomic_fetch_add(&errors, 1);
			continue;
		}
		if (r.d.rows != M || r.d.cols != N || r.d.bytes != sizeof(want) ||
		    memcmp(r.d.data, want, sizeof(want)) != 0)
			atomic_fetch_add(&wrong, 1);
		else
			atomic_fetch_add(&ok, 1);
		mfma_gemm_result_free(&r);
	}
	mfma_close(c);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: ha_load ENDPOINT THREADS SECONDS STOPFILE\n");
		return 2;
	}
	endpoint = argv[1];
	int threads = atoi(argv[2]);
	seconds = atof(argv[3]);
	stopfile = argv[4];
	if (threads < 1 || threads > 64 || seconds <= 0) {
		fprintf(stderr, "ha_load: THREADS 1..64, SECONDS > 0\n");
		return 2;
	}
	pthread_t t[64];
	double t0 = now_s();
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	double wall = now_s() - t0;
	unsigned long n = atomic_load(&requests), o = atomic_load(&ok);
	printf("requests=%lu ok=%lu errors=%lu wrong=%lu wall_s=%.2f requests_per_s=%.0f\n", n, o,
	       atomic_load(&errors), atomic_load(&wrong), wall, wall > 0 ? (double)o / wall : 0.0);
	return n > 0 && o == n ? 0 : 1;
}
