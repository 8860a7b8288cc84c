/* libmfmaclient against a scripted fake daemon on a Unix socket in a
 * temporary directory: answers out of order matched by id, a daemon that
 * writes large answers while the client is still sending (the deadlock
 * the library must avoid), daemon errors passed through verbatim, a
 * connection that breaks, and the argument and endpoint errors.  The
 * real daemon is exercised by tests/integration/client. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "frame.h"
#include "mfma.h"
#include "mfma_clock.h"
#include "mfma.pb-c.h"

struct fake {
	char dir[64];
	char path[100];
	char endpoint[140];
	int lfd;
	pthread_t tid;
	void (*script)(struct fake *f, int fd);
	size_t big;       /* bytes of D in big answers */
	int failed;       /* the script's own checks */
	mfma_client *c;   /* the test's client, closed by the teardown */
};

static int read_full(int fd, void *buf, size_t len)
{
	uint8_t *b = buf;
	while (len) {
		ssize_t r = recv(fd, b, len, 0);
		if (r <= 0)
			return -1;
		b += r;
		len -= (size_t)r;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;
	while (len) {
		ssize_t w = send(fd, b, len, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		b += w;
		len -= (size_t)w;
	}
	return 0;
}

static Mfma__V1__Request *read_request(int fd)
{
	uint8_t hdr[4];
	if (read_full(fd, hdr, 4) < 0)
		return NULL;
	uint32_t len = frame_header_get(hdr);
	uint8_t *buf = malloc(len + 1);
	if (!buf || read_full(fd, buf, len) < 0) {
		free(buf);
		return NULL;
	}
	Mfma__V1__Request *req = mfma__v1__request__unpack(NULL, len, buf);
	free(buf);
	return req;
}

static int send_response(int fd, const Mfma__V1__Response *resp)
{
	size_t n = mfma__v1__response__get_packed_size(resp);
	uint8_t *buf = malloc(n + 4);
	if (!buf)
		return -1;
	frame_header_put(buf, (uint32_t)n);
	mfma__v1__response__pack(resp, buf + 4);
	int rc = write_full(fd, buf, n + 4);
	free(buf);
	return rc;
}

/* A GEMM answer whose D is rows x cols f32, every element = value. */
/* A GEMM's answer, D rows x cols of value, with a status (code 0: none). */
static int send_gemm_status(int fd, uint64_t id, uint32_t rows, uint32_t cols, float value,
			    int code, const char *msg)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	Mfma__V1__GemmResult gr = MFMA__V1__GEMM_RESULT__INIT;
	Mfma__V1__Matrix d = MFMA__V1__MATRIX__INIT;
	Mfma__V1__Timing t = MFMA__V1__TIMING__INIT;
	Mfma__V1__DeviceRef dev = MFMA__V1__DEVICE_REF__INIT;
	size_t count = (size_t)rows * cols;
	float *data = malloc(count * sizeof(float) + 1);
	if (!data)
		return -1;
	for (size_t i = 0; i < count; i++)
		data[i] = value;
	d.has_rows = d.has_cols = d.has_dtype = d.has_data = 1;
	d.rows = rows;
	d.cols = cols;
	d.dtype = MFMA__V1__DTYPE__F32;
	d.data.len = count * sizeof(float);
	d.data.data = (uint8_t *)data;
	t.has_kernel_ns = t.has_total_ns = 1;
	t.kernel_ns = id * 10;
	t.total_ns = id * 10 + 5;
	dev.has_index = 1;
	dev.index = 3;
	dev.backend = "fake";
	dev.arch = "none";
	gr.d = &d;
	gr.timing = &t;
	gr.device = &dev;
	gr.variant = "fake.variant";
	resp.has_id = 1;
	resp.id = id;
	resp.body_case = MFMA__V1__RESPONSE__BODY_GEMM;
	resp.gemm = &gr;
	if (code) {
		st.has_code = 1;
		st.code = (Mfma__V1__Code)code;
		st.message = (char *)msg;
		resp.status = &st;
	}
	int rc = send_response(fd, &resp);
	free(data);
	return rc;
}

static int send_gemm(int fd, uint64_t id, uint32_t rows, uint32_t cols, float value)
{
	return send_gemm_status(fd, id, rows, cols, value, 0, NULL);
}

static int send_status(int fd, uint64_t id, int code, const char *msg)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	st.has_code = 1;
	st.code = (Mfma__V1__Code)code;
	st.message = (char *)msg;
	resp.has_id = 1;
	resp.id = id;
	resp.status = &st;
	return send_response(fd, &resp);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);
	if (fd < 0) {
		f->failed = 1;
		return NULL;
	}
	f->script(f, fd);
	/* The daemon is gone with its socket: a reconnection is refused
	 * (a listener left open would take it into its backlog). */
	shutdown(f->lfd, SHUT_RDWR);
	close(fd);
	return NULL;
}

/* Starts a fake daemon running `script` on its first connection; the
 * teardown stops it, also when an assertion ended the test early. */
