/* Declared weights (weights.declare) against the real daemon: loaded at
 * start from .npy files, /readyz 503 while one has failed and 200 once all
 * are resident, SIGHUP adding, changing and removing declarations (a
 * client's own weight untouched), a bad or too large file refused with a
 * message that names it, clients kept off declared names, the
 * declaration winning over a stored copy in the state directory, and a
 * declaration removed and made again, or made, while a load of its name is
 * under way. */
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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "mfma.h"
#include "mfma_clock.h"
#include "npy.h"

enum { M = 16, K = 32, N = 8 };

static char dir[64];
static float b[K * N];

/* The M x K A of `seed`. */
static void fill_a(int seed, float *a)
{
	for (int i = 0; i < M * K; i++)
		a[i] = (float)((i * 7 + seed * 3) % 13) - 6.0f;
}

/* Writes an M x K f32 .npy whose values follow `seed`. */
static void write_npy(const char *name, int seed)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	float a[M * K];
	fill_a(seed, a);
	uint8_t hdr[NPY_HEADER_MAX];
	size_t hlen = npy_write_header(NPY_F4, M, K, hdr);
	/* Renamed in place, as a deployment would: a new inode. */
	char tmp[140];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(hdr, 1, hlen, f), hlen);
	assert_int_equal(fwrite(a, 1, sizeof(a), f), sizeof(a));
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rename(tmp, path), 0);
}

/* The reference: the same A sent with the request. */
static void expected(int seed, float *out)
{
	float a[M * K];
	fill_a(seed, a);
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			float s = 0;
			for (int k = 0; k < K; k++)
				s += a[i * K + k] * b[k * N + j];
			out[i * N + j] = s;
		}
}

static int gemm_on(mfma_client *c, const char *name, float *out, struct mfma_error *err)
{
	struct mfma_gemm_args g;
	mfma_gemm_args_init(&g);
	g.a.kind = MFMA_OPERAND_WEIGHT;
	g.a.weight = name;
	g.b = (struct mfma_matrix){ K, N, MFMA_TYPE_F32, b, sizeof(b) };
	struct mfma_gemm_result r;
	int rc = mfma_gemm(c, &g, &r, err);
	if (rc < 0)
		return rc;
	memcpy(out, r.d.data, sizeof(float) * M * N);
	mfma_gemm_result_free(&r);
	return 0;
}

static void check_weight(mfma_client *c, const char *name, int seed)
{
	float got[M * N], want[M * N];
	struct mfma_error err;
	if (gemm_on(c, name, got, &err) < 0)
		fail_msg("gemm on %s: %s", name, err.message);
	expected(seed, want);
	for (int i = 0; i < M * N; i++)
		if (got[i] != want[i])
			fail_msg("%s: D[%d] = %g, want %g (seed %d)", name, i, got[i], want[i], seed);
}

/* The HTTP status of GET /readyz. */
static int readyz(int port)
{
	char buf[512];
	return harness_http_get(port, "/readyz", buf, sizeof(buf));
}

/* The state of the declaration `name` in status (and its message). */
static enum mfma_declared_state declared_state(mfma_client *c, const char *name, char *msg,
					       size_t len)
{
	struct mfma_status st;
	struct mfma_error err;
	if (mfma_status(c, &st, &err) < 0)
		fail_msg("status: %s", err.message);
	enum mfma_declared_state s = MFMA_DECLARED_UNKNOWN;
	for (size_t i = 0; i < st.n_declared; i++)
		if (strcmp(st.declared[i].name, name) == 0) {
			s = st.declared[i].state;
			if (msg)
				snprintf(msg, len, "%s", st.declared[i].message);
		}
	mfma_status_free(&st);
	return s;
}

/* Waits (up to 10 s) for the declaration to reach `want`. */
static void wait_state(mfma_client *c, const char *name, enum mfma_declared_state want)
{
	uint64_t end = mfma_clock_ns() + 10000000000ull;
	while (declared_state(c, name, NULL, 0) != want) {
		if (mfma_clock_ns() > end)
			fail_msg("declared weight %s did not become state %d", name, (int)want);
		usleep(20000);
	}
}

