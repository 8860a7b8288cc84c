/* libmfmaclient against the real mfmad: ping and status, dense GEMMs of
 * every dtype, the three 2:4 paths (validate, client-packed, prune),
 * resident weights, pipelining on one connection and several connections
 * from threads, corked submits (held, then written in one go, in order
 * with the client's other requests).  Every result is checked against
 * the float64 reference on random data with no zeros and odd shapes; each
 * test starts its own daemon and checks that it exits cleanly. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "ctl_util.h"
#include "harness.h"
#include "mfma.h"
#include "sparse24.h"

struct env {
	struct mfmad_proc d;
	mfma_client *c;
};

static int start_with(void **state, const char *conf)
{
	struct env *e = calloc(1, sizeof(*e));
	struct mfma_error err;
	if (!e || harness_start(&e->d, conf, NULL) != 0)
		return -1;
	if (mfma_connect(e->d.endpoint, &e->c, &err) != 0) {
		fprintf(stderr, "connect: %s\n", err.message);
		return -1;
	}
	/* A hung daemon fails the test instead of hanging it. */
	mfma_set_timeout(e->c, 60000);
	*state = e;
	return 0;
}

static int setup(void **state)
{
	return start_with(state, NULL);
}

static int setup_deep_pipeline(void **state)
{
	return start_with(state, "limits = { max_inflight_per_connection = 256; };");
}

/* For a test that killed its daemon: the client closed, nothing to stop. */
static int teardown_killed(void **state)
{
	struct env *e = *state;
	mfma_close(e->c);
	(void)harness_stop(&e->d);
	free(e);
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	mfma_close(e->c);
	int rc = harness_stop(&e->d);
	free(e);
	/* 0: a clean exit, and under ASan no leak. */
	return rc == 0 ? 0 : -1;
}

/* ---- matrices and the reference ---- */

struct mat {
	uint32_t rows, cols;
	enum mfma_dtype t;
	void *p;
	size_t bytes;
};

static struct mat mat_rand(enum mfma_dtype t, uint32_t rows, uint32_t cols, bool sparse24,
			   uint64_t seed)
{
	struct mat m = { rows, cols, t, NULL, (size_t)rows * cols * mfma_dtype_size(t) };
	m.p = malloc(m.bytes);
	assert_non_null(m.p);
	assert_int_equal(ctl_random_matrix(m.p, t, rows, cols, sparse24, seed), 0);
	return m;
}

/* The library's element type for the kernels' one: the same number. */
static enum mfma_type pub(enum mfma_dtype t)
{
	return (enum mfma_type)t;
}

static struct mfma_matrix as_mfma(const struct mat *m)
{
	return (struct mfma_matrix){ m->rows, m->cols, pub(m->t), m->p, m->bytes };
}

/* The A the daemon multiplies under PRUNE_24 (K a multiple of 4). */
static struct mat mat_pruned(const struct mat *a)
{
	struct mat p = *a;
	size_t es = mfma_dtype_size(a->t);
	void *values = malloc(sparse24_values_bytes(a->rows, a->cols, es));
	uint32_t *meta = malloc(sparse24_meta_bytes(a->rows, a->cols));
	p.p = malloc(a->bytes);
	assert_true(values && meta && p.p);
	assert_int_equal(sparse24_prune(a->p, a->t, a->rows, a->cols, values, meta), 0);
	assert_int_equal(sparse24_decompress(values, meta, a->t, a->rows, a->cols, p.p, NULL,
					     NULL), 0);
	free(values);
	free(meta);
	return p;
}

/* Relative Frobenius error of D against alpha*A.B + beta*C in float64,
 * after checking D's shape and type. */
static double rel_error(const struct mfma_gemm_result *r, const struct mat *a, const struct mat *b,
			const struct mat *c, float alpha, float beta, enum mfma_dtype out)
{
	assert_int_equal(r->d.rows, a->rows);
	assert_int_equal(r->d.cols, b->cols);
	assert_int_equal(r->d.dtype, out);
	assert_int_equal(r->d.bytes, (size_t)a->rows * b->cols * mfma_dtype_size(out));
	struct mfma_gemm g = {
		.m = a->rows, .n = b->cols, .k = a->cols,
		.in_dtype = a->t, .out_dtype = out,
		.alpha = alpha, .beta = c ? beta : 0.0f,
		.a = a->p, .b = b->p, .c = c ? c->p : NULL,
		.d = (void *)(uintptr_t)r->d.data,
	};
	size_t count = (size_t)a->rows * b->cols;
	double *ref = malloc(count * sizeof(double));
	assert_non_null(ref);
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	double e = cpu_rel_frobenius(r->d.data, out, ref, count);
	free(ref);
	return e;
}

static void expect_close(const struct mfma_gemm_result *r, const struct mat *a,
			 const struct mat *b, const struct mat *c, float alpha, float beta,
			 enum mfma_dtype out)
{
	double e = rel_error(r, a, b, c, alpha, beta, out);
	double tol = mfma_check_tolerance(pub(out), a->cols);
	if (tol == 0.0 ? e != 0.0 : !(e < tol))
		fail_msg("%s x %s -> %s (%s): relative error %g over %g", mfma_dtype_name(a->t),
			 mfma_dtype_name(b->t), mfma_dtype_name(out), r->variant, e, tol);
}

