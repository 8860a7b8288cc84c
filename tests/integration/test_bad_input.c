/* Bad input against the real daemon: every case is answered with a clear
 * error (or the connection closed when its framing cannot be trusted),
 * while a well-behaved client on another connection keeps getting right
 * answers.  At the end the daemon still answers ping and exits 0 on
 * SIGTERM (under ASan: without a leak). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
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
#include "frame.h"
#include "harness.h"
#include "mfma.h"
#include "mfma.pb-c.h"
#include "sparse24.h"

static struct mfmad_proc D;
static mfma_client *good;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static float rndf(void)
{
	return (float)(rnd() % 2001) / 1000.0f - 1.0f;
}

/* A GEMM on the good connection, checked against the float64 reference. */
static void good_client_still_served(void)
{
	uint32_t m = 17, k = 12, n = 9;
	float a[17 * 12], b[12 * 9];
	for (size_t i = 0; i < sizeof(a) / 4; i++)
		a[i] = rndf();
	for (size_t i = 0; i < sizeof(b) / 4; i++)
		b[i] = rndf();
	struct mfma_gemm_args args;
	mfma_gemm_args_init(&args);
	args.a.kind = MFMA_OPERAND_DENSE;
	args.a.dense = (struct mfma_matrix){ m, k, MFMA_TYPE_F32, a, sizeof(a) };
	args.b = (struct mfma_matrix){ k, n, MFMA_TYPE_F32, b, sizeof(b) };
	struct mfma_gemm_result res;
	struct mfma_error err;
	int rc = mfma_gemm(good, &args, &res, &err);
	if (rc != 0)
		fail_msg("good client failed: %s", err.message);
	struct mfma_gemm g = { .m = m, .n = n, .k = k, .in_dtype = MFMA_DT_F32,
			       .out_dtype = MFMA_DT_F32, .alpha = 1, .a = a, .b = b,
			       .d = (void *)res.d.data };
	double ref[17 * 9];
	assert_int_equal(cpu_gemm_ref_f64(&g, ref), 0);
	double e = cpu_rel_frobenius(res.d.data, MFMA_DT_F32, ref, m * n);
	assert_true(e < 1e-5);
	mfma_gemm_result_free(&res);
	assert_int_equal(mfma_ping(good, "x", 1, NULL, &err), 0);
}

