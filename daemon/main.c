/* mfmad: the process.  Reads the configuration, starts the device
 * workers, listens, and runs the loop until SIGTERM/SIGINT (or a drain:
 * SIGUSR1 or the Drain request, the same graceful stop); SIGHUP reloads
 * what can change live. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "choices.h"
#include "conn.h"
#include "daemon.h"
#include "declare.h"
#include "devices.h"
#include "dispatch.h"
#include "endpoint.h"
#include "listen.h"
#include "log.h"
#include "loop_poll.h"
#include "metrics.h"
#include "mfma_clock.h"
#include "mfma_dtype.h"
#include "mfmad_build.h"
#include "notify.h"
#include "read_arena.h"
#include "readers.h"
#include "scheduler.h"
#include "state_lock.h"
#include "weights.h"

static const char usage_text[] =
	"Usage: mfmad [OPTION]...\n"
	"Serve dense and 2:4-sparse matrix multiplication (GEMM) over a Unix socket\n"
	"(and TCP, optionally with TLS).\n"
	"\n"
	"mfmad finds the machine's GPUs (CUDA, HIP) and serves on them, or on the CPU\n"
	"when there is none.  Clients speak the mfma.v1 protocol: use mfmactl(1) or\n"
	"libmfmaclient.  It runs in the foreground and logs to standard error.\n"
	"\n"
	"Options:\n"
	"  -c, --config FILE        read FILE (default: " MFMAD_SYSCONFDIR "/mfmad/mfmad.conf\n"
	"                           if it exists, else built-in defaults)\n"
	"      --check-config       check the configuration, print the effective\n"
	"                           settings and exit (0 valid, 1 invalid)\n"
	"  -s, --socket PATH        Unix socket to listen on (listen.unix); default\n"
	"                           /run/mfmad/mfmad.sock for root, else\n"
	"                           $XDG_RUNTIME_DIR/mfmad.sock (without it, the\n"
	"                           system path: give --socket)\n"
	"      --tcp [ADDR:]PORT    also listen on TCP (loopback unless\n"
	"                           listen.tcp_allow_remote = true; TLS when\n"
	"                           listen.tls_cert and listen.tls_key are set)\n"
	"  -l, --log-level LEVEL    error, warning, notice, info (default), debug\n"
	"  -t, --threads N          CPU backend: threads per GEMM (0 = all cores)\n"
	"      --cpu-devices N      CPU backend: number of CPU queues to expose\n"
	"      --backends LIST      enable only these backends: cpu,hip,cuda\n"
	"      --metrics [ADDR:]PORT  serve /metrics, /healthz, /readyz over HTTP\n"
	"  -V, --version            print the version and the backends built in (and the\n"
	"                           digest of the CUDA kernels)\n"
	"  -h, --help               show this help\n"
	"\n"
	"Command-line options override the file, and still do after a reload.\n"
	"\n"
	"Signals:\n"
	"  SIGTERM, SIGINT  stop accepting, finish what is in flight within\n"
	"                   shutdown_grace_ms, answer the rest \"shutting down\", exit 0;\n"
	"                   a second signal ends the grace period at once\n"
	"  SIGUSR1          drain: report not ready (/readyz 503, systemd STATUS=),\n"
	"                   close the listeners, finish what is in flight, exit 0\n"
	"                   (the same stop as SIGTERM; also `mfmactl drain`)\n"
	"  SIGHUP           re-read the configuration file; log level, limits (but\n"
	"                   reader_threads, post_threads, pinned_reads_mb),\n"
	"                   batching, cpu.inline_max_flops, cuda.warmup,\n"
	"                   weights.max_count and weights.declare change live\n"
	"                   (declared weights load, reload or unload), the token\n"
	"                   and the TLS certificate, key and client CAs are read\n"
	"                   again for new connections; the rest needs a restart,\n"
	"                   and the log names what it kept (mfmad.conf(5) marks\n"
	"                   each setting; a bad file is reported and the old\n"
	"                   configuration, or certificate, kept)\n"
	"\n"
	"Exit status: 0 after a clean stop, 1 on a configuration or start-up error,\n"
	"2 on a usage error.\n"
	"\n"
	"See also: mfmactl(1), mfmad.conf(5).\n";

static struct daemon D;
/* SIGUSR1 (drain); daemon.h's struct holds the other signals. */
static uv_signal_t sig_usr1;
/* systemd readiness, status line and watchdog (no-ops outside systemd). */
static struct notify N;
/* limits.loop_poll_us: the loop's busy-poll before it blocks. */
static struct loop_poll LP;

