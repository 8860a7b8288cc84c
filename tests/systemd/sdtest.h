/* Helpers of the systemd tests: a fake service manager listening on a
 * NOTIFY_SOCKET, a one-shot HTTP GET, and a child process started with
 * extra environment variables. */
#ifndef MFMAD_SDTEST_H
#define MFMAD_SDTEST_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

uint64_t sdtest_now_ns(void);

/* ---- a fake service manager ---- */

#define SDTEST_MAX_MSGS 1024

struct sdtest_manager {
	int fd;
	char dir[64], path[100];
	pthread_t thread;
	pthread_mutex_t lock;
	int n;
	char msg[SDTEST_MAX_MSGS][512];
	uint64_t at[SDTEST_MAX_MSGS]; /* CLOCK_MONOTONIC when it arrived */
};

/* Binds a datagram socket in a fresh temporary directory and receives on
 * it from a thread, time-stamping each message.  Returns 0 or -errno. */
int sdtest_manager_start(struct sdtest_manager *m);
void sdtest_manager_stop(struct sdtest_manager *m);

/* Waits up to timeout_ms until the manager holds at least n messages;
 * returns how many it holds. */
int sdtest_manager_wait(struct sdtest_manager *m, int n, int timeout_ms);

/* Waits up to timeout_ms for a message, from index *from on, that contains
 * the line `line` (e.g. "READY=1"); returns its index and sets *from past
 * it, or -1. */
int sdtest_manager_find(struct sdtest_manager *m, const char *line, int *from, int timeout_ms);

/* How many messages from index `from` on contain the line `line`. */
int sdtest_manager_count(struct sdtest_manager *m, const char *line, int from);

/* ---- HTTP ---- */

/* One HTTP/1.0 request to a loopback port (family AF_INET or AF_INET6);
 * returns the status code (or -1) and copies the headers and the body,
 * NUL-terminated and cut to fit. */
int sdtest_http(int family, int port, const char *method, const char *path, char *head,
		size_t headlen, char *body, size_t bodylen);

/* A socket connected to 127.0.0.1:port, trying every 25 ms for up to
 * timeout_ms (a listener still starting), or -1. */
int sdtest_connect_tcp(int port, int timeout_ms);

/* ---- processes ---- */

/* posix_spawn of argv with `env` (NAME=VALUE strings, NULL-terminated) added
 * to the environment and with stdout/stderr into log_path.  Returns the
 * pid or -1. */
pid_t sdtest_spawn(const char *const *argv, const char *const *env, const char *log_path);

/* Waits up to timeout_ms for pid; returns its exit status, 128 + signal, or
 * -1 when it is still running (it is then killed and reaped). */
int sdtest_wait_exit(pid_t pid, int timeout_ms);

/* Waits up to 20 s for pid to exit with `status` having written `want`
 * into log_path: 1 when it did, else 0 with what happened and the log
 * printed to stderr (a daemon refusing to start, say). */
int sdtest_exits_saying(pid_t pid, int status, const char *log_path, const char *want);

/* Whether the file `path` contains `needle`. */
int sdtest_file_contains(const char *path, const char *needle);
/* Lines of the file `path` that contain `needle`. */
int sdtest_file_count(const char *path, const char *needle);

/* Waits up to timeout_ms for the file `path` to contain `needle`: 1 when
 * it does, else 0 (a daemon's log line written after the answer that
 * prompted it). */
int sdtest_file_wait(const char *path, const char *needle, int timeout_ms);

/* Prints the file to stderr (a daemon's log after a failure). */
void sdtest_print_file(const char *path);

#endif