static void dense_args(struct mfma_gemm_args *ga, const struct mat *a, const struct mat *b)
{
	mfma_gemm_args_init(ga);
	ga->a.kind = MFMA_OPERAND_DENSE;
	ga->a.dense = as_mfma(a);
	ga->b = as_mfma(b);
}

static void run_ok(mfma_client *c, const struct mfma_gemm_args *ga, struct mfma_gemm_result *r)
{
	struct mfma_error err;
	int rc = mfma_gemm(c, ga, r, &err);
	if (rc != 0)
		fail_msg("gemm failed (%d): %s", rc, err.message);
	assert_int_equal(err.code, 0);
}

/* ---- tests ---- */

static void test_ping_and_status(void **state)
{
	struct env *e = *state;
	struct mfma_error err;
	uint64_t rtt = 0;
	assert_int_equal(mfma_ping(e->c, NULL, 0, &rtt, &err), 0);
	assert_true(rtt > 0);
	char payload[3000];
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (char)(i * 31);
	assert_int_equal(mfma_ping(e->c, payload, sizeof(payload), &rtt, &err), 0);

	struct mfma_status s;
	assert_int_equal(mfma_status(e->c, &s, &err), 0);
	assert_true(strlen(s.version) > 0);
	assert_true(s.uptime_ns > 0);
	assert_true(s.n_devices >= 1);
	assert_string_equal(s.devices[0].backend, "cpu");
	assert_true(strlen(s.devices[0].arch) > 0 && strlen(s.devices[0].name) > 0);
	assert_true(s.devices[0].mem_total > 0);
	assert_true(s.devices[0].n_variants > 0);
	assert_int_equal(s.n_weights, 0);
	/* The two pings are counted; this connection is open. */
	assert_true(s.counters.requests >= 2);
	assert_true(s.counters.ok >= 2);
	assert_true(s.counters.connections_open >= 1);
	mfma_status_free(&s);
	assert_null(s.devices);
}

static void test_dense_every_dtype(void **state)
{
	struct env *e = *state;
	static const struct {
		enum mfma_dtype in, out; /* out NONE: the daemon's default */
		enum mfma_dtype expect;
	} cases[] = {
		{ MFMA_DT_F32, MFMA_DT_NONE, MFMA_DT_F32 },
		{ MFMA_DT_F16, MFMA_DT_NONE, MFMA_DT_F32 },
		{ MFMA_DT_BF16, MFMA_DT_NONE, MFMA_DT_F32 },
		{ MFMA_DT_I8, MFMA_DT_NONE, MFMA_DT_I32 },
		{ MFMA_DT_F16, MFMA_DT_F16, MFMA_DT_F16 },
		{ MFMA_DT_BF16, MFMA_DT_BF16, MFMA_DT_BF16 },
	};
	/* Shapes that fill no tile: odd M, N and K. */
	static const uint32_t shapes[][3] = { { 37, 45, 29 }, { 1, 7, 1 }, { 65, 130, 33 } };
	uint64_t seed = 100;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
			uint32_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
			struct mat a = mat_rand(cases[i].in, m, k, false, seed++);
			struct mat b = mat_rand(cases[i].in, k, n, false, seed++);
			struct mfma_gemm_args ga;
			struct mfma_gemm_result r;
			dense_args(&ga, &a, &b);
			ga.out_dtype = pub(cases[i].out);
			run_ok(e->c, &ga, &r);
			expect_close(&r, &a, &b, NULL, 1.0f, 0.0f, cases[i].expect);
			assert_true(r.round_trip_ns > 0);
			assert_true(r.timing.total_ns > 0 && r.timing.kernel_ns > 0);
			assert_true(r.timing.total_ns >= r.timing.kernel_ns);
			assert_true(strlen(r.variant) > 0);
			assert_string_equal(r.device.backend, "cpu");
			mfma_gemm_result_free(&r);
			free(a.p);
			free(b.p);
		}
	}
}

static void test_alpha_beta_c(void **state)
{
	struct env *e = *state;
	static const struct {
		enum mfma_dtype in, out;
		float alpha, beta;
	} cases[] = {
		{ MFMA_DT_F32, MFMA_DT_F32, 0.5f, -2.0f },
		{ MFMA_DT_F16, MFMA_DT_F32, -1.5f, 0.25f },
		{ MFMA_DT_BF16, MFMA_DT_BF16, 2.0f, 1.0f },
		{ MFMA_DT_I8, MFMA_DT_I32, 1.0f, 1.0f },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mat a = mat_rand(cases[i].in, 23, 31, false, 200 + i);
		struct mat b = mat_rand(cases[i].in, 31, 19, false, 300 + i);
		struct mat c = mat_rand(cases[i].out, 23, 19, false, 400 + i);
		struct mfma_matrix cm = as_mfma(&c);
		struct mfma_gemm_args ga;
		struct mfma_gemm_result r;
		dense_args(&ga, &a, &b);
		ga.c = &cm;
		ga.alpha = cases[i].alpha;
		ga.beta = cases[i].beta;
		ga.out_dtype = pub(cases[i].out);
		run_ok(e->c, &ga, &r);
		expect_close(&r, &a, &b, &c, cases[i].alpha, cases[i].beta, cases[i].out);
		mfma_gemm_result_free(&r);
		free(a.p);
		free(b.p);
		free(c.p);
	}
}