static int group_setup(void **state)
{
	(void)state;
	static const char conf[] = "limits = { max_frame_mb = 1; max_inflight_per_connection = 4; "
				   "max_dim = 4096; };\n";
	if (harness_start(&D, conf, NULL) < 0)
		return -1;
	struct mfma_error err;
	if (mfma_connect(D.endpoint, &good, &err) < 0) {
		fprintf(stderr, "connect: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	mfma_close(good);
	return harness_stop(&D) == 0 ? 0 : -1;
}

static void send_frame(int fd, const void *payload, size_t len)
{
	uint8_t hdr[4];
	frame_header_put(hdr, (uint32_t)len);
	assert_int_equal(harness_write_all(fd, hdr, 4), 0);
	if (len)
		assert_int_equal(harness_write_all(fd, payload, len), 0);
}

static void send_request(int fd, const Mfma__V1__Request *req)
{
	size_t n = mfma__v1__request__get_packed_size(req);
	uint8_t *buf = malloc(n ? n : 1);
	mfma__v1__request__pack(req, buf);
	send_frame(fd, buf, n);
	free(buf);
}

static Mfma__V1__Response *recv_response(int fd)
{
	uint8_t *buf = NULL;
	long n = harness_read_frame(fd, &buf, 10000);
	if (n < 0)
		fail_msg("no response from the daemon");
	Mfma__V1__Response *r = mfma__v1__response__unpack(NULL, (size_t)n, buf);
	free(buf);
	assert_non_null(r);
	return r;
}

/* Sends req on a fresh raw connection and checks the answer's code and
 * message, then that the good client is still served. */
static void expect_reply(const Mfma__V1__Request *req, int code, const char *want)
{
	int fd = harness_connect_raw(&D);
	assert_true(fd >= 0);
	send_request(fd, req);
	Mfma__V1__Response *r = recv_response(fd);
	assert_non_null(r->status);
	const char *msg = r->status->message ? r->status->message : ""; /* none on OK */
	if ((int)r->status->code != code || !strstr(msg, want))
		fail_msg("got code %d \"%s\", want code %d with \"%s\"", r->status->code, msg,
			 code, want);
	assert_int_equal(r->id, req->id);
	mfma__v1__response__free_unpacked(r, NULL);
	close(fd);
	good_client_still_served();
}

/* ---- framing ---- */

static void test_truncated_frame(void **state)
{
	(void)state;
	int fd = harness_connect_raw(&D);
	uint8_t hdr[4];
	frame_header_put(hdr, 100);
	assert_int_equal(harness_write_all(fd, hdr, 4), 0);
	assert_int_equal(harness_write_all(fd, "0123456789", 10), 0);
	close(fd); /* the rest never comes */
	good_client_still_served();
}

static void test_frame_over_limit(void **state)
{
	(void)state;
	int fd = harness_connect_raw(&D);
	uint8_t hdr[4];
	frame_header_put(hdr, (2u << 20) + 1);
	assert_int_equal(harness_write_all(fd, hdr, 4), 0);
	Mfma__V1__Response *r = recv_response(fd);
	assert_int_equal(r->status->code, MFMA__V1__CODE__MALFORMED);
	assert_non_null(strstr(r->status->message, "exceeds the limit of 1048576 bytes"));
	mfma__v1__response__free_unpacked(r, NULL);
	assert_true(harness_wait_closed(fd, 5000));
	close(fd);
	good_client_still_served();
}

static void test_garbage_protobuf(void **state)
{
	(void)state;
	int fd = harness_connect_raw(&D);
	/* Field 2 (gemm) says 50 bytes follow, but only 2 do. */
	static const uint8_t bad[] = { 0x08, 0x07, 0x12, 0x32, 0x01, 0x02 };
	send_frame(fd, bad, sizeof(bad));
	Mfma__V1__Response *r = recv_response(fd);
	assert_int_equal(r->status->code, MFMA__V1__CODE__MALFORMED);
	assert_non_null(strstr(r->status->message, "not a valid mfma.v1.Request"));
	mfma__v1__response__free_unpacked(r, NULL);
	/* The framing was sound, so the connection goes on. */
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Ping ping = MFMA__V1__PING__INIT;
	req.has_id = 1;
	req.id = 5;
	req.body_case = MFMA__V1__REQUEST__BODY_PING;
	req.ping = &ping;
	send_request(fd, &req);
	r = recv_response(fd);
	assert_int_equal(r->status->code, MFMA__V1__CODE__OK);
	assert_int_equal(r->id, 5);
	mfma__v1__response__free_unpacked(r, NULL);
	close(fd);
	good_client_still_served();
}

static void test_random_bytes(void **state)
{
	(void)state;
	for (int round = 0; round < 20; round++) {
		int fd = harness_connect_raw(&D);
		uint8_t junk[2048];
		size_t n = 16 + rnd() % sizeof(junk);
		for (size_t i = 0; i < n; i++)
			junk[i] = (uint8_t)rnd();
		if (round % 2)
			send_frame(fd, junk, n); /* well framed, random payload */
		else
			harness_write_all(fd, junk, n); /* random from the first byte */
		close(fd);
	}
	good_client_still_served();
}

static void test_unknown_request_type(void **state)
{
	(void)state;
	int fd = harness_connect_raw(&D);
	/* id = 9, then field 50 as a varint: a request type from the future. */
	static const uint8_t msg[] = { 0x08, 0x09, 0x90, 0x03, 0x01 };
	send_frame(fd, msg, sizeof(msg));
	Mfma__V1__Response *r = recv_response(fd);
	assert_int_equal(r->status->code, MFMA__V1__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(r->status->message, "unknown request type (field 50)"));
	assert_int_equal(r->id, 9);
	mfma__v1__response__free_unpacked(r, NULL);
	/* And a request with no body at all. */
	static const uint8_t empty[] = { 0x08, 0x0a };
	send_frame(fd, empty, sizeof(empty));
	r = recv_response(fd);
	assert_int_equal(r->status->code, MFMA__V1__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(r->status->message, "has no body"));
	mfma__v1__response__free_unpacked(r, NULL);
	close(fd);
	good_client_still_served();
}

/* ---- well-formed requests with wrong fields ---- */

struct greq {
	Mfma__V1__Request req;
	Mfma__V1__Gemm g;
	Mfma__V1__Operand a;
	Mfma__V1__Matrix ad, b;
	Mfma__V1__Sparse24 as;
	float abuf[64 * 64], bbuf[64 * 64];
	uint32_t meta[64 * 2];
};

static void set_m(Mfma__V1__Matrix *m, uint32_t r, uint32_t c, void *data)
{
	mfma__v1__matrix__init(m);
	m->has_rows = m->has_cols = m->has_dtype = m->has_data = 1;
	m->rows = r;
	m->cols = c;
	m->dtype = MFMA__V1__DTYPE__F32;
	m->data.data = data;
	m->data.len = (size_t)r * c * 4;
}

/* A valid dense m x k times k x n f32 request with random data. */
static struct greq *gemm_req(uint32_t m, uint32_t k, uint32_t n)
{
	struct greq *q = calloc(1, sizeof(*q));
	mfma__v1__request__init(&q->req);
	mfma__v1__gemm__init(&q->g);
	mfma__v1__operand__init(&q->a);
	for (size_t i = 0; i < 64 * 64; i++) {
		q->abuf[i] = rndf();
		q->bbuf[i] = rndf();
	}
	set_m(&q->ad, m, k, q->abuf);
	set_m(&q->b, k, n, q->bbuf);
	q->a.kind_case = MFMA__V1__OPERAND__KIND_DENSE;
	q->a.dense = &q->ad;
	q->g.a = &q->a;
	q->g.b = &q->b;
	q->req.has_id = 1;
	q->req.id = 1000 + rnd() % 1000;
	q->req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	q->req.gemm = &q->g;
	return q;
}

/* Makes q's A a compressed 2:4 operand of rows x cols over q's buffers. */
static void make_sparse(struct greq *q, uint32_t rows, uint32_t cols, size_t meta_bytes)
{
	mfma__v1__sparse24__init(&q->as);
	q->as.has_rows = q->as.has_cols = q->as.has_dtype = 1;
	q->as.has_values = q->as.has_meta = 1;
	q->as.rows = rows;
	q->as.cols = cols;
	q->as.dtype = MFMA__V1__DTYPE__F32;
	q->as.values.data = (uint8_t *)q->abuf;
	q->as.values.len = sparse24_values_bytes(rows, cols, 4);
	q->as.meta.data = (uint8_t *)q->meta;
	q->as.meta.len = meta_bytes;
	q->a.kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
	q->a.sparse = &q->as;
}

static void test_bad_dimensions(void **state)
{
	(void)state;
	struct greq *q = gemm_req(8, 8, 8);
	q->ad.rows = 0;
	q->ad.data.len = 0;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "a has shape 0x8");
	/* -1 sent as a uint32 is 4294967295: refused by the limit, not allocated. */
	q->ad.rows = (uint32_t)-1;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "a has shape 4294967295x8");
	q->ad.rows = 8;
	q->ad.data.len = 8 * 8 * 4;
	q->b.cols = 100000;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "the limit is 4096 per dimension");
	free(q);
}

