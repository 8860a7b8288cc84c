/* /metrics, /healthz and /readyz; see metrics.h.  The text format follows
 * https://prometheus.io/docs/instrumenting/exposition_formats/ and the
 * counters follow Triton's: requests by result, cumulative per-phase
 * durations, a latency histogram, queue depths and memory per device. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mfma_clock.h"
#include "mfmad_build.h"

#if MFMAD_HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

/* ---- rendering (pure) ---- */

struct buf {
	char *p;
	size_t len, cap;
	int err;
};

static void buf_reserve(struct buf *b, size_t more)
{
	if (b->err || b->len + more + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (p == NULL) {
		b->err = -ENOMEM;
		return;
	}
	b->p = p;
	b->cap = cap;
}

__attribute__((format(printf, 2, 3))) static void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->err = -EINVAL;
		return;
	}
	buf_reserve(b, (size_t)n);
	if (b->err)
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* Nanoseconds as an exact decimal number of seconds ("0.000025", "10", "0"):
 * no float rounding, so a test can compare the text exactly. */
static const char *fmt_seconds(uint64_t ns, char out[32])
{
	uint64_t sec = ns / 1000000000u, frac = ns % 1000000000u;
	if (frac == 0) {
		snprintf(out, 32, "%" PRIu64, sec);
		return out;
	}
	char f[10];
	snprintf(f, sizeof(f), "%09" PRIu64, frac);
	size_t n = 9;
	while (n > 0 && f[n - 1] == '0')
		n--;
	f[n] = '\0';
	snprintf(out, 32, "%" PRIu64 ".%s", sec, f);
	return out;
}

/* A label value with \, " and newline escaped, as the format requires; the
 * source is a fixed-size field that may lack a terminating NUL. */
static void buf_label_value(struct buf *b, const char *v, size_t max)
{
	size_t n = strnlen(v, max);
	buf_reserve(b, 2 * n);
	if (b->err)
		return;
	for (size_t i = 0; i < n; i++) {
		if (v[i] == '\\' || v[i] == '"') {
			b->p[b->len++] = '\\';
			b->p[b->len++] = v[i];
		} else if (v[i] == '\n') {
			b->p[b->len++] = '\\';
			b->p[b->len++] = 'n';
		} else {
			b->p[b->len++] = v[i];
		}
	}
	b->p[b->len] = '\0';
}

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
	buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Label values of mfmad_requests_total.  A kind this file does not know yet
 * renders as "other" (as STATS_OTHER does) and an unknown result as "unknown";
 * the unit test fails on either, so a new enum member is not missed. */
static const char *kind_label(int k)
{
	switch (k) {
	case STATS_GEMM: return "gemm";
	case STATS_LOAD: return "load_weight";
	case STATS_UNLOAD: return "unload_weight";
	case STATS_LIST: return "list_weights";
	case STATS_STATUS: return "status";
	case STATS_PING: return "ping";
	case STATS_REGION: return "region";
	default: return "other";
	}
}

static const char *result_label(int r)
{
	switch (r) {
	case STATS_OK: return "ok";
	case STATS_INVALID: return "invalid";
	case STATS_NOT_FOUND: return "not_found";
	case STATS_EXISTS: return "exists";
	case STATS_BUSY: return "busy";
	case STATS_UNAVAILABLE: return "unavailable";
	case STATS_DEADLINE: return "deadline";
	case STATS_INTERNAL: return "internal";
	case STATS_MALFORMED: return "malformed";
	default: return "unknown";
	}
}

static void render_seconds_counter(struct buf *b, const char *name, const char *help,
				   uint64_t ns)
{
	char t[32];
	family(b, name, "counter", help);
	buf_printf(b, "%s %s\n", name, fmt_seconds(ns, t));
}

static void render_gauge(struct buf *b, const char *name, const char *help, uint64_t v)
{
	family(b, name, "gauge", help);
	buf_printf(b, "%s %" PRIu64 "\n", name, v);
}

static void render_counter(struct buf *b, const char *name, const char *help, uint64_t v)
{
	family(b, name, "counter", help);
	buf_printf(b, "%s %" PRIu64 "\n", name, v);
}

/* A counter family of two series, one label telling them apart
 * (label="a" and label="b"). */