static void test_sparse24_paths(void **state)
{
	struct env *e = *state;
	static const enum mfma_dtype all[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16, MFMA_DT_I8 };
	const uint32_t m = 37, k = 68, n = 21; /* K a multiple of 4, not of 8 or 32 */
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		enum mfma_dtype out = all[i] == MFMA_DT_I8 ? MFMA_DT_I32 : MFMA_DT_F32;
		struct mat a24 = mat_rand(all[i], m, k, true, 500 + i);
		struct mat dense = mat_rand(all[i], m, k, false, 600 + i);
		struct mat b = mat_rand(all[i], k, n, false, 700 + i);
		struct mfma_gemm_args ga;
		struct mfma_gemm_result r;
		struct mfma_error err;

		/* VALIDATE_24 on an A that is 2:4. */
		dense_args(&ga, &a24, &b);
		ga.a.sparsity = MFMA_SPARSITY_VALIDATE_24;
		run_ok(e->c, &ga, &r);
		expect_close(&r, &a24, &b, NULL, 1.0f, 0.0f, out);
		mfma_gemm_result_free(&r);

		/* ... and on one that is not: refused, naming the trouble. */
		dense_args(&ga, &dense, &b);
		ga.a.sparsity = MFMA_SPARSITY_VALIDATE_24;
		assert_int_equal(mfma_gemm(e->c, &ga, &r, &err),
				 MFMA_EREMOTE(MFMA_CODE_INVALID_ARGUMENT));
		assert_int_equal(err.code, MFMA_CODE_INVALID_ARGUMENT);
		assert_true(strlen(err.message) > 10);
		assert_null(r.priv);

		/* The canonical 2:4 form, compressed here. */
		size_t es = mfma_dtype_size(all[i]);
		size_t vb = sparse24_values_bytes(m, k, es), mb = sparse24_meta_bytes(m, k);
		void *values = malloc(vb);
		uint32_t *meta = malloc(mb);
		assert_int_equal(sparse24_compress(a24.p, all[i], m, k, values, meta, NULL, NULL), 0);
		mfma_gemm_args_init(&ga);
		ga.a.kind = MFMA_OPERAND_SPARSE24;
		ga.a.sparse = (struct mfma_sparse24){ m, k, pub(all[i]), values, vb, meta, mb };
		ga.b = as_mfma(&b);
		run_ok(e->c, &ga, &r);
		expect_close(&r, &a24, &b, NULL, 1.0f, 0.0f, out);
		mfma_gemm_result_free(&r);
		free(values);
		free(meta);

		/* PRUNE_24 of a dense A: the reference multiplies the pruned A. */
		dense_args(&ga, &dense, &b);
		ga.a.sparsity = MFMA_SPARSITY_PRUNE_24;
		run_ok(e->c, &ga, &r);
		struct mat pruned = mat_pruned(&dense);
		expect_close(&r, &pruned, &b, NULL, 1.0f, 0.0f, out);
		/* Not the unpruned product: the pruning really happened. */
		assert_true(rel_error(&r, &dense, &b, NULL, 1.0f, 0.0f, out) > 0.05);
		mfma_gemm_result_free(&r);
		free(pruned.p);
		free(a24.p);
		free(dense.p);
		free(b.p);
	}
}

