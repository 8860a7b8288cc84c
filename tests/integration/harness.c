#include "harness.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Daemons started and not yet stopped, as copies (a test's own struct may
 * be on a stack that a failed assertion has left): harness_stop_leftover
 * stops them after a failed test, and those still running when the
 * program exits are killed then, so no test leaves one behind. */
static struct mfmad_proc live[16];

static void remove_files(const struct mfmad_proc *p)
{
	unlink(p->sock);
	unlink(p->conf);
	unlink(p->log);
	rmdir(p->dir);
}

static void kill_leftovers(void)
{
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
		if (live[i].pid > 0) {
			kill(live[i].pid, SIGKILL);
			waitpid(live[i].pid, NULL, 0);
			remove_files(&live[i]);
			live[i].pid = 0;
		}
	}
}

/* Starts (on) or ends (off) tracking the daemon of pid p->pid. */
static void track(const struct mfmad_proc *p, int on)
{
	static int registered;
	if (!registered) {
		atexit(kill_leftovers);
		registered = 1;
	}
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
		if (on && live[i].pid <= 0) {
			live[i] = *p;
			return;
		}
		if (!on && live[i].pid > 0 && live[i].pid == p->pid) {
			live[i].pid = 0;
			return;
		}
	}
}

static void print_log(const struct mfmad_proc *p)
{
	FILE *f = fopen(p->log, "r");
	if (!f)
		return;
	char line[1024];
	fprintf(stderr, "---- mfmad log ----\n");
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "-------------------\n");
	fclose(f);
}

static int file_count(const char *path, const char *s)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, s) != NULL;
	if (f)
		fclose(f);
	return n;
}

int harness_log_count(const struct mfmad_proc *p, const char *s)
{
	return file_count(p->log, s);
}

int harness_connect_raw(const struct mfmad_proc *p)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int harness_start_slowed(struct mfmad_proc *p, const char *extra_conf,
			 const char *const *extra_args)
{
	const char *shim = getenv("MFMAD_TEST_SLOW_FSTAT");
	if (!shim)
		return 1;
	const char *asan0 = getenv("ASAN_OPTIONS");
	char *asan = strdup(asan0 ? asan0 : "");
	char opts[512];
	/* A preloaded library comes before ASan's runtime in an ASan build. */
	snprintf(opts, sizeof(opts), "%s%sverify_asan_link_order=0", asan ? asan : "",
		 asan && *asan ? ":" : "");
	setenv("ASAN_OPTIONS", opts, 1);
	setenv("LD_PRELOAD", shim, 1);
	int rc = harness_start(p, extra_conf, extra_args);
	unsetenv("LD_PRELOAD");
	if (asan0 && asan)
		setenv("ASAN_OPTIONS", asan, 1);
	else
		unsetenv("ASAN_OPTIONS");
	free(asan);
	return rc;
}

int harness_start(struct mfmad_proc *p, const char *extra_conf, const char *const *extra_args)
{
	const char *bin = getenv("MFMAD_BIN");
	if (!bin) {
		fprintf(stderr, "MFMAD_BIN is not set\n");
		return -1;
	}
	memset(p, 0, sizeof(*p));
	snprintf(p->dir, sizeof(p->dir), "/tmp/mfmad-test-XXXXXX");
	if (!mkdtemp(p->dir))
		return -1;
	snprintf(p->sock, sizeof(p->sock), "%s/mfmad.sock", p->dir);
	snprintf(p->endpoint, sizeof(p->endpoint), "unix:%s", p->sock);
	snprintf(p->conf, sizeof(p->conf), "%s/mfmad.conf", p->dir);
	snprintf(p->log, sizeof(p->log), "%s/mfmad.log", p->dir);
	FILE *f = fopen(p->conf, "w");
	if (!f)
		return -1;
	fprintf(f, "%s\n", extra_conf ? extra_conf : "");
	fclose(f);

	const char *argv[32];
	int n = 0;
	argv[n++] = bin;
	argv[n++] = "--config";
	argv[n++] = p->conf;
	argv[n++] = "--socket";
	argv[n++] = p->sock;
	argv[n++] = "--log-level";
	argv[n++] = "debug";
	for (int i = 0; extra_args && extra_args[i] && n < 31; i++)
		argv[n++] = extra_args[i];
	argv[n] = NULL;

	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
	int rc = posix_spawn(&p->pid, bin, &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		fprintf(stderr, "cannot start %s: %s\n", bin, strerror(rc));
		return -1;
	}
	track(p, 1);
	/* Ready when the socket accepts and the daemon has logged "ready" (its
	 * Unix socket accepts before its TCP and metrics listeners are bound);
	 * give a sanitizer build time. */
	for (int i = 0; i < 300; i++) {
		int fd = harness_connect_raw(p);
		if (fd >= 0)
			close(fd);
		if (fd >= 0 && harness_log_count(p, "ready: ") > 0)
			return 0;
		int st;
		if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
			fprintf(stderr, "mfmad exited during start-up\n");
			print_log(p);
			track(p, 0);
			p->pid = 0;
			return -1;
		}
		usleep(50 * 1000);
	}
	fprintf(stderr, "mfmad did not start listening within 15 s\n");
	print_log(p);
	return -1;
}

