/* Authentication beyond the Unix socket (issue 12, attack 5), against the
 * real daemon: a TCP listener with listen.token_file serves only clients
 * that send its token first; a remote TCP listener without a token is
 * refused at start, also when socket activation hands it over; the Unix
 * socket checks the peer's uid against listen.unix_users/unix_group. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "mfma.h"
#include "harness.h"
#include "sdtest.h"

#define TOKEN "s3cret-token-of-32-bytes-0123456"

struct run {
	char dir[64], conf[96], log[96], sock[96], token[96];
	pid_t pid;
	int port;
};

static const char *env_or_empty(const char *name)
{
	const char *v = getenv(name);
	return v ? v : "";
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	fchmod(fd, mode);
	close(fd);
}

static void run_init(struct run *r)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->dir, "/tmp/mfmad-auth-XXXXXX");
	assert_non_null(mkdtemp(r->dir));
	snprintf(r->conf, sizeof(r->conf), "%s/mfmad.conf", r->dir);
	snprintf(r->log, sizeof(r->log), "%s/mfmad.log", r->dir);
	snprintf(r->sock, sizeof(r->sock), "%s/mfmad.sock", r->dir);
	snprintf(r->token, sizeof(r->token), "%s/token", r->dir);
	write_file(r->token, TOKEN "\n", 0600);
	r->port = harness_free_port();
}

static pid_t spawn(struct run *r, const char *conf)
{
	write_file(r->conf, conf, 0644);
	const char *argv[] = { env_or_empty("MFMAD_BIN"), "--config", r->conf, "--socket", r->sock,
			       "--log-level", "debug", NULL };
	return sdtest_spawn(argv, NULL, r->log);
}

static void run_stop(struct run *r)
{
	if (r->pid > 0) {
		kill(r->pid, SIGTERM);
		int st = sdtest_wait_exit(r->pid, 30000);
		if (st != 0)
			sdtest_print_file(r->log);
		assert_int_equal(st, 0);
	}
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", r->dir);
	(void)!system(cmd);
}

static mfma_client *connect_tcp(const struct run *r)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "tcp:127.0.0.1:%d", r->port);
	mfma_client *c = NULL;
	struct mfma_error err;
	for (int i = 0; i < 400 && mfma_connect(ep, &c, &err) < 0; i++)
		usleep(25000);
	assert_non_null(c);
	mfma_set_timeout(c, 5000);
	return c;
}

static void test_tcp_token(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	char conf[512];
	snprintf(conf, sizeof(conf), "listen = { tcp = true; tcp_port = %d; token_file = \"%s\"; };",
		 r.port, r.token);
	r.pid = spawn(&r, conf);
	struct mfma_error err;

	/* No token: the request is not served. */
	mfma_client *c = connect_tcp(&r);
	int rc = mfma_ping(c, "x", 1, NULL, &err);
	printf("no token: %d \"%s\"\n", rc, err.message);
	assert_true(rc < 0);
	assert_non_null(strstr(err.message, "listen.token_file"));
	mfma_close(c);

	/* A wrong token of the right length. */
	c = connect_tcp(&r);
	rc = mfma_authenticate(c, "s3cret-token-of-32-bytes-0123457", 32, &err);
	printf("wrong token: %d \"%s\"\n", rc, err.message);
	assert_true(rc < 0);
	mfma_close(c);

	/* The right one, then requests as usual. */
	c = connect_tcp(&r);
	rc = mfma_authenticate(c, TOKEN, strlen(TOKEN), &err);
	if (rc < 0)
		fail_msg("right token refused: %s", err.message);
	assert_int_equal(mfma_ping(c, "abc", 3, NULL, &err), 0);
	mfma_close(c);

	/* mfmactl: --token-file and $MFMA_TOKEN_FILE. */
	const char *ctl = env_or_empty("MFMACTL_BIN");
	if (ctl[0]) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "%s -e tcp:127.0.0.1:%d --token-file %s status >/dev/null",
			 ctl, r.port, r.token);
		assert_int_equal(system(cmd), 0);
		snprintf(cmd, sizeof(cmd),
			 "MFMA_TOKEN_FILE=%s %s -e tcp:127.0.0.1:%d status >/dev/null", r.token, ctl,
			 r.port);
		assert_int_equal(system(cmd), 0);
		snprintf(cmd, sizeof(cmd), "%s -e tcp:127.0.0.1:%d status >/dev/null 2>&1", ctl,
			 r.port);
		assert_int_not_equal(system(cmd), 0);
	}

	/* The Unix socket asks for no token. */
	char ep[128];
	snprintf(ep, sizeof(ep), "unix:%s", r.sock);
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	assert_int_equal(mfma_ping(c, "x", 1, NULL, &err), 0);
	mfma_close(c);

	/* 50 failures in a burst: logged at most once a second. */
	for (int i = 0; i < 50; i++) {
		c = connect_tcp(&r);
		(void)mfma_ping(c, "x", 1, NULL, &err);
		mfma_close(c);
	}
	FILE *f = fopen(r.log, "r");
	char line[1024];
	int lines = 0;
	while (f && fgets(line, sizeof(line), f))
		lines += strstr(line, "refused: this listener takes a token") != NULL;
	fclose(f);
	printf("53 unauthenticated connections, %d log line(s)\n", lines);
	assert_true(lines >= 1 && lines <= 4);

	/* SIGHUP reads the token file again: the new token is taken, the old
	 * one no longer; a token file made unusable keeps the new one. */
	const char *newer = "a-newer-token-of-issue-12-tls";
	write_file(r.token, "a-newer-token-of-issue-12-tls\n", 0600);
	assert_int_equal(harness_reload(r.pid, r.log, 10000), 0);
	c = connect_tcp(&r);
	assert_true(mfma_authenticate(c, TOKEN, strlen(TOKEN), &err) < 0);
	mfma_close(c);
	c = connect_tcp(&r);
	if (mfma_authenticate(c, newer, strlen(newer), &err) < 0)
		fail_msg("the token read on SIGHUP was refused: %s", err.message);
	mfma_close(c);
	write_file(r.token, "short\n", 0600);
	assert_int_equal(harness_reload(r.pid, r.log, 10000), 0);
	assert_true(sdtest_file_contains(r.log, "reload: listen.token_file"));
	c = connect_tcp(&r);
	assert_int_equal(mfma_authenticate(c, newer, strlen(newer), &err), 0);
	mfma_close(c);
	run_stop(&r);
}