static void test_weights(void **state)
{
	struct env *e = *state;
	struct mfma_error err;
	const uint32_t m = 45, k = 36, n = 13;
	struct mat wd = mat_rand(MFMA_DT_F16, m, k, false, 800);
	struct mat ws = mat_rand(MFMA_DT_F16, m, k, true, 801);
	struct mat wp = mat_rand(MFMA_DT_F16, m, k, false, 802);
	struct mat b = mat_rand(MFMA_DT_F16, k, n, false, 803);
	struct mfma_load_args la;
	struct mfma_load_result lr;

	mfma_load_args_init(&la);
	la.name = "dense-w";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = as_mfma(&wd);
	assert_int_equal(mfma_load_weight(e->c, &la, &lr, &err), 0);
	assert_string_equal(lr.weight.name, "dense-w");
	assert_int_equal(lr.weight.rows, m);
	assert_int_equal(lr.weight.cols, k);
	assert_int_equal(lr.weight.dtype, MFMA_DT_F16);
	assert_false(lr.weight.sparse);
	assert_true(lr.weight.n_devices >= 1);
	mfma_load_result_free(&lr);

	la.name = "sparse-w";
	la.a.dense = as_mfma(&ws);
	la.a.sparsity = MFMA_SPARSITY_VALIDATE_24;
	assert_int_equal(mfma_load_weight(e->c, &la, &lr, &err), 0);
	assert_true(lr.weight.sparse);
	mfma_load_result_free(&lr);

	la.name = "pruned-w";
	la.a.dense = as_mfma(&wp);
	la.a.sparsity = MFMA_SPARSITY_PRUNE_24;
	assert_int_equal(mfma_load_weight(e->c, &la, NULL, &err), 0);

	/* The same name again: refused unless replace. */
	assert_int_equal(mfma_load_weight(e->c, &la, NULL, &err),
			 MFMA_EREMOTE(MFMA_CODE_ALREADY_EXISTS));
	assert_non_null(strstr(err.message, "pruned-w"));
	la.replace = true;
	assert_int_equal(mfma_load_weight(e->c, &la, NULL, &err), 0);

	struct mfma_weight_list l;
	assert_int_equal(mfma_list_weights(e->c, &l, &err), 0);
	assert_int_equal(l.n_weights, 3);
	int found = 0;
	for (size_t i = 0; i < l.n_weights; i++) {
		assert_int_equal(l.weights[i].rows, m);
		assert_int_equal(l.weights[i].cols, k);
		assert_true(l.weights[i].bytes > 0);
		if (!strcmp(l.weights[i].name, "dense-w"))
			found += 1 + 10 * l.weights[i].sparse;
		if (!strcmp(l.weights[i].name, "sparse-w"))
			found += 100 * l.weights[i].sparse;
		if (!strcmp(l.weights[i].name, "pruned-w"))
			found += 1000 * l.weights[i].sparse;
	}
	assert_int_equal(found, 1101);
	mfma_weight_list_free(&l);

	/* GEMMs with each, checked against what was loaded. */
	const struct {
		const char *name;
		struct mat *a;
	} uses[] = { { "dense-w", &wd }, { "sparse-w", &ws }, { "pruned-w", &wp } };
	for (size_t i = 0; i < 3; i++) {
		struct mfma_gemm_args ga;
		struct mfma_gemm_result r;
		mfma_gemm_args_init(&ga);
		ga.a.kind = MFMA_OPERAND_WEIGHT;
		ga.a.weight = uses[i].name;
		ga.b = as_mfma(&b);
		run_ok(e->c, &ga, &r);
		if (i == 2) {
			struct mat p = mat_pruned(uses[i].a);
			expect_close(&r, &p, &b, NULL, 1.0f, 0.0f, MFMA_DT_F32);
			free(p.p);
		} else {
			expect_close(&r, uses[i].a, &b, NULL, 1.0f, 0.0f, MFMA_DT_F32);
		}
		mfma_gemm_result_free(&r);
	}

	struct mfma_status s;
	assert_int_equal(mfma_status(e->c, &s, &err), 0);
	assert_int_equal(s.n_weights, 3);
	assert_true(s.weight_bytes > 0);
	mfma_status_free(&s);

	assert_int_equal(mfma_unload_weight(e->c, "sparse-w", &err), 0);
	assert_int_equal(mfma_unload_weight(e->c, "sparse-w", &err),
			 MFMA_EREMOTE(MFMA_CODE_NOT_FOUND));
	assert_non_null(strstr(err.message, "sparse-w"));
	assert_int_equal(mfma_list_weights(e->c, &l, &err), 0);
	assert_int_equal(l.n_weights, 2);
	mfma_weight_list_free(&l);

	/* A GEMM naming an unknown weight: NOT_FOUND, the name in the message. */
	struct mfma_gemm_args ga;
	struct mfma_gemm_result r;
	mfma_gemm_args_init(&ga);
	ga.a.kind = MFMA_OPERAND_WEIGHT;
	ga.a.weight = "sparse-w";
	ga.b = as_mfma(&b);
	assert_int_equal(mfma_gemm(e->c, &ga, &r, &err), MFMA_EREMOTE(MFMA_CODE_NOT_FOUND));
	assert_int_equal(err.code, MFMA_CODE_NOT_FOUND);
	assert_non_null(strstr(err.message, "sparse-w"));
	/* The connection goes on. */
	assert_int_equal(mfma_ping(e->c, NULL, 0, NULL, &err), 0);
	free(wd.p);
	free(ws.p);
	free(wp.p);
	free(b.p);
}

/* `count` GEMMs submitted before any wait, each with its own B, then
 * collected in the order given by `by_id` (or MFMA_ANY) and checked. */
static void pipeline(mfma_client *c, size_t count, uint32_t m, uint32_t k, uint32_t n,
		     bool by_id, uint64_t seed)
{
	struct mat a = mat_rand(MFMA_DT_F32, m, k, false, seed);
	struct mat *bs = calloc(count, sizeof(*bs));
	uint64_t *ids = calloc(count, sizeof(*ids));
	bool *seen = calloc(count, sizeof(*seen));
	struct mfma_error err;
	assert_true(bs && ids && seen);
	for (size_t i = 0; i < count; i++) {
		struct mfma_gemm_args ga;
		bs[i] = mat_rand(MFMA_DT_F32, k, n, false, seed + 1 + i);
		dense_args(&ga, &a, &bs[i]);
		if (mfma_gemm_submit(c, &ga, &ids[i], &err) != 0)
			fail_msg("submit %zu: %s", i, err.message);
	}
	assert_int_equal(mfma_in_flight(c), count);
	for (size_t w = 0; w < count; w++) {
		struct mfma_gemm_result r;
		uint64_t want = by_id ? ids[count - 1 - w] : MFMA_ANY, done = 0;
		if (mfma_wait(c, want, 60000, &done, &r, &err) != 0)
			fail_msg("wait %zu: %s", w, err.message);
		size_t i = 0;
		while (i < count && ids[i] != done)
			i++;
		assert_true(i < count);
		assert_false(seen[i]);
		seen[i] = true;
		/* Matched by id: D is the product with that request's B. */
		expect_close(&r, &a, &bs[i], NULL, 1.0f, 0.0f, MFMA_DT_F32);
		mfma_gemm_result_free(&r);
	}
	assert_int_equal(mfma_in_flight(c), 0);
	for (size_t i = 0; i < count; i++)
		free(bs[i].p);
	free(bs);
	free(ids);
	free(seen);
	free(a.p);
}