static struct fake *fake_start(void **state, void (*script)(struct fake *, int), size_t big)
{
	struct fake *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->script = script;
	f->big = big;
	snprintf(f->dir, sizeof(f->dir), "/tmp/mfma-client-test-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	*state = f;
	snprintf(f->path, sizeof(f->path), "%s/fake.sock", f->dir);
	snprintf(f->endpoint, sizeof(f->endpoint), "unix:%s", f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->lfd >= 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	assert_int_equal(pthread_create(&f->tid, NULL, fake_main, f), 0);
	return f;
}

static int fake_teardown(void **state)
{
	struct fake *f = *state;
	if (!f)
		return 0;
	/* Closing the client ends the script's reads and writes; shutting
	 * the listener down ends an accept() that never got a client. */
	mfma_close(f->c);
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->tid, NULL);
	close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
	int failed = f->failed;
	free(f);
	*state = NULL;
	return failed ? -1 : 0;
}

static void args_for(struct mfma_gemm_args *a, const float *data, uint32_t rows, uint32_t cols)
{
	mfma_gemm_args_init(a);
	a->a.kind = MFMA_OPERAND_DENSE;
	a->a.dense = (struct mfma_matrix){ rows, cols, MFMA_TYPE_F32, data, (size_t)rows * cols * 4 };
	a->b = (struct mfma_matrix){ cols, 1, MFMA_TYPE_F32, data, (size_t)cols * 4 };
}

/* A client connected to a fake daemon running script, and a's GEMM: A
 * 2 x 4 and B 4 x 1 (a D of 2 x 1), the matrices every script answers. */
static mfma_client *fake_client(void **state, void (*script)(struct fake *, int),
				struct mfma_gemm_args *a)
{
	static const float data[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct fake *f = fake_start(state, script, 0);
	struct mfma_error err;
	assert_int_equal(mfma_connect(f->endpoint, &f->c, &err), 0);
	assert_int_equal(err.code, 0);
	args_for(a, data, 2, 4);
	return f->c;
}

/* ---- answers out of order ---- */

#define NREV 16

static void script_reverse(struct fake *f, int fd)
{
	uint64_t ids[NREV];
	for (int i = 0; i < NREV; i++) {
		Mfma__V1__Request *req = read_request(fd);
		if (!req || req->body_case != MFMA__V1__REQUEST__BODY_GEMM || !req->has_id) {
			f->failed = 1;
			return;
		}
		/* The library sends what the caller gave: check one field. */
		if (req->gemm->a->dense->rows != 2 || req->gemm->alpha != 1.0f ||
		    req->gemm->device != -1)
			f->failed = 1;
		ids[i] = req->id;
		mfma__v1__request__free_unpacked(req, NULL);
	}
	for (int i = NREV - 1; i >= 0; i--)
		if (send_gemm(fd, ids[i], 2, 1, (float)ids[i]) < 0)
			f->failed = 1;
}

static void test_out_of_order(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_reverse, &a);
	struct fake *f = *state;
	struct mfma_error err;
	assert_string_equal(mfma_endpoint(c), f->endpoint);
	uint64_t ids[NREV];
	for (int i = 0; i < NREV; i++) {
		assert_int_equal(mfma_gemm_submit(c, &a, &ids[i], &err), 0);
		assert_true(ids[i] != 0 && ids[i] != MFMA_ANY);
		for (int k = 0; k < i; k++)
			assert_true(ids[k] != ids[i]);
	}
	assert_int_equal(mfma_in_flight(c), NREV);
	/* The first-sent is answered last: waiting for it buffers the rest. */
	struct mfma_gemm_result r;
	uint64_t done;
	assert_int_equal(mfma_wait(c, ids[0], 5000, &done, &r, &err), 0);
	assert_true(done == ids[0]);
	assert_int_equal(r.d.rows, 2);
	assert_true(((const float *)r.d.data)[1] == (float)ids[0]);
	assert_true(r.timing.kernel_ns == ids[0] * 10);
	assert_string_equal(r.variant, "fake.variant");
	assert_string_equal(r.device.backend, "fake");
	assert_int_equal(r.device.index, 3);
	assert_true(r.round_trip_ns > 0);
	mfma_gemm_result_free(&r);
	assert_null(r.priv);
	/* A specific one from the buffer, then the rest with MFMA_ANY in
	 * arrival order (the fake answered in reverse). */
	assert_int_equal(mfma_wait(c, ids[5], 0, &done, &r, &err), 0);
	assert_true(((const float *)r.d.data)[0] == (float)ids[5]);
	mfma_gemm_result_free(&r);
	for (int i = NREV - 1; i >= 1; i--) {
		if (i == 5)
			continue;
		assert_int_equal(mfma_wait(c, MFMA_ANY, 0, &done, &r, &err), 0);
		assert_true(done == ids[i]);
		assert_true(((const float *)r.d.data)[0] == (float)ids[i]);
		mfma_gemm_result_free(&r);
	}
	assert_int_equal(mfma_in_flight(c), 0);
	assert_int_equal(mfma_wait(c, MFMA_ANY, 0, &done, &r, &err), -ENOENT);
	assert_int_equal(err.code, -ENOENT);
	assert_int_equal(mfma_wait(c, ids[0], 0, &done, &r, &err), -ENOENT);
}

/* ---- MFMA_ANY in arrival order, after many waits by id ---- */

#define ROUNDS_BY_ID 20
#define ROUND_N 50
#define NMANY 600

/* The order the fake answers NMANY requests in: i -> (7i + 3) mod NMANY,
 * a permutation (7 and 600 share no factor). */
static int many_order(int i)
{
	return (7 * i + 3) % NMANY;
}

/* Reads n GEMM requests, their ids into ids; false (f failed) when the
 * connection ends first. */
static bool read_ids(struct fake *f, int fd, uint64_t *ids, int n)
{
	for (int i = 0; i < n; i++) {
		Mfma__V1__Request *req = read_request(fd);
		if (!req) {
			f->failed = 1;
			return false;
		}
		ids[i] = req->id;
		mfma__v1__request__free_unpacked(req, NULL);
	}
	return true;
}

static void script_many(struct fake *f, int fd)
{
	static uint64_t ids[NMANY];
	/* Rounds answered in order, each waited for by id: arrivals that
	 * MFMA_ANY never takes, which the client must drop as they pile up. */
	for (int r = 0; r < ROUNDS_BY_ID; r++) {
		if (!read_ids(f, fd, ids, ROUND_N))
			return;
		for (int i = 0; i < ROUND_N; i++)
			if (send_gemm(fd, ids[i], 2, 1, (float)ids[i]) < 0)
				f->failed = 1;
	}
	if (!read_ids(f, fd, ids, NMANY))
		return;
	for (int i = 0; i < NMANY; i++)
		if (send_gemm(fd, ids[many_order(i)], 2, 1, (float)ids[many_order(i)]) < 0)
			f->failed = 1;
}

/* 980 answers waited for by id and 20 left for MFMA_ANY, then 600
 * answered in a shuffled order, a third taken by id: MFMA_ANY must return
 * the rest in the order they arrived, each its own answer. */
static void test_any_in_arrival_order(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_many, &a);
	struct mfma_error err;
	struct mfma_gemm_result r;
	uint64_t done;
	static uint64_t ids[NMANY];
	/* Each round leaves one answer unclaimed: the ring drops the stale
	 * arrivals around them, and must keep them, in order. */
	uint64_t left[ROUNDS_BY_ID];
	for (int round = 0; round < ROUNDS_BY_ID; round++) {
		for (int i = 0; i < ROUND_N; i++)
			assert_int_equal(mfma_gemm_submit(c, &a, &ids[i], &err), 0);
		left[round] = ids[ROUND_N / 2];
		for (int i = ROUND_N - 1; i >= 0; i--) {
			if (i == ROUND_N / 2)
				continue;
			assert_int_equal(mfma_wait(c, ids[i], 5000, &done, &r, &err), 0);
			assert_true(done == ids[i]);
			mfma_gemm_result_free(&r);
		}
	}
	assert_int_equal(mfma_in_flight(c), ROUNDS_BY_ID);
	for (int round = 0; round < ROUNDS_BY_ID; round++) {
		assert_int_equal(mfma_wait(c, MFMA_ANY, 5000, &done, &r, &err), 0);
		if (done != left[round])
			fail_msg("round %d's unclaimed answer: MFMA_ANY gave id %llu, not %llu", round,
				 (unsigned long long)done, (unsigned long long)left[round]);
		mfma_gemm_result_free(&r);
	}
	assert_int_equal(mfma_in_flight(c), 0);
	for (int i = 0; i < NMANY; i++)
		assert_int_equal(mfma_gemm_submit(c, &a, &ids[i], &err), 0);
	assert_int_equal(mfma_in_flight(c), NMANY);
	/* Every third request by id (the last first: all the answers are
	 * read while waiting for it). */
	for (int i = NMANY - 3; i >= 0; i -= 3) {
		assert_int_equal(mfma_wait(c, ids[i], 5000, &done, &r, &err), 0);
		assert_true(done == ids[i]);
		assert_true(((const float *)r.d.data)[0] == (float)ids[i]);
		mfma_gemm_result_free(&r);
	}
	for (int k = 0; k < NMANY; k++) {
		const int i = many_order(k);
		if (i % 3 == 0)
			continue;
		assert_int_equal(mfma_wait(c, MFMA_ANY, 5000, &done, &r, &err), 0);
		if (done != ids[i])
			fail_msg("arrival %d: MFMA_ANY gave id %llu, not %llu", k,
				 (unsigned long long)done, (unsigned long long)ids[i]);
		assert_true(((const float *)r.d.data)[0] == (float)ids[i]);
		mfma_gemm_result_free(&r);
	}
	assert_int_equal(mfma_in_flight(c), 0);
	assert_int_equal(mfma_wait(c, MFMA_ANY, 0, &done, &r, &err), -ENOENT);
}