/* A reload whose file drops listen.token_file keeps the token (whether
 * there is one is fixed at start, and the reload says so), and a later
 * reload that brings it back reads the file again.  The dropped name was
 * taken as the running one: every later reload then warned of a change
 * needing a restart and never read the token again. */
static void test_token_file_dropped_by_reload(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	char conf[512];
	snprintf(conf, sizeof(conf), "listen = { tcp = true; tcp_port = %d; token_file = \"%s\"; };",
		 r.port, r.token);
	r.pid = spawn(&r, conf);
	struct mfma_error err;
	mfma_client *c = connect_tcp(&r);
	if (mfma_authenticate(c, TOKEN, strlen(TOKEN), &err) < 0)
		fail_msg("token refused: %s", err.message);
	mfma_close(c);
	char dropped[256];
	snprintf(dropped, sizeof(dropped), "listen = { tcp = true; tcp_port = %d; };", r.port);
	write_file(r.conf, dropped, 0644);
	assert_int_equal(harness_reload(r.pid, r.log, 10000), 0);
	assert_true(sdtest_file_contains(r.log, "that needs a restart, kept the running values"));
	/* Still asked for, still the same. */
	c = connect_tcp(&r);
	assert_true(mfma_ping(c, "x", 1, NULL, &err) < 0);
	mfma_close(c);
	c = connect_tcp(&r);
	assert_int_equal(mfma_authenticate(c, TOKEN, strlen(TOKEN), &err), 0);
	mfma_close(c);
	/* Back in the file, with a new token: read again. */
	const char *newer = "the-token-after-the-file-came-back";
	write_file(r.token, "the-token-after-the-file-came-back\n", 0600);
	write_file(r.conf, conf, 0644);
	assert_int_equal(harness_reload(r.pid, r.log, 10000), 0);
	c = connect_tcp(&r);
	if (mfma_authenticate(c, newer, strlen(newer), &err) < 0)
		fail_msg("the token read on the second reload was refused: %s", err.message);
	mfma_close(c);
	assert_int_equal(sdtest_file_count(r.log, "that needs a restart, kept the running values"), 1);
	run_stop(&r);
}

/* Whether the peer closed fd within timeout_ms (whatever it wrote before). */
static bool closed_within(int fd, int timeout_ms)
{
	char buf[512];
	for (int waited = 0; waited < timeout_ms; waited += 50) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) == 1) {
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n <= 0)
				return true;
		}
	}
	return false;
}

