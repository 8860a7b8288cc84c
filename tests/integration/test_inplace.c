/* Large frames without the double copy (issue 10), against the real mfmad
 * on the CPU backend: GEMMs whose matrices the daemon leaves in the frame
 * they came in and the client library sends in pieces and decodes in
 * place, checked against a float64 reference across the split threshold
 * (4 KiB), the off-loop decode (1 MiB), blocking and submitted calls, D
 * given or not, Unix and TCP; deep pipelines (many frames per read), with
 * a D of each request's own copied there as the answer is read;
 * frames by hand that protobuf merges (the split must step aside); the
 * frame a request keeps counted against limits.max_inflight_mb; and a
 * blocking call's frame, kept in pieces, sent again after a lost
 * connection; frames read into the arena of limits.pinned_reads_mb, or the
 * heap when it is full or off. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "frame.h"
#include "harness.h"
#include "harness_gemm.h"
#include "mfma.h"
#include "rawwire.h"
#include "wire_varint.h"

/* The daemon of the test running (harness_stop_leftover stops it after
 * a failed assertion). */
static struct mfmad_proc proc;

static struct mfmad_proc *start(const char *conf, const char *const *args)
{
	assert_int_equal(harness_start(&proc, conf, args), 0);
	return &proc;
}

static void stop(struct mfmad_proc *p)
{
	assert_int_equal(harness_stop(p), 0);
}

static float *values(size_t n, unsigned seed)
{
	float *p = malloc(n * sizeof(*p));
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((i * 2654435761u + seed * 40503u) % 2001) / 1000.0f - 1.0f;
	return p;
}

struct shape {
	uint32_t m, k, n;
	bool with_c;
};

/* Across the thresholds: B of exactly 4 KiB, below it, A and B of 256 KiB,
 * a frame over 1 MiB (decoded off the loop), D of 350 KiB, odd sizes; and
 * answers each side of the client's pool (frames of 4 KiB, client.c): D
 * of 1 and 3 KiB decoded into the answer's arena, and of 4032 bytes in a
 * frame just over 4 KiB, into a buffer of the pool. */
static const struct shape shapes[] = {
	{ 16, 16, 16, false },   /* D 1 KiB */
	{ 24, 9, 32, true },     /* D 3 KiB */
	{ 24, 5, 42, false },    /* D 4032 bytes, its frame past 4 KiB */
	{ 8, 128, 8, false },    /* B 4096 bytes: split from this size */
	{ 8, 127, 8, true },     /* B 4064 bytes: copied as before */
	{ 64, 1024, 64, true },  /* A, B 256 KiB, C and D 16 KiB */
	{ 32, 2048, 160, false }, /* B 1.25 MiB: the off-loop decode */
	{ 300, 17, 301, true },  /* B 20 KiB, C and D 353 KiB */
};

/* Every shape through c: blocking and submitted, D given and not. */
static void run_shapes(mfma_client *c, const char *what)
{
	struct mfma_error err;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		const struct shape *sh = &shapes[s];
		float *a = values((size_t)sh->m * sh->k, 1 + s), *b = values((size_t)sh->k * sh->n, 7 + s);
		float *cm = sh->with_c ? values((size_t)sh->m * sh->n, 13 + s) : NULL;
		size_t dn = (size_t)sh->m * sh->n;
		float *dst = malloc(dn * sizeof(float));
		struct mfma_matrix cmat = { sh->m, sh->n, MFMA_TYPE_F32, cm, dn * 4 };
		for (int mode = 0; mode < 4; mode++) {
			struct mfma_gemm_args g;
			harness_dense_f32_args(&g, a, b, sh->m, sh->k, sh->n);
			if (cm) {
				g.c = &cmat;
				g.beta = 0.5f;
				g.alpha = 2.0f;
			}
			bool given = mode & 1;
			if (given) {
				memset(dst, 0xff, dn * sizeof(float));
				g.d = dst;
				g.d_bytes = dn * sizeof(float);
			}
			struct mfma_gemm_result r;
			if (mode & 2) {
				uint64_t id, done;
				if (mfma_gemm_submit(c, &g, &id, &err) < 0)
					fail_msg("%s submit %ux%ux%u: %s", what, sh->m, sh->k, sh->n,
						 err.message);
				/* The caller may reuse its matrices once submit returns. */
				float keep = b[0];
				b[0] = 1e9f;
				if (mfma_wait(c, id, 30000, &done, &r, &err) < 0)
					fail_msg("%s wait %ux%ux%u: %s", what, sh->m, sh->k, sh->n,
						 err.message);
				b[0] = keep;
			} else if (mfma_gemm(c, &g, &r, &err) < 0) {
				fail_msg("%s gemm %ux%ux%u: %s", what, sh->m, sh->k, sh->n, err.message);
			}
			assert_int_equal(r.d.rows, sh->m);
			assert_int_equal(r.d.cols, sh->n);
			assert_int_equal(r.d.bytes, dn * sizeof(float));
			if (given)
				assert_ptr_equal(r.d.data, dst);
			double e = harness_worst_error(r.d.data, a, b, cm, g.alpha, g.beta, sh->m,
						       sh->k, sh->n);
			if (e > 1e-4)
				fail_msg("%s %ux%ux%u mode %d: worst relative error %.2e", what, sh->m,
					 sh->k, sh->n, mode, e);
			mfma_gemm_result_free(&r);
		}
		free(a);
		free(b);
		free(cm);
		free(dst);
	}
}