/* ---- a blocking call's D, placed only while the call waits ---- */

static void script_late(struct fake *f, int fd)
{
	uint64_t ids[2];
	if (!read_ids(f, fd, ids, 1))
		return;
	/* Past the client's 100 ms: the first call has returned. */
	usleep(300 * 1000);
	if (send_gemm(fd, ids[0], 2, 1, 7.0f) < 0 || !read_ids(f, fd, ids + 1, 1) ||
	    send_gemm(fd, ids[1], 2, 1, 9.0f) < 0)
		f->failed = 1;
}

/* mfma_gemm copies D into the caller's d as the answer is read; a call
 * that timed out has handed d back, so its late answer, read by the next
 * call, must not touch it. */
static void test_blocking_d_after_timeout(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_late, &a);
	struct mfma_error err;
	float first[2] = { 0, 0 }, second[2] = { 0, 0 };
	struct mfma_gemm_result r;
	a.d = first;
	a.d_bytes = sizeof(first);
	mfma_set_timeout(c, 100);
	assert_int_equal(mfma_gemm(c, &a, &r, &err), -ETIMEDOUT);
	first[0] = first[1] = -1.0f; /* the caller's again */
	mfma_set_timeout(c, 5000);
	a.d = second;
	a.d_bytes = sizeof(second);
	assert_int_equal(mfma_gemm(c, &a, &r, &err), 0);
	assert_ptr_equal(r.d.data, second);
	assert_true(second[0] == 9.0f && second[1] == 9.0f);
	mfma_gemm_result_free(&r);
	if (first[0] != -1.0f || first[1] != -1.0f)
		fail_msg("the timed-out call's late answer wrote its d: %g %g", first[0], first[1]);
}

/* ---- big answers while the client still sends ---- */

#define NBIG 24

static void script_big(struct fake *f, int fd)
{
	/* Answer each request as soon as it is read, with a large D, using
	 * blocking writes: if the client does not read while it sends, this
	 * thread blocks in send() and never reads the next request. */
	for (int i = 0; i < NBIG; i++) {
		Mfma__V1__Request *req = read_request(fd);
		if (!req) {
			f->failed = 1;
			return;
		}
		/* D is 1024 x N, as asked (A 1024 rows, B f->big / 4 KiB columns). */
		uint32_t cols = (uint32_t)(f->big / 4 / 1024);
		if (send_gemm(fd, req->id, 1024, cols, (float)req->id) < 0)
			f->failed = 1;
		mfma__v1__request__free_unpacked(req, NULL);
	}
}

struct progress {
	uint64_t calls, last_sent, last_total, frames;
	int backwards;
};

static void on_progress(void *user, uint64_t sent, uint64_t total)
{
	struct progress *p = user;
	if (p->calls && p->last_sent < p->last_total && (sent < p->last_sent || total != p->last_total))
		p->backwards++;
	p->calls++;
	p->last_sent = sent;
	p->last_total = total;
	p->frames += sent == total;
}

static void test_no_deadlock_with_large_frames(void **state)
{
	struct fake *f = fake_start(state, script_big, 1u << 20);
	struct mfma_error err;
	assert_int_equal(mfma_connect(f->endpoint, &f->c, &err), 0);
	mfma_client *c = f->c;
	/* A deadlock turns into a timeout and a failed test, not a hang. */
	mfma_set_timeout(c, 20000);
	struct progress prog = { 0 };
	mfma_set_progress(c, on_progress, &prog);
	/* 5 MiB requests (A 4 MiB, B 1 MiB): larger than the client's send
	 * buffer (1 MiB, CLIENT_SEND_BUFFER) and than the socket's on the
	 * other side. */
	size_t n = (4u << 20) / 4;
	float *data = calloc(n, sizeof(float));
	assert_non_null(data);
	struct mfma_gemm_args a;
	args_for(&a, data, 1024, 1024);
	a.b = (struct mfma_matrix){ 1024, (uint32_t)(f->big / 4 / 1024), MFMA_TYPE_F32, data,
				    f->big };
	uint64_t ids[NBIG];
	for (int i = 0; i < NBIG; i++) {
		if (mfma_gemm_submit(c, &a, &ids[i], &err) != 0)
			fail_msg("submit %d: %s", i, err.message);
	}
	/* Every frame reported up to its end, monotonically, in pieces (it
	 * is larger than the socket buffer).  How many depends on how fast
	 * the fake reads: two a frame with other tests running beside this
	 * one (48 here, which "more than two a frame" failed), 49-53 alone. */
	assert_int_equal(prog.frames, NBIG);
	assert_int_equal(prog.backwards, 0);
	assert_true(prog.calls > NBIG);
	assert_true(prog.last_total > (4u << 20));
	for (int i = 0; i < NBIG; i++) {
		struct mfma_gemm_result r;
		uint64_t done;
		assert_int_equal(mfma_wait(c, MFMA_ANY, 20000, &done, &r, &err), 0);
		assert_true(done == ids[i]); /* answered in order */
		assert_int_equal(r.d.bytes, f->big);
		assert_true(((const float *)r.d.data)[r.d.bytes / 4 - 1] == (float)done);
		mfma_gemm_result_free(&r);
	}
	free(data);
}

