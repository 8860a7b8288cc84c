/* GEMMs run on the loop thread (cpu.inline_max_flops) against the real
 * daemon: a small GEMM on an idle CPU device runs there and is answered
 * right, for every input type, a dense and a 2:4 A, odd shapes; one over
 * the limit, one behind a running GEMM and one that may share a launch
 * with batching on go to the device's queue as before; 0 turns it off and
 * SIGHUP on again.  /metrics' mfmad_device_inline_total says which way
 * each went.  And launches the loop starts on an idle device for its
 * worker to finish (limits.loop_start), on the CPU with its testing aid
 * that reports a lone launch left running as a GPU's is:
 * mfmad_device_loop_starts_total. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpu_gemm.h"
#include "ctl_util.h"
#include "harness.h"
#include "harness_gemm.h"
#include "mfma.h"

#define INLINE_TOTAL "mfmad_device_inline_total{device=\"0\"}"
#define COMPLETED "mfmad_device_completed_total{device=\"0\"}"
#define LOOP_STARTS "mfmad_device_loop_starts_total{device=\"0\"}"
#define LAUNCHES "mfmad_gemm_executions_total"

/* A GEMM's operands, random from seed, and its float64 reference. */
struct case_data {
	uint32_t m, n, k;
	enum mfma_dtype t;
	bool sparse;
	void *a, *b;
	double *ref;
};

/* A from a_seed, B from b_seed. */
static void case_make_seeds(struct case_data *cd, uint32_t m, uint32_t n, uint32_t k,
			    enum mfma_dtype t, bool sparse, uint64_t a_seed, uint64_t b_seed)
{
	*cd = (struct case_data){ .m = m, .n = n, .k = k, .t = t, .sparse = sparse };
	size_t es = mfma_dtype_size(t);
	cd->a = malloc((size_t)m * k * es);
	cd->b = malloc((size_t)k * n * es);
	cd->ref = malloc((size_t)m * n * sizeof(double));
	assert_true(cd->a && cd->b && cd->ref);
	assert_int_equal(ctl_random_matrix(cd->a, t, m, k, sparse, a_seed), 0);
	assert_int_equal(ctl_random_matrix(cd->b, t, k, n, false, b_seed), 0);
	struct mfma_gemm g = { .m = m, .n = n, .k = k, .in_dtype = t,
			       .out_dtype = t == MFMA_DT_I8 ? MFMA_DT_I32 : MFMA_DT_F32,
			       .alpha = 1.0f, .a = cd->a, .b = cd->b,
			       .d = cd->ref /* checked for, not written */ };
	assert_int_equal(cpu_gemm_ref_f64(&g, cd->ref), 0);
}

static void case_make(struct case_data *cd, uint32_t m, uint32_t n, uint32_t k, enum mfma_dtype t,
		      bool sparse, uint64_t seed)
{
	case_make_seeds(cd, m, n, k, t, sparse, seed, seed + 1);
}

static void case_args(const struct case_data *cd, struct mfma_gemm_args *ga)
{
	size_t es = mfma_dtype_size(cd->t);
	mfma_gemm_args_init(ga);
	ga->a.kind = MFMA_OPERAND_DENSE;
	ga->a.dense = (struct mfma_matrix){ cd->m, cd->k, (enum mfma_type)cd->t, cd->a,
					    (size_t)cd->m * cd->k * es };
	ga->a.sparsity = cd->sparse ? MFMA_SPARSITY_VALIDATE_24 : MFMA_SPARSITY_DENSE;
	ga->b = (struct mfma_matrix){ cd->k, cd->n, (enum mfma_type)cd->t, cd->b,
				      (size_t)cd->k * cd->n * es };
}

/* r's D against the reference, within the tolerance of its output type
 * and K (mfma_check_tolerance). */
static void case_check(const struct case_data *cd, const struct mfma_gemm_result *r)
{
	enum mfma_dtype out = cd->t == MFMA_DT_I8 ? MFMA_DT_I32 : MFMA_DT_F32;
	assert_int_equal(r->d.rows, cd->m);
	assert_int_equal(r->d.cols, cd->n);
	double e = cpu_rel_frobenius(r->d.data, out, cd->ref, (size_t)cd->m * cd->n);
	if (!ctl_within_tolerance(e, mfma_check_tolerance((enum mfma_type)out, cd->k)))
		fail_msg("%ux%ux%u %s %s: relative error %g", cd->m, cd->n, cd->k,
			 mfma_dtype_name(cd->t), cd->sparse ? "2:4" : "dense", e);
}