static void test_pipeline_64(void **state)
{
	struct env *e = *state;
	pipeline(e->c, 64, 19, 27, 11, false, 900);
	pipeline(e->c, 64, 19, 27, 11, true, 1900);
}

static void test_pipeline_deep_large(void **state)
{
	/* 200 requests of 256 KiB each way: far more than the socket buffers
	 * hold, so the daemon writes answers while the client still sends. */
	struct env *e = *state;
	pipeline(e->c, 200, 128, 512, 128, false, 3000);
}

struct worker {
	const char *endpoint;
	int index;
	int failures;
	char msg[600];
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	mfma_client *c;
	struct mfma_error err;
	if (mfma_connect(w->endpoint, &c, &err) != 0) {
		w->failures++;
		snprintf(w->msg, sizeof(w->msg), "connect: %s", err.message);
		return NULL;
	}
	mfma_set_timeout(c, 60000);
	for (int i = 0; i < 8; i++) {
		/* cmocka's asserts are not for other threads: count failures. */
		enum mfma_dtype t = i % 2 ? MFMA_DT_F16 : MFMA_DT_F32;
		uint64_t seed = (uint64_t)w->index * 1000 + (uint64_t)i;
		struct mat a = mat_rand(t, 29 + w->index, 40, false, seed);
		struct mat b = mat_rand(t, 40, 17, false, seed + 500);
		struct mfma_gemm_args ga;
		struct mfma_gemm_result r = { 0 };
		dense_args(&ga, &a, &b);
		uint64_t id, done;
		int rc;
		if (i % 3) {
			rc = mfma_gemm(c, &ga, &r, &err);
		} else {
			rc = mfma_gemm_submit(c, &ga, &id, &err);
			if (rc == 0)
				rc = mfma_wait(c, id, 60000, &done, &r, &err);
		}
		if (rc != 0) {
			w->failures++;
			snprintf(w->msg, sizeof(w->msg), "gemm %d: %s", i, err.message);
		} else if (r.d.rows != a.rows || r.d.cols != b.cols) {
			w->failures++;
			snprintf(w->msg, sizeof(w->msg), "gemm %d: D is %ux%u", i, r.d.rows, r.d.cols);
		} else {
			struct mfma_gemm g = { .m = a.rows, .n = b.cols, .k = a.cols, .in_dtype = t,
					       .out_dtype = MFMA_DT_F32, .alpha = 1, .a = a.p,
					       .b = b.p, .d = (void *)(uintptr_t)r.d.data };
			double *ref = malloc((size_t)a.rows * b.cols * sizeof(double));
			double rel = 1.0;
			if (ref && cpu_gemm_ref_f64(&g, ref) == 0)
				rel = cpu_rel_frobenius(r.d.data, MFMA_DT_F32, ref,
							(size_t)a.rows * b.cols);
			free(ref);
			if (!(rel < mfma_check_tolerance(MFMA_TYPE_F32, a.cols))) {
				w->failures++;
				snprintf(w->msg, sizeof(w->msg), "gemm %d: relative error %g", i, rel);
			}
		}
		mfma_gemm_result_free(&r);
		free(a.p);
		free(b.p);
	}
	mfma_close(c);
	return NULL;
}