/* ---- daemon errors and a broken connection ---- */

static void script_errors(struct fake *f, int fd)
{
	Mfma__V1__Request *r1 = read_request(fd), *r2 = read_request(fd), *r3 = read_request(fd);
	if (!r1 || !r2 || !r3) {
		f->failed = 1;
		goto out;
	}
	if (r3->body_case != MFMA__V1__REQUEST__BODY_UNLOAD_WEIGHT ||
	    strcmp(r3->unload_weight->name, "w\"1") != 0)
		f->failed = 1;
	send_gemm(fd, r2->id, 1, 1, 2.0f);
	send_status(fd, r1->id, MFMA__V1__CODE__NOT_FOUND, "weight 'ghost' is not loaded");
	send_status(fd, r3->id, MFMA__V1__CODE__NOT_FOUND, "weight 'w\"1' is not loaded");
	/* The client then pings; answer with a frame it cannot attribute,
	 * then close, as a daemon does with a frame it refuses. */
	Mfma__V1__Request *p = read_request(fd);
	if (!p || p->body_case != MFMA__V1__REQUEST__BODY_PING)
		f->failed = 1;
	send_status(fd, 0, MFMA__V1__CODE__MALFORMED, "frame of 300 MiB exceeds max_frame_mb");
	if (p)
		mfma__v1__request__free_unpacked(p, NULL);
out:
	if (r1)
		mfma__v1__request__free_unpacked(r1, NULL);
	if (r2)
		mfma__v1__request__free_unpacked(r2, NULL);
	if (r3)
		mfma__v1__request__free_unpacked(r3, NULL);
}

static void test_errors(void **state)
{
	struct fake *f = fake_start(state, script_errors, 0);
	struct mfma_error err;
	assert_int_equal(mfma_connect(f->endpoint, &f->c, &err), 0);
	mfma_client *c = f->c;
	mfma_set_timeout(c, 10000);
	float data[4] = { 1, 2, 3, 4 };
	struct mfma_gemm_args a;
	uint64_t id1, id2, done;
	args_for(&a, data, 1, 4);
	a.a.kind = MFMA_OPERAND_WEIGHT;
	a.a.weight = "ghost";
	assert_int_equal(mfma_gemm_submit(c, &a, &id1, &err), 0);
	args_for(&a, data, 1, 4);
	assert_int_equal(mfma_gemm_submit(c, &a, &id2, &err), 0);
	/* A blocking call in between: its answer comes after both GEMMs'. */
	int rc = mfma_unload_weight(c, "w\"1", &err);
	assert_int_equal(rc, MFMA_EREMOTE(MFMA_CODE_NOT_FOUND));
	assert_true(MFMA_IS_REMOTE(rc));
	assert_int_equal(MFMA_REMOTE_CODE(rc), MFMA_CODE_NOT_FOUND);
	assert_int_equal(err.code, MFMA_CODE_NOT_FOUND);
	assert_string_equal(err.message, "weight 'w\"1' is not loaded");
	assert_string_equal(mfma_code_name(err.code), "NOT_FOUND");

	struct mfma_gemm_result r;
	assert_int_equal(mfma_wait(c, MFMA_ANY, 0, &done, &r, &err), 0);
	assert_true(done == id2);
	mfma_gemm_result_free(&r);
	done = 0;
	assert_int_equal(mfma_wait(c, MFMA_ANY, 0, &done, &r, &err),
			 MFMA_EREMOTE(MFMA_CODE_NOT_FOUND));
	assert_true(done == id1);
	assert_int_equal(err.code, MFMA_CODE_NOT_FOUND);
	assert_string_equal(err.message, "weight 'ghost' is not loaded");
	assert_null(r.priv);

	/* The daemon's last word is kept for the error of the broken link. */
	uint64_t rtt;
	rc = mfma_ping(c, "abc", 3, &rtt, &err);
	assert_int_equal(rc, -ECONNRESET);
	assert_int_equal(err.code, -ECONNRESET);
	assert_non_null(strstr(err.message, "closed the connection"));
	assert_non_null(strstr(err.message, "exceeds max_frame_mb (MALFORMED)"));
	/* And every later call fails the same way. */
	assert_int_equal(mfma_status(c, &(struct mfma_status){ 0 }, &err), -ECONNRESET);
	assert_int_equal(mfma_gemm_submit(c, &a, &id1, &err), -ECONNRESET);
}

/* ---- an answer, then the end ---- */

static void script_answer_then_close(struct fake *f, int fd)
{
	Mfma__V1__Request *r1 = read_request(fd), *r2 = read_request(fd);
	if (!r1 || !r2 || send_gemm(fd, r1->id, 2, 1, 7.0f) < 0)
		f->failed = 1;
	/* Close at once: the answer and the end of the stream arrive
	 * together, and the answer must still be delivered. */
	if (r1)
		mfma__v1__request__free_unpacked(r1, NULL);
	if (r2)
		mfma__v1__request__free_unpacked(r2, NULL);
}

