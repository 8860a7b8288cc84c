/* The weight registry on a real loop, a real scheduler and the CPU
 * backend, without sockets: requests come from no connection, so their
 * answers land in the counters only, and the registry's state is read
 * directly. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "devices.h"
#include "log.h"
#include "reply.h"
#include "scheduler.h"
#include "weights.h"

struct fx {
	struct daemon d;
	uv_loop_t loop;
	uint64_t next_id;
};

static int fx_start(void **state, uint64_t budget_mb, int devices)
{
	struct fx *f = calloc(1, sizeof(*f));
	char err[256];
	if (!f)
		return -1;
	config_defaults(&f->d.cfg);
	f->d.cfg.cpu = BACKEND_ON;
	f->d.cfg.hip = f->d.cfg.cuda = BACKEND_OFF;
	f->d.cfg.cpu_devices = devices;
	f->d.cfg.cpu_threads = 1;
	f->d.cfg.weight_budget_bytes = budget_mb << 20;
	log_set_level(LOG_LVL_WARNING);
	uv_loop_init(&f->loop);
	f->loop.data = &f->d;
	f->d.loop = &f->loop;
	if (devices_probe(&f->d, err, sizeof(err)) < 0 || sched_start(&f->d, err, sizeof(err)) < 0) {
		print_error("%s\n", err);
		return -1;
	}
	*state = f;
	return 0;
}

static int setup_1mb(void **state)
{
	return fx_start(state, 1, 1);
}

static int setup_3mb_two_devices(void **state)
{
	return fx_start(state, 3, 2);
}

static void close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	weights_destroy(&f->d);
	sched_stop(&f->d);
	sched_drain(&f->d);
	uv_walk(&f->loop, close_walk, NULL);
	uv_run(&f->loop, UV_RUN_DEFAULT);
	sched_free(&f->d);
	devices_free(&f->d);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	free(f);
	return 0;
}

/* Runs the loop until no request is in flight. */
static void settle(struct fx *f)
{
	while (f->d.inflight > 0)
		uv_run(&f->loop, UV_RUN_ONCE);
}

static uint64_t count(struct fx *f, enum stats_kind kind, enum stats_result res)
{
	return STATS_GET(f->d.stats.requests[kind][res]);
}

/* A LoadWeight of a rows x cols f32 matrix, as the daemon receives it
 * (unpacked, owning its bytes). */
static void load(struct fx *f, const char *name, uint32_t rows, uint32_t cols, bool replace)
{
	size_t n = (size_t)rows * cols;
	float *data = malloc(n * sizeof(float));
	assert_non_null(data);
	for (size_t i = 0; i < n; i++)
		data[i] = (float)(i % 7);
	Mfma__V1__Matrix m = MFMA__V1__MATRIX__INIT;
	m.has_rows = m.has_cols = m.has_dtype = m.has_data = 1;
	m.rows = rows;
	m.cols = cols;
	m.dtype = MFMA__V1__DTYPE__F32;
	m.data.data = (uint8_t *)data;
	m.data.len = n * sizeof(float);
	Mfma__V1__Operand op = MFMA__V1__OPERAND__INIT;
	op.kind_case = MFMA__V1__OPERAND__KIND_DENSE;
	op.dense = &m;
	Mfma__V1__LoadWeight lw = MFMA__V1__LOAD_WEIGHT__INIT;
	lw.name = (char *)name;
	lw.a = &op;
	lw.has_replace = 1;
	lw.replace = replace;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	req.has_id = 1;
	req.id = ++f->next_id;
	req.body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
	req.load_weight = &lw;
	size_t len = mfma__v1__request__get_packed_size(&req);
	uint8_t *buf = malloc(len);
	assert_non_null(buf);
	mfma__v1__request__pack(&req, buf);
	Mfma__V1__Request *owned = mfma__v1__request__unpack(NULL, len, buf);
	assert_non_null(owned);
	free(buf);
	free(data);
	struct request r;
	request_init(&r, NULL, owned->id, 1, STATS_LOAD);
	weights_handle_load(&f->d, &r, owned);
}

