#include "config.h"

#include <errno.h>
#include <libconfig.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "frame.h"
#include "frame_arena.h"
#include "log.h"
#include "mfma.pb-c.h"
#include "mfma_dtype.h"
#include "stats.h"
#include "validate.h"

void config_defaults(struct mfmad_config *c)
{
	memset(c, 0, sizeof(*c));
	c->log_level = LOG_LVL_INFO;
	c->unix_mode = 0660;
	snprintf(c->tcp_address, sizeof(c->tcp_address), "127.0.0.1");
	c->tcp_port = 7470;
	c->max_frame_bytes = 256ull << 20;
	c->max_inflight_per_conn = 64;
	c->max_inflight = 1024;
	c->max_inflight_bytes = 4096ull << 20;
	c->max_connections = 256;
	c->max_connections_per_user = 64;
	c->max_connections_per_address = 0;
	c->max_buffered_bytes = 1024ull << 20;
	c->max_unsent_bytes = 64ull << 20;
	c->send_buffer_bytes = 1ull << 20;
	c->max_memory_bytes = 6144ull << 20;
	c->read_timeout_ms = 30000;
	c->idle_timeout_ms = 600000;
	c->write_timeout_ms = 60000;
	c->max_dim = 65536;
	c->max_regions_per_conn = 16;
	c->max_region_bytes_per_conn = 4096ull << 20;
	c->max_pinned_bytes = 16384ull << 20;
	c->default_priority = 5;
	c->priority_aging_ms = 1000;
	c->loop_start = true;
	/* Off: on the H200's 16-core host they took the loop's CPU per
	 * request from 51-64 to 33-35 us but not the rate up (bench/RESULTS.md). */
	c->reader_threads = -1; /* auto */
	c->reader_min_bytes = 8ull << 10;
	c->reader_when_busy = true;
	c->pinned_read_bytes = 64ull << 20;
	c->post_threads = 4;
	c->batch_enabled = true;
	c->batch_overlap = true;
	c->batch_max_columns = 512;
	c->weights_persist = true;
	c->persist_min_free_bytes = 1024ull << 20;
	c->weight_max_count = 1024;
	c->cpu = BACKEND_AUTO;
	c->cpu_devices = 1;
	c->cpu_inline_max_flops = CONFIG_CPU_INLINE_MAX_FLOPS;
	c->hip = BACKEND_AUTO;
	c->cuda = BACKEND_AUTO;
	c->hip_providers.prefer = -1;
	c->cuda_providers.prefer = -1;
	c->cuda_warmup = true;
	c->cuda_graphs = true;
	c->cuda_served_trial = 16;
	c->cuda_pinned_answer_bytes = 64ull << 20;
	c->cuda_dma_part_bytes = CONFIG_DMA_PART_BYTES;
	c->cuda_region_copies = true;
	c->cuda_out_stream = true;
	c->cuda_gate = true;
	c->cuda_tile_out = true;
	c->shutdown_grace_ms = 10000;
	snprintf(c->metrics_address, sizeof(c->metrics_address), "127.0.0.1");
	c->metrics_port = 9464;
	c->status_interval_ms = 5000;
}

/* Parsing context: the file name for messages and the first error. */
struct pctx {
	const char *file;
	char *err;
	size_t errlen;
	int failed;
};