static int parse_hostport(const char *s, char *host, size_t hlen, int *port)
{
	const char *colon = strrchr(s, ':');
	const char *p = colon ? colon + 1 : s;
	char *end;
	long v = strtol(p, &end, 10);
	if (*p == '\0' || *end != '\0' || v < 1 || v > 65535)
		return -EINVAL;
	*port = (int)v;
	if (colon) {
		const char *h = s;
		size_t n = (size_t)(colon - s);
		if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
			h++;
			n -= 2;
		}
		if (n == 0 || n >= hlen)
			return -EINVAL;
		memcpy(host, h, n);
		host[n] = '\0';
	}
	return 0;
}

/* Applies the command-line overrides on top of a freshly read file. */
static void apply_cli(struct mfmad_config *c, const struct daemon *d)
{
	const struct mfmad_config *o = &d->cli;
	if (d->cli_set & CLI_SOCKET)
		memcpy(c->unix_path, o->unix_path, sizeof(c->unix_path));
	if (d->cli_set & CLI_TCP) {
		c->tcp_enabled = true;
		memcpy(c->tcp_address, o->tcp_address, sizeof(c->tcp_address));
		c->tcp_port = o->tcp_port;
	}
	if (d->cli_set & CLI_LOG)
		c->log_level = o->log_level;
	if (d->cli_set & CLI_THREADS)
		c->cpu_threads = o->cpu_threads;
	if (d->cli_set & CLI_CPU_DEVICES)
		c->cpu_devices = o->cpu_devices;
	if (d->cli_set & CLI_BACKENDS) {
		c->cpu = o->cpu;
		c->hip = o->hip;
		c->cuda = o->cuda;
	}
	if (d->cli_set & CLI_METRICS) {
		c->metrics_enabled = true;
		memcpy(c->metrics_address, o->metrics_address, sizeof(c->metrics_address));
		c->metrics_port = o->metrics_port;
	}
}

static int read_config(struct daemon *d, struct mfmad_config *out, char *err, size_t errlen)
{
	config_defaults(out);
	if (d->config_path) {
		int rc = config_load_file(out, d->config_path, err, errlen);
		if (rc < 0)
			return rc;
	}
	apply_cli(out, d);
	return 0;
}

static void print_providers(const struct provider_policy *p, enum provider_family f)
{
	size_t n;
	const char *const *names = providers_names(f, &n);
	printf("{ exclude = [");
	for (size_t i = 0, k = 0; i < n; i++)
		if (provider_excluded(p, i))
			printf("%s\"%s\"", k++ ? ", " : "", names[i]);
	printf("]; prefer = \"%s\"; }", p->prefer >= 0 ? names[p->prefer] : "");
}