static void test_answer_then_close(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_answer_then_close, &a);
	struct mfma_error err;
	uint64_t id1, id2, done;
	assert_int_equal(mfma_gemm_submit(c, &a, &id1, &err), 0);
	assert_int_equal(mfma_gemm_submit(c, &a, &id2, &err), 0);
	/* Let both the answer and the close arrive before looking. */
	usleep(200 * 1000);
	struct mfma_gemm_result r;
	assert_int_equal(mfma_wait(c, id2, 5000, &done, &r, &err), -ECONNRESET);
	assert_non_null(strstr(err.message, "closed the connection"));
	assert_int_equal(mfma_wait(c, id1, 5000, &done, &r, &err), 0);
	assert_true(done == id1);
	assert_int_equal(r.d.rows, 2);
	assert_true(((const float *)r.d.data)[1] == 7.0f);
	mfma_gemm_result_free(&r);
	assert_int_equal(mfma_wait(c, MFMA_ANY, 0, &done, &r, &err), -ECONNRESET);
}

/* ---- timeouts ---- */

static void script_silent(struct fake *f, int fd)
{
	Mfma__V1__Request *req = read_request(fd);
	if (!req) {
		f->failed = 1;
		return;
	}
	/* Never answer the ping; wait for the client to go. */
	char b;
	while (recv(fd, &b, 1, 0) > 0)
		;
	mfma__v1__request__free_unpacked(req, NULL);
}

/* A draining daemon's "shutting down" that also carries a GEMM's body
 * (a hostile or broken daemon: it decodes into the small answer's arena):
 * kept while the request would go to another connection, then, none
 * taking it, the call's answer, freed where it was decoded (it had been
 * freed as if malloc'd piece by piece: glibc aborted, ASan reported a
 * free inside the arena). */
static void script_refused_with_d(struct fake *f, int fd)
{
	Mfma__V1__Request *req = read_request(fd);
	if (!req || req->body_case != MFMA__V1__REQUEST__BODY_GEMM) {
		f->failed = 1;
		return;
	}
	send_gemm_status(fd, req->id, 2, 1, 3.0f, MFMA__V1__CODE__UNAVAILABLE, "shutting down");
	mfma__v1__request__free_unpacked(req, NULL);
}

static void test_refused_with_d(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_refused_with_d, &a);
	struct mfma_gemm_result r;
	struct mfma_error err;
	mfma_set_timeout(c, 2000);
	assert_true(mfma_gemm(c, &a, &r, &err) < 0);
	assert_int_equal(err.code, MFMA_CODE_UNAVAILABLE);
	assert_non_null(strstr(err.message, "shutting down"));
}

/* ---- a hostile daemon's answers ---- */

/* A GEMM's answer g (with gr) to request id, D being d. */
static void gemm_answer(Mfma__V1__Response *g, Mfma__V1__GemmResult *gr, uint64_t id,
			Mfma__V1__Matrix *d)
{
	mfma__v1__response__init(g);
	mfma__v1__gemm_result__init(gr);
	gr->d = d;
	g->has_id = 1;
	g->id = id;
	g->body_case = MFMA__V1__RESPONSE__BODY_GEMM;
	g->gemm = gr;
}

/* An f32 D of rows x cols with no bytes (set them, or a region, after). */
static void f32_d(Mfma__V1__Matrix *d, uint32_t rows, uint32_t cols)
{
	mfma__v1__matrix__init(d);
	d->has_rows = d->has_cols = d->has_dtype = 1;
	d->rows = rows;
	d->cols = cols;
	d->dtype = MFMA__V1__DTYPE__F32;
}

/* Region `region` at offset 0, for a D. */
static void region_at_0(Mfma__V1__RegionRef *ref, uint64_t region)
{
	mfma__v1__region_ref__init(ref);
	ref->has_region = ref->has_offset = 1;
	ref->region = region;
}

/* Reads a RegisterRegion and answers it with `region`; false (the fake
 * failed) on anything else. */
static bool answer_register(struct fake *f, int fd, uint64_t region)
{
	Mfma__V1__Request *req = read_request(fd);
	if (!req || req->body_case != MFMA__V1__REQUEST__BODY_REGISTER_REGION) {
		f->failed = 1;
		if (req)
			mfma__v1__request__free_unpacked(req, NULL);
		return false;
	}
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__RegisterRegionResult rr = MFMA__V1__REGISTER_REGION_RESULT__INIT;
	rr.has_region = rr.has_bytes = 1;
	rr.region = region;
	rr.bytes = req->register_region->bytes;
	resp.has_id = 1;
	resp.id = req->id;
	resp.body_case = MFMA__V1__RESPONSE__BODY_REGISTER_REGION;
	resp.register_region = &rr;
	send_response(fd, &resp);
	mfma__v1__request__free_unpacked(req, NULL);
	return true;
}

/* Reads one request, then writes head (len bytes) and zeros after it as
 * fast as the socket takes them, until the client goes. */
static void stream_after_request(struct fake *f, int fd, const void *head, size_t len)
{
	Mfma__V1__Request *req = read_request(fd);
	if (!req) {
		f->failed = 1;
		return;
	}
	mfma__v1__request__free_unpacked(req, NULL);
	int sz = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	static const uint8_t zeros[1 << 20];
	if (len && write_full(fd, head, len) < 0)
		return;
	while (send(fd, zeros, sizeof(zeros), MSG_NOSIGNAL) > 0)
		;
}

/* A ping with timeout_ms: its result, err, and how long it took in *s. */
static int timed_ping(mfma_client *c, int timeout_ms, const char *what, struct mfma_error *err,
		      double *s)
{
	mfma_set_timeout(c, timeout_ms);
	uint64_t t0 = mfma_clock_ns();
	int rc = mfma_ping(c, "x", 1, NULL, err);
	*s = (double)(mfma_clock_ns() - t0) / 1e9;
	print_message("a ping answered %s: %d after %.2f s (%s)\n", what, rc, *s, err->message);
	return rc;
}

/* Answers three GEMMs: the first with status code -10000 and a Pong body,
 * the second with a D of 1 x 1 where 2 x 1 was asked, the third with a
 * D of 2^31 x 2^31 f32 and no bytes (its size wraps 64 bits). */
