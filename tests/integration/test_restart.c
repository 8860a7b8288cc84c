/* Issue 12's restart test: a daemon killed with -9 under load and started
 * again by socket activation comes back with its weights (one persisted
 * in the state directory, one declared in the configuration), and a
 * client that kept sending through it sees 0 errors and 0 lost requests.
 *
 * What plays systemd's part: this test.  It creates and binds the Unix
 * listening socket itself and keeps it open for the whole test, as
 * systemd keeps a .socket unit's socket; it starts mfmad with that socket
 * as fd 3 and LISTEN_FDS=1, LISTEN_PID=<mfmad's pid> (set in the child
 * between fork and exec, as systemd does), kills it with SIGKILL while the
 * client is sending, and starts it again on the same socket.  Connections
 * made while no daemon runs wait in the socket's backlog, as they would
 * under systemd.  (systemd-socket-activate cannot do this: it execs the
 * daemon, so its socket dies with it.)
 *
 * The client is the real libmfmaclient on one endpoint: pipelined
 * mfma_gemm_submit (8 in flight) and blocking mfma_gemm calls, every
 * result checked exactly against a reference (integer-valued data, so f32
 * sums are exact), every submitted id completed exactly once; then the
 * same with the client corked (mfma_cork), its submits held until each
 * wait writes them. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "mfma.h"
#include "mfma_clock.h"
#include "npy.h"

enum { M = 16, K = 32, N = 8, WINDOW = 8, KILLS = 2 };

static char dir[64], sock[96], conf[128], logf[128], state_dir[128];
static float a_kept[M * K], a_decl[M * K], b[K * N], d_kept[M * N], d_decl[M * N];
static int lfd = -1;
static volatile pid_t daemon_pid;

static void fill(float *a, int seed)
{
	for (int i = 0; i < M * K; i++)
		a[i] = (float)((i * 7 + seed * 3) % 13) - 6.0f;
}

static void reference(const float *a, float *d)
{
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			float s = 0;
			for (int k = 0; k < K; k++)
				s += a[i * K + k] * b[k * N + j];
			d[i * N + j] = s;
		}
}

/* Starts mfmad on the socket this test holds, as systemd would. */
static pid_t spawn_activated(void)
{
	const char *bin = getenv("MFMAD_BIN");
	assert_non_null(bin);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char pidbuf[32];
		int log = open(logf, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (log < 0 || dup2(log, STDERR_FILENO) < 0 || dup2(lfd, 3) < 0)
			_exit(127);
		snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
		setenv("LISTEN_PID", pidbuf, 1);
		setenv("LISTEN_FDS", "1", 1);
		execl(bin, bin, "--config", conf, "--log-level", "info", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void *killer(void *arg)
{
	(void)arg;
	for (int i = 0; i < KILLS; i++) {
		usleep(600 * 1000);
		pid_t pid = daemon_pid;
		kill(pid, SIGKILL);
		int st;
		waitpid(pid, &st, 0);
		if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
			fprintf(stderr, "mfmad did not die of SIGKILL\n");
		/* A restart takes a moment under systemd too. */
		usleep(100 * 1000);
		daemon_pid = spawn_activated();
		fprintf(stderr, "killed mfmad -9 and started it again (pid %d)\n", (int)daemon_pid);
	}
	return NULL;
}

static void args_on(struct mfma_gemm_args *g, const char *weight)
{
	mfma_gemm_args_init(g);
	g->a.kind = MFMA_OPERAND_WEIGHT;
	g->a.weight = weight;
	g->b = (struct mfma_matrix){ K, N, MFMA_TYPE_F32, b, sizeof(b) };
}

static bool result_ok(const struct mfma_gemm_result *r, const float *want)
{
	return r->d.rows == M && r->d.cols == N && r->d.bytes == sizeof(float) * M * N &&
	       memcmp(r->d.data, want, sizeof(float) * M * N) == 0;
}

/* corked: the client holds its submits (mfma_cork) and writes them with
 * each wait, so that kills also land while requests are held. */
static void kill9_under_load(bool corked)
{
	struct mfma_error err;
	mfma_client *c = NULL;
	char endpoint[160];
	snprintf(endpoint, sizeof(endpoint), "unix:%s", sock);

	daemon_pid = spawn_activated();
	/* The socket exists before the daemon: connecting succeeds at once,
	 * the first answer says the daemon is up. */
	assert_int_equal(mfma_connect(endpoint, &c, &err), 0);
	assert_int_equal(mfma_ping(c, NULL, 0, NULL, &err), 0);
	struct mfma_load_args la;
	mfma_load_args_init(&la);
	la.name = "kept";
	la.a.kind = MFMA_OPERAND_DENSE;
	la.a.dense = (struct mfma_matrix){ M, K, MFMA_TYPE_F32, a_kept, sizeof(a_kept) };
	/* A second run finds it in the state directory. */
	int lrc = mfma_load_weight(c, &la, NULL, &err);
	if (lrc < 0 && lrc != MFMA_EREMOTE(MFMA_CODE_ALREADY_EXISTS))
		fail_msg("load: %s", err.message);
	if (corked)
		mfma_cork(c);

	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, killer, NULL), 0);
	uint64_t end = mfma_clock_ns() + (uint64_t)(KILLS * 700 + 1500) * 1000000ull;
	uint64_t submitted = 0, completed = 0, blocking = 0, errors = 0, wrong = 0;
	/* Which weight each id went to, for the check and exactly-once. */
	size_t cap = (size_t)1 << 23;
	uint8_t *which = calloc(cap, 1); /* 0 none, 1 kept, 2 decl, 3 done */
	assert_non_null(which);
	while (mfma_clock_ns() < end || mfma_in_flight(c) > 0) {
		while (mfma_clock_ns() < end && mfma_in_flight(c) < WINDOW) {
			struct mfma_gemm_args g;
			uint64_t id;
			int w = (int)(submitted % 2);
			args_on(&g, w ? "decl" : "kept");
			if (mfma_gemm_submit(c, &g, &id, &err) < 0) {
				fprintf(stderr, "submit: %s\n", err.message);
				errors++;
				break;
			}
			assert_true(id < cap);
			which[id] = (uint8_t)(w + 1);
			submitted++;
		}
		if (mfma_in_flight(c) == 0)
			continue;
		struct mfma_gemm_result r;
		uint64_t done = 0;
		int rc = mfma_wait(c, MFMA_ANY, 10000, &done, &r, &err);
		if (rc < 0) {
			fprintf(stderr, "wait: %s\n", err.message);
			errors++;
			if (!done)
				break;
			continue;
		}
		assert_true(done < cap);
		if (which[done] != 1 && which[done] != 2)
			fail_msg("id %llu completed twice or never submitted", (unsigned long long)done);
		wrong += !result_ok(&r, which[done] == 1 ? d_kept : d_decl);
		which[done] = 3;
		completed++;
		mfma_gemm_result_free(&r);
		/* And a blocking call now and then, through the same client. */
		if (completed % 16 == 0) {
			struct mfma_gemm_args g;
			args_on(&g, completed % 32 ? "kept" : "decl");
			if (mfma_gemm(c, &g, &r, &err) < 0) {
				fprintf(stderr, "gemm: %s\n", err.message);
				errors++;
			} else {
				wrong += !result_ok(&r, completed % 32 ? d_kept : d_decl);
				blocking++;
				mfma_gemm_result_free(&r);
			}
		}
	}
	pthread_join(t, NULL);
	uint64_t lost = 0;
	for (size_t i = 0; i < cap; i++)
		lost += which[i] == 1 || which[i] == 2;
	free(which);
	if (corked)
		assert_int_equal(mfma_uncork(c, &err), 0);
	printf("kill -9 x%d under load%s: %llu pipelined submitted, %llu completed, %llu blocking, "
	       "%llu errors, %llu lost, %llu wrong\n", KILLS, corked ? ", corked" : "",
	       (unsigned long long)submitted,
	       (unsigned long long)completed, (unsigned long long)blocking,
	       (unsigned long long)errors, (unsigned long long)lost, (unsigned long long)wrong);
	assert_int_equal(errors, 0);
	assert_int_equal(lost, 0);
	assert_int_equal(wrong, 0);
	assert_int_equal(completed, submitted);
	assert_true(submitted > 0);

	/* Both weights came back with the last restart. */
	struct mfma_weight_list l;
	assert_int_equal(mfma_list_weights(c, &l, &err), 0);
	assert_int_equal(l.n_weights, 2);
	mfma_weight_list_free(&l);
	mfma_close(c);
	kill(daemon_pid, SIGTERM);
	int st;
	waitpid(daemon_pid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_kill9_under_load(void **state)
{
	(void)state;
	kill9_under_load(false);
}

static void test_kill9_under_load_corked(void **state)
{
	(void)state;
	kill9_under_load(true);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < K * N; i++)
		b[i] = (float)((i * 5) % 11) - 5.0f;
	fill(a_kept, 1);
	fill(a_decl, 2);
	reference(a_kept, d_kept);
	reference(a_decl, d_decl);
	snprintf(dir, sizeof(dir), "/tmp/mfmad-restart-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(sock, sizeof(sock), "%s/mfmad.sock", dir);
	snprintf(conf, sizeof(conf), "%s/mfmad.conf", dir);
	snprintf(logf, sizeof(logf), "%s/mfmad.log", dir);
	snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
	mkdir(state_dir, 0700);
	char npy[160];
	snprintf(npy, sizeof(npy), "%s/decl.npy", dir);
	uint8_t hdr[NPY_HEADER_MAX];
	size_t hlen = npy_write_header(NPY_F4, M, K, hdr);
	FILE *f = fopen(npy, "wb");
	if (!f || fwrite(hdr, 1, hlen, f) != hlen || fwrite(a_decl, 1, sizeof(a_decl), f) != sizeof(a_decl))
		return 1;
	fclose(f);
	f = fopen(conf, "w");
	if (!f)
		return 1;
	fprintf(f, "weights = { state_dir = \"%s\";\n  declare = ( { name = \"decl\"; file = \"%s\"; } ); };\n",
		state_dir, npy);
	fclose(f);

	lfd = socket(AF_UNIX, SOCK_STREAM, 0); /* no CLOEXEC: the daemon inherits it */
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 128) < 0)
		return 1;
	signal(SIGPIPE, SIG_IGN);

	const struct CMUnitTest tests[] = { cmocka_unit_test(test_kill9_under_load),
					    cmocka_unit_test(test_kill9_under_load_corked) };
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	if (rc != 0) {
		if (daemon_pid > 0)
			kill(daemon_pid, SIGKILL);
		char cmd[200];
		snprintf(cmd, sizeof(cmd), "cat %s >&2", logf);
		(void)!system(cmd);
	}
	close(lfd);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	(void)!system(cmd);
	return rc;
}