static void test_shapes_unix_and_tcp(void **state)
{
	(void)state;
	char tcp[32], ep[160];
	int port = harness_free_port();
	assert_true(port > 0);
	snprintf(tcp, sizeof(tcp), "127.0.0.1:%d", port);
	const char *args[] = { "--tcp", tcp, NULL };
	struct mfmad_proc *p = start("cpu = { threads = 1; devices = 1; };", args);
	struct mfma_error err;
	mfma_client *c;
	assert_true(snprintf(ep, sizeof(ep), "unix:%s", p->sock) < (int)sizeof(ep));
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	run_shapes(c, "unix");
	mfma_close(c);
	snprintf(ep, sizeof(ep), "tcp:127.0.0.1:%d", port);
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	run_shapes(c, "tcp");
	mfma_close(c);
	stop(p);
}

/* 48 submits of 256 KiB before the first wait: the daemon reads several
 * frames at once (and then copies instead of taking its read buffer), the
 * client several answers; each answer is its own request's. */
enum { DEPTH = 48 };

static void deep_pipeline(const struct mfmad_proc *p)
{
	enum { M = 16, K = 1024, N = 64, VARIANTS = 3 };
	struct mfma_error err;
	mfma_client *c;
	char ep[160];
	assert_true(snprintf(ep, sizeof(ep), "unix:%s", p->sock) < (int)sizeof(ep));
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	float *a = values((size_t)M * K, 3), *b[VARIANTS];
	for (int v = 0; v < VARIANTS; v++)
		b[v] = values((size_t)K * N, 20 + v);
	uint64_t ids[DEPTH];
	for (int i = 0; i < DEPTH; i++) {
		struct mfma_gemm_args g;
		harness_dense_f32_args(&g, a, b[i % VARIANTS], M, K, N);
		if (mfma_gemm_submit(c, &g, &ids[i], &err) < 0)
			fail_msg("submit %d: %s", i, err.message);
	}
	for (int i = 0; i < DEPTH; i++) {
		struct mfma_gemm_result r;
		uint64_t done;
		if (mfma_wait(c, MFMA_ANY, 30000, &done, &r, &err) < 0)
			fail_msg("wait: %s", err.message);
		int which = -1;
		for (int j = 0; j < DEPTH; j++)
			if (ids[j] == done)
				which = j;
		assert_true(which >= 0);
		ids[which] = 0;
		double e = harness_worst_error(r.d.data, a, b[which % VARIANTS], NULL, 1, 0, M, K,
					       N);
		if (e > 1e-4)
			fail_msg("request %d: worst relative error %.2e", which, e);
		mfma_gemm_result_free(&r);
	}
	mfma_close(c);
	for (int v = 0; v < VARIANTS; v++)
		free(b[v]);
	free(a);
}

static void test_deep_pipeline(void **state)
{
	(void)state;
	struct mfmad_proc *p = start("cpu = { threads = 1; devices = 1; };", NULL);
	deep_pipeline(p);
	stop(p);
}