static void case_free(struct case_data *cd)
{
	free(cd->a);
	free(cd->b);
	free(cd->ref);
}

/* One checked GEMM, blocking. */
static void gemm_checked(mfma_client *c, uint32_t m, uint32_t n, uint32_t k, enum mfma_dtype t,
			 bool sparse, uint64_t seed)
{
	struct case_data cd;
	case_make(&cd, m, n, k, t, sparse, seed);
	struct mfma_gemm_args ga;
	case_args(&cd, &ga);
	struct mfma_gemm_result r;
	struct mfma_error err;
	if (mfma_gemm(c, &ga, &r, &err) != 0)
		fail_msg("gemm %ux%ux%u: %s", m, n, k, err.message);
	case_check(&cd, &r);
	assert_int_equal(r.timing.batch_requests, 1);
	mfma_gemm_result_free(&r);
	case_free(&cd);
}

/* Every input type, dense and 2:4, shapes up to the default limit (2 m n
 * k = 65536 for 32 x 32 x 32, which is in): each on the loop, each right;
 * 32 x 32 x 36 is over it and goes to the queue. */
static void test_small_gemms_run_inline(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_start_metrics(&p, NULL, NULL, NULL);
	assert_true(port > 0);
	mfma_client *c = harness_client(&p);
	static const uint32_t shapes[][3] = { { 1, 1, 4 }, { 7, 5, 12 }, { 16, 16, 16 },
					      { 31, 3, 36 }, { 32, 32, 32 } };
	static const enum mfma_dtype types[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16,
						 MFMA_DT_I8 };
	long long runs = 0;
	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
			for (int sp = 0; sp < 2; sp++, runs++)
				gemm_checked(c, shapes[s][0], shapes[s][1], shapes[s][2], types[t], sp,
					     100 + (uint64_t)runs * 7);
	assert_int_equal(harness_metric(port, INLINE_TOTAL), runs);
	assert_int_equal(harness_metric(port, COMPLETED), runs);
	gemm_checked(c, 32, 32, 36, MFMA_DT_F32, false, 9);
	assert_int_equal(harness_metric(port, INLINE_TOTAL), runs);
	assert_int_equal(harness_metric(port, COMPLETED), runs + 1);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

/* Small GEMMs sent while a large one runs queue behind it (the worker is
 * busy: the loop must not use the device beside it), and all come back
 * right. */
static void test_busy_device_queues(void **state)
{
	(void)state;
	struct mfmad_proc p;
	/* One thread: the large GEMM runs long enough (some 20-200 ms) for
	 * the small ones to arrive while it does. */
	int port = harness_start_metrics(&p, "cpu = { threads = 1; };", NULL, NULL);
	assert_true(port > 0);
	mfma_client *c = harness_client(&p);
	enum { SMALL = 8 };
	struct case_data big, small[SMALL];
	case_make(&big, 640, 640, 640, MFMA_DT_F32, false, 1);
	struct mfma_gemm_args ga;
	struct mfma_error err;
	uint64_t big_id, ids[SMALL];
	case_args(&big, &ga);
	assert_int_equal(mfma_gemm_submit(c, &ga, &big_id, &err), 0);
	for (int i = 0; i < SMALL; i++) {
		case_make(&small[i], 16, 8, 16, MFMA_DT_F16, i % 2, 20 + (uint64_t)i * 3);
		case_args(&small[i], &ga);
		assert_int_equal(mfma_gemm_submit(c, &ga, &ids[i], &err), 0);
	}
	struct mfma_gemm_result r;
	uint64_t done;
	assert_int_equal(mfma_wait(c, big_id, -1, &done, &r, &err), 0);
	case_check(&big, &r);
	mfma_gemm_result_free(&r);
	for (int i = 0; i < SMALL; i++) {
		assert_int_equal(mfma_wait(c, ids[i], -1, &done, &r, &err), 0);
		case_check(&small[i], &r);
		mfma_gemm_result_free(&r);
		case_free(&small[i]);
	}
	case_free(&big);
	assert_int_equal(harness_metric(port, INLINE_TOTAL), 0);
	assert_int_equal(harness_metric(port, COMPLETED), SMALL + 1);
	/* Idle again: the next small one runs on the loop. */
	gemm_checked(c, 16, 8, 16, MFMA_DT_F16, true, 77);
	assert_int_equal(harness_metric(port, INLINE_TOTAL), 1);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

/* Loads cd's A as the weight "w" (2:4 when cd is). */
static void load_weight(mfma_client *c, const struct case_data *cd)
{
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "w";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ cd->m, cd->k, (enum mfma_type)cd->t, cd->a,
					   (size_t)cd->m * cd->k * mfma_dtype_size(cd->t) };
	la.a.sparsity = cd->sparse ? MFMA_SPARSITY_VALIDATE_24 : MFMA_SPARSITY_DENSE;
	struct mfma_error err;
	if (mfma_load_weight(c, &la, NULL, &err) != 0)
		fail_msg("load: %s", err.message);
}

/* cd's GEMM with A the weight "w". */
static void weight_args(const struct case_data *cd, struct mfma_gemm_args *ga)
{
	case_args(cd, ga);
	ga->a.kind = MFMA_OPERAND_WEIGHT;
	ga->a.weight = "w";
}

/* cd's GEMM on the weight "w", blocking, checked; sent a millisecond
 * after the last answer came, so that the device's worker, which wrote
 * that answer, has gone back to waiting (the device is idle). */
static void weight_gemm_checked(mfma_client *c, const struct case_data *cd)
{
	usleep(1000);
	struct mfma_gemm_args ga;
	weight_args(cd, &ga);
	struct mfma_gemm_result r;
	struct mfma_error err;
	if (mfma_gemm(c, &ga, &r, &err) != 0)
		fail_msg("gemm on the weight: %s", err.message);
	case_check(cd, &r);
	assert_int_equal(r.timing.batch_requests, 1);
	mfma_gemm_result_free(&r);
}

/* GEMMs on a resident weight go to the queue while batching is on (they
 * may share a launch), and run on the loop with it off. */
static void test_resident_weight_with_batching(void **state)
{
	(void)state;
	static const char *const confs[] = { "batching = { enabled = true; };",
					     "batching = { enabled = false; };" };
	for (int off = 0; off < 2; off++) {
		struct mfmad_proc p;
		int port = harness_start_metrics(&p, confs[off], NULL, NULL);
		assert_true(port > 0);
		mfma_client *c = harness_client(&p);
		struct case_data cd;
		case_make(&cd, 24, 4, 32, MFMA_DT_F32, true, 5);
		load_weight(c, &cd);
		for (int i = 0; i < 5; i++)
			weight_gemm_checked(c, &cd);
		assert_int_equal(harness_metric(port, INLINE_TOTAL), off ? 5 : 0);
		case_free(&cd);
		mfma_close(c);
		assert_int_equal(harness_stop(&p), 0);
	}
}

/* 0 keeps every GEMM on the queue; SIGHUP changes the limit live. */
static void test_off_and_reload(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_start_metrics(&p, "cpu = { inline_max_flops = 0; };", NULL, NULL);
	assert_true(port > 0);
	mfma_client *c = harness_client(&p);
	for (int i = 0; i < 4; i++)
		gemm_checked(c, 8, 8, 8, MFMA_DT_F32, false, 40 + (uint64_t)i);
	assert_int_equal(harness_metric(port, INLINE_TOTAL), 0);
	/* 2 x 64 x 64 x 64 = 524288: queued with the limit at 0, on the loop
	 * with the limit raised to it. */
	gemm_checked(c, 64, 64, 64, MFMA_DT_BF16, true, 50);
	assert_int_equal(harness_reconfigure(&p, "cpu = { inline_max_flops = 524288; };"), 0);
	gemm_checked(c, 64, 64, 64, MFMA_DT_BF16, true, 51);
	gemm_checked(c, 8, 8, 8, MFMA_DT_F32, false, 52);
	assert_int_equal(harness_metric(port, INLINE_TOTAL), 2);
	assert_int_equal(harness_reconfigure(&p, "cpu = { inline_max_flops = 0; };"), 0);
	gemm_checked(c, 8, 8, 8, MFMA_DT_F32, false, 53);
	assert_int_equal(harness_metric(port, INLINE_TOTAL), 2);
	assert_int_equal(harness_metric(port, COMPLETED), 8);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

/* One at a time on an idle device, each GEMM on a resident weight is
 * started by the loop (the device's worker ends it and answers), right for
 * every input type; limits.loop_start = false on SIGHUP queues them again,
 * true starts them on the loop again.  96 x 8 x 64 is over the inline
 * limit, so none runs inline. */
static void test_loop_starts_lone_gemms(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_start_metrics(&p, NULL, "MFMAD_TEST_CPU_LEAVE", "1");
	assert_true(port > 0);
	mfma_client *c = harness_client(&p);
	static const enum mfma_dtype types[] = { MFMA_DT_F32, MFMA_DT_F16, MFMA_DT_BF16,
						 MFMA_DT_I8 };
	long long runs = 0;
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		struct case_data cd;
		case_make(&cd, 96, 8, 64, types[t], t % 2 == 0, 300 + t * 5);
		load_weight(c, &cd);
		for (int i = 0; i < 3; i++, runs++)
			weight_gemm_checked(c, &cd);
		struct mfma_error err;
		assert_int_equal(mfma_unload_weight(c, "w", &err), 0);
		case_free(&cd);
	}
	assert_int_equal(harness_metric(port, LOOP_STARTS), runs);
	assert_int_equal(harness_metric(port, COMPLETED), runs);
	assert_int_equal(harness_metric(port, INLINE_TOTAL), 0);
	/* The status RPC counts them too (mfmactl status). */
	struct mfma_status st;
	struct mfma_error serr;
	assert_int_equal(mfma_status(c, &st, &serr), 0);
	assert_int_equal(st.n_devices, 1);
	assert_int_equal(st.devices[0].loop_starts, runs);
	assert_int_equal(st.devices[0].completed, runs);
	mfma_status_free(&st);

	struct case_data cd;
	case_make(&cd, 100, 12, 68, MFMA_DT_F16, true, 41);
	load_weight(c, &cd);
	assert_int_equal(harness_reconfigure(&p, "limits = { loop_start = false; };"), 0);
	for (int i = 0; i < 3; i++)
		weight_gemm_checked(c, &cd);
	assert_int_equal(harness_metric(port, LOOP_STARTS), runs);
	assert_int_equal(harness_reconfigure(&p, "limits = { loop_start = true; };"), 0);
	weight_gemm_checked(c, &cd);
	assert_int_equal(harness_metric(port, LOOP_STARTS), runs + 1);
	assert_int_equal(harness_metric(port, COMPLETED), runs + 4);
	case_free(&cd);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

/* A burst on one weight behind a long GEMM: the device is busy, so none
 * of it is started by the loop; it queues and shares launches as before,
 * every answer right.  Once the device is idle again the next GEMM on the
 * weight is started by the loop. */
static void test_burst_queues_then_loop_starts(void **state)
{
	(void)state;
	struct mfmad_proc p;
	/* One thread: the long GEMM runs some 20-200 ms. */
	int port = harness_start_metrics(&p, "cpu = { threads = 1; };", "MFMAD_TEST_CPU_LEAVE",
					 "1");
	assert_true(port > 0);
	mfma_client *c = harness_client(&p);
	enum { BURST = 24 };
	struct case_data big, w, cds[BURST];
	case_make(&w, 128, 4, 128, MFMA_DT_F32, true, 60);
	load_weight(c, &w);
	case_make(&big, 640, 640, 640, MFMA_DT_F32, false, 61);
	struct mfma_gemm_args ga;
	struct mfma_error err;
	uint64_t big_id, ids[BURST];
	case_args(&big, &ga);
	assert_int_equal(mfma_gemm_submit(c, &ga, &big_id, &err), 0);
	for (int i = 0; i < BURST; i++) {
		/* The weight's A (the same seed) with a B of its own. */
		case_make_seeds(&cds[i], 128, 1 + (uint32_t)(i % 3), 128, MFMA_DT_F32, true, 60,
				700 + (uint64_t)i);
		weight_args(&cds[i], &ga);
		assert_int_equal(mfma_gemm_submit(c, &ga, &ids[i], &err), 0);
	}
	struct mfma_gemm_result r;
	uint64_t done;
	assert_int_equal(mfma_wait(c, big_id, -1, &done, &r, &err), 0);
	case_check(&big, &r);
	mfma_gemm_result_free(&r);
	for (int i = 0; i < BURST; i++) {
		if (mfma_wait(c, ids[i], -1, &done, &r, &err) != 0)
			fail_msg("request %d: %s", i, err.message);
		case_check(&cds[i], &r);
		mfma_gemm_result_free(&r);
		case_free(&cds[i]);
	}
	long long starts = harness_metric(port, LOOP_STARTS);
	assert_true(starts < BURST);
	assert_int_equal(harness_metric(port, COMPLETED), BURST + 1);
	assert_true(harness_metric(port, LAUNCHES) < BURST + 1);
	weight_gemm_checked(c, &w);
	assert_int_equal(harness_metric(port, LOOP_STARTS), starts + 1);
	case_free(&big);
	case_free(&w);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

/* A launch the loop started that fails at its end (the CPU's testing aid
 * MFMAD_TEST_CPU_FAIL_LONE, as a GPU's kernel fault surfaces there): that
 * request is answered INTERNAL with a message naming the device and what
 * failed, counted failed, and everyone after it is served: a GEMM through
 * the queue, and with limits.loop_start off the same GEMM on the weight,
 * both right. */
static void test_loop_start_fails_at_its_end(void **state)
{
	(void)state;
	struct mfmad_proc p;
	setenv("MFMAD_TEST_CPU_FAIL_LONE", "1", 1);
	int port = harness_start_metrics(&p, NULL, "MFMAD_TEST_CPU_LEAVE", "1");
	unsetenv("MFMAD_TEST_CPU_FAIL_LONE");
	assert_true(port > 0);
	mfma_client *c = harness_client(&p);
	struct case_data cd;
	case_make(&cd, 96, 8, 64, MFMA_DT_F16, true, 80);
	load_weight(c, &cd);
	for (int i = 0; i < 2; i++) {
		usleep(1000);
		struct mfma_gemm_args ga;
		weight_args(&cd, &ga);
		struct mfma_gemm_result r;
		struct mfma_error err;
		if (mfma_gemm(c, &ga, &r, &err) == 0)
			fail_msg("a lone launch that failed at its end was answered OK");
		assert_int_equal(err.code, MFMA_CODE_INTERNAL);
		if (!strstr(err.message, "device 0") ||
		    !strstr(err.message, "lone launch failed at its end"))
			fail_msg("the failure does not say what failed: %s", err.message);
	}
	assert_int_equal(harness_metric(port, LOOP_STARTS), 2);
	assert_int_equal(harness_metric(port, "mfmad_device_failed_total{device=\"0\"}"), 2);
	gemm_checked(c, 40, 24, 64, MFMA_DT_F32, false, 81);
	assert_int_equal(harness_reconfigure(&p, "limits = { loop_start = false; };"), 0);
	weight_gemm_checked(c, &cd);
	assert_int_equal(harness_metric(port, LOOP_STARTS), 2);
	assert_int_equal(harness_metric(port, COMPLETED), 2);
	case_free(&cd);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

/* A device that cannot leave a lone launch running (the CPU without its
 * testing aid: backend_device_info.leaves_lone false) gets no start from
 * the loop, and the GEMM goes through the queue as before, answered
 * right. */
static void test_loop_start_refused(void **state)
{
	(void)state;
	struct mfmad_proc p;
	int port = harness_start_metrics(&p, NULL, NULL, NULL);
	assert_true(port > 0);
	mfma_client *c = harness_client(&p);
	struct case_data cd;
	case_make(&cd, 96, 8, 64, MFMA_DT_BF16, true, 70);
	load_weight(c, &cd);
	for (int i = 0; i < 3; i++)
		weight_gemm_checked(c, &cd);
	assert_int_equal(harness_metric(port, LOOP_STARTS), 0);
	assert_int_equal(harness_metric(port, COMPLETED), 3);
	case_free(&cd);
	mfma_close(c);
	assert_int_equal(harness_stop(&p), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_small_gemms_run_inline, harness_stop_leftover),
		cmocka_unit_test_teardown(test_busy_device_queues, harness_stop_leftover),
		cmocka_unit_test_teardown(test_resident_weight_with_batching, harness_stop_leftover),
		cmocka_unit_test_teardown(test_off_and_reload, harness_stop_leftover),
		cmocka_unit_test_teardown(test_loop_starts_lone_gemms, harness_stop_leftover),
		cmocka_unit_test_teardown(test_burst_queues_then_loop_starts, harness_stop_leftover),
		cmocka_unit_test_teardown(test_loop_start_fails_at_its_end, harness_stop_leftover),
		cmocka_unit_test_teardown(test_loop_start_refused, harness_stop_leftover),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