static void script_hostile(struct fake *f, int fd)
{
	Mfma__V1__Request *r[3] = { read_request(fd), NULL, NULL };
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	Mfma__V1__Pong pong = MFMA__V1__PONG__INIT;
	st.has_code = 1;
	st.code = (Mfma__V1__Code)-10000;
	st.message = "hi";
	pong.has_payload = 1;
	pong.payload = (ProtobufCBinaryData){ 3, (uint8_t *)"abc" };
	resp.has_id = 1;
	resp.id = r[0] ? r[0]->id : 0;
	resp.status = &st;
	resp.body_case = MFMA__V1__RESPONSE__BODY_PONG;
	resp.pong = &pong;
	if (!r[0] || send_response(fd, &resp) < 0)
		f->failed = 1;
	if (!(r[1] = read_request(fd)) || send_gemm(fd, r[1]->id, 1, 1, 1.0f) < 0)
		f->failed = 1;
	Mfma__V1__Response g;
	Mfma__V1__GemmResult gr;
	Mfma__V1__Matrix d;
	f32_d(&d, 1u << 31, 1u << 31);
	if (!(r[2] = read_request(fd)))
		f->failed = 1;
	else if (gemm_answer(&g, &gr, r[2]->id, &d), send_response(fd, &g) < 0)
		f->failed = 1;
	for (int i = 0; i < 3; i++)
		if (r[i])
			mfma__v1__request__free_unpacked(r[i], NULL);
}

/* What a daemon answers is checked before it is believed: a status code
 * the library does not know is a failure (MFMA_EREMOTE(-10000) was 0, and
 * the Pong body was read as a GEMM's: a crash), and a D whose shape is
 * not the one asked for, or whose size wraps, is refused (both were
 * returned as results). */
static void test_hostile_answers(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_hostile, &a);
	mfma_set_timeout(c, 5000);
	struct mfma_error err;
	struct mfma_gemm_result r;
	assert_int_equal(mfma_gemm(c, &a, &r, &err), MFMA_EREMOTE(MFMA_CODE_INTERNAL));
	assert_non_null(strstr(err.message, "status code -10000"));
	assert_int_equal(mfma_gemm(c, &a, &r, &err), -EPROTO);
	assert_string_equal(err.message, "the daemon's D is 1x1, where the request asked for 2x1");
	assert_int_equal(mfma_gemm(c, &a, &r, &err), -EPROTO);
	assert_non_null(strstr(err.message, "2147483648x2147483648"));
}

/* Answers a RegisterRegion (region 7), then a GEMM with a D that names
 * region 7 and also carries 2 MiB of bytes, laid so that they start
 * 4-byte aligned in the client's buffer (the status message pads). */
static void script_region_and_bytes(struct fake *f, int fd)
{
	Mfma__V1__Request *req;
	if (!answer_register(f, fd, 7) || !(req = read_request(fd))) {
		f->failed = 1;
		return;
	}
	const size_t big = 2u << 20;
	uint8_t *bytes = calloc(1, big);
	Mfma__V1__Response g;
	Mfma__V1__GemmResult gr;
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	Mfma__V1__Matrix d;
	Mfma__V1__RegionRef ref;
	f32_d(&d, 2, 1);
	d.has_data = 1;
	d.data = (ProtobufCBinaryData){ big, bytes };
	region_at_0(&ref, 7);
	d.region = &ref;
	gemm_answer(&g, &gr, req->id, &d);
	char msg[8] = "";
	for (int pad = 0; pad < 4; pad++) {
		memset(msg, 'p', (size_t)pad);
		msg[pad] = '\0';
		st.message = msg;
		g.status = pad ? &st : NULL;
		/* D's bytes end 6 bytes before the message (the region's key,
		 * length and fields follow them). */
		if ((4 + mfma__v1__response__get_packed_size(&g) - 6 - big) % 4 == 0)
			break;
	}
	send_response(fd, &g);
	free(bytes);
	mfma__v1__request__free_unpacked(req, NULL);
}

/* A D that names the client's region and also carries bytes is refused:
 * the bytes were taken for the region's, and freeing the result freed a
 * pointer into the region's mapping (a crash). */
static void test_region_and_bytes(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_region_and_bytes, &a);
	mfma_set_timeout(c, 5000);
	struct mfma_error err;
	mfma_region *rg;
	assert_int_equal(mfma_region_create(c, 4096, &rg, &err), 0);
	float *base = mfma_region_data(rg);
	memcpy(base, a.b.data, a.b.bytes);
	a.b.data = base;
	struct mfma_gemm_result r;
	int rc = mfma_gemm(c, &a, &r, &err);
	if (rc == 0)
		mfma_gemm_result_free(&r);
	assert_int_equal(rc, -EPROTO);
	assert_non_null(strstr(err.message, "(and carries 2097152 bytes), which is not where"));
}

/* Answers two RegisterRegions both with region 7, then a GEMM with a D
 * "in region 7 at 0" that the request did not put there. */
static void script_foreign_region(struct fake *f, int fd)
{
	Mfma__V1__Request *req;
	if (!answer_register(f, fd, 7) || !answer_register(f, fd, 7) || !(req = read_request(fd))) {
		f->failed = 1;
		return;
	}
	Mfma__V1__Response g;
	Mfma__V1__GemmResult gr;
	Mfma__V1__Matrix d;
	Mfma__V1__RegionRef ref;
	f32_d(&d, 2, 1);
	region_at_0(&ref, 7);
	d.region = &ref;
	gemm_answer(&g, &gr, req->id, &d);
	send_response(fd, &g);
	mfma__v1__request__free_unpacked(req, NULL);
}

/* A region id the client already has is refused at registration (two
 * regions shared one id), and a D in a region where the request did not
 * put it is refused (r.d.data pointed at the region's bytes, B's, and
 * the caller's D was never written). */
static void test_foreign_region(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_foreign_region, &a);
	mfma_set_timeout(c, 5000);
	struct mfma_error err;
	mfma_region *rg, *rg2;
	assert_int_equal(mfma_region_create(c, 4096, &rg, &err), 0);
	assert_int_equal(mfma_region_create(c, 4096, &rg2, &err), -EPROTO);
	assert_non_null(strstr(err.message, "region 7, which this client already has"));
	struct mfma_gemm_result r;
	int rc = mfma_gemm(c, &a, &r, &err);
	if (rc == 0)
		mfma_gemm_result_free(&r);
	assert_int_equal(rc, -EPROTO);
	assert_non_null(strstr(err.message, "region 7 at offset 0 (and carries 0 bytes), which is "
					    "not where the request asked for D"));
}

/* Empty frames (zeros), none answering the ping, without end. */
static void script_flood(struct fake *f, int fd)
{
	stream_after_request(f, fd, NULL, 0);
}