void harness_remove(const struct mfmad_proc *p)
{
	remove_files(p);
}

int harness_stop(struct mfmad_proc *p)
{
	int status = -1;
	track(p, 0);
	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		int st;
		/* Bounded: a daemon that hangs on shutdown fails the test. */
		for (int i = 0; i < 400; i++) {
			pid_t r = waitpid(p->pid, &st, WNOHANG);
			if (r == p->pid) {
				status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
				break;
			}
			usleep(50 * 1000);
		}
		if (status == -1) {
			fprintf(stderr, "mfmad did not exit within 20 s of SIGTERM\n");
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
			status = 137;
		}
		p->pid = 0;
	}
	if (status != 0)
		print_log(p);
	remove_files(p);
	return status;
}

int harness_stop_leftover(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
		if (live[i].pid > 0) {
			struct mfmad_proc p = live[i];
			harness_stop(&p);
		}
	}
	return 0;
}

int harness_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;
	while (len > 0) {
		ssize_t w = send(fd, b, len, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += w;
		len -= (size_t)w;
	}
	return 0;
}

int harness_start_nofile(struct mfmad_proc *p, const char *extra_conf,
			 const char *const *extra_args, unsigned long soft)
{
	struct rlimit old, low;
	if (getrlimit(RLIMIT_NOFILE, &old) < 0)
		return -1;
	low = old;
	low.rlim_cur = soft;
	if (setrlimit(RLIMIT_NOFILE, &low) < 0)
		return -1;
	int rc = harness_start(p, extra_conf, extra_args);
	if (setrlimit(RLIMIT_NOFILE, &old) < 0)
		rc = -1;
	return rc;
}

long harness_proc_status(pid_t pid, const char *key)
{
	char path[64], line[256], fmt[48];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	snprintf(fmt, sizeof(fmt), "%s: %%ld", key);
	FILE *f = fopen(path, "r");
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, fmt, &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

long harness_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(HARNESS_MAX_FDS * sizeof(int))];
	} u;
	if (nfds < 0 || nfds > HARNESS_MAX_FDS)
		return -1;
	memset(&u, 0, sizeof(u));
	struct iovec iov = { (void *)(uintptr_t)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds > 0) {
		mh.msg_control = u.space;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	return (long)sendmsg(sock, &mh, MSG_NOSIGNAL);
}

