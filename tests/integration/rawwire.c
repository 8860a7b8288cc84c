#include "rawwire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "frame.h"
#include "harness.h"

void rw_mat_init(struct rw_mat *x, uint32_t rows, uint32_t cols, uint32_t seed)
{
	mfma__v1__matrix__init(&x->m);
	mfma__v1__operand__init(&x->op);
	x->data = calloc((size_t)rows * cols, sizeof(float));
	assert_non_null(x->data);
	for (size_t i = 0; i < (size_t)rows * cols; i++)
		x->data[i] = (float)(((i + seed) * 7 + seed * 13) % 13) / 13.0f - 0.5f;
	x->m.has_rows = x->m.has_cols = x->m.has_dtype = x->m.has_data = 1;
	x->m.rows = rows;
	x->m.cols = cols;
	x->m.dtype = MFMA__V1__DTYPE__F32;
	x->m.data.data = (uint8_t *)x->data;
	x->m.data.len = (size_t)rows * cols * sizeof(float);
	x->op.kind_case = MFMA__V1__OPERAND__KIND_DENSE;
	x->op.dense = &x->m;
}

void rw_mat_free(struct rw_mat *x)
{
	free(x->data);
	x->data = NULL;
}

void rw_send_gemm_request(int fd, uint64_t id, Mfma__V1__Gemm *g)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	req.has_id = 1;
	req.id = id;
	req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	req.gemm = g;
	rw_send(fd, &req);
}

void rw_load_request(Mfma__V1__Request *req, Mfma__V1__LoadWeight *lw, uint64_t id,
		     const char *name, Mfma__V1__Operand *a)
{
	mfma__v1__load_weight__init(lw);
	lw->name = (char *)name;
	lw->a = a;
	mfma__v1__request__init(req);
	req->has_id = 1;
	req->id = id;
	req->body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
	req->load_weight = lw;
}

void rw_send(int fd, const Mfma__V1__Request *req)
{
	size_t len = mfma__v1__request__get_packed_size(req);
	uint8_t *buf = malloc(FRAME_HEADER_SIZE + len);
	assert_non_null(buf);
	frame_header_put(buf, (uint32_t)len);
	mfma__v1__request__pack(req, buf + FRAME_HEADER_SIZE);
	assert_int_equal(harness_write_all(fd, buf, FRAME_HEADER_SIZE + len), 0);
	free(buf);
}

void rw_send_together(int fd, const Mfma__V1__Request *const *reqs, size_t n)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += FRAME_HEADER_SIZE + mfma__v1__request__get_packed_size(reqs[i]);
	uint8_t *buf = malloc(total ? total : 1);
	assert_non_null(buf);
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = mfma__v1__request__get_packed_size(reqs[i]);
		frame_header_put(buf + at, (uint32_t)len);
		mfma__v1__request__pack(reqs[i], buf + at + FRAME_HEADER_SIZE);
		at += FRAME_HEADER_SIZE + len;
	}
	assert_int_equal(harness_write_all(fd, buf, total), 0);
	free(buf);
}

void rw_send_gemm(int fd, uint64_t id, uint32_t m, uint32_t n, uint32_t k, bool prune,
		  uint32_t prio, uint64_t timeout_us)
{
	struct rw_mat a, b;
	rw_mat_init(&a, m, k, 1);
	rw_mat_init(&b, k, n, 2);
	if (prune)
		a.op.sparsity = MFMA__V1__SPARSITY__PRUNE_24;
	Mfma__V1__Gemm g = MFMA__V1__GEMM__INIT;
	g.a = &a.op;
	g.b = &b.m;
	if (prio) {
		g.has_priority = 1;
		g.priority = prio;
	}
	if (timeout_us) {
		g.has_timeout_us = 1;
		g.timeout_us = timeout_us;
	}
	rw_send_gemm_request(fd, id, &g);
	rw_mat_free(&a);
	rw_mat_free(&b);
}

void rw_wait_running(int fd)
{
	for (int tries = 0; tries < 2000; tries++) {
		Mfma__V1__GetStatus s = MFMA__V1__GET_STATUS__INIT;
		Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
		req.has_id = 1;
		req.id = 1000 + (uint64_t)tries;
		req.body_case = MFMA__V1__REQUEST__BODY_STATUS;
		req.status = &s;
		rw_send(fd, &req);
		Mfma__V1__Response *r = rw_read(fd, 10000);
		assert_int_equal(r->body_case, MFMA__V1__RESPONSE__BODY_STATUS_RESULT);
		bool running = r->status_result->n_devices > 0 &&
			       r->status_result->devices[0]->in_flight > 0;
		mfma__v1__response__free_unpacked(r, NULL);
		if (running)
			return;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	fail_msg("the long GEMM never started");
}

Mfma__V1__Response *rw_read(int fd, int timeout_ms)
{
	uint8_t *buf = NULL;
	long n = harness_read_frame(fd, &buf, timeout_ms);
	assert_true(n >= 0);
	Mfma__V1__Response *r = mfma__v1__response__unpack(NULL, (size_t)n, buf);
	free(buf);
	assert_non_null(r);
	assert_non_null(r->status);
	return r;
}