/* A daemon that streams without end does not keep a call past its
 * timeout: each look at the socket reads a bounded amount, files a bounded
 * number of frames, and looks at the deadline again.  The call returned
 * after 3 to 19 s at a 1 s timeout, or not at all, reading and decoding
 * for as long as bytes came; then, filing every frame of a 256 KiB read
 * (65,536 empty ones) per look, after 1.4-1.7 s (3.0 s on a busy machine)
 * under AddressSanitizer. */
static void test_flood_keeps_timeout(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_flood, &a);
	struct mfma_error err;
	double s;
	assert_true(timed_ping(c, 1000, "by an endless stream", &err, &s) < 0);
	assert_true(s < 1.3);
}

/* Reads until the client goes. */
static void script_idle(struct fake *f, int fd)
{
	(void)f;
	char b;
	while (recv(fd, &b, 1, 0) > 0)
		;
}

/* The ping's answer behind many empty frames sent at once, and then
 * nothing more until the client goes. */
static void script_burst(struct fake *f, int fd)
{
	Mfma__V1__Request *req = read_request(fd);
	if (!req) {
		f->failed = 1;
		return;
	}
	enum { EMPTY = 200000 };
	static const uint8_t zeros[EMPTY * FRAME_HEADER_SIZE];
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Pong pong = MFMA__V1__PONG__INIT;
	pong.has_payload = 1;
	pong.payload = req->ping ? req->ping->payload : (ProtobufCBinaryData){ 0, NULL };
	resp.has_id = 1;
	resp.id = req->id;
	resp.body_case = MFMA__V1__RESPONSE__BODY_PONG;
	resp.pong = &pong;
	if (write_full(fd, zeros, sizeof(zeros)) < 0 || send_response(fd, &resp) < 0)
		f->failed = 1;
	mfma__v1__request__free_unpacked(req, NULL);
	script_idle(f, fd);
}

/* Frames already read are filed without waiting for the socket: the ping's
 * answer, read with the empty frames before it, is found although no byte
 * comes after it (a look that files part of what it read must not then
 * sleep in poll() on a quiet socket). */
static void test_burst_filed_without_waiting(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_burst, &a);
	struct mfma_error err;
	double s;
	assert_int_equal(timed_ping(c, 5000, "behind 200,000 empty frames", &err, &s), 0);
	assert_true(s < 2.5);
}

/* A frame of 4 GiB - 1 announced, zeros streamed into it. */
static void script_huge_frame(struct fake *f, int fd)
{
	static const uint8_t header[4] = { 0xff, 0xff, 0xff, 0xff };
	stream_after_request(f, fd, header, sizeof(header));
}

/* A response frame longer than any answer in flight can be is refused at
 * its header: a ping's answer announced at 4 GiB fails at once, nothing
 * buffered.  The client reserved the frame and read into it for as long
 * as the call's timeout let it (725 MiB in 3 s). */
static void test_huge_frame_refused(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_huge_frame, &a);
	struct mfma_error err;
	double s;
	assert_int_equal(timed_ping(c, 3000, "with a 4 GiB frame", &err, &s), -EPROTO);
	assert_non_null(strstr(err.message, "too large"));
	/* Well before the 3 s the reading took (1.6 s under ThreadSanitizer,
	 * which slows the connect and the ping themselves). */
	assert_true(s < 2.0);
}

/* Answers the GEMM with its D of 4096 x 4097 f32: a frame of 64 MiB and
 * 16 KiB. */
static void script_large_answer(struct fake *f, int fd)
{
	Mfma__V1__Request *req = read_request(fd);
	if (!req || send_gemm(fd, req->id, 4096, 4097, 3.0f) < 0)
		f->failed = 1;
	if (req)
		mfma__v1__request__free_unpacked(req, NULL);
}

/* An answer longer than the frames taken as they come (64 MiB) is taken
 * when a request in flight is answered with one that long. */
static void test_large_answer_taken(void **state)
{
	struct mfma_gemm_args a;
	mfma_client *c = fake_client(state, script_large_answer, &a);
	mfma_set_timeout(c, 20000);
	static float adata[4096 * 4], bdata[4 * 4097];
	a.a.dense = (struct mfma_matrix){ 4096, 4, MFMA_TYPE_F32, adata, sizeof(adata) };
	a.b = (struct mfma_matrix){ 4, 4097, MFMA_TYPE_F32, bdata, sizeof(bdata) };
	struct mfma_error err;
	struct mfma_gemm_result r;
	if (mfma_gemm(c, &a, &r, &err) < 0)
		fail_msg("a 4096x4097 f32 answer: %s", err.message);
	assert_int_equal(r.d.bytes, (size_t)4096 * 4097 * 4);
	assert_true(((const float *)r.d.data)[(size_t)4096 * 4097 - 1] == 3.0f);
	mfma_gemm_result_free(&r);
}

static void test_timeout(void **state)
{
	struct fake *f = fake_start(state, script_silent, 0);
	struct mfma_error err;
	assert_int_equal(mfma_connect(f->endpoint, &f->c, &err), 0);
	mfma_client *c = f->c;
	mfma_set_timeout(c, 100);
	assert_int_equal(mfma_ping(c, NULL, 0, NULL, &err), -ETIMEDOUT);
	assert_non_null(strstr(err.message, "within 100 ms"));
	/* The timed-out request is not one the caller can wait for. */
	assert_int_equal(mfma_in_flight(c), 0);
}

/* A spinning wait still ends at its deadline: a 1 s spin does not stretch
 * a 100 ms timeout against a daemon that never answers. */
static void test_spin_keeps_timeout(void **state)
{
	struct fake *f = fake_start(state, script_silent, 0);
	struct mfma_error err;
	assert_int_equal(mfma_connect(f->endpoint, &f->c, &err), 0);
	mfma_client *c = f->c;
	assert_int_equal(mfma_spin_us(c), 0);
	assert_int_equal(mfma_set_spin_us(c, MFMA_SPIN_US_MAX), 0);
	assert_int_equal(mfma_set_spin_us(c, MFMA_SPIN_US_MAX + 1), -EINVAL);
	assert_int_equal(mfma_spin_us(c), MFMA_SPIN_US_MAX);
	assert_int_equal(mfma_set_spin_us(NULL, 1), -EINVAL);
	assert_int_equal(mfma_spin_us(NULL), 0);
	mfma_set_timeout(c, 100);
	uint64_t t0 = mfma_clock_ns();
	assert_int_equal(mfma_ping(c, NULL, 0, NULL, &err), -ETIMEDOUT);
	uint64_t ms = (mfma_clock_ns() - t0) / 1000000;
	assert_non_null(strstr(err.message, "within 100 ms"));
	assert_true(ms >= 95 && ms < 600);
}