static int read_full(int fd, uint8_t *buf, size_t len, int timeout_ms)
{
	size_t got = 0;
	while (got < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int pr = poll(&pfd, 1, timeout_ms);
		if (pr <= 0)
			return -1;
		ssize_t r = recv(fd, buf + got, len - got, 0);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

long harness_read_frame(int fd, uint8_t **out, int timeout_ms)
{
	uint8_t hdr[4];
	if (read_full(fd, hdr, 4, timeout_ms) < 0)
		return -1;
	size_t len = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return -1;
	if (read_full(fd, buf, len, timeout_ms) < 0) {
		free(buf);
		return -1;
	}
	*out = buf;
	return (long)len;
}

int harness_wait_closed(int fd, int timeout_ms)
{
	uint8_t b[4096];
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int pr = poll(&pfd, 1, timeout_ms);
		if (pr <= 0)
			return 0;
		ssize_t r = recv(fd, b, sizeof(b), 0);
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return 1;
		if (r < 0)
			return 0;
	}
}

int harness_run(const char *const *argv, char *out, size_t outlen)
{
	int pipefd[2];
	if (pipe(pipefd) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addclose(&fa, pipefd[0]);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	if (rc != 0) {
		close(pipefd[0]);
		return -1;
	}
	size_t got = 0;
	char sink[4096];
	for (;;) {
		char *dst = out && got + 1 < outlen ? out + got : sink;
		size_t room = out && got + 1 < outlen ? outlen - 1 - got : sizeof(sink);
		ssize_t r = read(pipefd[0], dst, room);
		if (r <= 0)
			break;
		if (dst != sink)
			got += (size_t)r;
	}
	close(pipefd[0]);
	if (out && outlen)
		out[got] = '\0';
	int st;
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Ports are picked below Linux's default ephemeral range (32768-60999):
 * a port that bind(0) has just handed out and released lies in the range
 * the kernel also gives every outgoing connection, so another test's
 * client could take it before the daemon binds it.  Each process walks
 * the ports in order from a start derived from its pid, so it never gets
 * the same port twice and two processes seldom meet. */
enum { PORT_LOW = 20000, PORT_SPAN = 12000 };

int harness_free_port(void)
{
	static unsigned next;
	if (next == 0)
		next = (unsigned)getpid() * 7919u + (unsigned)time(NULL);
	for (int tries = 0; tries < PORT_SPAN; tries++) {
		int port = PORT_LOW + (int)(next++ % PORT_SPAN);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_port = htons((uint16_t)port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		close(fd);
		if (ok)
			return port;
	}
	return -1;
}

int harness_http_get(int port, const char *path, char *out, size_t outlen)
{
	out[0] = '\0';
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
	if (harness_write_all(fd, req, (size_t)n) < 0) {
		close(fd);
		return -1;
	}
	size_t got = 0;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	while (got < outlen - 1 && poll(&pfd, 1, 5000) > 0) {
		ssize_t r = recv(fd, out + got, outlen - 1 - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	out[got] = '\0';
	close(fd);
	int code = -1;
	sscanf(out, "HTTP/1.%*d %d", &code);
	return code;
}

int harness_start_metrics(struct mfmad_proc *p, const char *extra_conf, const char *env,
			  const char *value)
{
	int port = harness_free_port();
	if (port <= 0)
		return -1;
	char port_s[32];
	snprintf(port_s, sizeof(port_s), "127.0.0.1:%d", port);
	const char *args[] = { "--metrics", port_s, NULL };
	if (env)
		setenv(env, value, 1);
	int rc = harness_start(p, extra_conf, args);
	if (env)
		unsetenv(env);
	return rc == 0 ? port : -1;
}

double harness_metric_value(int port, const char *name)
{
	size_t cap = 1 << 20;
	char *buf = malloc(cap), key[160];
	double v = -1;
	snprintf(key, sizeof(key), "\n%s ", name);
	if (buf && harness_http_get(port, "/metrics", buf, cap) == 200) {
		const char *at = strstr(buf, key);
		if (at)
			v = strtod(at + strlen(key), NULL);
	}
	free(buf);
	return v;
}

long long harness_metric(int port, const char *name)
{
	return (long long)harness_metric_value(port, name);
}

int harness_reload(pid_t pid, const char *log_path, int timeout_ms)
{
	int before = file_count(log_path, "configuration reloaded");
	if (kill(pid, SIGHUP) != 0)
		return -1;
	for (int waited = 0; waited < timeout_ms; waited += 25) {
		if (file_count(log_path, "configuration reloaded") > before)
			return 0;
		usleep(25 * 1000);
	}
	return file_count(log_path, "configuration reloaded") > before ? 0 : -1;
}

int harness_reconfigure(const struct mfmad_proc *p, const char *conf)
{
	FILE *f = fopen(p->conf, "w");
	if (!f)
		return -1;
	fprintf(f, "%s\n", conf);
	if (fclose(f) != 0)
		return -1;
	return harness_reload(p->pid, p->log, 5000);
}