/* Submitted GEMMs each with a D of its own (mfma_gemm_args.d), many in
 * flight, waited for newest first, so that the answers of the others are
 * read (and their D copied where asked, client.c's place_d) while a later
 * one is waited for: every result's D in its own buffer, right, and not
 * a byte past it written.  D of 128 bytes (within the answer's arena),
 * 16 KiB and 160 KiB (past it).  (A d too short for D is refused at
 * submit, before anything is in flight: test_regions.) */
static void test_own_d_pipelined(void **state)
{
	(void)state;
	enum { IN_FLIGHT = 24, GUARD = 64 };
	static const struct shape own[] = { { 8, 64, 4, false }, { 64, 64, 64, false },
					    { 256, 32, 160, false } };
	struct mfmad_proc *p = start("cpu = { threads = 1; devices = 1; };", NULL);
	struct mfma_error err;
	mfma_client *c;
	char ep[160];
	assert_true(snprintf(ep, sizeof(ep), "unix:%s", p->sock) < (int)sizeof(ep));
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	for (size_t s = 0; s < sizeof(own) / sizeof(own[0]); s++) {
		const struct shape *sh = &own[s];
		size_t dn = (size_t)sh->m * sh->n, dbytes = dn * sizeof(float);
		float *a = values((size_t)sh->m * sh->k, 5 + s), *b[IN_FLIGHT];
		unsigned char *dst[IN_FLIGHT];
		uint64_t ids[IN_FLIGHT];
		for (int i = 0; i < IN_FLIGHT; i++) {
			b[i] = values((size_t)sh->k * sh->n, 100 + i);
			assert_non_null(dst[i] = malloc(dbytes + GUARD));
			memset(dst[i], 0xa5, dbytes + GUARD);
			struct mfma_gemm_args g;
			harness_dense_f32_args(&g, a, b[i], sh->m, sh->k, sh->n);
			g.d = dst[i];
			g.d_bytes = dbytes;
			if (mfma_gemm_submit(c, &g, &ids[i], &err) < 0)
				fail_msg("%ux%ux%u submit %d: %s", sh->m, sh->k, sh->n, i,
					 err.message);
		}
		for (int i = IN_FLIGHT - 1; i >= 0; i--) {
			struct mfma_gemm_result r;
			uint64_t done;
			if (mfma_wait(c, ids[i], 30000, &done, &r, &err) < 0)
				fail_msg("%ux%ux%u wait %d: %s", sh->m, sh->k, sh->n, i, err.message);
			assert_int_equal(done, ids[i]);
			for (size_t g = 0; g < GUARD; g++)
				if (dst[i][dbytes + g] != 0xa5)
					fail_msg("%ux%ux%u request %d: byte %zu past D written", sh->m,
						 sh->k, sh->n, i, g);
			assert_ptr_equal(r.d.data, dst[i]);
			if (i == IN_FLIGHT - 1) {
				/* One device answers in order: the others' answers
				 * came first, and some D is in place before its wait. */
				int placed = 0;
				for (int j = 0; j < i; j++)
					placed += dst[j][0] != 0xa5 || dst[j][1] != 0xa5;
				if (placed == 0)
					fail_msg("%ux%ux%u: no D copied where asked as its answer "
						 "was read", sh->m, sh->k, sh->n);
			}
			double e = harness_worst_error(r.d.data, a, b[i], NULL, 1, 0, sh->m, sh->k,
						       sh->n);
			if (e > 1e-4)
				fail_msg("%ux%ux%u request %d: worst relative error %.2e", sh->m,
					 sh->k, sh->n, i, e);
			mfma_gemm_result_free(&r);
		}
		for (int i = 0; i < IN_FLIGHT; i++) {
			free(b[i]);
			free(dst[i]);
		}
		free(a);
	}
	mfma_close(c);
	stop(p);
}

/* The same without a d: each D in a buffer of the client's pool (from 4
 * KiB), kept for the next answers; results held across many answers and
 * freed after the client is closed, in two rounds so that the second
 * reuses what the first gave back: every D right, none overwritten by a
 * later answer (ASan: none used after the pool let it go). */