static void unload(struct fx *f, const char *name)
{
	Mfma__V1__UnloadWeight uw = MFMA__V1__UNLOAD_WEIGHT__INIT;
	uw.name = (char *)name;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	req.body_case = MFMA__V1__REQUEST__BODY_UNLOAD_WEIGHT;
	req.unload_weight = &uw;
	uint8_t buf[256];
	size_t len = mfma__v1__request__pack(&req, buf);
	struct request r;
	request_init(&r, NULL, 0, 1, STATS_UNLOAD);
	weights_handle_unload(&f->d, &r, mfma__v1__request__unpack(NULL, len, buf));
}

static uint64_t used(struct fx *f)
{
	return STATS_GET(f->d.stats.weight_bytes);
}

static void test_budget_and_failed_replace(void **state)
{
	struct fx *f = *state;
	load(f, "w1", 512, 512, false); /* exactly the 1 MiB budget */
	settle(f);
	assert_int_equal(count(f, STATS_LOAD, STATS_OK), 1);
	struct weight *w = weights_find(&f->d, "w1");
	assert_non_null(w);
	assert_int_equal(used(f), 1u << 20);
	/* The new copy would have to sit beside the old one: refused, and
	 * the old one stays, resident and charged. */
	load(f, "w1", 512, 512, true);
	settle(f);
	assert_int_equal(count(f, STATS_LOAD, STATS_BUSY), 1);
	assert_ptr_equal(weights_find(&f->d, "w1"), w);
	assert_true(w->resident[0]);
	assert_int_equal(used(f), 1u << 20);
	/* Without replace the name is taken. */
	load(f, "w1", 4, 4, false);
	settle(f);
	assert_int_equal(count(f, STATS_LOAD, STATS_EXISTS), 1);
	/* A second weight does not fit either, and nothing leaks from it. */
	load(f, "w2", 4, 4, false);
	settle(f);
	assert_int_equal(count(f, STATS_LOAD, STATS_BUSY), 2);
	assert_null(weights_find(&f->d, "w2"));
	assert_int_equal(used(f), 1u << 20);
	unload(f, "w1");
	settle(f);
	assert_int_equal(count(f, STATS_UNLOAD, STATS_OK), 1);
	assert_null(weights_find(&f->d, "w1"));
	assert_int_equal(used(f), 0);
	unload(f, "w1");
	settle(f);
	assert_int_equal(count(f, STATS_UNLOAD, STATS_NOT_FOUND), 1);
}

static void test_replace_swaps_on_every_device(void **state)
{
	struct fx *f = *state;
	load(f, "w", 512, 512, false);
	settle(f);
	struct weight *old = weights_find(&f->d, "w");
	assert_non_null(old);
	assert_true(old->resident[0] && old->resident[1]);
	assert_int_equal(used(f), 2u << 20); /* 1 MiB on each of two devices */
	weights_ref(old); /* as a queued GEMM would */
	load(f, "w", 256, 512, true);
	/* While the new copy loads, the old one serves. */
	assert_ptr_equal(weights_find(&f->d, "w"), old);
	assert_true(weights_loading(&f->d, "w") == false);
	settle(f);
	struct weight *w = weights_find(&f->d, "w");
	assert_non_null(w);
	assert_ptr_not_equal(w, old);
	assert_int_equal(w->m, 256);
	assert_true(w->resident[0] && w->resident[1]);
	assert_int_equal(old->state, WEIGHT_DEAD);
	/* The old copy is held by the "GEMM" until it lets go. */
	assert_int_equal(used(f), 2u * ((1u << 20) + (1u << 19)));
	weights_unref(&f->d, old);
	while (used(f) != 2u * (1u << 19))
		uv_run(&f->loop, UV_RUN_ONCE);
	assert_int_equal(STATS_GET(f->d.stats.weights), 1);
}

static void test_a_second_load_of_a_loading_name_waits(void **state)
{
	struct fx *f = *state;
	load(f, "x", 64, 64, false);
	assert_true(weights_loading(&f->d, "x"));
	load(f, "x", 64, 64, false);
	settle(f);
	assert_int_equal(count(f, STATS_LOAD, STATS_UNAVAILABLE), 1);
	assert_int_equal(count(f, STATS_LOAD, STATS_OK), 1);
	assert_non_null(weights_find(&f->d, "x"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_budget_and_failed_replace, setup_1mb, teardown),
		cmocka_unit_test_setup_teardown(test_replace_swaps_on_every_device,
						setup_3mb_two_devices, teardown),
		cmocka_unit_test_setup_teardown(test_a_second_load_of_a_loading_name_waits,
						setup_3mb_two_devices, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