static void write_conf(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_declare_reload(void **state)
{
	(void)state;
	char conf[1024], msg[1024], port_s[32];
	int port = harness_free_port();
	snprintf(port_s, sizeof(port_s), "127.0.0.1:%d", port);
	const char *args[] = { "--metrics", port_s, NULL };
	write_npy("one.npy", 1);
	write_npy("two.npy", 2);
	FILE *bad = fopen("/tmp/declare-test-bad.npy", "w");
	assert_non_null(bad);
	fputs("not numpy", bad);
	fclose(bad);
	snprintf(conf, sizeof(conf),
		 "weights = { declare = (\n"
		 "  { name = \"one\"; file = \"%s/one.npy\"; },\n"
		 "  { name = \"sp\"; file = \"%s/two.npy\"; sparse = \"prune\"; dtype = \"f16\"; },\n"
		 "  { name = \"bad\"; file = \"/tmp/declare-test-bad.npy\"; }\n"
		 "); };\n", dir, dir);
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, conf, args), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);

	/* At start: two resident, the bad one failed with its reason, not ready. */
	check_weight(c, "one", 1);
	assert_int_equal(declared_state(c, "sp", NULL, 0), MFMA_DECLARED_RESIDENT);
	assert_int_equal(declared_state(c, "bad", msg, sizeof(msg)), MFMA_DECLARED_FAILED);
	assert_non_null(strstr(msg, "/tmp/declare-test-bad.npy: not a .npy file"));
	assert_int_equal(readyz(port), 503);

	/* Clients keep off declared names; their own weights are theirs. */
	struct mfma_load_args la;
	float a[M * K] = { 0 };
	mfma_load_args_init(&la);
	la.name = "one";
	la.replace = true;
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a, sizeof(a) };
	assert_int_equal(mfma_load_weight(c, &la, NULL, &err), MFMA_EREMOTE(MFMA_CODE_ALREADY_EXISTS));
	assert_non_null(strstr(err.message, "weights.declare"));
	assert_int_equal(mfma_unload_weight(c, "one", &err), MFMA_EREMOTE(MFMA_CODE_INVALID_ARGUMENT));
	la.name = "mine";
	la.replace = false;
	assert_int_equal(mfma_load_weight(c, &la, NULL, &err), 0);

	/* SIGHUP: the bad file fixed, one's file changed, sp removed, three added. */
	write_npy("one.npy", 3);
	write_npy("bad.npy", 4);
	write_npy("three.npy", 5);
	snprintf(conf, sizeof(conf),
		 "weights = { declare = (\n"
		 "  { name = \"one\"; file = \"%s/one.npy\"; },\n"
		 "  { name = \"bad\"; file = \"%s/bad.npy\"; },\n"
		 "  { name = \"three\"; file = \"%s/three.npy\"; }\n"
		 "); };\n", dir, dir, dir);
	write_conf(d.conf, conf);
	kill(d.pid, SIGHUP);
	wait_state(c, "bad", MFMA_DECLARED_RESIDENT);
	wait_state(c, "three", MFMA_DECLARED_RESIDENT);
	uint64_t end = mfma_clock_ns() + 10000000000ull;
	for (;;) {
		float got[M * N], want[M * N];
		assert_int_equal(gemm_on(c, "one", got, &err), 0);
		expected(3, want);
		if (memcmp(got, want, sizeof(got)) == 0)
			break;
		if (mfma_clock_ns() > end)
			fail_msg("the changed file of 'one' was not loaded after SIGHUP");
		usleep(20000);
	}
	check_weight(c, "bad", 4);
	check_weight(c, "three", 5);
	float out[M * N];
	end = mfma_clock_ns() + 10000000000ull;
	while (gemm_on(c, "sp", out, &err) == 0) {
		if (mfma_clock_ns() > end)
			fail_msg("the removed declaration 'sp' was not unloaded");
		usleep(20000);
	}
	assert_int_equal(err.code, MFMA_CODE_NOT_FOUND);
	assert_int_equal(declared_state(c, "sp", NULL, 0), MFMA_DECLARED_UNKNOWN);
	assert_int_equal(gemm_on(c, "mine", out, &err), 0);
	assert_int_equal(readyz(port), 200);

	/* A file over limits.max_memory_mb is refused before it is read. */
	char big[128];
	snprintf(big, sizeof(big), "%s/big.npy", dir);
	FILE *f = fopen(big, "wb");
	assert_non_null(f);
	assert_int_equal(ftruncate(fileno(f), 17 << 20), 0);
	fclose(f);
	snprintf(conf, sizeof(conf),
		 "limits = { max_memory_mb = 16; };\n"
		 "weights = { declare = ( { name = \"one\"; file = \"%s/one.npy\"; },\n"
		 "  { name = \"big\"; file = \"%s\"; } ); };\n", dir, big);
	write_conf(d.conf, conf);
	kill(d.pid, SIGHUP);
	wait_state(c, "big", MFMA_DECLARED_FAILED);
	declared_state(c, "big", msg, sizeof(msg));
	assert_non_null(strstr(msg, "17825792 bytes, over the limit of 16777216"));
	assert_non_null(strstr(msg, "limits.max_memory_mb"));
	assert_int_equal(readyz(port), 503);
	printf("declare: start, failed (%s), SIGHUP add/change/remove, size limit: as expected\n",
	       "not ready");

	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
	unlink(big);
	unlink("/tmp/declare-test-bad.npy");
}