static void test_pooled_d_outlives_client(void **state)
{
	(void)state;
	enum { IN_FLIGHT = 20, ROUNDS = 2 };
	static const struct shape pooled[] = { { 32, 64, 32, false }, { 256, 32, 160, false } };
	struct mfmad_proc *p = start("cpu = { threads = 1; devices = 1; };", NULL);
	struct mfma_error err;
	char ep[160];
	assert_true(snprintf(ep, sizeof(ep), "unix:%s", p->sock) < (int)sizeof(ep));
	for (size_t s = 0; s < sizeof(pooled) / sizeof(pooled[0]); s++) {
		const struct shape *sh = &pooled[s];
		mfma_client *c;
		assert_int_equal(mfma_connect(ep, &c, &err), 0);
		float *a = values((size_t)sh->m * sh->k, 9 + s), *b[IN_FLIGHT];
		for (int i = 0; i < IN_FLIGHT; i++)
			b[i] = values((size_t)sh->k * sh->n, 300 + i);
		struct mfma_gemm_result r[ROUNDS][IN_FLIGHT];
		for (int round = 0; round < ROUNDS; round++) {
			uint64_t ids[IN_FLIGHT];
			for (int i = 0; i < IN_FLIGHT; i++) {
				struct mfma_gemm_args g;
				harness_dense_f32_args(&g, a, b[i], sh->m, sh->k, sh->n);
				if (mfma_gemm_submit(c, &g, &ids[i], &err) < 0)
					fail_msg("%ux%ux%u submit %d: %s", sh->m, sh->k, sh->n, i,
						 err.message);
			}
			for (int i = IN_FLIGHT - 1; i >= 0; i--) {
				uint64_t done;
				if (mfma_wait(c, ids[i], 30000, &done, &r[round][i], &err) < 0)
					fail_msg("%ux%ux%u wait %d: %s", sh->m, sh->k, sh->n, i,
						 err.message);
			}
			if (round == 0) /* the second round's buffers come back from these */
				for (int i = 0; i < IN_FLIGHT; i++)
					mfma_gemm_result_free(&r[0][i]);
		}
		mfma_close(c);
		for (int i = 0; i < IN_FLIGHT; i++) {
			double e = harness_worst_error(r[ROUNDS - 1][i].d.data, a, b[i], NULL, 1,
						       0, sh->m, sh->k, sh->n);
			if (e > 1e-4)
				fail_msg("%ux%ux%u request %d, after the close: worst relative error "
					 "%.2e", sh->m, sh->k, sh->n, i, e);
			mfma_gemm_result_free(&r[ROUNDS - 1][i]);
		}
		for (int i = 0; i < IN_FLIGHT; i++)
			free(b[i]);
		free(a);
	}
	stop(p);
}

static long long frames_in(int port, const char *memory)
{
	char name[96];
	snprintf(name, sizeof(name), "mfmad_gemm_request_frames_total{memory=\"%s\"}", memory);
	return harness_metric(port, name);
}

/* The daemon with metrics on; with the arena of request frames although
 * there is no GPU to register it, or as a CPU-only daemon is. */
static int start_metrics(const char *conf, bool cpu_arena)
{
	int port = harness_start_metrics(&proc, conf,
					 cpu_arena ? "MFMAD_TEST_CPU_PINNED_READS" : NULL, "1");
	assert_true(port > 0);
	return port;
}

/* Request frames read into the arena of limits.pinned_reads_mb (on a GPU,
 * memory it registered; here, with the testing aid, plain memory and the
 * same code): by default every frame that keeps a matrix was read there,
 * and the answers are right; an arena too small for a deep pipeline
 * still answers every request right; 0 turns it off; a daemon without a
 * GPU makes none. */