static void test_threads(void **state)
{
	struct env *e = *state;
	enum { NT = 6 };
	struct worker w[NT];
	pthread_t tid[NT];
	for (int i = 0; i < NT; i++) {
		w[i] = (struct worker){ .endpoint = e->d.endpoint, .index = i };
		assert_int_equal(pthread_create(&tid[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < NT; i++)
		pthread_join(tid[i], NULL);
	for (int i = 0; i < NT; i++)
		if (w[i].failures)
			fail_msg("thread %d: %d failures, last: %s", i, w[i].failures, w[i].msg);
	struct mfma_status s;
	struct mfma_error err;
	assert_int_equal(mfma_status(e->c, &s, &err), 0);
	assert_true(s.counters.connections_total >= NT + 1);
	/* Every answer the threads have is counted completed and no longer
	 * in flight on its device: both are counted before an answer can be
	 * sent. */
	uint64_t done = 0, running = 0;
	for (size_t i = 0; i < s.n_devices; i++) {
		done += s.devices[i].completed;
		running += s.devices[i].in_flight;
	}
	assert_true(done >= NT * 8);
	assert_int_equal(running, 0);
	/* Nor in the daemon's count of requests not yet answered. */
	assert_int_equal(s.counters.in_flight, 0);
	mfma_status_free(&s);
}

/* ---- corked submits (mfma_cork) ---- */

/* The GEMMs the daemon has read so far (queued, running or done on its
 * devices), asked on a connection of its own: held requests have not
 * been written. */
static uint64_t daemon_gemms(const char *endpoint)
{
	mfma_client *o;
	struct mfma_error err;
	struct mfma_status s;
	assert_int_equal(mfma_connect(endpoint, &o, &err), 0);
	assert_int_equal(mfma_status(o, &s, &err), 0);
	uint64_t n = 0;
	for (size_t i = 0; i < s.n_devices; i++)
		n += s.devices[i].queue_depth + s.devices[i].in_flight + s.devices[i].completed +
		     s.devices[i].failed;
	mfma_status_free(&s);
	mfma_close(o);
	return n;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Submits b[0..n) against a, corked or not as the client is. */
static void submit_all(mfma_client *c, const struct mat *a, const struct mat *b, size_t n,
		       uint64_t *ids)
{
	struct mfma_error err;
	for (size_t i = 0; i < n; i++) {
		struct mfma_gemm_args ga;
		dense_args(&ga, a, &b[i]);
		if (mfma_gemm_submit(c, &ga, &ids[i], &err) != 0)
			fail_msg("submit %zu: %s", i, err.message);
	}
}

/* Waits for each id (in the order given) and checks it against a.b[i]. */
static void wait_all(mfma_client *c, const struct mat *a, const struct mat *b, size_t n,
		     const uint64_t *ids)
{
	struct mfma_error err;
	for (size_t i = 0; i < n; i++) {
		struct mfma_gemm_result r;
		uint64_t done;
		if (mfma_wait(c, ids[i], 60000, &done, &r, &err) != 0)
			fail_msg("wait %zu: %s", i, err.message);
		assert_int_equal(done, ids[i]);
		expect_close(&r, a, &b[i], NULL, 1.0f, 0.0f, MFMA_DT_F32);
		mfma_gemm_result_free(&r);
	}
}

/* Corked submits are held, not written, until mfma_uncork; then all are
 * answered right.  Corked again, a wait writes what is held (no wait on
 * a request never sent) and the cork stays; a blocking call writes the
 * held requests before its own. */
static void test_cork_holds_until_written(void **state)
{
	struct env *e = *state;
	struct mfma_error err;
	enum { NH = 16 };
	struct mat a = mat_rand(MFMA_DT_F32, 23, 31, false, 4000);
	struct mat b[NH];
	uint64_t ids[NH];
	for (int i = 0; i < NH; i++)
		b[i] = mat_rand(MFMA_DT_F32, 31, 5, false, 4001 + (uint64_t)i);
	uint64_t before = daemon_gemms(e->d.endpoint);
	mfma_cork(e->c);
	submit_all(e->c, &a, b, NH, ids);
	assert_int_equal(mfma_in_flight(e->c), NH);
	sleep_ms(100);
	assert_int_equal(daemon_gemms(e->d.endpoint) - before, 0);
	assert_int_equal(mfma_uncork(e->c, &err), 0);
	wait_all(e->c, &a, b, NH, ids);
	assert_int_equal(daemon_gemms(e->d.endpoint) - before, NH);

	mfma_cork(e->c);
	submit_all(e->c, &a, b, 4, ids);
	wait_all(e->c, &a, b, 4, ids);
	submit_all(e->c, &a, b + 4, 2, ids + 4);
	struct mfma_gemm_args ga;
	struct mfma_gemm_result r;
	dense_args(&ga, &a, &b[6]);
	run_ok(e->c, &ga, &r);
	expect_close(&r, &a, &b[6], NULL, 1.0f, 0.0f, MFMA_DT_F32);
	mfma_gemm_result_free(&r);
	wait_all(e->c, &a, b + 4, 2, ids + 4);
	assert_int_equal(mfma_in_flight(e->c), 0);
	assert_int_equal(mfma_uncork(e->c, &err), 0);
	/* Nothing held: uncorking again writes nothing and succeeds. */
	assert_int_equal(mfma_uncork(e->c, &err), 0);
	for (int i = 0; i < NH; i++)
		free(b[i].p);
	free(a.p);
}

/* A flush of held requests that times out before a byte goes (the daemon
 * stopped, its socket full) keeps them held on the live connection: they
 * go with the next flush and are answered.  They had been dropped, and
 * their ids never completed. */
static void test_cork_flush_timed_out(void **state)
{
	struct env *e = *state;
	struct mfma_error err;
	struct mat a = mat_rand(MFMA_DT_F32, 8, 8, false, 5000);
	struct mat b = mat_rand(MFMA_DT_F32, 8, 4, false, 5001);
	struct mfma_gemm_args ga;
	dense_args(&ga, &a, &b);
	mfma_set_timeout(e->c, 200);
	assert_int_equal(kill(e->d.pid, SIGSTOP), 0);
	enum { MAXN = 200000 };
	uint64_t *ids = malloc(MAXN * sizeof(*ids));
	size_t n = 0;
	int rc;
	while (n < MAXN && (rc = mfma_gemm_submit(e->c, &ga, &ids[n], &err)) == 0)
		n++;
	assert_int_equal(rc, -ETIMEDOUT); /* the socket is full */
	mfma_cork(e->c);
	uint64_t held;
	assert_int_equal(mfma_gemm_submit(e->c, &ga, &held, &err), 0);
	assert_int_equal(mfma_uncork(e->c, &err), -ETIMEDOUT);
	assert_int_equal(kill(e->d.pid, SIGCONT), 0);
	mfma_set_timeout(e->c, 60000);
	/* Every earlier one, then the held one: written by this wait. */
	for (size_t i = 0; i < n; i++) {
		struct mfma_gemm_result r;
		uint64_t done;
		if (mfma_wait(e->c, ids[i], 60000, &done, &r, &err) != 0)
			fail_msg("wait %zu of %zu: %s", i, n, err.message);
		mfma_gemm_result_free(&r);
	}
	struct mfma_gemm_result r;
	uint64_t done;
	if (mfma_wait(e->c, held, 10000, &done, &r, &err) != 0)
		fail_msg("the held request, after its flush timed out: %s", err.message);
	expect_close(&r, &a, &b, NULL, 1.0f, 0.0f, MFMA_DT_F32);
	mfma_gemm_result_free(&r);
	assert_int_equal(mfma_in_flight(e->c), 0);
	free(ids);
	free(a.p);
	free(b.p);
}

static int setup_small_frames(void **state)
{
	return start_with(state, "limits = { max_frame_mb = 1; };");
}

/* A frame the daemon closes the connection over (here one past
 * limits.max_frame_mb) is not sent again on the next connection, where
 * the same verdict would close it again: the requests then in flight end
 * with FAILED_PRECONDITION saying why, and the client serves on.  Every
 * call failed with the same reset for the minute of the resend window. */
static void test_verdict_not_resent(void **state)
{
	struct env *e = *state;
	struct mfma_error err;
	struct mat big_a = mat_rand(MFMA_DT_F32, 512, 1024, false, 6000); /* 2 MiB */
	struct mat big_b = mat_rand(MFMA_DT_F32, 1024, 4, false, 6001);
	struct mfma_gemm_args ga;
	dense_args(&ga, &big_a, &big_b);
	uint64_t big;
	assert_int_equal(mfma_gemm_submit(e->c, &ga, &big, &err), 0);
	struct mfma_gemm_result r;
	uint64_t done;
	int rc = mfma_wait(e->c, big, 5000, &done, &r, &err);
	print_message("  the oversized request: %d %s\n", rc, err.message);
	assert_true(rc < 0);
	struct mat a = mat_rand(MFMA_DT_F32, 8, 8, false, 6002);
	struct mat b = mat_rand(MFMA_DT_F32, 8, 4, false, 6003);
	dense_args(&ga, &a, &b);
	for (int i = 0; i < 3; i++) {
		if (mfma_gemm(e->c, &ga, &r, &err) != 0)
			fail_msg("a small GEMM after the verdict (%d): %s", i, err.message);
		expect_close(&r, &a, &b, NULL, 1.0f, 0.0f, MFMA_DT_F32);
		mfma_gemm_result_free(&r);
		assert_int_equal(mfma_ping(e->c, "x", 1, NULL, &err), 0);
	}
	if (rc != MFMA_EREMOTE(MFMA_CODE_FAILED_PRECONDITION)) {
		rc = mfma_wait(e->c, big, 5000, &done, &r, &err);
		assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_FAILED_PRECONDITION));
		assert_non_null(strstr(err.message, "not sent again"));
	}
	assert_int_equal(mfma_in_flight(e->c), 0);
	free(big_a.p);
	free(big_b.p);
	free(a.p);
	free(b.p);
}

/* A submitted GEMM whose D lies in a region is not sent again when the
 * connection is lost (the region went with it): its wait is told
 * (UNAVAILABLE), where it had vanished from the table unanswered.  A
 * plain GEMM submitted beside it goes to the next endpoint and is
 * answered there. */
static void test_region_request_lost_is_answered(void **state)
{
	struct env *e = *state;
	struct mfmad_proc second;
	assert_int_equal(harness_start(&second, NULL, NULL), 0);
	char eps[300];
	snprintf(eps, sizeof(eps), "%s,%s", e->d.endpoint, second.endpoint);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(eps, &c, &err), 0);
	mfma_set_timeout(c, 20000);
	struct mat a = mat_rand(MFMA_DT_F32, 4, 4, false, 7000);
	struct mat b = mat_rand(MFMA_DT_F32, 4, 4, false, 7001);
	mfma_region *rg;
	assert_int_equal(mfma_region_create(c, 4096, &rg, &err), 0);
	struct mfma_gemm_args in_region, plain;
	dense_args(&in_region, &a, &b);
	in_region.d = mfma_region_data(rg);
	in_region.d_bytes = 4 * 4 * sizeof(float);
	dense_args(&plain, &a, &b);
	assert_int_equal(kill(e->d.pid, SIGSTOP), 0);
	uint64_t id_region, id_plain;
	assert_int_equal(mfma_gemm_submit(c, &in_region, &id_region, &err), 0);
	assert_int_equal(mfma_gemm_submit(c, &plain, &id_plain, &err), 0);
	assert_int_equal(kill(e->d.pid, SIGKILL), 0);
	struct mfma_gemm_result r;
	uint64_t done;
	int rc = mfma_wait(c, id_plain, 20000, &done, &r, &err);
	if (rc != 0)
		fail_msg("the plain GEMM on the next endpoint: %s", err.message);
	expect_close(&r, &a, &b, NULL, 1.0f, 0.0f, MFMA_DT_F32);
	mfma_gemm_result_free(&r);
	rc = mfma_wait(c, id_region, 5000, &done, &r, &err);
	print_message("  the GEMM with D in a region: %d %s\n", rc, err.message);
	assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_UNAVAILABLE));
	assert_non_null(strstr(err.message, "region"));
	assert_int_equal(mfma_in_flight(c), 0);
	/* The region went with the connection: naming it again is NOT_FOUND
	 * (it had been sent as plain memory, its D copied there later). */
	assert_int_equal(mfma_gemm_submit(c, &in_region, &id_region, &err),
			 MFMA_EREMOTE(MFMA_CODE_NOT_FOUND));
	assert_non_null(strstr(err.message, "lost connection"));
	assert_int_equal(mfma_gemm(c, &in_region, &r, &err), MFMA_EREMOTE(MFMA_CODE_NOT_FOUND));
	mfma_region_destroy(c, rg, &err);
	mfma_close(c);
	assert_int_equal(harness_stop(&second), 0);
	free(a.p);
	free(b.p);
}