static void test_byte_length_and_inner_dims(void **state)
{
	(void)state;
	struct greq *q = gemm_req(8, 12, 5);
	q->b.data.len -= 4;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "b.data has 236 bytes but 12x5 f32 needs 240");
	free(q);
	q = gemm_req(8, 12, 5);
	set_m(&q->b, 16, 5, q->bbuf);
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "b.rows=16 does not match a.cols=12");
	free(q);
}

/* Request.pad is ignored up to its limit and refused, by name, past it. */
static void test_pad(void **state)
{
	(void)state;
	static uint8_t pad[65];
	struct greq *q = gemm_req(8, 12, 5);
	q->req.has_pad = 1;
	q->req.pad = (ProtobufCBinaryData){ .len = 65, .data = pad };
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "pad of 65 bytes; at most 64");
	q->req.pad.len = 64;
	int fd = harness_connect_raw(&D);
	assert_true(fd >= 0);
	send_request(fd, &q->req);
	Mfma__V1__Response *r = recv_response(fd);
	assert_true(!r->status || r->status->code == MFMA__V1__CODE__OK);
	assert_int_equal(r->body_case, MFMA__V1__RESPONSE__BODY_GEMM);
	assert_int_equal(r->id, q->req.id);
	mfma__v1__response__free_unpacked(r, NULL);
	close(fd);
	free(q);
}

