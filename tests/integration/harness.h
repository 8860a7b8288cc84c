/* Starts the real mfmad on a temporary Unix socket for integration tests
 * and stops it again, checking that it exits 0 (under ASan that also
 * means no leak).  The binaries come from the environment that meson
 * sets: MFMAD_BIN, MFMACTL_BIN. */
#ifndef MFMA_TEST_HARNESS_H
#define MFMA_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mfmad_proc {
	pid_t pid;
	char dir[32];
	char sock[100];
	char endpoint[112];
	char conf[128];
	char log[128];
};

/* extra_conf: libconfig text written into the config file (NULL: none);
 * extra_args: more mfmad flags, NULL-terminated (NULL: none).  Returns 0
 * once the socket accepts connections, or -1 (the log is printed). */
int harness_start(struct mfmad_proc *p, const char *extra_conf, const char *const *extra_args);
/* harness_start with the library $MFMAD_TEST_SLOW_FSTAT (slow_fstat.c)
 * preloaded into the daemon alone: 1 when that variable is not set (not
 * run through meson: the caller skips), else harness_start's result. */
int harness_start_slowed(struct mfmad_proc *p, const char *extra_conf,
			 const char *const *extra_args);

/* SIGTERM, wait, remove the directory.  Returns the exit status (or 128 +
 * signal); prints the daemon's log when it is not 0. */
int harness_stop(struct mfmad_proc *p);

/* Removes the files and directory of a daemon that harness_start could
 * not start (its log read first, with harness_log_count). */
void harness_remove(const struct mfmad_proc *p);

/* A cmocka teardown: stops (as harness_stop) every daemon a test started
 * and did not stop, as after a failed assertion.  Returns 0. */
int harness_stop_leftover(void **state);

/* Lines of the daemon's log that hold s. */
int harness_log_count(const struct mfmad_proc *p, const char *s);

/* harness_start with the daemon's soft descriptor limit at soft (it
 * inherits this process's, which is put back before returning). */
int harness_start_nofile(struct mfmad_proc *p, const char *extra_conf,
			 const char *const *extra_args, unsigned long soft);

/* A number field of /proc/PID/status ("VmHWM", "VmRSS" in KiB,
 * "Threads"), or -1. */
long harness_proc_status(pid_t pid, const char *key);

/* A raw connected socket to the daemon, or -1. */
int harness_connect_raw(const struct mfmad_proc *p);

/* Writes all of buf; 0 or -1. */
int harness_write_all(int fd, const void *buf, size_t len);

/* One sendmsg of buf with nfds descriptors (at most HARNESS_MAX_FDS) on
 * its first byte, as a client passes a region's memfd: what sendmsg
 * returned. */
#define HARNESS_MAX_FDS 64
long harness_send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds);

/* Reads one response frame (4-byte big-endian length + payload) into a
 * malloc'd buffer, with a timeout; returns the payload length, or -1 on
 * EOF/timeout/error (*out untouched). */
long harness_read_frame(int fd, uint8_t **out, int timeout_ms);

/* 1 if the peer closed the connection within timeout_ms, else 0. */
int harness_wait_closed(int fd, int timeout_ms);

/* A loopback TCP port free now (for --tcp, --metrics), never one this
 * process was given before. */
int harness_free_port(void);
/* harness_start with the metrics server on a free loopback port, and the
 * environment variable env set to value for the daemon alone (env NULL:
 * none; a testing aid such as MFMAD_TEST_CPU_PINNED_READS): the port, or
 * -1 when the daemon did not start. */
int harness_start_metrics(struct mfmad_proc *p, const char *extra_conf, const char *env,
			  const char *value);

/* GET path from the HTTP server on 127.0.0.1:port: the whole response,
 * headers and body, into out (NUL-terminated, cut at outlen-1); its
 * status code, or -1 when nothing answered. */
int harness_http_get(int port, const char *path, char *out, size_t outlen);
/* The value of a series (a name with its labels, as the page writes it)
 * on GET /metrics from 127.0.0.1:port, or -1 when it is not there or
 * nothing answered; harness_metric for a count. */
double harness_metric_value(int port, const char *name);
long long harness_metric(int port, const char *name);

/* Sends pid SIGHUP and waits up to timeout_ms for its log at log_path to
 * say "configuration reloaded" once more than before: 0, or -1 when no
 * reload was logged.  A fixed sleep after the signal is a guess a loaded
 * machine can outrun. */
int harness_reload(pid_t pid, const char *log_path, int timeout_ms);

/* Replaces the daemon's configuration file with conf and reloads it
 * (harness_reload, up to 5 s): 0, or -1 when the file could not be written
 * or no reload was logged. */
int harness_reconfigure(const struct mfmad_proc *p, const char *conf);

/* Runs a program with arguments, stdout captured into out (NUL-terminated,
 * cut at outlen-1); returns its exit status or -1. */
int harness_run(const char *const *argv, char *out, size_t outlen);

#endif