/* ---- arguments and endpoints ---- */

/* A listener whose queue is full (nothing accepts): a TCP connect there
 * gets no answer to its SYN and, blocking, waited out the kernel's
 * retries, some two minutes whatever the caller's timeout; a Unix one
 * blocked for good.  Each now gives up within a few seconds, saying so. */
static void test_connect_bounded(void **state)
{
	(void)state;
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 0), 0);
	socklen_t al = sizeof(a);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &al), 0);
	/* Fill the queue: connections never accepted. */
	int filler[4];
	for (int i = 0; i < 4; i++) {
		filler[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		(void)connect(filler[i], (struct sockaddr *)&a, sizeof(a));
	}
	usleep(100 * 1000);
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp:127.0.0.1:%d", ntohs(a.sin_port));
	mfma_client *c = NULL;
	struct mfma_error err;
	const uint64_t t0 = mfma_clock_ns();
	int rc = mfma_connect(ep, &c, &err);
	const double s = (double)(mfma_clock_ns() - t0) / 1e9;
	print_message("  connect to a full queue: %d after %.1f s: %s\n", rc, s, rc ? err.message : "");
	assert_int_equal(rc, -ETIMEDOUT); /* not refused: it waited, and gave up */
	assert_true(s < 20.0);
	for (int i = 0; i < 4; i++)
		close(filler[i]);
	close(l);
}

static void test_arguments(void **state)
{
	mfma_client *c = (mfma_client *)1;
	struct mfma_error err;
	int rc = mfma_connect("unix:/nonexistent-dir/mfmad.sock", &c, &err);
	assert_int_equal(rc, -ENOENT);
	assert_null(c);
	assert_int_equal(err.code, -ENOENT);
	assert_non_null(strstr(err.message, "unix:/nonexistent-dir/mfmad.sock"));
	assert_non_null(strstr(err.message, "is mfmad running?"));
	assert_int_equal(mfma_connect("tcp:nohost", &c, &err), -EINVAL);
	assert_non_null(strstr(err.message, "tcp:nohost"));

	/* NULL takes MFMA_ENDPOINT. */
	setenv("MFMA_ENDPOINT", "unix:/nonexistent-dir/from-env.sock", 1);
	assert_int_equal(mfma_connect(NULL, &c, &err), -ENOENT);
	assert_non_null(strstr(err.message, "from-env.sock"));
	unsetenv("MFMA_ENDPOINT");

	struct mfma_gemm_args a = MFMA_GEMM_ARGS_INIT;
	struct mfma_gemm_args b;
	mfma_gemm_args_init(&b);
	assert_true(a.alpha == b.alpha && a.beta == b.beta && a.device == b.device);
	assert_true(b.alpha == 1.0f && b.device == -1);

	struct fake *f = fake_start(state, script_idle, 0);
	assert_int_equal(mfma_connect(f->endpoint, &f->c, &err), 0);
	c = f->c;
	float x = 1;
	b.a.dense = (struct mfma_matrix){ 1, 1, MFMA_TYPE_F32, NULL, 4 };
	b.b = (struct mfma_matrix){ 1, 1, MFMA_TYPE_F32, &x, 4 };
	uint64_t id;
	assert_int_equal(mfma_gemm_submit(c, &b, &id, &err), -EINVAL);
	assert_string_equal(err.message, "a.data is NULL but a.bytes=4");
	b.a.dense.data = &x;
	b.b.dtype = (enum mfma_type)9;
	assert_int_equal(mfma_gemm_submit(c, &b, &id, &err), -EINVAL);
	assert_string_equal(err.message, "b.dtype=9 is not a known element type");
	b.b.dtype = MFMA_TYPE_F32;
	b.a.kind = MFMA_OPERAND_WEIGHT;
	b.a.weight = "";
	assert_int_equal(mfma_gemm_submit(c, &b, &id, &err), -EINVAL);
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	assert_int_equal(la.device, -1);
	la.name = "w";
	la.a.kind = MFMA_OPERAND_WEIGHT;
	la.a.weight = "other";
	assert_int_equal(mfma_load_weight(c, &la, NULL, &err), -EINVAL);
	assert_non_null(strstr(err.message, "cannot be loaded from another weight"));
	assert_int_equal(mfma_unload_weight(c, "", &err), -EINVAL);
	assert_int_equal(mfma_in_flight(c), 0);

	/* Destructors take NULL and zeroed structs. */
	mfma_close(NULL);
	mfma_gemm_result_free(NULL);
	mfma_status_free(&(struct mfma_status){ 0 });
	mfma_weight_list_free(&(struct mfma_weight_list){ 0 });
	mfma_load_result_free(NULL);
	assert_string_equal(mfma_code_name(42), "UNKNOWN");
	assert_string_equal(mfma_version(), MFMA_TEST_VERSION);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_out_of_order, fake_teardown),
		cmocka_unit_test_teardown(test_any_in_arrival_order, fake_teardown),
		cmocka_unit_test_teardown(test_blocking_d_after_timeout, fake_teardown),
		cmocka_unit_test_teardown(test_refused_with_d, fake_teardown),
		cmocka_unit_test_teardown(test_no_deadlock_with_large_frames, fake_teardown),
		cmocka_unit_test_teardown(test_errors, fake_teardown),
		cmocka_unit_test_teardown(test_answer_then_close, fake_teardown),
		cmocka_unit_test_teardown(test_timeout, fake_teardown),
		cmocka_unit_test_teardown(test_spin_keeps_timeout, fake_teardown),
		cmocka_unit_test(test_connect_bounded),
		cmocka_unit_test_teardown(test_hostile_answers, fake_teardown),
		cmocka_unit_test_teardown(test_region_and_bytes, fake_teardown),
		cmocka_unit_test_teardown(test_foreign_region, fake_teardown),
		cmocka_unit_test_teardown(test_flood_keeps_timeout, fake_teardown),
		cmocka_unit_test_teardown(test_burst_filed_without_waiting, fake_teardown),
		cmocka_unit_test_teardown(test_huge_frame_refused, fake_teardown),
		cmocka_unit_test_teardown(test_large_answer_taken, fake_teardown),
		cmocka_unit_test_teardown(test_arguments, fake_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