static void print_config(const struct mfmad_config *c, const char *src)
{
	char sock[108];
	if (c->unix_path[0])
		snprintf(sock, sizeof(sock), "%s", c->unix_path);
	else if (endpoint_default_path(sock, sizeof(sock)) < 0)
		snprintf(sock, sizeof(sock), "(too long)");
	static const char *const en[] = { "false", "true", "\"auto\"" };
	long ncores = sysconf(_SC_NPROCESSORS_ONLN);
	char readers_s[16];
	if (c->reader_threads < 0)
		snprintf(readers_s, sizeof(readers_s), "\"auto\"");
	else
		snprintf(readers_s, sizeof(readers_s), "%d", c->reader_threads);
	printf("# effective configuration (%s)\n", src);
	printf("log_level = \"%s\";\n", log_level_name((enum log_level)c->log_level));
	printf("shutdown_grace_ms = %" PRIu64 ";\n", c->shutdown_grace_ms);
	printf("status_interval_ms = %" PRIu64 ";\n", c->status_interval_ms);
	printf("listen = { unix = \"%s\"; unix_mode = \"%04o\"; tcp = %s; tcp_address = \"%s\"; "
	       "tcp_port = %d; tcp_allow_remote = %s;\n           token_file = \"%s\"; "
	       "unix_users = \"%s\"; unix_group = \"%s\";\n           tls_cert = \"%s\"; "
	       "tls_key = \"%s\"; tls_client_ca = \"%s\"; };\n",
	       sock, c->unix_mode, c->tcp_enabled ? "true" : "false", c->tcp_address, c->tcp_port,
	       c->tcp_allow_remote ? "true" : "false", c->token_file, c->unix_users, c->unix_group,
	       c->tls_cert, c->tls_key, c->tls_client_ca);
	printf("limits = { max_frame_mb = %" PRIu64 "; max_inflight_per_connection = %u; "
	       "max_inflight = %u; max_inflight_mb = %" PRIu64 "; max_connections = %u; "
	       "max_connections_per_user = %u; max_connections_per_address = %u; "
	       "max_dim = %u; default_priority = %u; default_timeout_ms = %" PRIu64 "; "
	       "priority_aging_ms = %" PRIu64 "; worker_poll_us = %" PRIu64 "; loop_poll_us = %" PRIu64
	       "; loop_start = %s;\n           max_buffered_mb = %" PRIu64 "; "
	       "max_unsent_mb = %" PRIu64 "; max_memory_mb = %" PRIu64 "; read_timeout_ms = %" PRIu64
	       "; idle_timeout_ms = %" PRIu64 "; write_timeout_ms = %" PRIu64 ";\n"
	       "           max_regions_per_conn = %u; max_region_mb_per_conn = %" PRIu64
	       "; max_pinned_mb = %" PRIu64 "; send_buffer_kb = %" PRIu64 ";\n"
	       "           reader_threads = %s; reader_min_kb = %" PRIu64 "; reader_when_busy = %s;\n"
	       "           pinned_reads_mb = %" PRIu64 "; post_threads = %u; };\n",
	       c->max_frame_bytes >> 20, c->max_inflight_per_conn, c->max_inflight,
	       c->max_inflight_bytes >> 20, c->max_connections, c->max_connections_per_user,
	       c->max_connections_per_address, c->max_dim, c->default_priority,
	       c->default_timeout_ms, c->priority_aging_ms, c->worker_poll_us, c->loop_poll_us,
	       c->loop_start ? "true" : "false", c->max_buffered_bytes >> 20,
	       c->max_unsent_bytes >> 20, c->max_memory_bytes >> 20, c->read_timeout_ms,
	       c->idle_timeout_ms, c->write_timeout_ms, c->max_regions_per_conn,
	       c->max_region_bytes_per_conn >> 20, c->max_pinned_bytes >> 20,
	       c->send_buffer_bytes >> 10, readers_s, c->reader_min_bytes >> 10,
	       c->reader_when_busy ? "true" : "false", c->pinned_read_bytes >> 20, c->post_threads);
	printf("# limits.reader_threads: %u reader thread(s) on this host (%ld cores)\n",
	       config_reader_threads(c, ncores), ncores);
	printf("weights = { budget_mb = %" PRIu64 "; max_count = %u; persist = %s; "
	       "persist_min_free_mb = %" PRIu64 "; state_dir = \"%s\"; };\n",
	       c->weight_budget_bytes >> 20, c->weight_max_count, c->weights_persist ? "true" : "false",
	       c->persist_min_free_bytes >> 20, c->weights_state_dir);
	printf("weights.declare = (");
	for (uint32_t i = 0; i < c->ndeclared; i++) {
		const struct weight_decl *w = &c->declared[i];
		static const char *const sp[] = { "none", "validate", "prune" };
		printf("%s\n  { name = \"%s\"; file = \"%s\"; sparse = \"%s\"; dtype = \"%s\"; "
		       "device = %d; }", i ? "," : "", w->name, w->file, sp[w->sparsity],
		       w->dtype ? mfma_dtype_name((enum mfma_dtype)w->dtype) : "(the file's)", w->device);
	}
	printf("%s);\n", c->ndeclared ? "\n" : "");
	printf("batching = { enabled = %s; max_columns = %u; max_queue_delay_us = %" PRIu64
	       "; overlap = %s; };\n",
	       c->batch_enabled ? "true" : "false", c->batch_max_columns,
	       c->batch_max_queue_delay_us, c->batch_overlap ? "true" : "false");
	printf("cpu = { enabled = %s; threads = %d; devices = %d; inline_max_flops = %" PRIu64 "; };\n",
	       en[c->cpu], c->cpu_threads, c->cpu_devices, c->cpu_inline_max_flops);
	printf("hip = { enabled = %s; providers = ", en[c->hip]);
	print_providers(&c->hip_providers, PROVIDERS_HIP);
	printf("; };\ncuda = { enabled = %s; providers = ", en[c->cuda]);
	print_providers(&c->cuda_providers, PROVIDERS_CUDA);
	printf("; warmup = %s; graphs = %s; served_trial = %u; pinned_answers_mb = %" PRIu64
	       "; copy_stream = %s; dma_parts_kb = %" PRIu64 "; region_copies = %s; gate = %s;"
	       " tile_out = %s; out_stream = %s; };\n",
	       c->cuda_warmup ? "true" : "false", c->cuda_graphs ? "true" : "false", c->cuda_served_trial,
	       c->cuda_pinned_answer_bytes >> 20, c->cuda_copy_stream ? "true" : "false",
	       c->cuda_dma_part_bytes >> 10, c->cuda_region_copies ? "true" : "false",
	       c->cuda_gate ? "true" : "false", c->cuda_tile_out ? "true" : "false",
	       c->cuda_out_stream ? "true" : "false");
	printf("metrics = { enabled = %s; address = \"%s\"; port = %d; allow_remote = %s; };\n",
	       c->metrics_enabled ? "true" : "false", c->metrics_address, c->metrics_port,
	       c->metrics_allow_remote ? "true" : "false");
}