static void render_counter_pair(struct buf *b, const char *name, const char *help,
				const char *label, const char *a, uint64_t av, const char *bn,
				uint64_t bv)
{
	family(b, name, "counter", help);
	buf_printf(b, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, a, av);
	buf_printf(b, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, bn, bv);
}

enum dev_field {
	DEV_QUEUED,
	DEV_IN_FLIGHT,
	DEV_COMPLETED,
	DEV_INLINE,
	DEV_LOOP_START,
	DEV_GATED,
	DEV_TILE_OUT,
	DEV_FAILED,
	DEV_UP,
	DEV_WEIGHT_BYTES,
	DEV_MEM
};

static uint64_t dev_get(const struct stats_device *d, enum dev_field f)
{
	switch (f) {
	case DEV_QUEUED: return STATS_GET(d->queued);
	case DEV_IN_FLIGHT: return STATS_GET(d->in_flight);
	case DEV_COMPLETED: return STATS_GET(d->completed);
	case DEV_INLINE: return STATS_GET(d->inline_runs);
	case DEV_LOOP_START: return STATS_GET(d->loop_starts);
	case DEV_GATED: return STATS_GET(d->gated);
	case DEV_TILE_OUT: return STATS_GET(d->tile_out);
	case DEV_FAILED: return STATS_GET(d->failed);
	case DEV_UP: return STATS_GET(d->up);
	case DEV_WEIGHT_BYTES: return STATS_GET(d->weight_bytes);
	case DEV_MEM: return d->mem_total;
	}
	return 0;
}

/* /healthz fails when the event loop has not ticked for this long. */
#define LOOP_STALL_NS (10 * 1000000000ull)

/* How long since the event loop's last tick (0 before its first). */
static uint64_t loop_age_ns(const struct mfmad_stats *s, uint64_t now_ns)
{
	uint64_t beat = STATS_GET(s->loop_beat_ns);
	return beat && now_ns > beat ? now_ns - beat : 0;
}

/* The devices the stats hold, within what they have room for. */
static int devices_of(const struct mfmad_stats *s)
{
	return s->ndevices < 0 ? 0 : s->ndevices > STATS_MAX_DEVICES ? STATS_MAX_DEVICES : s->ndevices;
}

/* Whether some device takes work (none: every one failed to open or has
 * lost its context). */
static bool any_device_up(const struct mfmad_stats *s)
{
	const int ndev = devices_of(s);
	for (int d = 0; d < ndev; d++)
		if (STATS_GET(s->dev[d].up))
			return true;
	return false;
}

static void render_per_device(struct buf *b, const struct mfmad_stats *s, int ndev,
			      const char *name, const char *type, const char *help,
			      enum dev_field f)
{
	family(b, name, type, help);
	for (int d = 0; d < ndev; d++)
		buf_printf(b, "%s{device=\"%d\"} %" PRIu64 "\n", name, d, dev_get(&s->dev[d], f));
}