static void fail(struct pctx *p, const config_setting_t *s, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail(struct pctx *p, const config_setting_t *s, const char *fmt, ...)
{
	if (p->failed)
		return;
	p->failed = 1;
	int n = snprintf(p->err, p->errlen, "%s:%d: ", p->file, s ? config_setting_source_line(s) : 0);
	if (n < 0 || (size_t)n >= p->errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
	va_end(ap);
}

/* Full dotted name of a setting, for messages. */
static const char *path_of(const config_setting_t *s, char *buf, size_t len)
{
	const config_setting_t *parent = config_setting_parent(s);
	const char *name = config_setting_name(s);
	if (!name)
		name = "?";
	if (parent && config_setting_name(parent)) {
		char pb[128];
		snprintf(buf, len, "%s.%s", path_of(parent, pb, sizeof(pb)), name);
	} else {
		snprintf(buf, len, "%s", name);
	}
	return buf;
}

static int get_int64(struct pctx *p, const config_setting_t *s, long long lo, long long hi,
		     long long *out)
{
	char nb[128];
	int t = config_setting_type(s);
	if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64) {
		fail(p, s, "%s must be an integer", path_of(s, nb, sizeof(nb)));
		return -1;
	}
	long long v = config_setting_get_int64(s);
	if (v < lo || v > hi) {
		fail(p, s, "%s = %lld is out of range %lld..%lld", path_of(s, nb, sizeof(nb)), v, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

static void set_u32(struct pctx *p, const config_setting_t *s, long long lo, long long hi,
		    uint32_t *dst)
{
	long long v;
	if (get_int64(p, s, lo, hi, &v) == 0)
		*dst = (uint32_t)v;
}

static void set_int(struct pctx *p, const config_setting_t *s, long long lo, long long hi, int *dst)
{
	long long v;
	if (get_int64(p, s, lo, hi, &v) == 0)
		*dst = (int)v;
}

static void set_u64(struct pctx *p, const config_setting_t *s, long long lo, long long hi,
		    uint64_t mul, uint64_t *dst)
{
	long long v;
	if (get_int64(p, s, lo, hi, &v) == 0)
		*dst = (uint64_t)v * mul;
}

static void set_bool(struct pctx *p, const config_setting_t *s, bool *dst)
{
	char nb[128];
	if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
		fail(p, s, "%s must be true or false", path_of(s, nb, sizeof(nb)));
		return;
	}
	*dst = config_setting_get_bool(s);
}

static const char *get_str(struct pctx *p, const config_setting_t *s)
{
	char nb[128];
	if (config_setting_type(s) != CONFIG_TYPE_STRING) {
		fail(p, s, "%s must be a string", path_of(s, nb, sizeof(nb)));
		return NULL;
	}
	return config_setting_get_string(s);
}

static void set_str(struct pctx *p, const config_setting_t *s, char *dst, size_t len)
{
	char nb[128];
	const char *v = get_str(p, s);
	if (!v)
		return;
	if (strlen(v) >= len) {
		fail(p, s, "%s is longer than %zu bytes", path_of(s, nb, sizeof(nb)), len - 1);
		return;
	}
	strcpy(dst, v);
}

static void set_enable(struct pctx *p, const config_setting_t *s, enum backend_enable *dst)
{
	char nb[128];
	if (config_setting_type(s) == CONFIG_TYPE_BOOL) {
		*dst = config_setting_get_bool(s) ? BACKEND_ON : BACKEND_OFF;
		return;
	}
	const char *v = get_str(p, s);
	if (!v)
		return;
	if (strcmp(v, "auto") == 0)
		*dst = BACKEND_AUTO;
	else
		fail(p, s, "%s must be true, false or \"auto\", not \"%s\"", path_of(s, nb, sizeof(nb)), v);
}

typedef void (*key_fn)(struct pctx *, const config_setting_t *, struct mfmad_config *);

struct key {
	const char *name;
	key_fn fn;
	const struct key *group; /* for a group: its keys */
};

#define KEY(n, body)                                                                               \
	static void k_##n(struct pctx *p, const config_setting_t *s, struct mfmad_config *c)      \
	{                                                                                          \
		(void)c;                                                                           \
		body;                                                                              \
	}

KEY(log_level, {
	const char *v = get_str(p, s);
	int lvl = v ? log_level_parse(v) : -1;
	if (v && lvl < 0)
		fail(p, s, "log_level = \"%s\" is not one of error, warning, notice, info, debug", v);
	else if (v)
		c->log_level = lvl;
})
KEY(unix_path, {
	set_str(p, s, c->unix_path, sizeof(c->unix_path));
})
KEY(unix_mode, {
	const char *v = get_str(p, s);
	char *end;
	long m = v ? strtol(v, &end, 8) : 0;
	if (v && (*v == '\0' || *end != '\0' || m < 0 || m > 0777))
		fail(p, s, "listen.unix_mode = \"%s\" is not an octal mode such as \"0660\"", v);
	else if (v)
		c->unix_mode = (int)m;
})
KEY(tcp, { set_bool(p, s, &c->tcp_enabled); })
KEY(tcp_address, { set_str(p, s, c->tcp_address, sizeof(c->tcp_address)); })
KEY(tcp_port, { set_int(p, s, 1, 65535, &c->tcp_port); })
KEY(tcp_allow_remote, { set_bool(p, s, &c->tcp_allow_remote); })
KEY(token_file, { set_str(p, s, c->token_file, sizeof(c->token_file)); })
KEY(tls_cert, { set_str(p, s, c->tls_cert, sizeof(c->tls_cert)); })
KEY(tls_key, { set_str(p, s, c->tls_key, sizeof(c->tls_key)); })
KEY(tls_client_ca, { set_str(p, s, c->tls_client_ca, sizeof(c->tls_client_ca)); })
KEY(unix_users, { set_str(p, s, c->unix_users, sizeof(c->unix_users)); })
KEY(unix_group, { set_str(p, s, c->unix_group, sizeof(c->unix_group)); })
KEY(max_frame_mb, { set_u64(p, s, 1, 2047, 1ull << 20, &c->max_frame_bytes); })
KEY(max_inflight_per_connection, { set_u32(p, s, 1, 1 << 20, &c->max_inflight_per_conn); })
KEY(max_inflight, { set_u32(p, s, 1, 1 << 24, &c->max_inflight); })
KEY(max_inflight_mb, { set_u64(p, s, 1, 1ll << 30, 1ull << 20, &c->max_inflight_bytes); })
KEY(max_connections, { set_u32(p, s, 1, 1 << 20, &c->max_connections); })
KEY(max_connections_per_user, { set_u32(p, s, 0, 1 << 20, &c->max_connections_per_user); })
KEY(max_connections_per_address, { set_u32(p, s, 0, 1 << 20, &c->max_connections_per_address); })
KEY(max_buffered_mb, { set_u64(p, s, 1, 1ll << 30, 1ull << 20, &c->max_buffered_bytes); })
KEY(max_unsent_mb, { set_u64(p, s, 1, 1ll << 30, 1ull << 20, &c->max_unsent_bytes); })
KEY(send_buffer_kb, { set_u64(p, s, 0, 1 << 20, 1024, &c->send_buffer_bytes); })
KEY(max_memory_mb, { set_u64(p, s, 16, 1ll << 30, 1ull << 20, &c->max_memory_bytes); })
KEY(read_timeout_ms, { set_u64(p, s, 0, 1ll << 32, 1, &c->read_timeout_ms); })
KEY(idle_timeout_ms, { set_u64(p, s, 0, 1ll << 32, 1, &c->idle_timeout_ms); })
KEY(write_timeout_ms, { set_u64(p, s, 0, 1ll << 32, 1, &c->write_timeout_ms); })
KEY(max_regions_per_conn, { set_u32(p, s, 0, 1 << 16, &c->max_regions_per_conn); })
KEY(max_region_mb_per_conn, { set_u64(p, s, 0, 1ll << 30, 1ull << 20, &c->max_region_bytes_per_conn); })
KEY(max_pinned_mb, { set_u64(p, s, 0, 1ll << 30, 1ull << 20, &c->max_pinned_bytes); })
KEY(max_dim, { set_u32(p, s, 1, 1 << 24, &c->max_dim); })
KEY(default_priority, { set_u32(p, s, 1, 1000, &c->default_priority); })
KEY(default_timeout_ms, { set_u64(p, s, 0, 1ll << 40, 1, &c->default_timeout_ms); })
KEY(priority_aging_ms, { set_u64(p, s, 0, 3600000, 1, &c->priority_aging_ms); })
KEY(worker_poll_us, { set_u64(p, s, 0, 10000, 1, &c->worker_poll_us); })
KEY(loop_poll_us, { set_u64(p, s, 0, 10000, 1, &c->loop_poll_us); })
KEY(loop_start, { set_bool(p, s, &c->loop_start); })
/* The most reader threads; more would only contend for the loop's
 * hand-offs. */
#define READER_THREADS_MAX 64
KEY(reader_threads, {
	char nb[128];
	if (config_setting_type(s) == CONFIG_TYPE_STRING) {
		const char *v = config_setting_get_string(s);
		if (strcmp(v, "auto") == 0)
			c->reader_threads = -1;
		else
			fail(p, s, "%s must be \"auto\" or a number 0..%d, not \"%s\"",
			     path_of(s, nb, sizeof(nb)), READER_THREADS_MAX, v);
	} else {
		set_int(p, s, 0, READER_THREADS_MAX, &c->reader_threads);
	}
})
KEY(reader_min_kb, { set_u64(p, s, 1, 1 << 20, 1024, &c->reader_min_bytes); })
KEY(reader_when_busy, { set_bool(p, s, &c->reader_when_busy); })
KEY(post_threads, {
	int v = 0;
	set_int(p, s, 1, CONFIG_POST_THREADS_MAX, &v);
	c->post_threads = (unsigned)v;
})
/* At most the arena's own bound (frame_arena.h: 4096 MiB). */
KEY(pinned_reads_mb, {
	set_u64(p, s, 0, (long long)(FRAME_ARENA_MAX_BYTES >> 20), 1ull << 20, &c->pinned_read_bytes);
})
KEY(batch_enabled, { set_bool(p, s, &c->batch_enabled); })
KEY(batch_overlap, { set_bool(p, s, &c->batch_overlap); })
KEY(batch_max_columns, { set_u32(p, s, 1, 1 << 20, &c->batch_max_columns); })
KEY(batch_max_queue_delay_us, { set_u64(p, s, 0, 1000000, 1, &c->batch_max_queue_delay_us); })
KEY(budget_mb, { set_u64(p, s, 0, 1ll << 40, 1ull << 20, &c->weight_budget_bytes); })
KEY(max_count, { set_u32(p, s, 1, 1 << 20, &c->weight_max_count); })
KEY(weights_persist, { set_bool(p, s, &c->weights_persist); })
KEY(persist_min_free_mb, { set_u64(p, s, 0, 1ll << 30, 1ull << 20, &c->persist_min_free_bytes); })
KEY(weights_state_dir, { set_str(p, s, c->weights_state_dir, sizeof(c->weights_state_dir)); })
KEY(cpu_enabled, { set_enable(p, s, &c->cpu); })
KEY(cpu_threads, { set_int(p, s, 0, 4096, &c->cpu_threads); })
KEY(cpu_devices, { set_int(p, s, 1, 16, &c->cpu_devices); })
KEY(cpu_inline_max_flops, { set_u64(p, s, 0, 1ll << 30, 1, &c->cpu_inline_max_flops); })
KEY(hip_enabled, { set_enable(p, s, &c->hip); })
KEY(cuda_enabled, { set_enable(p, s, &c->cuda); })
KEY(cuda_warmup, { set_bool(p, s, &c->cuda_warmup); })
KEY(cuda_graphs, { set_bool(p, s, &c->cuda_graphs); })
KEY(cuda_copy_stream, { set_bool(p, s, &c->cuda_copy_stream); })
KEY(cuda_region_copies, { set_bool(p, s, &c->cuda_region_copies); })
KEY(cuda_out_stream, { set_bool(p, s, &c->cuda_out_stream); })
KEY(cuda_gate, { set_bool(p, s, &c->cuda_gate); })
KEY(cuda_tile_out, { set_bool(p, s, &c->cuda_tile_out); })
KEY(cuda_dma_parts_kb, { set_u64(p, s, 0, 1 << 30, 1024, &c->cuda_dma_part_bytes); })
/* At most the served times the backend keeps per candidate (backend.h). */
KEY(cuda_served_trial, { set_u32(p, s, 0, BACKEND_TRIAL_MAX, &c->cuda_served_trial); })
/* At most the arena's own bound (frame_arena.h: 4096 MiB). */
KEY(cuda_pinned_answers_mb, {
	set_u64(p, s, 0, (long long)(FRAME_ARENA_MAX_BYTES >> 20), 1ull << 20,
		&c->cuda_pinned_answer_bytes);
})
/* family.providers = { exclude = ["name", ...]; prefer = "name"; }: every
 * name one of the family's providers (providers.h), the pinned one not
 * excluded too. */
static void parse_providers(struct pctx *p, const config_setting_t *s, enum provider_family f,
			    struct provider_policy *pol)
{
	char nb[128], known[128];
	const char *fam = f == PROVIDERS_CUDA ? "cuda" : "hip";
	providers_list(f, known, sizeof(known));
	if (config_setting_type(s) != CONFIG_TYPE_GROUP) {
		fail(p, s, "%s.providers must be a group: providers = { exclude = [\"name\"]; "
		     "prefer = \"name\"; };", fam);
		return;
	}
	struct provider_policy np = { .exclude = 0, .prefer = -1 };
	const config_setting_t *prefer = NULL;
	int n = config_setting_length(s);
	for (int i = 0; i < n && !p->failed; i++) {
		const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
		const char *key = config_setting_name(e);
		if (strcmp(key, "prefer") == 0) {
			const char *v = get_str(p, e);
			/* "" is no pin, as --check-config prints it. */
			int at = v && *v ? providers_index(f, v) : -1;
			if (v && *v && at < 0)
				fail(p, e, "%s.providers.prefer = \"%s\" is not a %s provider (known: %s)",
				     fam, v, fam, known);
			else if (v)
				np.prefer = at;
			prefer = e;
		} else if (strcmp(key, "exclude") == 0) {
			int t = config_setting_type(e);
			if (t != CONFIG_TYPE_ARRAY && t != CONFIG_TYPE_LIST) {
				fail(p, e, "%s must be a list of names: exclude = [\"cusparselt\"];",
				     path_of(e, nb, sizeof(nb)));
				return;
			}
			int m = config_setting_length(e);
			for (int j = 0; j < m && !p->failed; j++) {
				const config_setting_t *x = config_setting_get_elem(e, (unsigned)j);
				if (config_setting_type(x) != CONFIG_TYPE_STRING) {
					fail(p, x, "%s.providers.exclude[%d] must be a string", fam, j);
					return;
				}
				const char *v = config_setting_get_string(x);
				int at = providers_index(f, v);
				if (at < 0)
					fail(p, x, "%s.providers.exclude[%d] = \"%s\" is not a %s provider "
					     "(known: %s)", fam, j, v, fam, known);
				else
					np.exclude |= 1u << at;
			}
		} else {
			fail(p, e, "unknown setting '%s' (a %s.providers group has exclude and prefer)",
			     path_of(e, nb, sizeof(nb)), fam);
		}
	}
	if (!p->failed && np.prefer >= 0 && provider_excluded(&np, (size_t)np.prefer))
		fail(p, prefer, "%s.providers.prefer = \"%s\" is also in %s.providers.exclude", fam,
		     providers_names(f, &(size_t){ 0 })[np.prefer], fam);
	if (!p->failed)
		*pol = np;
}

KEY(hip_providers, { parse_providers(p, s, PROVIDERS_HIP, &c->hip_providers); })
KEY(cuda_providers, { parse_providers(p, s, PROVIDERS_CUDA, &c->cuda_providers); })
KEY(shutdown_grace_ms, { set_u64(p, s, 0, 3600000, 1, &c->shutdown_grace_ms); })
KEY(status_interval_ms, { set_u64(p, s, 100, 3600000, 1, &c->status_interval_ms); })
KEY(metrics_enabled, { set_bool(p, s, &c->metrics_enabled); })
KEY(metrics_address, { set_str(p, s, c->metrics_address, sizeof(c->metrics_address)); })
KEY(metrics_port, { set_int(p, s, 1, 65535, &c->metrics_port); })
KEY(metrics_allow_remote, { set_bool(p, s, &c->metrics_allow_remote); })

static const struct key listen_keys[] = {
	{ "unix", k_unix_path, NULL }, { "unix_mode", k_unix_mode, NULL },
	{ "tcp", k_tcp, NULL }, { "tcp_address", k_tcp_address, NULL },
	{ "tcp_port", k_tcp_port, NULL }, { "tcp_allow_remote", k_tcp_allow_remote, NULL },
	{ "token_file", k_token_file, NULL }, { "unix_users", k_unix_users, NULL },
	{ "unix_group", k_unix_group, NULL }, { "tls_cert", k_tls_cert, NULL },
	{ "tls_key", k_tls_key, NULL }, { "tls_client_ca", k_tls_client_ca, NULL },
	{ NULL, NULL, NULL },
};
static const struct key limits_keys[] = {
	{ "max_frame_mb", k_max_frame_mb, NULL },
	{ "max_inflight_per_connection", k_max_inflight_per_connection, NULL },
	{ "max_inflight", k_max_inflight, NULL },
	{ "max_inflight_mb", k_max_inflight_mb, NULL },
	{ "max_connections", k_max_connections, NULL },
	{ "max_connections_per_user", k_max_connections_per_user, NULL },
	{ "max_connections_per_address", k_max_connections_per_address, NULL },
	{ "max_buffered_mb", k_max_buffered_mb, NULL },
	{ "max_unsent_mb", k_max_unsent_mb, NULL },
	{ "send_buffer_kb", k_send_buffer_kb, NULL },
	{ "max_memory_mb", k_max_memory_mb, NULL },
	{ "read_timeout_ms", k_read_timeout_ms, NULL },
	{ "idle_timeout_ms", k_idle_timeout_ms, NULL },
	{ "write_timeout_ms", k_write_timeout_ms, NULL },
	{ "max_dim", k_max_dim, NULL },
	{ "max_regions_per_conn", k_max_regions_per_conn, NULL },
	{ "max_region_mb_per_conn", k_max_region_mb_per_conn, NULL },
	{ "max_pinned_mb", k_max_pinned_mb, NULL },
	{ "default_priority", k_default_priority, NULL },
	{ "default_timeout_ms", k_default_timeout_ms, NULL },
	{ "priority_aging_ms", k_priority_aging_ms, NULL },
	{ "worker_poll_us", k_worker_poll_us, NULL },
	{ "loop_poll_us", k_loop_poll_us, NULL },
	{ "loop_start", k_loop_start, NULL },
	{ "reader_threads", k_reader_threads, NULL },
	{ "reader_min_kb", k_reader_min_kb, NULL },
	{ "reader_when_busy", k_reader_when_busy, NULL },
	{ "pinned_reads_mb", k_pinned_reads_mb, NULL },
	{ "post_threads", k_post_threads, NULL },
	{ NULL, NULL, NULL },
};
static const struct key batching_keys[] = {
	{ "enabled", k_batch_enabled, NULL },
	{ "max_columns", k_batch_max_columns, NULL },
	{ "max_queue_delay_us", k_batch_max_queue_delay_us, NULL },
	{ "overlap", k_batch_overlap, NULL },
	{ NULL, NULL, NULL },
};

/* One entry of weights.declare, a group; `at` names it in messages. */
static void parse_decl(struct pctx *p, const config_setting_t *g, const char *at,
		       struct weight_decl *w)
{
	char why[256];
	memset(w, 0, sizeof(*w));
	w->device = -1;
	if (config_setting_type(g) != CONFIG_TYPE_GROUP) {
		fail(p, g, "%s must be a group: { name = \"...\"; file = \"/path/w.npy\"; }", at);
		return;
	}
	int n = config_setting_length(g);
	for (int i = 0; i < n && !p->failed; i++) {
		const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
		const char *key = config_setting_name(s);
		const char *v = NULL;
		if (strcmp(key, "device") == 0) {
			int t = config_setting_type(s);
			long long dev = config_setting_get_int64(s);
			/* Named here: path_of() cannot name an element of a list. */
			if (t != CONFIG_TYPE_INT && t != CONFIG_TYPE_INT64)
				fail(p, s, "%s.device must be an integer", at);
			else if (dev < -1 || dev >= STATS_MAX_DEVICES)
				fail(p, s, "%s.device = %lld is out of range -1..%d", at, dev,
				     STATS_MAX_DEVICES - 1);
			else
				w->device = (int)dev;
			continue;
		}
		if (strcmp(key, "name") != 0 && strcmp(key, "file") != 0 &&
		    strcmp(key, "sparse") != 0 && strcmp(key, "dtype") != 0) {
			fail(p, s, "%s.%s is not a setting of a declared weight (name, file, sparse, "
			     "dtype, device)", at, key);
			return;
		}
		if (config_setting_type(s) != CONFIG_TYPE_STRING) {
			fail(p, s, "%s.%s must be a string", at, key);
			return;
		}
		v = config_setting_get_string(s);
		if (strcmp(key, "name") == 0) {
			if (validate_weight_name(v, why, sizeof(why)) < 0)
				fail(p, s, "%s.name: %s", at, why);
			else
				snprintf(w->name, sizeof(w->name), "%s", v);
		} else if (strcmp(key, "file") == 0) {
			if (v[0] != '/')
				fail(p, s, "%s.file = \"%s\" must be an absolute path", at, v);
			else if (strlen(v) >= sizeof(w->file))
				fail(p, s, "%s.file is longer than %zu bytes", at, sizeof(w->file) - 1);
			else
				snprintf(w->file, sizeof(w->file), "%s", v);
		} else if (strcmp(key, "sparse") == 0) {
			/* mfmactl load's --sparse words; "packed" compresses on
			 * the client, which for the daemon's own read is the
			 * same as "validate". */
			if (strcmp(v, "none") == 0)
				w->sparsity = MFMA__V1__SPARSITY__DENSE;
			else if (strcmp(v, "validate") == 0 || strcmp(v, "packed") == 0)
				w->sparsity = MFMA__V1__SPARSITY__VALIDATE_24;
			else if (strcmp(v, "prune") == 0)
				w->sparsity = MFMA__V1__SPARSITY__PRUNE_24;
			else
				fail(p, s, "%s.sparse = \"%s\": expected none, validate, prune or "
				     "packed", at, v);
		} else {
			enum mfma_dtype t = mfma_dtype_parse(v);
			if (t == MFMA_DT_NONE || t == MFMA_DT_I32)
				fail(p, s, "%s.dtype = \"%s\": expected f32, f16, bf16 or i8", at, v);
			else
				w->dtype = t;
		}
	}
	if (!p->failed && (!w->name[0] || !w->file[0]))
		fail(p, g, "%s needs %s", at, !w->name[0] ? "a name" : "a file");
}

KEY(weights_declare, {
	char nb[128];
	if (config_setting_type(s) != CONFIG_TYPE_LIST) {
		fail(p, s, "%s must be a list: declare = ( { name = ...; file = ...; }, ... );",
		     path_of(s, nb, sizeof(nb)));
		return;
	}
	int n = config_setting_length(s);
	if (n > CONFIG_DECLARE_MAX) {
		fail(p, s, "weights.declare has %d entries; the limit is %d", n, CONFIG_DECLARE_MAX);
		return;
	}
	c->ndeclared = 0;
	for (int i = 0; i < n && !p->failed; i++) {
		char at[64];
		snprintf(at, sizeof(at), "weights.declare[%d]", i);
		struct weight_decl *w = &c->declared[i];
		parse_decl(p, config_setting_get_elem(s, (unsigned)i), at, w);
		for (int j = 0; j < i && !p->failed; j++)
			if (strcmp(c->declared[j].name, w->name) == 0)
				fail(p, config_setting_get_elem(s, (unsigned)i), "%s.name = \"%s\" is "
				     "declared twice (also weights.declare[%d])", at, w->name, j);
		c->ndeclared++;
	}
})

static const struct key weights_keys[] = {
	{ "budget_mb", k_budget_mb, NULL }, { "max_count", k_max_count, NULL },
	{ "persist", k_weights_persist, NULL }, { "persist_min_free_mb", k_persist_min_free_mb, NULL },
	{ "state_dir", k_weights_state_dir, NULL }, { "declare", k_weights_declare, NULL },
	{ NULL, NULL, NULL },
};
static const struct key cpu_keys[] = {
	{ "enabled", k_cpu_enabled, NULL }, { "threads", k_cpu_threads, NULL },
	{ "devices", k_cpu_devices, NULL }, { "inline_max_flops", k_cpu_inline_max_flops, NULL },
	{ NULL, NULL, NULL },
};
static const struct key hip_keys[] = {
	{ "enabled", k_hip_enabled, NULL }, { "providers", k_hip_providers, NULL },
	{ NULL, NULL, NULL },
};
static const struct key cuda_keys[] = {
	{ "enabled", k_cuda_enabled, NULL }, { "providers", k_cuda_providers, NULL },
	{ "warmup", k_cuda_warmup, NULL }, { "graphs", k_cuda_graphs, NULL },
	{ "served_trial", k_cuda_served_trial, NULL },
	{ "pinned_answers_mb", k_cuda_pinned_answers_mb, NULL },
	{ "copy_stream", k_cuda_copy_stream, NULL }, { "dma_parts_kb", k_cuda_dma_parts_kb, NULL },
	{ "region_copies", k_cuda_region_copies, NULL }, { "gate", k_cuda_gate, NULL },
	{ "tile_out", k_cuda_tile_out, NULL }, { "out_stream", k_cuda_out_stream, NULL },
	{ NULL, NULL, NULL },
};
static const struct key metrics_keys[] = {
	{ "enabled", k_metrics_enabled, NULL }, { "address", k_metrics_address, NULL },
	{ "port", k_metrics_port, NULL }, { "allow_remote", k_metrics_allow_remote, NULL },
	{ NULL, NULL, NULL },
};
static const struct key root_keys[] = {
	{ "log_level", k_log_level, NULL },
	{ "shutdown_grace_ms", k_shutdown_grace_ms, NULL },
	{ "status_interval_ms", k_status_interval_ms, NULL },
	{ "listen", NULL, listen_keys },
	{ "limits", NULL, limits_keys },
	{ "weights", NULL, weights_keys },
	{ "batching", NULL, batching_keys },
	{ "cpu", NULL, cpu_keys },
	{ "hip", NULL, hip_keys },
	{ "cuda", NULL, cuda_keys },
	{ "metrics", NULL, metrics_keys },
	{ NULL, NULL, NULL },
};

static void apply_group(struct pctx *p, const config_setting_t *grp, const struct key *keys,
			struct mfmad_config *c)
{
	char nb[128];
	int n = config_setting_length(grp);
	for (int i = 0; i < n && !p->failed; i++) {
		const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
		const char *name = config_setting_name(s);
		const struct key *k = keys;
		while (k->name && (!name || strcmp(k->name, name) != 0))
			k++;
		if (!k->name) {
			fail(p, s, "unknown setting '%s'", path_of(s, nb, sizeof(nb)));
			return;
		}
		if (k->group) {
			if (config_setting_type(s) != CONFIG_TYPE_GROUP) {
				fail(p, s, "%s must be a group: %s = { ... };", name, name);
				return;
			}
			apply_group(p, s, k->group, c);
		} else {
			k->fn(p, s, c);
		}
	}
}

static int load(struct mfmad_config *cfg, config_t *lc, int ok, const char *name, char *err,
		size_t errlen)
{
	if (!ok) {
		if (config_error_type(lc) == CONFIG_ERR_FILE_IO) {
			/* libconfig keeps no errno: ask the file again. */
			FILE *f = fopen(name, "r");
			int e = f ? EIO : errno;
			if (f)
				fclose(f);
			snprintf(err, errlen, "%s: cannot read the file: %s", name, strerror(e));
			return -ENOENT;
		}
		snprintf(err, errlen, "%s:%d: %s", name, config_error_line(lc), config_error_text(lc));
		return -EINVAL;
	}
	struct pctx p = { .file = name, .err = err, .errlen = errlen };
	apply_group(&p, config_root_setting(lc), root_keys, cfg);
	if (p.failed)
		return -EINVAL;
	if (!cfg->tls_cert[0] != !cfg->tls_key[0] || (cfg->tls_client_ca[0] && !cfg->tls_cert[0])) {
		snprintf(err, errlen,
			 "%s: listen.tls_cert and listen.tls_key go together (tls_cert = \"%s\", "
			 "tls_key = \"%s\"), and listen.tls_client_ca (\"%s\") needs them",
			 name, cfg->tls_cert, cfg->tls_key, cfg->tls_client_ca);
		return -EINVAL;
	}
	return 0;
}

int config_load_file(struct mfmad_config *cfg, const char *path, char *err, size_t errlen)
{
	config_t lc;
	config_init(&lc);
	int rc = load(cfg, &lc, config_read_file(&lc, path) == CONFIG_TRUE, path, err, errlen);
	config_destroy(&lc);
	return rc;
}

int config_load_string(struct mfmad_config *cfg, const char *text, const char *name, char *err,
		       size_t errlen)
{
	config_t lc;
	config_init(&lc);
	int rc = load(cfg, &lc, config_read_string(&lc, text) == CONFIG_TRUE, name, err, errlen);
	config_destroy(&lc);
	return rc;
}

const char *config_state_dir(const struct mfmad_config *cfg, char *buf, size_t len)
{
	const char *base = cfg->weights_state_dir;
	if (!base[0])
		base = getenv("STATE_DIRECTORY"); /* systemd's StateDirectory= */
	if (!base || !base[0])
		return NULL;
	/* $STATE_DIRECTORY lists one path per StateDirectory=, ':'-separated. */
	size_t n = strcspn(base, ":");
	int w = snprintf(buf, len, "%.*s", (int)n, base);
	return w > 0 && (size_t)w < len ? buf : NULL;
}

uint64_t config_read_frame_limit(const struct mfmad_config *cfg, const char **key)
{
	uint64_t limit = cfg->max_frame_bytes;
	const char *why = "limits.max_frame_mb";
	if (cfg->max_buffered_bytes - FRAME_HEADER_SIZE < limit) {
		limit = cfg->max_buffered_bytes - FRAME_HEADER_SIZE;
		why = "limits.max_buffered_mb";
	}
	if (cfg->max_memory_bytes - FRAME_HEADER_SIZE < limit) {
		limit = cfg->max_memory_bytes - FRAME_HEADER_SIZE;
		why = "limits.max_memory_mb";
	}
	if (key)
		*key = why;
	return limit;
}

unsigned config_reader_threads(const struct mfmad_config *cfg, long ncores)
{
	if (cfg->reader_threads >= 0)
		return (unsigned)cfg->reader_threads;
	if (ncores < 8)
		return 0;
	return ncores / 4 < 4 ? (unsigned)(ncores / 4) : 4;
}

int config_restart_only_changes(const struct mfmad_config *a, const struct mfmad_config *b,
				char *buf, size_t len)
{
	int n = 0;
	size_t off = 0;
	buf[0] = '\0';
#define DIFF(cond, name)                                                                           \
	do {                                                                                       \
		if (cond) {                                                                        \
			int w = snprintf(buf + off, len - off, "%s%s", n ? ", " : "", name);      \
			if (w > 0 && (size_t)w < len - off)                                        \
				off += (size_t)w;                                                  \
			n++;                                                                       \
		}                                                                                  \
	} while (0)
	DIFF(strcmp(a->unix_path, b->unix_path) != 0, "listen.unix");
	DIFF(a->unix_mode != b->unix_mode, "listen.unix_mode");
	DIFF(a->tcp_enabled != b->tcp_enabled || strcmp(a->tcp_address, b->tcp_address) != 0 ||
		     a->tcp_port != b->tcp_port || a->tcp_allow_remote != b->tcp_allow_remote,
	     "listen.tcp*");
	/* Whether TCP takes a token, TLS and client certificates decides at
	 * start what a listener may be (a remote one needs a credential);
	 * the files themselves are read again on SIGHUP (listen_reload). */
	DIFF(!a->token_file[0] != !b->token_file[0] || !a->tls_cert[0] != !b->tls_cert[0] ||
		     !a->tls_client_ca[0] != !b->tls_client_ca[0],
	     "listen.token_file/tls_cert/tls_client_ca (set or unset)");
	DIFF(strcmp(a->unix_users, b->unix_users) != 0 || strcmp(a->unix_group, b->unix_group) != 0,
	     "listen.unix_users/unix_group");
	DIFF(a->cpu != b->cpu || a->cpu_threads != b->cpu_threads || a->cpu_devices != b->cpu_devices,
	     "cpu.*");
	DIFF(a->hip != b->hip, "hip.enabled");
	DIFF(a->cuda != b->cuda, "cuda.enabled");
	/* The providers a device has are attached when it opens, and the
	 * resident weights were packed by them: a change takes a restart. */
	DIFF(memcmp(&a->hip_providers, &b->hip_providers, sizeof(a->hip_providers)) != 0,
	     "hip.providers");
	DIFF(memcmp(&a->cuda_providers, &b->cuda_providers, sizeof(a->cuda_providers)) != 0,
	     "cuda.providers");
	/* The pool is started once. */
	DIFF(a->reader_threads != b->reader_threads, "limits.reader_threads");
	/* The arena is mapped, and registered by each device, at start. */
	DIFF(a->pinned_read_bytes != b->pinned_read_bytes, "limits.pinned_reads_mb");
	/* The threads start with the devices. */
	DIFF(a->post_threads != b->post_threads, "limits.post_threads");
	/* Told to the devices when they open. */
	DIFF(a->cuda_graphs != b->cuda_graphs, "cuda.graphs");
	DIFF(a->cuda_copy_stream != b->cuda_copy_stream, "cuda.copy_stream");
	DIFF(a->cuda_dma_part_bytes != b->cuda_dma_part_bytes, "cuda.dma_parts_kb");
	DIFF(a->cuda_region_copies != b->cuda_region_copies, "cuda.region_copies");
	DIFF(a->cuda_gate != b->cuda_gate, "cuda.gate");
	DIFF(a->cuda_tile_out != b->cuda_tile_out, "cuda.tile_out");
	DIFF(a->cuda_out_stream != b->cuda_out_stream, "cuda.out_stream");
	DIFF(a->cuda_served_trial != b->cuda_served_trial, "cuda.served_trial");
	/* Each device maps and registers its arena when it opens. */
	DIFF(a->cuda_pinned_answer_bytes != b->cuda_pinned_answer_bytes, "cuda.pinned_answers_mb");
	DIFF(a->metrics_enabled != b->metrics_enabled ||
		     strcmp(a->metrics_address, b->metrics_address) != 0 ||
		     a->metrics_port != b->metrics_port || a->metrics_allow_remote != b->metrics_allow_remote,
	     "metrics.*");
	DIFF(a->weight_budget_bytes != b->weight_budget_bytes, "weights.budget_mb");
	DIFF(a->weights_persist != b->weights_persist ||
		     strcmp(a->weights_state_dir, b->weights_state_dir) != 0,
	     "weights.persist/state_dir");
	/* Read by the threadpool's writes: not changed under them. */
	DIFF(a->persist_min_free_bytes != b->persist_min_free_bytes, "weights.persist_min_free_mb");
#undef DIFF
	return n;
}