/* How long answers may take to reach clients after the grace period. */
#define DRAIN_MS 5000

static void on_grace(uv_timer_t *t)
{
	struct daemon *d = t->data;
	if (d->grace_expired) {
		log_notice("closing connections whose clients did not read their answers");
		d->drain_expired = true;
		conn_check_drained(d);
		return;
	}
	d->grace_expired = true;
	uv_timer_start(&d->grace_timer, on_grace, DRAIN_MS, 0);
	log_notice("shutdown grace period over: answering %" PRIu64
		   " unstarted request(s) with \"shutting down\"",
		   d->inflight);
	sched_cancel_queued(d);
	conn_check_drained(d);
}

static void begin_shutdown(struct daemon *d, int signum)
{
	if (d->stopping) {
		if (!d->grace_expired) {
			log_notice("%s again: ending the grace period now", strsignal(signum));
			on_grace(&d->grace_timer);
		}
		return;
	}
	d->stopping = true;
	atomic_store(&d->stats.stopping, 1);
	notify_stopping(&N);
	log_notice("%s: %s, %" PRIu64 " request(s) in flight, grace %" PRIu64 " ms",
		   strsignal(signum), signum == SIGUSR1 ? "draining" : "shutting down", d->inflight,
		   d->cfg.shutdown_grace_ms);
	listen_close(d);
	uv_timer_start(&d->grace_timer, on_grace, d->cfg.shutdown_grace_ms, 0);
	conn_check_drained(d);
}

/* Says so when limits.max_frame_mb is not what bounds a request frame. */
static void say_frame_limit(const struct mfmad_config *c)
{
	const char *key;
	uint64_t limit = config_read_frame_limit(c, &key);
	if (limit < c->max_frame_bytes)
		log_notice("requests are read up to %" PRIu64 " bytes, below limits.max_frame_mb = "
			   "%" PRIu64 ": a frame must fit in %s",
			   limit, c->max_frame_bytes >> 20, key);
}

static void apply_scheduling(struct daemon *d)
{
	const struct mfmad_config *c = &d->cfg;
	sched_set_batching(d, c->batch_enabled, c->batch_max_columns,
			   c->batch_max_queue_delay_us * 1000);
	sched_set_overlap(d, c->batch_overlap);
	sched_set_poll(d, c->worker_poll_us * 1000);
	sched_set_aging(d, c->priority_aging_ms);
	loop_poll_set(&LP, c->loop_poll_us * 1000);
}