/* Waits up to 10 s for the daemon's /metrics on metrics_port to count
 * `total` client connections accepted and `open` of them open.  A
 * connect() returns once the kernel has queued it, which can be before the
 * loop has accepted it, and a close can be counted later still; a test
 * that fills max_connections has to know the daemon has seen both. */
static void wait_connections(int metrics_port, long long total, long long open)
{
	long long t = -1, o = -1;
	for (int i = 0; i < 1000; i++) {
		if (i)
			usleep(10000);
		t = harness_metric(metrics_port, "mfmad_connections_total");
		o = harness_metric(metrics_port, "mfmad_connections_open");
		if (t == total && o == open)
			return;
	}
	fail_msg("/metrics says %lld connection(s) accepted and %lld open, not %lld and %lld", t, o,
		 total, open);
}

/* Connections that never send the token are closed after
 * limits.read_timeout_ms, not idle_timeout_ms: they hold slots of
 * limits.max_connections, which the Unix socket's clients share.  The
 * deadline is 2 s so that the Unix client's refusal is seen before it on
 * a loaded machine (at 500 ms a CI run whose cores were shared saw the
 * four closed first). */
static void test_token_deadline(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	int metrics_port = harness_free_port();
	assert_true(metrics_port > 0 && metrics_port != r.port);
	char conf[512];
	snprintf(conf, sizeof(conf),
		 "listen = { tcp = true; tcp_port = %d; token_file = \"%s\"; };\n"
		 "limits = { read_timeout_ms = 2000; max_connections = 4; };\n"
		 "metrics = { enabled = true; port = %d; };",
		 r.port, r.token, metrics_port);
	r.pid = spawn(&r, conf);
	mfma_client *c = connect_tcp(&r); /* up: the listener accepts */
	mfma_close(c);
	wait_connections(metrics_port, 1, 0);
	int fds[4];
	for (int i = 0; i < 4; i++)
		assert_true((fds[i] = sdtest_connect_tcp(r.port, 5000)) >= 0);
	wait_connections(metrics_port, 5, 4);
	/* Every slot held: the Unix socket is refused too. */
	char ep[128];
	snprintf(ep, sizeof(ep), "unix:%s", r.sock);
	struct mfma_error err;
	int rc = mfma_connect(ep, &c, &err);
	if (rc == 0)
		rc = mfma_ping(c, "x", 1, NULL, &err);
	mfma_close(c);
	assert_true(rc < 0);
	/* Until the deadline closes them (the tick runs every second). */
	for (int i = 0; i < 4; i++) {
		assert_true(closed_within(fds[i], 8000));
		close(fds[i]);
	}
	assert_true(sdtest_file_contains(r.log, "none came within 2000 ms (limits.read_timeout_ms)"));
	assert_int_equal(mfma_connect(ep, &c, &err), 0);
	assert_int_equal(mfma_ping(c, "x", 1, NULL, &err), 0);
	mfma_close(c);
	run_stop(&r);
}

/* The daemon exits 1 at start, saying why. */
static void expect_refused_start(struct run *r, pid_t pid, const char *want)
{
	assert_true(sdtest_exits_saying(pid, 1, r->log, want));
}

static void test_remote_tcp_without_token_refused(void **state)
{
	(void)state;
	struct run r;
	run_init(&r);
	char conf[512];
	snprintf(conf, sizeof(conf),
		 "listen = { tcp = true; tcp_address = \"0.0.0.0\"; tcp_port = %d; "
		 "tcp_allow_remote = true; };",
		 r.port);
	expect_refused_start(&r, spawn(&r, conf), "without a credential");
	/* A token file others can read is refused too. */
	chmod(r.token, 0644);
	snprintf(conf, sizeof(conf),
		 "listen = { tcp = true; tcp_address = \"0.0.0.0\"; tcp_port = %d; "
		 "tcp_allow_remote = true; token_file = \"%s\"; };",
		 r.port, r.token);
	expect_refused_start(&r, spawn(&r, conf), "may be read by any user");
	run_stop(&r);
}

static void test_activated_remote_tcp_refused(void **state)
{
	(void)state;
	const char *act = env_or_empty("SOCKET_ACTIVATE");
	if (!act[0]) {
		print_message("systemd-socket-activate not found; skipped\n");
		skip();
	}
	struct run r;
	run_init(&r);
	write_file(r.conf, "", 0644);
	char listen[32];
	snprintf(listen, sizeof(listen), "0.0.0.0:%d", r.port);
	const char *argv[] = { act, "-l", listen, env_or_empty("MFMAD_BIN"), "--config", r.conf,
			       NULL };
	pid_t pid = sdtest_spawn(argv, NULL, r.log);
	/* The first connection starts mfmad on the activated socket. */
	int fd = sdtest_connect_tcp(r.port, 5000);
	assert_true(fd >= 0);
	expect_refused_start(&r, pid, "socket activation: activated tcp socket (fd 3) listens on "
				      "0.0.0.0");
	close(fd);
	run_stop(&r);
}