static void test_pinned_reads(void **state)
{
	(void)state;
	/* The four shapes with a matrix of 4 KiB or more, four ways each. */
	const long long kept = 16;
	mfma_client *c;
	struct mfma_error err;
	char ep[160];
	int port = start_metrics("cpu = { threads = 1; devices = 1; };", true);
	assert_true(snprintf(ep, sizeof(ep), "unix:%s", proc.sock) < (int)sizeof(ep));
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	run_shapes(c, "pinned");
	mfma_close(c);
	assert_int_equal(frames_in(port, "pinned"), kept);
	assert_int_equal(frames_in(port, "heap"), 0);
	stop(&proc);

	/* 1 MiB: three of the 48 frames of 320 KiB at most at once, every
	 * answer right.  (A frame read with others behind it is copied out,
	 * not kept: those count in neither.)  How many go to the heap depends
	 * on how far the reads run ahead of the GEMMs: from none (the daemon
	 * keeping up, seen in about one run in eight under ASan) to most;
	 * test_pinned_reads_stalled holds frames in the arena on purpose and
	 * proves that the next one goes to the heap. */
	port = start_metrics("cpu = { threads = 1; devices = 1; };\n"
			     "limits = { pinned_reads_mb = 1; };",
			     true);
	deep_pipeline(&proc);
	long long pinned = frames_in(port, "pinned"), heap = frames_in(port, "heap");
	assert_true(pinned + heap <= DEPTH);
	assert_true(pinned >= 1);
	stop(&proc);

	static const char *const off[] = {
		"cpu = { threads = 1; devices = 1; };\nlimits = { pinned_reads_mb = 0; };",
		"cpu = { threads = 1; devices = 1; };",
	};
	for (int i = 0; i < 2; i++) {
		port = start_metrics(off[i], i == 0);
		assert_true(snprintf(ep, sizeof(ep), "unix:%s", proc.sock) < (int)sizeof(ep));
		assert_int_equal(mfma_connect(ep, &c, &err), 0);
		run_shapes(c, "heap");
		mfma_close(c);
		assert_int_equal(frames_in(port, "pinned"), 0);
		assert_int_equal(frames_in(port, "heap"), kept);
		stop(&proc);
	}
}

/* A client that announces a large frame and stalls holds the arena of
 * request frames for as long as it holds its buffer: others' frames that
 * do not fit go to the heap meanwhile, answered right, and the arena
 * takes frames again once the staller has gone. */
static void test_pinned_reads_stalled(void **state)
{
	(void)state;
	int port = start_metrics("cpu = { threads = 1; devices = 1; };\n"
				 "limits = { pinned_reads_mb = 1; read_timeout_ms = 60000; };",
				 true);
	/* 700 KiB announced, 100 KiB sent: the daemon sizes its buffer to the
	 * whole frame, from the arena (1 MiB). */
	int staller = harness_connect_raw(&proc);
	assert_true(staller >= 0);
	size_t sent = 100 << 10;
	uint8_t *part = calloc(1, FRAME_HEADER_SIZE + sent);
	frame_header_put(part, 700u << 10);
	part[FRAME_HEADER_SIZE] = 0x08; /* the frame starts as a request would */
	assert_int_equal(harness_write_all(staller, part, FRAME_HEADER_SIZE + sent), 0);
	free(part);
	usleep(500 * 1000);
	mfma_client *c;
	struct mfma_error err;
	char ep[160];
	assert_true(snprintf(ep, sizeof(ep), "unix:%s", proc.sock) < (int)sizeof(ep));
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	/* A and B of 256 KiB each: more than the 324 KiB left. */
	harness_gemm_checked(c, 64, 64, 1024, 5);
	assert_int_equal(frames_in(port, "pinned"), 0);
	assert_int_equal(frames_in(port, "heap"), 1);
	close(staller);
	usleep(500 * 1000);
	harness_gemm_checked(c, 64, 64, 1024, 6);
	assert_int_equal(frames_in(port, "pinned"), 1);
	assert_int_equal(frames_in(port, "heap"), 1);
	mfma_close(c);
	stop(&proc);
}

/* payload1 then payload2 as one frame: protobuf reads them as one message,
 * merged (a message field sent twice is merged, a scalar's last value
 * kept, a oneof's last member kept). */
static void send_merged(int fd, const Mfma__V1__Request *r1, const Mfma__V1__Request *r2)
{
	size_t l1 = mfma__v1__request__get_packed_size(r1);
	size_t l2 = mfma__v1__request__get_packed_size(r2);
	uint8_t *buf = malloc(FRAME_HEADER_SIZE + l1 + l2);
	frame_header_put(buf, (uint32_t)(l1 + l2));
	mfma__v1__request__pack(r1, buf + FRAME_HEADER_SIZE);
	mfma__v1__request__pack(r2, buf + FRAME_HEADER_SIZE + l1);
	assert_int_equal(harness_write_all(fd, buf, FRAME_HEADER_SIZE + l1 + l2), 0);
	free(buf);
}

/* Frames whose large fields come twice, or whose GEMM loses its oneof to
 * a ping: the daemon answers what protobuf-c says the frame means. */