static void reload(struct daemon *d)
{
	struct mfmad_config nc;
	char err[512];
	notify_reloading();
	if (read_config(d, &nc, err, sizeof(err)) < 0) {
		log_err("reload failed, keeping the old configuration: %s", err);
		notify_ready(&N);
		return;
	}
	char fixed[256];
	if (config_restart_only_changes(&d->cfg, &nc, fixed, sizeof(fixed)) > 0)
		log_warn("reload: %s changed; that needs a restart, kept the running values", fixed);
	struct mfmad_config *c = &d->cfg;
	if (listen_reload(d, &nc, err, sizeof(err)) < 0) {
		log_err("reload: %s; new connections keep the token and certificates they had", err);
	} else if (c->tls_cert[0] || c->token_file[0]) {
		/* Whether there is a token is fixed at start: a token_file set or
		 * unset by the new file is not taken (it was, and a later reload
		 * then said it read a token no listener asked for). */
		if (c->token_file[0] && nc.token_file[0])
			memcpy(c->token_file, nc.token_file, sizeof(c->token_file));
		if (c->tls_cert[0] && nc.tls_cert[0] && !c->tls_client_ca[0] == !nc.tls_client_ca[0]) {
			memcpy(c->tls_cert, nc.tls_cert, sizeof(c->tls_cert));
			memcpy(c->tls_key, nc.tls_key, sizeof(c->tls_key));
			memcpy(c->tls_client_ca, nc.tls_client_ca, sizeof(c->tls_client_ca));
		}
		log_info("reload: %s%s%s read again", c->token_file[0] ? "the token" : "",
			 c->token_file[0] && c->tls_cert[0] ? " and " : "",
			 c->tls_cert[0] ? "the TLS certificate, key and client CAs" : "");
	}
	c->log_level = nc.log_level;
	c->max_frame_bytes = nc.max_frame_bytes;
	c->max_inflight_per_conn = nc.max_inflight_per_conn;
	c->max_inflight = nc.max_inflight;
	c->max_inflight_bytes = nc.max_inflight_bytes;
	c->max_connections_per_user = nc.max_connections_per_user;
	c->max_connections_per_address = nc.max_connections_per_address;
	if (c->max_connections != nc.max_connections) {
		c->max_connections = nc.max_connections;
		listen_fit_fd_limit(d); /* more connections, more descriptors */
	}
	c->max_buffered_bytes = nc.max_buffered_bytes;
	c->max_unsent_bytes = nc.max_unsent_bytes;
	c->send_buffer_bytes = nc.send_buffer_bytes; /* for connections accepted from now on */
	c->max_memory_bytes = nc.max_memory_bytes;
	c->read_timeout_ms = nc.read_timeout_ms;
	c->idle_timeout_ms = nc.idle_timeout_ms;
	c->write_timeout_ms = nc.write_timeout_ms;
	c->max_dim = nc.max_dim;
	/* Regions already registered stay; the limits apply to the next. */
	c->max_regions_per_conn = nc.max_regions_per_conn;
	c->max_region_bytes_per_conn = nc.max_region_bytes_per_conn;
	c->max_pinned_bytes = nc.max_pinned_bytes;
	c->default_priority = nc.default_priority;
	c->default_timeout_ms = nc.default_timeout_ms;
	c->priority_aging_ms = nc.priority_aging_ms;
	c->worker_poll_us = nc.worker_poll_us;
	c->cpu_inline_max_flops = nc.cpu_inline_max_flops;
	c->loop_poll_us = nc.loop_poll_us;
	c->loop_start = nc.loop_start;
	/* Read at each large frame's header; the pool's size takes a restart. */
	c->reader_min_bytes = nc.reader_min_bytes;
	c->reader_when_busy = nc.reader_when_busy;
	c->batch_enabled = nc.batch_enabled;
	c->batch_max_columns = nc.batch_max_columns;
	c->batch_max_queue_delay_us = nc.batch_max_queue_delay_us;
	c->batch_overlap = nc.batch_overlap;
	/* Weights loaded from now on are warmed (or not) by the new value. */
	c->cuda_warmup = nc.cuda_warmup;
	apply_scheduling(d);
	c->shutdown_grace_ms = nc.shutdown_grace_ms;
	c->status_interval_ms = nc.status_interval_ms;
	c->weight_max_count = nc.weight_max_count; /* for the next load */
	c->ndeclared = nc.ndeclared;
	memcpy(c->declared, nc.declared, sizeof(c->declared));
	log_set_level((enum log_level)c->log_level);
	conn_set_frame_limit(d, config_read_frame_limit(c, NULL));
	say_frame_limit(c);
	notify_set_status_interval(&N, c->status_interval_ms);
	log_notice("configuration reloaded from %s", d->config_path ? d->config_path : "(defaults)");
	/* New, changed and removed declarations load and unload off the loop;
	 * /readyz says 503 until every declared weight is resident. */
	if (!d->stopping)
		declare_apply(d);
	notify_ready(&N);
}

/* ---- a long start's progress, for systemd's start timeout ---- */

/* How often the start's progress is looked at, and how much more time
 * each step of progress asks systemd for (EXTEND_TIMEOUT_USEC): a start
 * restoring many large weights is not killed by TimeoutStartSec= while it
 * goes on making weights resident, and is once it stops for that long. */
#define START_TICK_MS 500
#define START_EXTEND_USEC (120 * 1000000ull)

static uv_timer_t start_timer;
static uint64_t start_seen = UINT64_MAX;

/* Loads finished (resident or failed) since the start: its progress. */
static uint64_t start_progress(const struct daemon *d)
{
	uint64_t n = 0;
	for (int r = 0; r < STATS_NRESULTS; r++)
		n += STATS_GET(d->stats.requests[STATS_LOAD][r]);
	return n;
}

static void on_start_tick(uv_timer_t *t)
{
	const struct daemon *d = t->data;
	uint64_t now = start_progress(d);
	if (now == start_seen)
		return;
	start_seen = now;
	char text[128];
	snprintf(text, sizeof(text), "starting: %" PRIu64 " weight(s) loaded so far", now);
	notify_extend_start(START_EXTEND_USEC, text);
}

/* Set once the daemon is ready: a SIGHUP before that (while stored and
 * declared weights load) is kept for then, so that READY=1 is never sent
 * before the sockets accept. */
static bool serving, reload_pending;

static void on_signal(uv_signal_t *s, int signum)
{
	struct daemon *d = s->data;
	if (signum != SIGHUP) {
		begin_shutdown(d, signum);
	} else if (serving) {
		reload(d);
	} else if (!reload_pending) {
		reload_pending = true;
		log_notice("SIGHUP while starting: the configuration is read again once mfmad is "
			   "ready");
	}
}