static void test_sparse_k_not_multiple_of_4(void **state)
{
	(void)state;
	struct greq *q = gemm_req(8, 10, 5);
	q->a.has_sparsity = 1;
	q->a.sparsity = MFMA__V1__SPARSITY__PRUNE_24;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "a.cols=10 is not a multiple of 4");
	/* And in the compressed form. */
	q->a.has_sparsity = 0;
	q->a.sparsity = MFMA__V1__SPARSITY__DENSE;
	make_sparse(q, 8, 10, 8 * 4);
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "a.sparse.cols=10 is not a multiple of 4");
	free(q);
}

static void test_not_24_under_validate(void **state)
{
	(void)state;
	struct greq *q = gemm_req(6, 8, 3);
	/* Dense random data: every group has 4 non-zeros. */
	for (int i = 0; i < 6 * 8; i++)
		if (q->abuf[i] == 0.0f)
			q->abuf[i] = 0.5f;
	q->a.has_sparsity = 1;
	q->a.sparsity = MFMA__V1__SPARSITY__VALIDATE_24;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT,
		     "a is not 2:4 (VALIDATE_24): row 0, columns 0..3 have more than two non-zeros");
	free(q);
}

static void test_bad_meta_nibble(void **state)
{
	(void)state;
	struct greq *q = gemm_req(4, 8, 3);
	make_sparse(q, 4, 8, 4 * 4);
	for (int r = 0; r < 4; r++)
		q->meta[r] = 0x84 | 0x84 << 4; /* (0,1) then (0,2)... valid */
	q->meta[2] = 0x4 | 0x5 << 4;          /* row 2, group 1: i0 = i1 = 1 */
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT, "row 2 group 1 has index nibble 0x5");
	free(q);
}

static void test_unknown_weight(void **state)
{
	(void)state;
	struct greq *q = gemm_req(4, 8, 3);
	q->a.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
	q->a.weight = "no-such-weight";
	expect_reply(&q->req, MFMA__V1__CODE__NOT_FOUND, "weight 'no-such-weight' is not loaded");
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__UnloadWeight uw = MFMA__V1__UNLOAD_WEIGHT__INIT;
	uw.name = "no-such-weight";
	req.has_id = 1;
	req.id = 77;
	req.body_case = MFMA__V1__REQUEST__BODY_UNLOAD_WEIGHT;
	req.unload_weight = &uw;
	expect_reply(&req, MFMA__V1__CODE__NOT_FOUND, "weight 'no-such-weight' is not loaded");
	free(q);
}

/* Fields of a well-formed GEMM that the daemon refuses and no other test
 * sent it: a sparsity on an A that is already compressed 2:4, a device
 * below -1, a timeout past a day.  With the sparsity or the device check
 * taken out of validate.c, unit-validate and the bad-input, daemon,
 * queue, batching, declare, client-library and hostile tests all still
 * passed (the timeout one only test_queue saw, not by its message). */