int metrics_render_at(const struct mfmad_stats *s, uint64_t now_ns, char **out, size_t *len)
{
	if (s == NULL || out == NULL || len == NULL)
		return -EINVAL;

	struct buf b = { 0 };
	char t[32];
	const int ndev = devices_of(s);
	int ready = STATS_GET(s->ready) != 0, stopping = STATS_GET(s->stopping) != 0;
	uint64_t declared_pending = STATS_GET(s->declared_pending);

	family(&b, "mfmad_build_info", "gauge", "Version of the running mfmad (always 1).");
	buf_printf(&b, "mfmad_build_info{version=\"%s\"} 1\n", MFMAD_VERSION);
	render_gauge(&b, "mfmad_up", "Whether the daemon process is up (1 whenever this page is served).", 1);
	render_gauge(&b, "mfmad_ready",
		     "Whether the daemon accepts work: listening, a device up, every declared weight "
		     "resident and not stopping (what /readyz says).",
		     ready && !stopping && !declared_pending && any_device_up(s));
	render_gauge(&b, "mfmad_declared_weights_pending",
		     "Declared weights (weights.declare) loading or failed, not resident.",
		     (double)declared_pending);
	render_gauge(&b, "mfmad_stopping", "Whether a graceful stop is in progress.", stopping);
	family(&b, "mfmad_uptime_seconds", "gauge", "Seconds since the daemon started.");
	buf_printf(&b, "mfmad_uptime_seconds %s\n",
		   fmt_seconds(now_ns > s->start_ns && s->start_ns != 0 ? now_ns - s->start_ns : 0, t));
	family(&b, "mfmad_event_loop_tick_age_seconds", "gauge",
	       "Seconds since the event loop last ran its 100 ms tick (/healthz fails past "
	       "10): a loop that stalls shows here first.");
	buf_printf(&b, "mfmad_event_loop_tick_age_seconds %s\n", fmt_seconds(loop_age_ns(s, now_ns), t));

	family(&b, "mfmad_requests_total", "counter",
	       "Requests answered, by request kind and result (ok or the reason it failed).");
	for (int k = 0; k < STATS_NKINDS; k++)
		for (int r = 0; r < STATS_NRESULTS; r++)
			buf_printf(&b, "mfmad_requests_total{kind=\"%s\",result=\"%s\"} %" PRIu64 "\n",
				   kind_label(k), result_label(r), STATS_GET(s->requests[k][r]));

	render_seconds_counter(&b, "mfmad_gemm_queue_seconds_total",
			       "Cumulative time GEMM requests waited in a device queue.",
			       STATS_GET(s->gemm_queue_ns));
	render_seconds_counter(&b, "mfmad_gemm_h2d_seconds_total",
			       "Cumulative time spent copying GEMM operands to a device.",
			       STATS_GET(s->gemm_h2d_ns));
	render_seconds_counter(&b, "mfmad_gemm_kernel_seconds_total",
			       "Cumulative time spent in GEMM kernels, as timed by device events.",
			       STATS_GET(s->gemm_kernel_ns));
	render_seconds_counter(&b, "mfmad_gemm_d2h_seconds_total",
			       "Cumulative time spent copying GEMM results back from a device.",
			       STATS_GET(s->gemm_d2h_ns));
	render_seconds_counter(&b, "mfmad_gemm_server_seconds_total",
			       "Cumulative server-side time of GEMM requests, from decode to response.",
			       STATS_GET(s->gemm_total_ns));
	render_counter(&b, "mfmad_gemm_flops_total",
		       "Floating-point (or integer) operations of the GEMMs run, counted as dense 2*M*N*K.",
		       STATS_GET(s->gemm_flops));

	/* The stats keep one count per bucket; the format wants cumulative
	 * counts.  The +Inf bucket and _count are the same sum, so the two
	 * never disagree even while workers are adding. */
	family(&b, "mfmad_request_duration_seconds", "histogram",
	       "Server-side latency of requests, from decode to response.");
	uint64_t cum = 0;
	for (int i = 0; i < STATS_LATENCY_BUCKETS; i++) {
		cum += STATS_GET(s->latency_bucket[i]);
		buf_printf(&b, "mfmad_request_duration_seconds_bucket{le=\"%s\"} %" PRIu64 "\n",
			   fmt_seconds(stats_latency_le_ns[i], t), cum);
	}
	cum += STATS_GET(s->latency_bucket[STATS_LATENCY_BUCKETS]);
	buf_printf(&b, "mfmad_request_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
	buf_printf(&b, "mfmad_request_duration_seconds_sum %s\n",
		   fmt_seconds(STATS_GET(s->latency_sum_ns), t));
	buf_printf(&b, "mfmad_request_duration_seconds_count %" PRIu64 "\n", cum);

	/* Batching, in the manner of Triton's execution and inference counts:
	 * launches against the GEMMs they answered, and requests per launch. */
	render_counter(&b, "mfmad_gemm_executions_total",
		       "GEMM launches run on devices (a batch of requests is one launch).",
		       STATS_GET(s->batch_count));
	family(&b, "mfmad_gemm_batch_size", "histogram", "Requests per GEMM launch.");
	cum = 0;
	for (int i = 0; i < STATS_BATCH_BUCKETS; i++) {
		cum += STATS_GET(s->batch_bucket[i]);
		buf_printf(&b, "mfmad_gemm_batch_size_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n",
			   stats_batch_le[i], cum);
	}
	cum += STATS_GET(s->batch_bucket[STATS_BATCH_BUCKETS]);
	buf_printf(&b, "mfmad_gemm_batch_size_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
	buf_printf(&b, "mfmad_gemm_batch_size_sum %" PRIu64 "\n", STATS_GET(s->batch_sum));
	buf_printf(&b, "mfmad_gemm_batch_size_count %" PRIu64 "\n", cum);

	/* Planning per N: at weight load (cuda.warmup) against on the serving
	 * path, where the GEMM that makes a plan and the queue behind it wait
	 * for it. */
	render_counter_pair(&b, "mfmad_gemm_plans_total",
			    "Per-N kernel plans the device backends made (a library's plan with its "
			    "algorithm search), at weight load (warming) or on the serving path (a "
			    "GEMM's first of its width).",
			    "when", "load", STATS_GET(s->plans_load), "serving",
			    STATS_GET(s->plans_serving));
	render_counter_pair(&b, "mfmad_gemm_choice_measurements_total",
			    "Choices among kernel providers measured on a device (each candidate "
			    "timed), at weight load (warming) or on the serving path; a choice found "
			    "in the state directory is not measured.",
			    "when", "load", STATS_GET(s->measures_load), "serving",
			    STATS_GET(s->measures_serving));
	render_counter_pair(&b, "mfmad_gemm_choice_trials_total",
			    "Served trials of a measured choice that ended (cuda.served_trial: a "
			    "bucket's candidates served in a block each), by whether "
			    "the one measured fastest kept the lead or another took it.",
			    "outcome", "kept", STATS_GET(s->trials_kept), "changed",
			    STATS_GET(s->trials_changed));

	render_counter_pair(&b, "mfmad_gemm_matrices_total",
			    "A GEMM frame's large matrices (4 KiB or more), by whether the decode "
			    "left them in the frame it read or copied them out (not at a 16-byte "
			    "offset: a client that does not send Request.pad).",
			    "placement", "in_place", STATS_GET(s->matrices_in_place), "copied",
			    STATS_GET(s->matrices_copied));
	render_counter(&b, "mfmad_reader_frames_total",
		       "Frames whose body a reader thread read from the socket and decoded, off "
		       "the loop (limits.reader_threads, reader_min_kb, reader_when_busy).",
		       STATS_GET(s->reader_frames));
	render_counter_pair(&b, "mfmad_gemm_answer_frames_total",
			    "GEMM answer frames that carry D, by where they were laid out: pinned "
			    "(a device's arena of answer frames, cuda.pinned_answers_mb: the device "
			    "copied D into the frame) or heap (D staged and copied by the host).",
			    "memory", "pinned", STATS_GET(s->answer_frames[STATS_FRAME_PINNED]), "heap",
			    STATS_GET(s->answer_frames[STATS_FRAME_HEAP]));
	render_counter(&b, "mfmad_gemm_batches_left_running_total",
		       "Batched launches left running on the device while its worker started the "
		       "next batch behind them (batching.overlap).",
		       STATS_GET(s->batches_left));
	render_counter(&b, "mfmad_gemm_batches_retried_total",
		       "Batched launches that failed, at their start or their end, each of whose "
		       "requests then ran alone.",
		       STATS_GET(s->batches_retried));
	render_counter_pair(&b, "mfmad_gemm_request_frames_total",
			    "GEMM request frames whose large matrices stayed in them, by where the "
			    "frame was read: pinned (the arena the GPUs registered, "
			    "limits.pinned_reads_mb: a device copies B and C from the frame) or heap "
			    "(staged and copied by the host on the device's worker).",
			    "memory", "pinned", STATS_GET(s->request_frames[STATS_FRAME_PINNED]),
			    "heap", STATS_GET(s->request_frames[STATS_FRAME_HEAP]));

	render_gauge(&b, "mfmad_connections_open", "Client connections open now.",
		     STATS_GET(s->connections_open));
	render_counter(&b, "mfmad_connections_total", "Client connections accepted since start.",
		       STATS_GET(s->connections_total));
	render_counter_pair(&b, "mfmad_tls_handshakes_total",
			    "TLS handshakes on TCP listeners, by result (failed: a certificate missing "
			    "or not trusted, a plaintext client, a handshake past "
			    "limits.read_timeout_ms).",
			    "result", "ok", STATS_GET(s->tls_handshakes_ok), "failed",
			    STATS_GET(s->tls_handshakes_failed));
	render_gauge(&b, "mfmad_in_flight_requests", "Requests received and not yet answered.",
		     STATS_GET(s->in_flight));
	render_gauge(&b, "mfmad_resident_weights", "Weights loaded and resident.",
		     STATS_GET(s->weights));
	render_gauge(&b, "mfmad_weight_bytes", "Bytes of resident weights, over all devices.",
		     STATS_GET(s->weight_bytes));
	render_gauge(&b, "mfmad_weight_budget_bytes", "Bytes the resident weights may take.",
		     STATS_GET(s->weight_budget));

	render_gauge(&b, "mfmad_devices", "Devices the daemon serves.", (uint64_t)ndev);
	family(&b, "mfmad_device_info", "gauge",
	       "Each device's backend, architecture and name (always 1).");
	for (int d = 0; d < ndev; d++) {
		const struct stats_device *dv = &s->dev[d];
		buf_printf(&b, "mfmad_device_info{device=\"%d\",backend=\"", d);
		buf_label_value(&b, dv->backend, sizeof(dv->backend));
		buf_printf(&b, "\",arch=\"");
		buf_label_value(&b, dv->arch, sizeof(dv->arch));
		buf_printf(&b, "\",name=\"");
		buf_label_value(&b, dv->name, sizeof(dv->name));
		buf_printf(&b, "\"} 1\n");
	}
	render_per_device(&b, s, ndev, "mfmad_device_up", "gauge",
			  "Whether the device takes work: 0 when it failed to open or has lost its "
			  "context since (mfmactl status says why).", DEV_UP);
	render_per_device(&b, s, ndev, "mfmad_device_memory_total_bytes", "gauge",
			  "Memory of the device.", DEV_MEM);
	render_per_device(&b, s, ndev, "mfmad_device_weight_bytes", "gauge",
			  "Bytes of resident weights on the device.", DEV_WEIGHT_BYTES);
	render_per_device(&b, s, ndev, "mfmad_device_queued_requests", "gauge",
			  "Requests waiting in the device's queue.", DEV_QUEUED);
	render_per_device(&b, s, ndev, "mfmad_device_in_flight_requests", "gauge",
			  "Requests the device's worker is running now.", DEV_IN_FLIGHT);
	render_per_device(&b, s, ndev, "mfmad_device_completed_total", "counter",
			  "Requests the device finished successfully.", DEV_COMPLETED);
	render_per_device(&b, s, ndev, "mfmad_device_inline_total", "counter",
			  "Requests run on the loop thread instead of the device's queue (GEMMs of at "
			  "most cpu.inline_max_flops on an idle CPU device), finished or failed.",
			  DEV_INLINE);
	render_per_device(&b, s, ndev, "mfmad_device_loop_starts_total", "counter",
			  "Requests whose launch the loop thread started on an idle device "
			  "(limits.loop_start), finished by the device's worker or failed.",
			  DEV_LOOP_START);
	render_per_device(&b, s, ndev, "mfmad_device_gated_total", "counter",
			  "Requests whose kernel was launched before their B was on the device "
			  "(cuda.gate), answered.",
			  DEV_GATED);
	render_per_device(&b, s, ndev, "mfmad_device_tile_out_total", "counter",
			  "Requests whose kernel copied D into registered host memory itself "
			  "(cuda.tile_out), answered.",
			  DEV_TILE_OUT);
	render_per_device(&b, s, ndev, "mfmad_device_failed_total", "counter",
			  "Requests that failed on the device or in its queue (copy or kernel errors, "
			  "deadlines passed while queued, cancelled at shutdown).",
			  DEV_FAILED);
	family(&b, "mfmad_device_kernel_seconds_total", "counter",
	       "Cumulative kernel time on the device, once per launch (a batch's requests share "
	       "one).");
	for (int d = 0; d < ndev; d++)
		buf_printf(&b, "mfmad_device_kernel_seconds_total{device=\"%d\"} %s\n", d,
			   fmt_seconds(STATS_GET(s->dev[d].kernel_ns), t));
	family(&b, "mfmad_device_launch_seconds_total", "counter",
	       "Cumulative host time of the kernel launch calls, once per launch (where a launch "
	       "call outlasts the copy in, the GPU waits for it).");
	for (int d = 0; d < ndev; d++)
		buf_printf(&b, "mfmad_device_launch_seconds_total{device=\"%d\"} %s\n", d,
			   fmt_seconds(STATS_GET(s->dev[d].launch_ns), t));
	family(&b, "mfmad_device_worker_seconds_total", "counter",
	       "Where the device's worker thread spent its time: idle (waiting for work, its poll "
	       "included), prepare (taking jobs, laying out their answers, a one-off A, a weight's "
	       "load), launch (the backend's GEMM call; one not left running is waited for inside "
	       "it), wait (for a launch left running to end), answers (timing, encoding and "
	       "counting answers, handing them to the post threads).");
	for (int d = 0; d < ndev; d++) {
		uint64_t wns[STATS_WORKER_NPHASES];
		stats_worker_read(&s->dev[d], now_ns, wns);
		for (int ph = 0; ph < STATS_WORKER_NPHASES; ph++)
			buf_printf(&b, "mfmad_device_worker_seconds_total{device=\"%d\",phase=\"%s\"} %s\n",
				   d, stats_worker_phase_names[ph], fmt_seconds(wns[ph], t));
	}
	family(&b, "mfmad_device_batch_host_seconds_total", "counter",
	       "Host time of batched launches' gather (the parts' B and C joined: on the device for "
	       "CUDA, in host memory for the CPU and HIP) and split (the joined D back to the parts) "
	       "calls, part of the worker's launch phase (a launch not left running is waited for in "
	       "its split).");
	for (int d = 0; d < ndev; d++) {
		buf_printf(&b, "mfmad_device_batch_host_seconds_total{device=\"%d\",step=\"gather\"} %s\n",
			   d, fmt_seconds(STATS_GET(s->dev[d].gather_ns), t));
		buf_printf(&b, "mfmad_device_batch_host_seconds_total{device=\"%d\",step=\"split\"} %s\n",
			   d, fmt_seconds(STATS_GET(s->dev[d].split_ns), t));
	}

	if (b.err) {
		free(b.p);
		return b.err;
	}
	*out = b.p;
	*len = b.len;
	return 0;
}

int metrics_render(const struct mfmad_stats *s, char **out, size_t *len)
{
	return metrics_render_at(s, mfma_clock_ns(), out, len);
}

/* ---- address checks ---- */

/* Parses an IPv4 or IPv6 literal (IPv6 optionally in brackets) or
 * "localhost" into a socket address with the given port. */
static int parse_address(const char *address, int port, struct sockaddr_storage *ss)
{
	char host[INET6_ADDRSTRLEN + 2];
	size_t n = strlen(address);
	memset(ss, 0, sizeof(*ss));

	if (n >= 2 && address[0] == '[' && address[n - 1] == ']') {
		if (n - 2 >= sizeof(host))
			return -EINVAL;
		memcpy(host, address + 1, n - 2);
		host[n - 2] = '\0';
	} else {
		if (n >= sizeof(host))
			return -EINVAL;
		memcpy(host, address, n + 1);
	}
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");

	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (host[0] == '\0')
		return -EINVAL;
	if (address[0] != '[' && inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		return 0;
	}
	return -EINVAL;
}

static int sockaddr_is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in4 = (const struct sockaddr_in *)ss;
		return (ntohl(in4->sin_addr.s_addr) >> 24) == 127;
	}
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
	if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
		return 1;
	return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
}