static void close_walk(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/* The version and the backends built in, each GPU one with the digest of
 * its kernels where it has one (the key of the choices cached in the
 * state directory names it). */
static int version(void)
{
	static const struct backend_ops *const built[] = {
		&backend_cpu,
#ifdef MFMAD_HAVE_HIP
		&backend_hip,
#endif
#ifdef MFMAD_HAVE_CUDA
		&backend_cuda,
#endif
	};
	printf("mfmad %s\nbackends:", MFMAD_VERSION);
	for (size_t i = 0; i < sizeof(built) / sizeof(built[0]); i++) {
		printf("%s %s", i ? "," : "", built[i]->name);
		if (built[i]->kernels)
			printf(" (kernels %s)", built[i]->kernels);
	}
	printf("\n");
	return 0;
}

/* The state directory (weights.state_dir, else systemd's), when there is
 * one, is this daemon's alone (state_lock.h): 0, or -EBUSY with err
 * naming the daemon that has it.  A read-only one is shared, unlocked.  A
 * lock that cannot be taken for another reason (a directory not made yet,
 * a file system without locks) is said and the start goes on, as it did
 * before there was a lock. */
static int lock_state_dir(struct daemon *d, char *err, size_t errlen)
{
	char dir[256];
	d->state_lock = -1;
	if (!config_state_dir(&d->cfg, dir, sizeof(dir)))
		return 0;
	pid_t holder;
	int fd = state_lock_take(dir, &holder);
	if (fd >= 0) {
		d->state_lock = fd;
		return 0;
	}
	if (fd == -EROFS || fd == -EACCES) {
		log_info("the state directory %s is read-only here: shared with any other "
			 "daemon, not locked", dir);
		return 0;
	}
	if (fd != -EBUSY) {
		log_warn("the state directory %s is not locked (%s): another mfmad given it "
			 "would not be stopped", dir, strerror(-fd));
		return 0;
	}
	char who[48] = "another process";
	if (holder > 0)
		snprintf(who, sizeof(who), "another mfmad (pid %ld)", (long)holder);
	snprintf(err, errlen, "the state directory %s is in use by %s; each daemon needs a "
		 "weights.state_dir of its own", dir, who);
	return -EBUSY;
}

static int parse_backends(const char *s, struct mfmad_config *c)
{
	c->cpu = c->hip = c->cuda = BACKEND_OFF;
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", s);
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (strcmp(t, "cpu") == 0)
			c->cpu = BACKEND_ON;
		else if (strcmp(t, "hip") == 0)
			c->hip = BACKEND_ON;
		else if (strcmp(t, "cuda") == 0)
			c->cuda = BACKEND_ON;
		else
			return -EINVAL;
	}
	return 0;
}

/* glibc's heap for a daemon that allocates and frees a request's pieces
 * (its arena, its job, its answer) in bursts of hundreds: by default the
 * top of the heap is given back to the kernel whenever 128 KiB of it is
 * free and taken again by the next burst, page faults included: a fifth
 * to a third of the loop thread's CPU time at one column a request and
 * 256 in flight (bench/RESULTS.md).  M_TOP_PAD keeps 8 MiB at the top of
 * each arena.  Setting it also freezes glibc's mmap threshold at 128 KiB
 * (the default raises it to the size of the large blocks freed, up to 32
 * MiB, so that a frame buffer of a few MiB is reused instead of mapped
 * afresh each time: 6x slower at 2 MiB frames when frozen), so the
 * threshold is set to that ceiling.  Left alone when GLIBC_TUNABLES says
 * anything of malloc: the user's settings win. */