/* A declaration removed while its changed file is being read: the version
 * resident goes at once, and a client that then loads the name (it is no
 * longer declared) keeps its weight when the read ends.  The read was
 * undone by name, unloading the client's weight.  slow_fstat holds the
 * read 300 ms (the file's name asks for it). */
static void test_removed_while_read(void **state)
{
	(void)state;
	char conf[512];
	write_npy("mfma-slow-fstat.npy", 6);
	snprintf(conf, sizeof(conf),
		 "weights = { declare = ( { name = \"x\"; file = \"%s/mfma-slow-fstat.npy\"; } ); };",
		 dir);
	struct mfmad_proc d;
	int started = harness_start_slowed(&d, conf, NULL);
	if (started == 1) {
		print_message("  (MFMAD_TEST_SLOW_FSTAT not set: run through meson)\n");
		skip();
	}
	assert_int_equal(started, 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	check_weight(c, "x", 6);
	/* The file changed: read again, 300 ms in its fstat... */
	write_npy("mfma-slow-fstat.npy", 7);
	assert_int_equal(harness_reconfigure(&d, conf), 0);
	/* ...and the declaration removed meanwhile. */
	assert_int_equal(harness_reconfigure(&d, "weights = { declare = (); };"), 0);
	float out[M * N];
	assert_int_equal(gemm_on(c, "x", out, &err), MFMA_EREMOTE(MFMA_CODE_NOT_FOUND));
	float a[M * K];
	fill_a(8, a);
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "x";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a, sizeof(a) };
	if (mfma_load_weight(c, &la, NULL, &err) < 0)
		fail_msg("the client's load of x: %s", err.message);
	usleep(600 * 1000); /* the read ends */
	check_weight(c, "x", 8);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

/* The configuration that declares name from dir/file alone. */
static void declare_conf(char *buf, size_t len, const char *name, const char *file)
{
	snprintf(buf, len, "weights = { declare = ( { name = \"%s\"; file = \"%s/%s\"; } ); };",
		 name, dir, file);
}

/* Waits (up to 10 s) until the daemon's log holds s n times. */
static void wait_log(const struct mfmad_proc *d, const char *s, int n)
{
	uint64_t end = mfma_clock_ns() + 10000000000ull;
	while (harness_log_count(d, s) < n) {
		if (mfma_clock_ns() > end)
			fail_msg("the log did not say \"%s\" %d times", s, n);
		usleep(20000);
	}
}

/* A daemon whose every weight load takes 1 s (MFMAD_TEST_CPU_LOAD_MS)
 * serving conf, which declares name from file; once that is resident, file
 * is written again with `seed` and the daemon reloaded: the new load is
 * under way when this returns.  Its metrics port, and *c connected. */
static int start_reloading(struct mfmad_proc *d, const char *conf, const char *name,
			   const char *file, int seed, mfma_client **c)
{
	int port = harness_start_metrics(d, conf, "MFMAD_TEST_CPU_LOAD_MS", "1000");
	assert_true(port > 0);
	struct mfma_error err;
	assert_int_equal(mfma_connect(d->endpoint, c, &err), 0);
	wait_state(*c, name, MFMA_DECLARED_RESIDENT);
	write_npy(file, seed);
	assert_int_equal(harness_reconfigure(d, conf), 0);
	char loading[160];
	snprintf(loading, sizeof(loading), "declared weight '%s': loading", name);
	wait_log(d, loading, 2);
	return port;
}

/* A declaration removed while its load is under way, and the name
 * declared again (another file) before that load ends: the new entry
 * waits while the old one holds the name, and loads once that is over.
 * It stayed failed ("still loading", /readyz 503) until the next reload.
 * Every weight load waits 1 s (MFMAD_TEST_CPU_LOAD_MS) to hold the window
 * open. */
static void test_declared_again_while_loading(void **state)
{
	(void)state;
	char conf[512], again[512];
	write_npy("first.npy", 9);
	write_npy("second.npy", 10);
	declare_conf(conf, sizeof(conf), "y", "first.npy");
	declare_conf(again, sizeof(again), "y", "second.npy");
	struct mfmad_proc d;
	mfma_client *c;
	/* The file changes: its load (1 s) starts... */
	int port = start_reloading(&d, conf, "y", "first.npy", 11, &c);
	/* ...the declaration goes, and comes back naming another file. */
	assert_int_equal(harness_reconfigure(&d, "weights = { declare = (); };"), 0);
	assert_int_equal(harness_reconfigure(&d, again), 0);
	wait_log(&d, "waits for the load of that name under way", 1);
	wait_state(c, "y", MFMA_DECLARED_RESIDENT);
	check_weight(c, "y", 10);
	assert_int_equal(readyz(port), 200);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

struct client_load {
	const char *endpoint;
	const char *name;
	int seed;
	int rc;
	char msg[sizeof(((struct mfma_error *)0)->message)];
};

static void *client_load_run(void *arg)
{
	struct client_load *l = arg;
	float a[M * K];
	fill_a(l->seed, a);
	mfma_client *c;
	struct mfma_error err;
	l->rc = mfma_connect(l->endpoint, &c, &err);
	if (l->rc == 0) {
		struct mfma_load_args la;
		mfma_load_args_init(&la);
		la.name = l->name;
		la.a.kind = MFMA_OPERAND_DENSE;
		la.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a, sizeof(a) };
		l->rc = mfma_load_weight(c, &la, NULL, &err);
		mfma_close(c);
	}
	if (l->rc < 0)
		snprintf(l->msg, sizeof(l->msg), "%s", err.message);
	return NULL;
}

/* A name declared while a client's load of it is under way: the
 * declaration waits (loading, /readyz 503) while that load holds the name,
 * and loads once it is over, replacing the client's weight.  It stayed
 * failed ("still loading") until the next reload. */
static void test_declared_while_a_client_loads(void **state)
{
	(void)state;
	char conf[512];
	write_npy("fourth.npy", 15);
	declare_conf(conf, sizeof(conf), "u", "fourth.npy");
	struct mfmad_proc d;
	int port = harness_start_metrics(&d, NULL, "MFMAD_TEST_CPU_LOAD_MS", "1000");
	assert_true(port > 0);
	struct client_load l = { .endpoint = d.endpoint, .name = "u", .seed = 16 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, client_load_run, &l), 0);
	uint64_t end = mfma_clock_ns() + 10000000000ull;
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	/* The client's load is under way once status counts a request held
	 * (each load takes 1 s). */
	for (;;) {
		struct mfma_status st;
		assert_int_equal(mfma_status(c, &st, &err), 0);
		bool loading = st.counters.in_flight > 0;
		mfma_status_free(&st);
		if (loading)
			break;
		if (mfma_clock_ns() > end)
			fail_msg("the client's load did not start");
		usleep(5000);
	}
	assert_int_equal(harness_reconfigure(&d, conf), 0);
	wait_log(&d, "waits for the load of that name under way", 1);
	char msg[1024];
	assert_int_equal(declared_state(c, "u", msg, sizeof(msg)), MFMA_DECLARED_LOADING);
	assert_non_null(strstr(msg, "waiting for the load of weight 'u'"));
	assert_int_equal(readyz(port), 503);
	assert_int_equal(pthread_join(t, NULL), 0);
	if (l.rc < 0)
		fail_msg("the client's load: %s", l.msg);
	wait_state(c, "u", MFMA_DECLARED_RESIDENT);
	check_weight(c, "u", 15);
	assert_int_equal(readyz(port), 200);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

/* A client's weight under a name then declared from a file that cannot be
 * read, and the declaration removed: the client's weight stays.  The
 * removal unloaded it, though the declaration never made it, and left its
 * stored copy to come back at the next start. */
static void test_failed_declaration_removed(void **state)
{
	(void)state;
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, NULL, NULL), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	float a[M * K];
	fill_a(12, a);
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "z";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a, sizeof(a) };
	assert_int_equal(mfma_load_weight(c, &la, NULL, &err), 0);
	char conf[256], msg[1024];
	declare_conf(conf, sizeof(conf), "z", "absent.npy");
	assert_int_equal(harness_reconfigure(&d, conf), 0);
	wait_state(c, "z", MFMA_DECLARED_FAILED);
	assert_int_equal(declared_state(c, "z", msg, sizeof(msg)), MFMA_DECLARED_FAILED);
	assert_non_null(strstr(msg, "the previous version still serves"));
	check_weight(c, "z", 12);
	assert_int_equal(harness_reconfigure(&d, "weights = { declare = (); };"), 0);
	check_weight(c, "z", 12);
	/* And it is the client's again. */
	assert_int_equal(mfma_unload_weight(c, "z", &err), 0);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