/* Order: GEMMs on a weight held, then the weight unloaded by a blocking
 * call on the same client.  The held GEMMs are written first, so the
 * daemon runs them on the weight before it goes: every one answered. */
static void test_cork_keeps_the_order(void **state)
{
	struct env *e = *state;
	struct mfma_error err;
	enum { NH = 4 };
	struct mat w = mat_rand(MFMA_DT_F32, 21, 17, false, 5000);
	struct mat b[NH];
	uint64_t ids[NH];
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "corked-w";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = as_mfma(&w);
	assert_int_equal(mfma_load_weight(e->c, &la, NULL, &err), 0);
	mfma_cork(e->c);
	for (int i = 0; i < NH; i++) {
		b[i] = mat_rand(MFMA_DT_F32, 17, 3, false, 5001 + (uint64_t)i);
		struct mfma_gemm_args ga;
		mfma_gemm_args_init(&ga);
		ga.a.kind = MFMA_OPERAND_WEIGHT;
		ga.a.weight = "corked-w";
		ga.b = as_mfma(&b[i]);
		assert_int_equal(mfma_gemm_submit(e->c, &ga, &ids[i], &err), 0);
	}
	assert_int_equal(mfma_unload_weight(e->c, "corked-w", &err), 0);
	wait_all(e->c, &w, b, NH, ids);
	assert_int_equal(mfma_uncork(e->c, &err), 0);
	for (int i = 0; i < NH; i++)
		free(b[i].p);
	free(w.p);
}