static void tune_heap(void)
{
#ifdef __GLIBC__
	const char *t = getenv("GLIBC_TUNABLES");
	if (t && strstr(t, "glibc.malloc."))
		return;
	mallopt(M_TOP_PAD, 8 << 20);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, 'C' },
		{ "socket", required_argument, NULL, 's' },
		{ "tcp", required_argument, NULL, 'T' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "cpu-devices", required_argument, NULL, 'D' },
		{ "backends", required_argument, NULL, 'B' },
		{ "metrics", required_argument, NULL, 'M' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct daemon *d = &D;
	bool check_only = false;
	char err[512];
	int opt;
	log_init();
	tune_heap();
	config_defaults(&d->cli);
	while ((opt = getopt_long(argc, argv, "c:s:l:t:Vh", opts, NULL)) != -1) {
		char *end;
		long v;
		switch (opt) {
		case 'c': d->config_path = optarg; break;
		case 'C': check_only = true; break;
		case 's':
			if (strlen(optarg) >= sizeof(d->cli.unix_path)) {
				fprintf(stderr, "mfmad: --socket: path longer than 107 bytes\n");
				return 2;
			}
			snprintf(d->cli.unix_path, sizeof(d->cli.unix_path), "%s", optarg);
			d->cli_set |= CLI_SOCKET;
			break;
		case 'T':
			if (parse_hostport(optarg, d->cli.tcp_address, sizeof(d->cli.tcp_address),
					   &d->cli.tcp_port) < 0) {
				fprintf(stderr, "mfmad: --tcp '%s': expected [ADDR:]PORT\n", optarg);
				return 2;
			}
			d->cli_set |= CLI_TCP;
			break;
		case 'M':
			if (parse_hostport(optarg, d->cli.metrics_address,
					   sizeof(d->cli.metrics_address), &d->cli.metrics_port) < 0) {
				fprintf(stderr, "mfmad: --metrics '%s': expected [ADDR:]PORT\n", optarg);
				return 2;
			}
			d->cli_set |= CLI_METRICS;
			break;
		case 'l':
			d->cli.log_level = log_level_parse(optarg);
			if (d->cli.log_level < 0) {
				fprintf(stderr, "mfmad: --log-level '%s': use error, warning, notice, info "
						"or debug\n", optarg);
				return 2;
			}
			d->cli_set |= CLI_LOG;
			break;
		case 't':
		case 'D':
			v = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || v < (opt == 't' ? 0 : 1) || v > 4096) {
				fprintf(stderr, "mfmad: --%s '%s': expected a number from %d to 4096%s\n",
					opt == 't' ? "threads" : "cpu-devices", optarg, opt == 't' ? 0 : 1,
					opt == 't' ? " (0: all cores)" : "");
				return 2;
			}
			if (opt == 't') {
				d->cli.cpu_threads = (int)v;
				d->cli_set |= CLI_THREADS;
			} else {
				d->cli.cpu_devices = (int)v;
				d->cli_set |= CLI_CPU_DEVICES;
			}
			break;
		case 'B':
			if (parse_backends(optarg, &d->cli) < 0) {
				fprintf(stderr, "mfmad: --backends '%s': a comma list of cpu, hip, cuda\n",
					optarg);
				return 2;
			}
			d->cli_set |= CLI_BACKENDS;
			break;
		case 'V': return version();
		case 'h': fputs(usage_text, stdout); return 0;
		default: fputs("Try 'mfmad --help'.\n", stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mfmad: unexpected argument '%s'\nTry 'mfmad --help'.\n", argv[optind]);
		return 2;
	}
	static const char default_conf[] = MFMAD_SYSCONFDIR "/mfmad/mfmad.conf";
	if (!d->config_path && access(default_conf, F_OK) == 0)
		d->config_path = default_conf;
	if (read_config(d, &d->cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "mfmad: %s\n", err);
		return 1;
	}
	if (check_only) {
		print_config(&d->cfg, d->config_path ? d->config_path : "built-in defaults");
		fprintf(stderr, "mfmad: configuration OK\n");
		return 0;
	}
	log_set_level((enum log_level)d->cfg.log_level);
	say_frame_limit(&d->cfg);
	signal(SIGPIPE, SIG_IGN);

	d->loop = uv_default_loop();
	d->loop->data = d;
	d->stats.start_ns = mfma_clock_ns();
	uv_timer_init(d->loop, &d->grace_timer);
	d->grace_timer.data = d;
	uv_signal_t *sigs[] = { &d->sig_term, &d->sig_int, &d->sig_hup };
	int signums[] = { SIGTERM, SIGINT, SIGHUP };
	for (int i = 0; i < 3; i++) {
		uv_signal_init(d->loop, sigs[i]);
		sigs[i]->data = d;
		uv_signal_start(sigs[i], on_signal, signums[i]);
	}
	uv_signal_init(d->loop, &sig_usr1);
	sig_usr1.data = d;
	uv_signal_start(&sig_usr1, on_signal, SIGUSR1);

	log_notice("mfmad %s starting (config: %s)", MFMAD_VERSION,
		   d->config_path ? d->config_path : "built-in defaults");
	int rc = lock_state_dir(d, err, sizeof(err));
	if (rc == 0 && (rc = conn_start(d)) < 0)
		snprintf(err, sizeof(err), "cannot start the connection timer: %s", uv_strerror(rc));
	if (rc == 0 && (rc = loop_poll_init(&LP, d->loop)) < 0)
		snprintf(err, sizeof(err), "cannot start the loop's poll handles: %s",
			 uv_strerror(rc));
	if (rc == 0) {
		long ncores = sysconf(_SC_NPROCESSORS_ONLN);
		unsigned nr = config_reader_threads(&d->cfg, ncores);
		rc = readers_start(d->loop, nr, &d->readers);
		if (rc < 0)
			snprintf(err, sizeof(err), "cannot start %u reader thread(s): %s", nr,
				 strerror(-rc));
		else if (nr)
			log_info("%u reader thread(s) for frames of %" PRIu64
				 " KiB and more (limits.reader_threads)", nr,
				 d->cfg.reader_min_bytes >> 10);
	}
	if (rc == 0)
		rc = devices_probe(d, err, sizeof(err));
	/* Before the devices open: they register it as they do. */
	if (rc == 0 && (rc = read_arena_open(d, err, sizeof(err))) == 0 && d->read_arena)
		log_info("request frames of 4 KiB and more are read into %" PRIu64
			 " MiB the GPUs register (limits.pinned_reads_mb)",
			 d->cfg.pinned_read_bytes >> 20);
	/* The devices find the measured choices when they open. */
	if (rc == 0 && (rc = choices_start(d)) < 0)
		snprintf(err, sizeof(err), "cannot start the cache of choices: %s", strerror(-rc));
	if (rc == 0)
		rc = sched_start(d, err, sizeof(err));
	/* Stored weights are resident again before anyone can connect.  A
	 * SIGTERM meanwhile (begin_shutdown) ends the start once the load
	 * under way is over: nothing more is loaded, nothing listens. */
	bool start_ticking = rc == 0 && uv_timer_init(d->loop, &start_timer) == 0;
	if (start_ticking) {
		start_timer.data = d;
		uv_timer_start(&start_timer, on_start_tick, START_TICK_MS, START_TICK_MS);
		uv_unref((uv_handle_t *)&start_timer);
	}
	if (rc == 0)
		weights_restore(d);
	/* Declared weights too (the declaration wins over a stored copy). */
	if (rc == 0 && !d->stopping) {
		declare_apply(d);
		declare_wait(d);
	}
	if (start_ticking)
		uv_timer_stop(&start_timer);
	const bool stopped = rc == 0 && d->stopping;
	if (stopped)
		rc = 1;
	if (rc == 0)
		apply_scheduling(d);
	if (rc == 0)
		rc = listen_start(d, &dispatch_events, err, sizeof(err));
	if (rc == 0 && d->cfg.metrics_enabled) {
		struct metrics *m = NULL;
		rc = metrics_start(d->cfg.metrics_address, d->cfg.metrics_port,
				   d->cfg.metrics_allow_remote, &d->stats, &m, err, sizeof(err));
		if (rc == 0) {
			d->metrics = m;
			log_info("metrics on http://%s%s%s:%d/metrics",
				 strchr(d->cfg.metrics_address, ':') ? "[" : "", d->cfg.metrics_address,
				 strchr(d->cfg.metrics_address, ':') ? "]" : "", metrics_port(m));
		}
	}
	if (rc == 0) {
		rc = notify_start(&N, d->loop, &d->stats, d->cfg.status_interval_ms);
		if (rc < 0)
			snprintf(err, sizeof(err), "cannot start the systemd watchdog timer: %s",
				 uv_strerror(rc));
	}
	if (rc < 0) {
		log_err("%s", err);
		d->exit_code = 1;
	} else if (stopped) {
		log_notice("stopped while starting: nothing was served");
	} else {
		atomic_store(&d->stats.ready, 1);
		/* After the sockets accept and the devices are up. */
		notify_ready(&N);
		log_notice("ready: %d device(s)", d->ndev);
		serving = true;
		if (reload_pending)
			reload(d);
		uv_run(d->loop, UV_RUN_DEFAULT);
		log_notice("stopped: every request answered");
	}

	/* Tear down in an order that lets every device free its own memory:
	 * weights first (their frees are queued to the workers), then the
	 * workers, then the completions they left, then the handles. */
	metrics_stop(d->metrics);
	d->metrics = NULL;
	notify_close(&N);
	listen_close(d);
	/* Before the connections close: a frame a reader holds goes back to
	 * its connection first. */
	readers_stop(d->readers);
	conn_close_all(d);
	weights_destroy(d);
	sched_stop(d);
	sched_drain(d);
	uv_walk(d->loop, close_walk, NULL);
	uv_run(d->loop, UV_RUN_DEFAULT);
	choices_free(d);
	declare_free(d);
	sched_free(d);
	readers_free(d->readers);
	d->readers = NULL;
	/* The devices have let it go; frames still out free it last. */
	read_arena_close(d);
	devices_free(d);
	listen_free(d);
	if (d->state_lock >= 0)
		close(d->state_lock);
	uv_loop_close(d->loop);
	return d->exit_code;
}