int metrics_address_is_loopback(const char *address)
{
	struct sockaddr_storage ss;
	if (address == NULL || parse_address(address, 0, &ss) < 0)
		return -EINVAL;
	return sockaddr_is_loopback(&ss);
}

/* ---- the HTTP server ---- */

#if MFMAD_HAVE_MICROHTTPD

struct metrics {
	struct MHD_Daemon *mhd;
	const struct mfmad_stats *stats;
	int port;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned int code, const char *type,
			     void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
	if (resp == NULL) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	/* Scrapers and probes want the current state, never a cached one. */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	enum MHD_Result r = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned int code, const char *text)
{
	return reply(c, code, "text/plain; charset=utf-8", (void *)text, strlen(text),
		     MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size,
				  void **req_cls)
{
	struct metrics *m = cls;
	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)req_cls;

	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are served\n");

	if (strcmp(url, "/metrics") == 0) {
		char *body;
		size_t len;
		if (metrics_render(m->stats, &body, &len) < 0)
			return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
		return reply(c, MHD_HTTP_OK, METRICS_CONTENT_TYPE, body, len,
			     MHD_RESPMEM_MUST_FREE);
	}
	if (strcmp(url, "/healthz") == 0) {
		/* The loop answers every client: one that no longer runs (a
		 * deadlock, a call that never returns) is not healthy, though
		 * this thread still answers. */
		uint64_t age = loop_age_ns(m->stats, mfma_clock_ns());
		if (age > LOOP_STALL_NS) {
			char text[96];
			int n = snprintf(text, sizeof(text), "event loop stalled: no tick for %.1f s\n",
					 (double)age / 1e9);
			return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", text,
				     (size_t)n, MHD_RESPMEM_MUST_COPY);
		}
		return reply_text(c, MHD_HTTP_OK, "ok\n");
	}
	if (strcmp(url, "/readyz") == 0) {
		if (STATS_GET(m->stats->stopping))
			return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "stopping\n");
		if (!STATS_GET(m->stats->ready))
			return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "not ready\n");
		if (STATS_GET(m->stats->declared_pending))
			return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "not ready: declared weights not resident (mfmactl status)\n");
		if (loop_age_ns(m->stats, mfma_clock_ns()) > LOOP_STALL_NS)
			return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "not ready: the event loop has stalled (/healthz)\n");
		if (!any_device_up(m->stats))
			return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "not ready: no device takes work (mfmactl status)\n");
		return reply_text(c, MHD_HTTP_OK, "ready\n");
	}
	return reply_text(c, MHD_HTTP_NOT_FOUND, "not found: try /metrics, /healthz or /readyz\n");
}

