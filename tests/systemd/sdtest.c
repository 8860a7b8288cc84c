#include "sdtest.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

extern char **environ;

uint64_t sdtest_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the fake manager ---- */

static const char quit_msg[] = "SDTEST_QUIT";

static void *manager_run(void *arg)
{
	struct sdtest_manager *m = arg;
	for (;;) {
		char buf[512];
		ssize_t r = recv(m->fd, buf, sizeof(buf) - 1, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		buf[r] = '\0';
		if (strcmp(buf, quit_msg) == 0)
			break;
		pthread_mutex_lock(&m->lock);
		if (m->n < SDTEST_MAX_MSGS) {
			memcpy(m->msg[m->n], buf, (size_t)r + 1);
			m->at[m->n] = sdtest_now_ns();
			m->n++;
		}
		pthread_mutex_unlock(&m->lock);
	}
	return NULL;
}

int sdtest_manager_start(struct sdtest_manager *m)
{
	memset(m, 0, sizeof(*m));
	strcpy(m->dir, "/tmp/mfmad-notify-XXXXXX");
	if (mkdtemp(m->dir) == NULL)
		return -errno;
	snprintf(m->path, sizeof(m->path), "%s/notify", m->dir);
	m->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (m->fd < 0)
		return -errno;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", m->path);
	if (bind(m->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(m->fd);
		rmdir(m->dir);
		return -e;
	}
	pthread_mutex_init(&m->lock, NULL);
	int r = pthread_create(&m->thread, NULL, manager_run, m);
	if (r != 0) {
		close(m->fd);
		unlink(m->path);
		rmdir(m->dir);
		return -r;
	}
	return 0;
}

void sdtest_manager_stop(struct sdtest_manager *m)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", m->path);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		(void)sendto(fd, quit_msg, strlen(quit_msg), 0, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
	}
	pthread_join(m->thread, NULL);
	close(m->fd);
	unlink(m->path);
	rmdir(m->dir);
	pthread_mutex_destroy(&m->lock);
}

int sdtest_manager_wait(struct sdtest_manager *m, int n, int timeout_ms)
{
	uint64_t end = sdtest_now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		pthread_mutex_lock(&m->lock);
		int have = m->n;
		pthread_mutex_unlock(&m->lock);
		if (have >= n || sdtest_now_ns() >= end)
			return have;
		usleep(1000);
	}
}

/* Whether the newline-separated assignments of msg include line. */
static int has_line(const char *msg, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = msg; (p = strstr(p, line)) != NULL; p++)
		if ((p == msg || p[-1] == '\n') && (p[n] == '\0' || p[n] == '\n'))
			return 1;
	return 0;
}

int sdtest_manager_find(struct sdtest_manager *m, const char *line, int *from, int timeout_ms)
{
	uint64_t end = sdtest_now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		pthread_mutex_lock(&m->lock);
		for (int i = *from; i < m->n; i++) {
			if (has_line(m->msg[i], line)) {
				pthread_mutex_unlock(&m->lock);
				*from = i + 1;
				return i;
			}
		}
		pthread_mutex_unlock(&m->lock);
		if (sdtest_now_ns() >= end)
			return -1;
		usleep(1000);
	}
}

int sdtest_manager_count(struct sdtest_manager *m, const char *line, int from)
{
	int c = 0;
	pthread_mutex_lock(&m->lock);
	for (int i = from; i < m->n; i++)
		c += has_line(m->msg[i], line);
	pthread_mutex_unlock(&m->lock);
	return c;
}

/* ---- HTTP ---- */

int sdtest_http(int family, int port, const char *method, const char *path, char *head,
		size_t headlen, char *body, size_t bodylen)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sl = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		a->sin6_addr = in6addr_loopback;
		sl = sizeof(*a);
	}
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0) {
		close(fd);
		return -1;
	}
	char req[256];
	int n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: localhost\r\n\r\n", method, path);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	size_t cap = 1 << 20, got = 0;
	char *resp = malloc(cap);
	if (resp == NULL) {
		close(fd);
		return -1;
	}
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		if (poll(&pfd, 1, 10000) <= 0)
			break;
		ssize_t r = read(fd, resp + got, cap - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == cap - 1)
			break;
	}
	close(fd);
	resp[got] = '\0';

	int code = -1;
	char *sep = strstr(resp, "\r\n\r\n");
	if (sscanf(resp, "HTTP/1.%*d %d", &code) != 1 || sep == NULL) {
		free(resp);
		return -1;
	}
	if (head != NULL)
		snprintf(head, headlen, "%.*s", (int)(sep - resp), resp);
	if (body != NULL)
		snprintf(body, bodylen, "%s", sep + 4);
	free(resp);
	return code;
}

int sdtest_exits_saying(pid_t pid, int status, const char *log_path, const char *want)
{
	int st = sdtest_wait_exit(pid, 20000);
	if (st == status && sdtest_file_contains(log_path, want))
		return 1;
	sdtest_print_file(log_path);
	fprintf(stderr, "exit status %d, want %d with \"%s\"\n", st, status, want);
	return 0;
}

int sdtest_connect_tcp(int port, int timeout_ms)
{
	for (int waited = 0;; waited += 25) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		if (fd >= 0)
			close(fd);
		if (waited >= timeout_ms)
			return -1;
		usleep(25000);
	}
}

/* ---- processes ---- */

pid_t sdtest_spawn(const char *const *argv, const char *const *env, const char *log_path)
{
	size_t n = 0, extra = 0;
	while (environ[n] != NULL)
		n++;
	while (env != NULL && env[extra] != NULL)
		extra++;
	char **envp = calloc(n + extra + 1, sizeof(*envp));
	if (envp == NULL)
		return -1;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		/* A variable we set replaces the inherited one. */
		int replaced = 0;
		for (size_t j = 0; j < extra; j++) {
			size_t len = strcspn(env[j], "=");
			if (strncmp(environ[i], env[j], len) == 0 && environ[i][len] == '=')
				replaced = 1;
		}
		if (!replaced)
			envp[k++] = environ[i];
	}
	for (size_t j = 0; j < extra; j++)
		envp[k++] = (char *)env[j];
	envp[k] = NULL;

	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path, O_WRONLY | O_CREAT | O_TRUNC,
					 0644);
	posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	free(envp);
	if (rc != 0) {
		fprintf(stderr, "cannot start %s: %s\n", argv[0], strerror(rc));
		return -1;
	}
	return pid;
}

int sdtest_wait_exit(pid_t pid, int timeout_ms)
{
	int st;
	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

int sdtest_file_count(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	char line[4096];
	int n = 0;
	while (fgets(line, sizeof(line), f) != NULL)
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

int sdtest_file_contains(const char *path, const char *needle)
{
	return sdtest_file_count(path, needle) > 0;
}

int sdtest_file_wait(const char *path, const char *needle, int timeout_ms)
{
	for (int waited = 0;; waited += 10) {
		if (sdtest_file_contains(path, needle))
			return 1;
		if (waited >= timeout_ms)
			return 0;
		usleep(10000);
	}
}

void sdtest_print_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return;
	char line[4096];
	fprintf(stderr, "---- %s ----\n", path);
	while (fgets(line, sizeof(line), f) != NULL)
		fputs(line, stderr);
	fprintf(stderr, "----\n");
	fclose(f);
}