static void test_merged_frames(void **state)
{
	(void)state;
	enum { M = 8, K = 256, N = 16 };
	struct mfmad_proc *p = start("cpu = { threads = 1; devices = 1; };", NULL);
	int fd = harness_connect_raw(p);
	assert_true(fd >= 0);
	struct rw_mat a, b1, b2;
	rw_mat_init(&a, M, K, 1);
	rw_mat_init(&b1, K, N, 2);
	rw_mat_init(&b2, K, N, 3);
	Mfma__V1__Request r1 = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Gemm g1 = MFMA__V1__GEMM__INIT;
	r1.has_id = 1;
	r1.id = 41;
	r1.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	r1.gemm = &g1;
	g1.a = &a.op;
	g1.b = &b1.m;
	/* Request{id = 41, gemm{a, b = b1, b = b2}}: protobuf merges the two
	 * b's, and b2's fields win. */
	size_t gl = mfma__v1__gemm__get_packed_size(&g1);
	size_t bl = mfma__v1__matrix__get_packed_size(&b2.m);
	uint8_t *buf = malloc(64 + gl + bl);
	size_t o = FRAME_HEADER_SIZE;
	buf[o++] = 0x08;
	o += wire_varint_put(buf + o, 41);
	buf[o++] = 0x12;
	size_t inner = gl + 1 + wire_varint_put(NULL, bl) + bl;
	o += wire_varint_put(buf + o, inner);
	o += mfma__v1__gemm__pack(&g1, buf + o);
	buf[o++] = 0x12;
	o += wire_varint_put(buf + o, bl);
	o += mfma__v1__matrix__pack(&b2.m, buf + o);
	frame_header_put(buf, (uint32_t)(o - FRAME_HEADER_SIZE));
	assert_int_equal(harness_write_all(fd, buf, o), 0);
	free(buf);
	Mfma__V1__Response *resp = rw_read(fd, 10000);
	assert_non_null(resp);
	assert_int_equal(resp->id, 41);
	if (resp->status && resp->status->code)
		fail_msg("gemm.b twice: %s", resp->status->message);
	const float *d = (const float *)resp->gemm->d->data.data;
	assert_int_equal(resp->gemm->d->data.len, sizeof(float) * M * N);
	assert_true(harness_worst_error(d, a.data, b2.data, NULL, 1, 0, M, K, N) < 1e-4);
	assert_true(harness_worst_error(d, a.data, b1.data, NULL, 1, 0, M, K, N) > 1e-2);
	mfma__v1__response__free_unpacked(resp, NULL);

	/* Two whole gemm bodies: protobuf-c keeps the last member of a
	 * oneof as it comes (no merge), so this one has no A. */
	Mfma__V1__Request r2 = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Gemm g2 = MFMA__V1__GEMM__INIT;
	r2.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	r2.gemm = &g2;
	g2.b = &b2.m;
	send_merged(fd, &r1, &r2);
	resp = rw_read(fd, 10000);
	assert_non_null(resp);
	assert_int_equal(resp->id, 41);
	assert_int_equal(resp->status->code, MFMA__V1__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(resp->status->message, "a is missing"));
	mfma__v1__response__free_unpacked(resp, NULL);

	/* The GEMM, then a ping in the same oneof: a ping it is. */
	Mfma__V1__Ping ping = MFMA__V1__PING__INIT;
	Mfma__V1__Request r3 = MFMA__V1__REQUEST__INIT;
	r1.id = 42;
	g1.b = &b1.m;
	r3.body_case = MFMA__V1__REQUEST__BODY_PING;
	r3.ping = &ping;
	send_merged(fd, &r1, &r3);
	resp = rw_read(fd, 10000);
	assert_non_null(resp);
	assert_int_equal(resp->id, 42);
	assert_int_equal(resp->body_case, MFMA__V1__RESPONSE__BODY_PONG);
	mfma__v1__response__free_unpacked(resp, NULL);
	close(fd);
	rw_mat_free(&a);
	rw_mat_free(&b1);
	rw_mat_free(&b2);
	stop(p);
}