int metrics_start(const char *address, int port, bool allow_remote, const struct mfmad_stats *s,
		  struct metrics **out, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	char dummy[1];
	if (err == NULL || errlen == 0) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (s == NULL || out == NULL) {
		snprintf(err, errlen, "metrics: internal error (no stats or result pointer)");
		return -EINVAL;
	}
	if (port < 0 || port > 65535) {
		snprintf(err, errlen, "metrics.port=%d is not a TCP port (0..65535)", port);
		return -EINVAL;
	}
	if (address == NULL || parse_address(address, port, &ss) < 0) {
		snprintf(err, errlen,
			 "metrics.address=\"%s\" is not an IPv4 or IPv6 address or \"localhost\"",
			 address ? address : "");
		return -EINVAL;
	}
	if (!allow_remote && !sockaddr_is_loopback(&ss)) {
		snprintf(err, errlen,
			 "metrics.address=\"%s\" is not a loopback address; the endpoint has no "
			 "authentication, so set metrics.allow_remote = true to serve it there",
			 address);
		return -EACCES;
	}

	struct metrics *m = calloc(1, sizeof(*m));
	if (m == NULL) {
		snprintf(err, errlen, "metrics: out of memory");
		return -ENOMEM;
	}
	m->stats = s;

	unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* MHD leaves errno from the failing socket/bind/listen call. */
	errno = 0;
	m->mhd = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, m,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				  /* A scraper or two and a few probes; nothing needs more. */
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned int)METRICS_CONNECTIONS,
				  /* The timeout counts inactivity only: a client sending a
				   * header line every few seconds keeps its connection.
				   * Per address, so that one such client cannot take
				   * every slot from the probes (/healthz, /readyz). */
				  MHD_OPTION_PER_IP_CONNECTION_LIMIT,
				  (unsigned int)METRICS_CONNECTIONS_PER_ADDRESS,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10,
				  MHD_OPTION_END);
	if (m->mhd == NULL) {
		int e = errno ? errno : EADDRNOTAVAIL;
		snprintf(err, errlen, "metrics: cannot listen on %s port %d: %s", address, port,
			 strerror(e));
		free(m);
		return -e;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_BIND_PORT);
	m->port = info != NULL && info->port != 0 ? info->port : port;
	*out = m;
	return 0;
}

int metrics_port(const struct metrics *m)
{
	return m == NULL ? -EINVAL : m->port;
}

void metrics_stop(struct metrics *m)
{
	if (m == NULL)
		return;
	MHD_stop_daemon(m->mhd);
	free(m);
}

#else /* !MFMAD_HAVE_MICROHTTPD */

struct metrics {
	int unused;
};

int metrics_start(const char *address, int port, bool allow_remote, const struct mfmad_stats *s,
		  struct metrics **out, char *err, size_t errlen)
{
	(void)address;
	(void)port;
	(void)allow_remote;
	(void)s;
	(void)out;
	if (err != NULL && errlen > 0)
		snprintf(err, errlen,
			 "metrics.enabled = true, but this mfmad was built without libmicrohttpd");
	return -ENOTSUP;
}

int metrics_port(const struct metrics *m)
{
	(void)m;
	return -ENOTSUP;
}

void metrics_stop(struct metrics *m)
{
	(void)m;
}

#endif