/* Connects to ep once the daemon there accepts (up to 10 s) and pings. */
static void ping_once_up(const char *ep)
{
	mfma_client *c = NULL;
	struct mfma_error err;
	for (int i = 0; i < 400 && mfma_connect(ep, &c, &err) < 0; i++)
		usleep(25000);
	assert_non_null(c);
	assert_int_equal(mfma_ping(c, "x", 1, NULL, &err), 0);
	mfma_close(c);
}

/* The peer's uid against listen.unix_users: only as root can the test
 * connect as another user. */
static void test_unix_peer_check(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		print_message("not root: cannot connect as another user; skipped\n");
		skip();
	}
	struct run r;
	run_init(&r);
	chmod(r.dir, 0755);
	r.pid = spawn(&r, "listen = { unix_mode = \"0666\"; unix_users = \"12345\"; };");
	char ep[128];
	snprintf(ep, sizeof(ep), "unix:%s", r.sock);
	ping_once_up(ep); /* root always passes */
	int uids[2] = { 12345, 23456 };
	for (int i = 0; i < 2; i++) {
		int pfd[2];
		assert_int_equal(pipe(pfd), 0);
		pid_t child = fork();
		if (child == 0) {
			close(pfd[0]);
			if (setgid(65534) < 0 || setuid((uid_t)uids[i]) < 0)
				_exit(2);
			mfma_client *cc;
			struct mfma_error e;
			int rc = mfma_connect(ep, &cc, &e);
			if (rc == 0)
				rc = mfma_ping(cc, "x", 1, NULL, &e);
			dprintf(pfd[1], "%s", rc == 0 ? "ok" : e.message);
			_exit(rc == 0 ? 0 : 1);
		}
		close(pfd[1]);
		char msg[512] = "";
		ssize_t n = read(pfd[0], msg, sizeof(msg) - 1);
		msg[n > 0 ? n : 0] = '\0';
		close(pfd[0]);
		int st;
		waitpid(child, &st, 0);
		printf("uid %d: %s\n", uids[i], msg);
		if (i == 0)
			assert_int_equal(WEXITSTATUS(st), 0);
		else
			assert_non_null(strstr(msg, "uid 23456"));
	}
	run_stop(&r);
}

/* listen.unix_users in a user namespace that maps only root (unshare
 * --map-root-user, as systemd's PrivateUsers=true maps only root and the
 * service's user): the kernel shows every other peer as uid 65534, so the
 * check cannot work, and the daemon refuses to start saying so.  It
 * started, refused the users it was to admit, and admitted every user
 * were "nobody" listed. */
static void test_peer_check_in_user_namespace(void **state)
{
	(void)state;
	const char *unshare = access("/usr/bin/unshare", X_OK) == 0 ? "/usr/bin/unshare" : "/bin/unshare";
	if (system("unshare --user --map-root-user true 2>/dev/null") != 0 || access(unshare, X_OK) != 0) {
		print_message("no user namespaces here (unshare --user); skipped\n");
		skip();
	}
	struct run r;
	run_init(&r);
	write_file(r.conf, "listen = { unix_users = \"12345\"; };", 0644);
	const char *argv[] = { unshare, "--user", "--map-root-user", env_or_empty("MFMAD_BIN"),
			       "--config", r.conf, "--socket", r.sock, NULL };
	expect_refused_start(&r, sdtest_spawn(argv, NULL, r.log), "user namespace that does not map");
	/* Without the check, the same namespace serves. */
	write_file(r.conf, "log_level = \"info\";", 0644);
	r.pid = sdtest_spawn(argv, NULL, r.log);
	char ep[128];
	snprintf(ep, sizeof(ep), "unix:%s", r.sock);
	ping_once_up(ep);
	run_stop(&r);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp_token),
		cmocka_unit_test(test_token_file_dropped_by_reload),
		cmocka_unit_test(test_token_deadline),
		cmocka_unit_test(test_remote_tcp_without_token_refused),
		cmocka_unit_test(test_activated_remote_tcp_refused),
		cmocka_unit_test(test_unix_peer_check),
		cmocka_unit_test(test_peer_check_in_user_namespace),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