/* A request holds its whole frame now: a GEMM with a small B (128 KiB)
 * and D (256 KiB) but 700 KiB of fields the daemon ignores counts its
 * frame against limits.max_inflight_mb (its matrices alone would fit
 * twice), so a second one while the first runs is refused, naming the
 * limit.  The first is slow (a resident 4096 x 2048 weight: ten
 * milliseconds or more here) against reading the second frame; and if it
 * is done first, its answer (256 KiB, more than a Unix socket buffers)
 * still counts until this test reads it, after both frames are written,
 * so the second is refused either way, and admitted either way were its
 * frame not counted (256 + 384 KiB of matrices fit under 1 MiB). */
static void test_frame_counted(void **state)
{
	(void)state;
	enum { M = 4096, K = 2048, N = 16, JUNK = 700 * 1024 };
	struct mfmad_proc *p = start("cpu = { threads = 1; devices = 1; };\nlimits = { max_inflight_mb = 1; };", NULL);
	int fd = harness_connect_raw(p);
	assert_true(fd >= 0);
	struct rw_mat w, b;
	rw_mat_init(&w, M, K, 5);
	rw_mat_init(&b, K, N, 6);
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__LoadWeight lw = MFMA__V1__LOAD_WEIGHT__INIT;
	lw.name = "big";
	lw.a = &w.op;
	req.has_id = 1;
	req.id = 1;
	req.body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
	req.load_weight = &lw;
	rw_send(fd, &req);
	Mfma__V1__Response *resp = rw_read(fd, 30000);
	assert_non_null(resp);
	assert_int_equal(resp->status ? resp->status->code : 0, MFMA__V1__CODE__OK);
	mfma__v1__response__free_unpacked(resp, NULL);

	Mfma__V1__Gemm g = MFMA__V1__GEMM__INIT;
	Mfma__V1__Operand op = MFMA__V1__OPERAND__INIT;
	op.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
	op.weight = "big";
	g.a = &op;
	g.b = &b.m;
	req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	req.gemm = &g;
	size_t n = mfma__v1__request__get_packed_size(&req);
	/* Field 99 (unknown to the schema), length-delimited, JUNK bytes. */
	size_t flen = n + 2 + 3 + JUNK;
	uint8_t *two = calloc(1, 2 * (FRAME_HEADER_SIZE + flen));
	for (int i = 0; i < 2; i++) {
		uint8_t *f = two + i * (FRAME_HEADER_SIZE + flen);
		req.id = 10 + i;
		frame_header_put(f, (uint32_t)flen);
		mfma__v1__request__pack(&req, f + FRAME_HEADER_SIZE);
		uint8_t *x = f + FRAME_HEADER_SIZE + n;
		x[0] = 0x9a, x[1] = 0x06;                                   /* key 99, type 2 */
		x[2] = (JUNK & 0x7f) | 0x80, x[3] = ((JUNK >> 7) & 0x7f) | 0x80, x[4] = JUNK >> 14;
	}
	assert_int_equal(harness_write_all(fd, two, 2 * (FRAME_HEADER_SIZE + flen)), 0);
	bool ok10 = false, refused11 = false;
	for (int i = 0; i < 2; i++) {
		resp = rw_read(fd, 30000);
		assert_non_null(resp);
		int code = resp->status ? (int)resp->status->code : 0;
		const char *msg = resp->status && resp->status->message ? resp->status->message : "";
		printf("answer %llu: code %d %s (kernel %llu us)\n", (unsigned long long)resp->id,
		       code, msg,
		       resp->gemm && resp->gemm->timing
			       ? (unsigned long long)resp->gemm->timing->kernel_ns / 1000
			       : 0ull);
		if (resp->id == 10)
			ok10 = code == MFMA__V1__CODE__OK;
		if (resp->id == 11)
			refused11 = code == MFMA__V1__CODE__RESOURCE_EXHAUSTED &&
				    strstr(msg, "limits.max_inflight_mb") != NULL;
		mfma__v1__response__free_unpacked(resp, NULL);
	}
	assert_true(ok10);
	assert_true(refused11);
	free(two);
	close(fd);
	rw_mat_free(&w);
	rw_mat_free(&b);
	stop(p);
}

/* A peer that takes one frame and closes without answering. */
struct swallow {
	int lfd;
	uint8_t *got;
	long len;
};

static void *swallow_one(void *arg)
{
	struct swallow *w = arg;
	int fd = accept(w->lfd, NULL, NULL);
	if (fd >= 0) {
		w->len = harness_read_frame(fd, &w->got, 10000);
		close(fd);
	}
	return NULL;
}

