/* Round trip of a small GEMM through mfmad against a raw Unix-socket echo
 * of the same bytes, in one run: the difference is our protocol, scheduling
 * and compute overhead.  A benchmark, not a test.
 *
 *   rtt_bench ENDPOINT [ITERATIONS]     (mfmad must be running there) */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame.h"
#include "mfma.h"
#include "mfma.pb-c.h"
#include "mfma_clock.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int io_full(int fd, void *buf, size_t len, int writing)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The echo server: one connection, frames back as they came. */
static void *echo_main(void *arg)
{
	int lfd = *(int *)arg;
	int fd = accept(lfd, NULL, NULL);
	uint8_t *buf = malloc(1 << 20);
	for (;;) {
		uint8_t hdr[4];
		if (io_full(fd, hdr, 4, 0) < 0)
			break;
		uint32_t n = frame_header_get(hdr);
		if (n > (1u << 20) || io_full(fd, buf, n, 0) < 0)
			break;
		if (io_full(fd, hdr, 4, 1) < 0 || io_full(fd, buf, n, 1) < 0)
			break;
	}
	free(buf);
	close(fd);
	return NULL;
}

struct summary {
	double mean_us, p50_us, p90_us, p99_us, rps;
};

static struct summary summarize(uint64_t *lat, int n, uint64_t wall_ns)
{
	struct summary s;
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += (double)lat[i];
	qsort(lat, (size_t)n, sizeof(*lat), cmp_u64);
	s.mean_us = sum / n / 1e3;
	s.p50_us = (double)lat[n / 2] / 1e3;
	s.p90_us = (double)lat[n * 9 / 10] / 1e3;
	s.p99_us = (double)lat[n * 99 / 100] / 1e3;
	s.rps = n / (wall_ns / 1e9);
	return s;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: rtt_bench ENDPOINT [ITERATIONS]\n");
		return 2;
	}
	int iters = argc > 2 ? atoi(argv[2]) : 2000;
	if (iters < 100)
		iters = 100;
	enum { M = 16, K = 16, N = 16 };
	float a[M * K], b[K * N];
	for (int i = 0; i < M * K; i++)
		a[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
	for (int i = 0; i < K * N; i++)
		b[i] = (float)((i * 11) % 13) / 13.0f - 0.5f;

	/* The same request bytes the client library sends for this GEMM. */
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Gemm g = MFMA__V1__GEMM__INIT;
	Mfma__V1__Operand op = MFMA__V1__OPERAND__INIT;
	Mfma__V1__Matrix am = MFMA__V1__MATRIX__INIT, bm = MFMA__V1__MATRIX__INIT;
	am.has_rows = am.has_cols = am.has_dtype = am.has_data = 1;
	am.rows = M;
	am.cols = K;
	am.dtype = MFMA__V1__DTYPE__F32;
	am.data.data = (uint8_t *)a;
	am.data.len = sizeof(a);
	bm = am;
	bm.rows = K;
	bm.cols = N;
	bm.data.data = (uint8_t *)b;
	bm.data.len = sizeof(b);
	op.kind_case = MFMA__V1__OPERAND__KIND_DENSE;
	op.dense = &am;
	g.a = &op;
	g.b = &bm;
	req.has_id = 1;
	req.id = 1;
	req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	req.gemm = &g;
	size_t plen = mfma__v1__request__get_packed_size(&req);
	uint8_t *frame = malloc(4 + plen), *back = malloc(4 + plen);
	frame_header_put(frame, (uint32_t)plen);
	mfma__v1__request__pack(&req, frame + 4);

	/* 1. Raw echo. */
	char path[108];
	snprintf(path, sizeof(path), "/tmp/rtt-echo-%d.sock", (int)getpid());
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0) {
		perror("echo socket");
		return 1;
	}
	pthread_t th;
	pthread_create(&th, NULL, echo_main, &lfd);
	int efd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (connect(efd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("connect echo");
		return 1;
	}
	uint64_t *lat = calloc((size_t)iters, sizeof(*lat));
	for (int i = 0; i < 200; i++) {
		io_full(efd, frame, 4 + plen, 1);
		io_full(efd, back, 4 + plen, 0);
	}
	uint64_t w0 = mfma_clock_ns();
	for (int i = 0; i < iters; i++) {
		uint64_t t0 = mfma_clock_ns();
		io_full(efd, frame, 4 + plen, 1);
		io_full(efd, back, 4 + plen, 0);
		lat[i] = mfma_clock_ns() - t0;
	}
	struct summary echo = summarize(lat, iters, mfma_clock_ns() - w0);
	close(efd);
	pthread_join(th, NULL);
	close(lfd);
	unlink(path);

	/* 2. The same GEMM through mfmad and the client library. */
	mfma_client *c;
	struct mfma_error err;
	if (mfma_connect(argv[1], &c, &err) < 0) {
		fprintf(stderr, "rtt_bench: %s\n", err.message);
		return 1;
	}
	struct mfma_gemm_args args;
	mfma_gemm_args_init(&args);
	args.a.kind = MFMA_OPERAND_DENSE;
	args.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a, sizeof(a) };
	args.b = (struct mfma_matrix){ K, N, MFMA_TYPE_F32, b, sizeof(b) };
	double queue = 0, kernel = 0, total = 0;
	const char *variant = "?";
	char variant_buf[64] = "";
	for (int i = 0; i < 200 + iters; i++) {
		struct mfma_gemm_result r;
		uint64_t t0 = mfma_clock_ns();
		if (i == 200)
			w0 = t0;
		if (mfma_gemm(c, &args, &r, &err) < 0) {
			fprintf(stderr, "rtt_bench: %s\n", err.message);
			return 1;
		}
		uint64_t t = mfma_clock_ns() - t0;
		if (i >= 200) {
			lat[i - 200] = t;
			queue += (double)r.timing.queue_ns;
			kernel += (double)r.timing.kernel_ns;
			total += (double)r.timing.total_ns;
		}
		snprintf(variant_buf, sizeof(variant_buf), "%s/%s", r.device.backend, r.variant);
		mfma_gemm_result_free(&r);
	}
	variant = variant_buf;
	struct summary gm = summarize(lat, iters, mfma_clock_ns() - w0);
	mfma_close(c);

	printf("16x16x16 f32 GEMM round trip, %d iterations each, request frame %zu bytes\n\n",
	       iters, 4 + plen);
	printf("| path | mean us | p50 us | p90 us | p99 us | requests/s |\n");
	printf("|---|---:|---:|---:|---:|---:|\n");
	printf("| raw Unix-socket echo of the same frame | %.1f | %.1f | %.1f | %.1f | %.0f |\n",
	       echo.mean_us, echo.p50_us, echo.p90_us, echo.p99_us, echo.rps);
	printf("| mfmad GEMM (%s) | %.1f | %.1f | %.1f | %.1f | %.0f |\n", variant, gm.mean_us,
	       gm.p50_us, gm.p90_us, gm.p99_us, gm.rps);
	printf("| difference (mfmad - echo) | %.1f | %.1f | %.1f | %.1f | |\n\n",
	       gm.mean_us - echo.mean_us, gm.p50_us - echo.p50_us, gm.p90_us - echo.p90_us,
	       gm.p99_us - echo.p99_us);
	printf("mfmad's own mean breakdown: queue %.1f us, kernel %.1f us, server total %.1f us\n",
	       queue / iters / 1e3, kernel / iters / 1e3, total / iters / 1e3);
	free(lat);
	free(frame);
	free(back);
	return 0;
}