/* Past 256 KiB held, the held requests are written without waiting for
 * mfma_uncork. */
static void test_cork_writes_past_its_limit(void **state)
{
	struct env *e = *state;
	struct mfma_error err;
	enum { NH = 24 }; /* 31 KiB of B each: the limit after some nine */
	struct mat a = mat_rand(MFMA_DT_F32, 9, 31, false, 6000);
	struct mat b[NH];
	uint64_t ids[NH];
	for (int i = 0; i < NH; i++)
		b[i] = mat_rand(MFMA_DT_F32, 31, 256, false, 6001 + (uint64_t)i);
	uint64_t before = daemon_gemms(e->d.endpoint);
	mfma_cork(e->c);
	submit_all(e->c, &a, b, NH, ids);
	uint64_t seen = 0;
	for (int t = 0; t < 100 && seen < 8; t++) {
		sleep_ms(20);
		seen = daemon_gemms(e->d.endpoint) - before;
	}
	assert_true(seen >= 8);
	assert_int_equal(mfma_uncork(e->c, &err), 0);
	wait_all(e->c, &a, b, NH, ids);
	for (int i = 0; i < NH; i++)
		free(b[i].p);
	free(a.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ping_and_status, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dense_every_dtype, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alpha_beta_c, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sparse24_paths, setup, teardown),
		cmocka_unit_test_setup_teardown(test_weights, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipeline_64, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipeline_deep_large, setup_deep_pipeline,
						teardown),
		cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cork_holds_until_written, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cork_keeps_the_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cork_flush_timed_out, setup_deep_pipeline,
						teardown),
		cmocka_unit_test_setup_teardown(test_verdict_not_resent, setup_small_frames, teardown),
		cmocka_unit_test_setup_teardown(test_region_request_lost_is_answered, setup,
						teardown_killed),
		cmocka_unit_test_setup_teardown(test_cork_writes_past_its_limit, setup_deep_pipeline,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