/* A blocking GEMM of 512 KiB goes out in pieces, the matrices from the
 * caller's memory; its first endpoint takes the frame and closes, and the
 * library sends the pieces it kept again to the next endpoint of the
 * list, within the same call.  The frame as sent is protobuf-c's own
 * packing, byte for byte. */
static void test_blocking_resend(void **state)
{
	(void)state;
	enum { M = 32, K = 1024, N = 128 };
	struct mfmad_proc *p = start("cpu = { threads = 1; devices = 1; };", NULL);
	struct swallow w = { .len = -1 };
	char fake[108];
	assert_true(snprintf(fake, sizeof(fake), "%s.swallow", p->sock) < (int)sizeof(fake));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, fake, sizeof(fake));
	w.lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(w.lfd >= 0);
	assert_int_equal(bind(w.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(w.lfd, 4), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, swallow_one, &w), 0);

	char ep[256];
	assert_true(snprintf(ep, sizeof(ep), "unix:%s,unix:%s", fake, p->sock) < (int)sizeof(ep));
	struct mfma_error err;
	mfma_client *c;
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	mfma_set_timeout(c, 20000);
	float *a = values((size_t)M * K, 31), *b = values((size_t)K * N, 32);
	struct mfma_gemm_args g;
	harness_dense_f32_args(&g, a, b, M, K, N);
	struct mfma_gemm_result r;
	if (mfma_gemm(c, &g, &r, &err) < 0)
		fail_msg("gemm after a swallowed frame: %s", err.message);
	pthread_join(t, NULL);
	close(w.lfd);
	unlink(fake);
	assert_true(harness_worst_error(r.d.data, a, b, NULL, 1, 0, M, K, N) < 1e-4);
	mfma_gemm_result_free(&r);
	mfma_close(c);

	/* What the first endpoint read: the whole request, as protobuf-c
	 * packs it, after a pad field that puts the first matrix (A's) at a
	 * 16-byte offset of the frame (its 4-byte header included). */
	assert_true(w.len > 0);
	Mfma__V1__Request *req = mfma__v1__request__unpack(NULL, (size_t)w.len, w.got);
	assert_non_null(req);
	assert_int_equal(req->body_case, MFMA__V1__REQUEST__BODY_GEMM);
	assert_int_equal(req->gemm->b->data.len, sizeof(float) * K * N);
	assert_memory_equal(req->gemm->b->data.data, b, sizeof(float) * K * N);
	assert_memory_equal(req->gemm->a->dense->data.data, a, sizeof(float) * M * K);
	const uint8_t *a_at = memmem(w.got, (size_t)w.len, a, sizeof(float) * M * K);
	assert_non_null(a_at);
	assert_int_equal((4 + (size_t)(a_at - w.got)) % 16, 0);
	size_t skip = 0;
	if (req->has_pad) {
		assert_int_equal(w.got[0], (15 << 3) | 2);
		assert_int_equal(w.got[1], req->pad.len);
		skip = 2 + req->pad.len;
		req->has_pad = 0;
	}
	size_t n = mfma__v1__request__get_packed_size(req);
	uint8_t *again = malloc(n);
	mfma__v1__request__pack(req, again);
	assert_int_equal(n + skip, (size_t)w.len);
	assert_memory_equal(again, w.got + skip, n);
	free(again);
	mfma__v1__request__free_unpacked(req, NULL);
	free(w.got);
	free(a);
	free(b);
	stop(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_shapes_unix_and_tcp, harness_stop_leftover),
		cmocka_unit_test_teardown(test_deep_pipeline, harness_stop_leftover),
		cmocka_unit_test_teardown(test_own_d_pipelined, harness_stop_leftover),
		cmocka_unit_test_teardown(test_pooled_d_outlives_client, harness_stop_leftover),
		cmocka_unit_test_teardown(test_pinned_reads, harness_stop_leftover),
		cmocka_unit_test_teardown(test_pinned_reads_stalled, harness_stop_leftover),
		cmocka_unit_test_teardown(test_merged_frames, harness_stop_leftover),
		cmocka_unit_test_teardown(test_frame_counted, harness_stop_leftover),
		cmocka_unit_test_teardown(test_blocking_resend, harness_stop_leftover),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