/* A declaration removed while its load is under way, and declared again
 * from a file that cannot be read: the removed entry's load ends, its
 * weight kept for the name's new declaration.  Removing that one unloads
 * it: it is a declaration's weight.  It stayed, serving the old file with
 * nothing declaring it ("never became resident"). */
static void test_kept_load_goes_with_the_new_declaration(void **state)
{
	(void)state;
	char conf[512], bad[512];
	write_npy("third.npy", 13);
	declare_conf(conf, sizeof(conf), "v", "third.npy");
	declare_conf(bad, sizeof(bad), "v", "absent.npy");
	struct mfmad_proc d;
	mfma_client *c;
	(void)start_reloading(&d, conf, "v", "third.npy", 14, &c);
	assert_int_equal(harness_reconfigure(&d, "weights = { declare = (); };"), 0);
	assert_int_equal(harness_reconfigure(&d, bad), 0);
	wait_state(c, "v", MFMA_DECLARED_FAILED);
	wait_log(&d, "declared weight 'v' resident from", 2); /* the removed entry's load */
	check_weight(c, "v", 14);
	assert_int_equal(harness_reconfigure(&d, "weights = { declare = (); };"), 0);
	float out[M * N];
	struct mfma_error err;
	assert_int_equal(gemm_on(c, "v", out, &err), MFMA_EREMOTE(MFMA_CODE_NOT_FOUND));
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

/* A weight a client loaded (stored in the state directory) under a name
 * that is then declared: after a restart the declared file serves and the
 * stored copy is gone. */
static void test_declaration_wins_over_state_dir(void **state)
{
	(void)state;
	char conf[1024], path[160];
	snprintf(path, sizeof(path), "%s/state", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(conf, sizeof(conf), "weights = { state_dir = \"%s/state\"; };", dir);
	struct mfmad_proc d;
	assert_int_equal(harness_start(&d, conf, NULL), 0);
	mfma_client *c;
	struct mfma_error err;
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	float a[M * K];
	for (int i = 0; i < M * K; i++)
		a[i] = (float)((i * 7 + 6 * 3) % 13) - 6.0f; /* seed 6 */
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "shared";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a, sizeof(a) };
	assert_int_equal(mfma_load_weight(c, &la, NULL, &err), 0);
	check_weight(c, "shared", 6);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
	snprintf(path, sizeof(path), "%s/state/weights/shared.mfw", dir);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);

	write_npy("shared.npy", 7);
	snprintf(conf, sizeof(conf),
		 "weights = { state_dir = \"%s/state\";\n"
		 "  declare = ( { name = \"shared\"; file = \"%s/shared.npy\"; } ); };", dir, dir);
	assert_int_equal(harness_start(&d, conf, NULL), 0);
	assert_int_equal(mfma_connect(d.endpoint, &c, &err), 0);
	check_weight(c, "shared", 7);
	assert_int_equal(stat(path, &st), -1);
	mfma_close(c);
	assert_int_equal(harness_stop(&d), 0);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (size_t i = 0; i < K * N; i++)
		b[i] = (float)((i * 5) % 11) / 4.0f - 1.0f;
	snprintf(dir, sizeof(dir), "/tmp/mfmad-declare-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_declare_reload),
		cmocka_unit_test(test_declaration_wins_over_state_dir),
		cmocka_unit_test(test_removed_while_read),
		cmocka_unit_test(test_declared_again_while_loading),
		cmocka_unit_test(test_declared_while_a_client_loads),
		cmocka_unit_test(test_failed_declaration_removed),
		cmocka_unit_test(test_kept_load_goes_with_the_new_declaration),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	(void)!system(cmd);
	return rc;
}