static void test_refused_gemm_fields(void **state)
{
	(void)state;
	struct greq *q = gemm_req(4, 8, 3);
	make_sparse(q, 4, 8, 4 * 4);
	for (int r = 0; r < 4; r++)
		q->meta[r] = 0x84 | 0x84 << 4; /* (0,1) then (0,2): valid */
	q->a.has_sparsity = 1;
	q->a.sparsity = MFMA__V1__SPARSITY__PRUNE_24;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT,
		     "a.sparsity applies to a dense operand only");
	free(q);
	q = gemm_req(4, 8, 3);
	q->g.has_device = 1;
	q->g.device = -2;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT,
		     "device=-2: use -1 for any device or a device index");
	q->g.has_device = 0;
	q->g.has_timeout_us = 1;
	q->g.timeout_us = 86400ull * 1000 * 1000 + 1;
	expect_reply(&q->req, MFMA__V1__CODE__INVALID_ARGUMENT,
		     "timeout_us=86400000001 is longer than the limit of 86400000000 (one day)");
	free(q);
}

/* The weight-side fields the daemon refuses and no other test sent it: a
 * load on a device that does not exist, and a sparsity on a resident
 * weight's operand (its sparsity was chosen at load). */
static void test_refused_weight_fields(void **state)
{
	(void)state;
	struct greq *q = gemm_req(4, 8, 3);
	Mfma__V1__LoadWeight lw = MFMA__V1__LOAD_WEIGHT__INIT;
	lw.name = "refusals";
	lw.a = &q->a;
	lw.has_device = 1;
	lw.device = 99;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	req.has_id = 1;
	req.id = 78;
	req.body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
	req.load_weight = &lw;
	expect_reply(&req, MFMA__V1__CODE__INVALID_ARGUMENT, "device=99 does not exist");
	lw.device = -1;
	expect_reply(&req, MFMA__V1__CODE__OK, "");

	struct greq *g = gemm_req(4, 8, 3);
	g->a.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
	g->a.weight = "refusals";
	g->a.has_sparsity = 1;
	g->a.sparsity = MFMA__V1__SPARSITY__PRUNE_24;
	expect_reply(&g->req, MFMA__V1__CODE__INVALID_ARGUMENT,
		     "a.sparsity does not apply to a resident weight");
	g->a.has_sparsity = 0;
	g->a.sparsity = MFMA__V1__SPARSITY__DENSE;
	expect_reply(&g->req, MFMA__V1__CODE__OK, "");

	Mfma__V1__UnloadWeight uw = MFMA__V1__UNLOAD_WEIGHT__INIT;
	uw.name = "refusals";
	req.body_case = MFMA__V1__REQUEST__BODY_UNLOAD_WEIGHT;
	req.unload_weight = &uw;
	expect_reply(&req, MFMA__V1__CODE__OK, "");
	free(g);
	free(q);
}

/* Pipelined past the per-connection cap: the excess is answered "busy",
 * everything else with a right result, every id exactly once. */
static void test_busy_per_connection(void **state)
{
	(void)state;
	int fd = harness_connect_raw(&D);
	struct greq *q = gemm_req(64, 64, 64);
	/* alpha = the id: an answer that went to another request's id, or
	 * came from another request's launch, has the wrong scale. */
	double ab[64 * 64];
	for (int i = 0; i < 64; i++)
		for (int j = 0; j < 64; j++) {
			double acc = 0;
			for (int p = 0; p < 64; p++)
				acc += (double)q->abuf[i * 64 + p] * q->bbuf[p * 64 + j];
			ab[i * 64 + j] = acc;
		}
	int sent = 16;
	q->g.has_alpha = 1;
	for (int i = 0; i < sent; i++) {
		q->req.id = (uint64_t)i + 1;
		q->g.alpha = (float)(i + 1);
		send_request(fd, &q->req);
	}
	int ok = 0, busy = 0;
	uint32_t seen = 0;
	for (int i = 0; i < sent; i++) {
		Mfma__V1__Response *r = recv_response(fd);
		assert_true(r->id >= 1 && r->id <= (uint64_t)sent);
		assert_false(seen & (1u << r->id));
		seen |= 1u << r->id;
		if (r->status->code == MFMA__V1__CODE__OK) {
			ok++;
			const Mfma__V1__Matrix *d = r->gemm->d;
			assert_int_equal(d->rows, 64);
			assert_int_equal(d->cols, 64);
			assert_int_equal(d->data.len, 64 * 64 * sizeof(float));
			double num = 0, den = 0;
			for (size_t e = 0; e < 64 * 64; e++) {
				float v;
				memcpy(&v, d->data.data + e * sizeof(v), sizeof(v));
				double want = (double)r->id * ab[e];
				num += (v - want) * (v - want);
				den += want * want;
			}
			if (!(sqrt(num / den) < 1e-5))
				fail_msg("answer of id %" PRIu64 ": relative error %g against alpha=%"
					 PRIu64 " * A.B", r->id, sqrt(num / den), r->id);
		} else {
			assert_int_equal(r->status->code, MFMA__V1__CODE__RESOURCE_EXHAUSTED);
			/* The count that refused: the cap, or one or two more
			 * where an answer a thread was writing counted as sent
			 * while a request was admitted, then did not go out. */
			const char *m = r->status->message;
			unsigned n = 0;
			if (sscanf(m, "busy: %u requests", &n) != 1 || n < 4 || n > 6)
				fail_msg("unexpected refusal: %s", m);
			assert_non_null(strstr(m, " in flight on this connection "
						  "(limits.max_inflight_per_connection = 4)"));
			busy++;
		}
		mfma__v1__response__free_unpacked(r, NULL);
	}
	assert_true(ok >= 4);
	assert_int_equal(ok + busy, sent);
	close(fd);
	free(q);
	good_client_still_served();
}

/* A client that vanishes with requests queued: they run, their answers
 * are dropped, nothing leaks (checked by ASan at exit). */
static void test_client_vanishes(void **state)
{
	(void)state;
	for (int round = 0; round < 5; round++) {
		int fd = harness_connect_raw(&D);
		struct greq *q = gemm_req(64, 64, 64);
		for (int i = 0; i < 4; i++) {
			q->req.id = (uint64_t)i + 1;
			send_request(fd, &q->req);
		}
		close(fd);
		free(q);
	}
	good_client_still_served();
}

static void test_still_answers_ping(void **state)
{
	(void)state;
	struct mfma_error err;
	uint64_t rtt;
	assert_int_equal(mfma_ping(good, "ping", 4, &rtt, &err), 0);
	struct mfma_status st;
	assert_int_equal(mfma_status(good, &st, &err), 0);
	assert_true(st.counters.malformed >= 3);
	assert_true(st.counters.failed > 10);
	mfma_status_free(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_truncated_frame),
		cmocka_unit_test(test_frame_over_limit),
		cmocka_unit_test(test_garbage_protobuf),
		cmocka_unit_test(test_random_bytes),
		cmocka_unit_test(test_unknown_request_type),
		cmocka_unit_test(test_bad_dimensions),
		cmocka_unit_test(test_byte_length_and_inner_dims),
		cmocka_unit_test(test_pad),
		cmocka_unit_test(test_sparse_k_not_multiple_of_4),
		cmocka_unit_test(test_not_24_under_validate),
		cmocka_unit_test(test_bad_meta_nibble),
		cmocka_unit_test(test_unknown_weight),
		cmocka_unit_test(test_refused_gemm_fields),
		cmocka_unit_test(test_refused_weight_fields),
		cmocka_unit_test(test_busy_per_connection),
		cmocka_unit_test(test_client_vanishes),
		cmocka_unit_test(test_still_answers_ping),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
