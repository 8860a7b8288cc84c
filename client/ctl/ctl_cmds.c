/* mfmactl: the small commands (ping, status, load, unload, weights,
 * random) and what they share with submit and bench. */
#include "ctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl_util.h"
#include "mfma_clock.h"
#include "sparse24.h"

/* ---- a text table with columns sized to their contents ---- */

#define TABLE_MAX_COLS 12

struct table {
	size_t ncols, nrows, cap;
	char **cells; /* nrows x ncols */
	size_t width[TABLE_MAX_COLS];
};

static void table_init(struct table *t, size_t ncols)
{
	memset(t, 0, sizeof(*t));
	t->ncols = ncols;
}

/* Adds a row of ncols strings; out of memory drops the row (the table is
 * for people; a missing row is better than no output). */
static void table_row(struct table *t, ...)
{
	va_list ap;
	if (t->nrows == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 8;
		char **nc = realloc(t->cells, ncap * t->ncols * sizeof(*nc));
		if (!nc)
			return;
		t->cells = nc;
		t->cap = ncap;
	}
	va_start(ap, t);
	for (size_t i = 0; i < t->ncols; i++) {
		const char *s = va_arg(ap, const char *);
		char *d = strdup(s ? s : "");
		t->cells[t->nrows * t->ncols + i] = d;
		size_t w = d ? strlen(d) : 0;
		if (w > t->width[i])
			t->width[i] = w;
	}
	va_end(ap);
	t->nrows++;
}

static void table_print(struct table *t, const char *indent)
{
	for (size_t r = 0; r < t->nrows; r++) {
		fputs(indent, stdout);
		for (size_t i = 0; i < t->ncols; i++) {
			const char *s = t->cells[r * t->ncols + i];
			if (i + 1 == t->ncols)
				printf("%s\n", s ? s : "");
			else
				printf("%-*s  ", (int)t->width[i], s ? s : "");
		}
	}
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	memset(t, 0, sizeof(*t));
}

/* ---- shared with submit and bench ---- */

int ctl_make_operand(const struct ctl_matrix *a, int mode, struct mfma_operand *op,
		     struct ctl_packed *pk, char *err, size_t errlen)
{
	memset(op, 0, sizeof(*op));
	memset(pk, 0, sizeof(*pk));
	if (mode != CTL_SPARSE_PACKED) {
		op->kind = MFMA_OPERAND_DENSE;
		op->dense = ctl_as_mfma(a);
		op->sparsity = mode == CTL_SPARSE_VALIDATE ? MFMA_SPARSITY_VALIDATE_24
			       : mode == CTL_SPARSE_PRUNE  ? MFMA_SPARSITY_PRUNE_24
							   : MFMA_SPARSITY_DENSE;
		return 0;
	}
	if (a->cols % 4 != 0) {
		snprintf(err, errlen, "--sparse packed needs K (the columns of A) to be a multiple "
			 "of 4; A is %ux%u", a->rows, a->cols);
		return -EINVAL;
	}
	if (ctl_packed_alloc(pk, a) < 0) {
		snprintf(err, errlen, "out of memory compressing A");
		return -ENOMEM;
	}
	size_t br = 0, bg = 0;
	if (sparse24_compress(a->data, a->dtype, a->rows, a->cols, pk->values, pk->meta, &br,
			      &bg) < 0) {
		ctl_packed_free(pk);
		snprintf(err, errlen, "A is not 2:4 sparse: row %zu, columns %zu..%zu hold more "
			 "than 2 non-zeros (use --sparse prune)", br, bg * 4, bg * 4 + 3);
		return -EINVAL;
	}
	op->kind = MFMA_OPERAND_SPARSE24;
	op->sparse = (struct mfma_sparse24){
		.rows = a->rows,
		.cols = a->cols,
		.dtype = ctl_type(a->dtype),
		.values = pk->values,
		.values_bytes = pk->values_bytes,
		.meta = pk->meta,
		.meta_bytes = pk->meta_bytes,
	};
	return 0;
}

int ctl_packed_alloc(struct ctl_packed *pk, const struct ctl_matrix *a)
{
	size_t es = mfma_dtype_size(a->dtype);
	memset(pk, 0, sizeof(*pk));
	pk->values_bytes = sparse24_values_bytes(a->rows, a->cols, es);
	pk->meta_bytes = sparse24_meta_bytes(a->rows, a->cols);
	pk->values = malloc(pk->values_bytes ? pk->values_bytes : 1);
	pk->meta = malloc(pk->meta_bytes ? pk->meta_bytes : 1);
	if (!pk->values || !pk->meta) {
		ctl_packed_free(pk);
		return -ENOMEM;
	}
	return 0;
}

void ctl_packed_free(struct ctl_packed *pk)
{
	if (!pk)
		return;
	free(pk->values);
	free(pk->meta);
	memset(pk, 0, sizeof(*pk));
}

static void devices_str(const struct mfma_weight_info *w, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < w->n_devices && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%u", i ? "," : "", w->devices[i]);
	if (w->n_devices == 0)
		snprintf(buf, len, "-");
}

void ctl_print_weights(const struct mfma_weight_info *w, size_t n)
{
	struct table t;
	table_init(&t, 8);
	table_row(&t, "NAME", "SHAPE", "DTYPE", "SPARSITY", "BYTES", "DEVICES", "GEMMS",
		  "MEAN BATCH");
	for (size_t i = 0; i < n; i++) {
		char shape[32], bytes[32], devs[256], gemms[32], batch[32];
		snprintf(shape, sizeof(shape), "%ux%u", w[i].rows, w[i].cols);
		ctl_format_bytes(w[i].bytes, bytes, sizeof(bytes));
		devices_str(&w[i], devs, sizeof(devs));
		snprintf(gemms, sizeof(gemms), "%" PRIu64, w[i].requests);
		if (w[i].launches)
			snprintf(batch, sizeof(batch), "%.2f", (double)w[i].requests / (double)w[i].launches);
		else
			snprintf(batch, sizeof(batch), "-");
		table_row(&t, w[i].name, shape, mfma_dtype_name(ctl_dtype(w[i].dtype)),
			  w[i].sparse ? "2:4" : "dense", bytes, devs, gemms, batch);
	}
	table_print(&t, "");
}

static const char *declared_state(enum mfma_declared_state s)
{
	switch (s) {
	case MFMA_DECLARED_LOADING: return "loading";
	case MFMA_DECLARED_RESIDENT: return "resident";
	case MFMA_DECLARED_FAILED: return "failed";
	default: return "unknown";
	}
}

/* A device worker's phases, in the order status shows them: their names
 * (the keys of --json's worker_ns) and their times in d. */
enum { WORKER_PHASES = 5 };
static const char *const worker_phase_names[WORKER_PHASES] = { "idle", "prepare", "launch", "wait",
								"answers" };

static void worker_phase_ns(const struct mfma_device_status *d, uint64_t ns[WORKER_PHASES])
{
	ns[0] = d->worker_idle_ns;
	ns[1] = d->worker_prepare_ns;
	ns[2] = d->worker_launch_ns;
	ns[3] = d->worker_wait_ns;
	ns[4] = d->worker_answers_ns;
}

/* "device N worker: idle 70.4%, ..." of the time its phases account for
 * since the daemon started; nothing from a daemon that does not report
 * them. */
static void print_worker(const struct mfma_device_status *d)
{
	uint64_t ns[WORKER_PHASES], sum = 0;
	worker_phase_ns(d, ns);
	for (size_t i = 0; i < WORKER_PHASES; i++)
		sum += ns[i];
	if (!sum)
		return;
	printf("device %u worker:", d->index);
	for (size_t i = 0; i < WORKER_PHASES; i++)
		printf("%s %s %.1f%%", i ? "," : "", worker_phase_names[i],
		       100.0 * (double)ns[i] / (double)sum);
	printf(" of %.1f s", (double)sum / 1e9);
	if (d->loop_starts)
		printf("; %" PRIu64 " of %" PRIu64 " GEMMs started by the loop", d->loop_starts,
		       d->completed + d->failed);
	printf("\n");
}

/* The declared weights that are not resident, with their state: what
 * keeps the daemon from being ready. */
static void print_declared(const struct mfma_declared_weight *w, size_t n)
{
	size_t waiting = 0;
	for (size_t i = 0; i < n; i++)
		waiting += w[i].state != MFMA_DECLARED_RESIDENT;
	if (waiting == 0)
		return;
	printf("\ndeclared weights not resident (%zu of %zu; the daemon is not ready):\n", waiting,
	       n);
	for (size_t i = 0; i < n; i++) {
		if (w[i].state == MFMA_DECLARED_RESIDENT)
			continue;
		printf("  %s  %s  %s%s%s\n", w[i].name, w[i].file, declared_state(w[i].state),
		       w[i].message[0] ? ": " : "", w[i].message);
	}
}

static void json_declared(struct json *j, const struct mfma_declared_weight *w, size_t n)
{
	json_key(j, "declared");
	json_array_begin(j);
	for (size_t i = 0; i < n; i++) {
		json_object_begin(j);
		json_kv_string(j, "name", w[i].name);
		json_kv_string(j, "file", w[i].file);
		json_kv_string(j, "state", declared_state(w[i].state));
		json_kv_string(j, "message", w[i].message);
		json_object_end(j);
	}
	json_array_end(j);
}

void ctl_json_weight(struct json *j, const struct mfma_weight_info *w, uint64_t load_ns,
		     int stored)
{
	json_object_begin(j);
	json_kv_string(j, "name", w->name);
	json_kv_uint(j, "rows", w->rows);
	json_kv_uint(j, "cols", w->cols);
	json_kv_string(j, "dtype", mfma_dtype_name(ctl_dtype(w->dtype)));
	json_kv_bool(j, "sparse", w->sparse);
	json_kv_uint(j, "bytes", w->bytes);
	json_key(j, "devices");
	json_array_begin(j);
	for (size_t i = 0; i < w->n_devices; i++)
		json_uint(j, w->devices[i]);
	json_array_end(j);
	json_kv_uint(j, "requests", w->requests);
	json_kv_uint(j, "launches", w->launches);
	if (load_ns)
		json_kv_uint(j, "load_ns", load_ns);
	if (stored >= 0)
		json_kv_bool(j, "stored", stored);
	json_object_end(j);
}

/* Parses a command that takes no options of its own (only the common
 * ones) and exactly `npos` positional arguments; CTL_CONTINUE or an exit
 * code. */
static int parse_plain(struct ctl *ctl, const char *cmd, int argc, char **argv, int npos)
{
	static const struct option opts[] = { CTL_COMMON_LONG, { NULL, 0, NULL, 0 } };
	int opt;
	while ((opt = getopt_long(argc, argv, CTL_COMMON_SHORT, opts, NULL)) != -1) {
		int r = ctl_common_option(ctl, cmd, opt, optarg);
		if (r != CTL_CONTINUE)
			return r;
	}
	if (argc - optind != npos)
		return ctl_usage(cmd, "expected %d argument%s, got %d", npos, npos == 1 ? "" : "s",
				 argc - optind);
	return CTL_CONTINUE;
}

/* ---- ping ---- */

int ctl_cmd_ping(struct ctl *ctl, int argc, char **argv)
{
	static const struct option opts[] = {
		CTL_COMMON_LONG,
		{ "count", required_argument, NULL, 'c' },
		{ "size", required_argument, NULL, 's' },
		{ "interval", required_argument, NULL, 'i' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t count = 1, size = 0, interval = 0;
	char err[256];
	int opt, rc;
	while ((opt = getopt_long(argc, argv, CTL_COMMON_SHORT "c:s:i:", opts, NULL)) != -1) {
		switch (opt) {
		case 'c': rc = ctl_parse_u64("--count", optarg, 1, 1000000, &count, err, sizeof(err)); break;
		case 's': rc = ctl_parse_u64("--size", optarg, 0, 64u << 20, &size, err, sizeof(err)); break;
		case 'i': rc = ctl_parse_u64("--interval", optarg, 0, 3600000, &interval, err, sizeof(err)); break;
		default:
			rc = ctl_common_option(ctl, "ping", opt, optarg);
			if (rc != CTL_CONTINUE)
				return rc;
			continue;
		}
		if (rc < 0)
			return ctl_usage("ping", "%s", err);
	}
	if (optind != argc)
		return ctl_usage("ping", "unexpected argument '%s'", argv[optind]);

	mfma_client *c;
	if ((rc = ctl_connect(ctl, &c)) != 0)
		return rc;
	uint8_t *payload = malloc(size ? size : 1);
	uint64_t *rtt = malloc(count * sizeof(*rtt));
	if (!payload || !rtt) {
		free(payload);
		free(rtt);
		mfma_close(c);
		return ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory");
	}
	uint64_t st = (uint64_t)time(NULL);
	for (size_t i = 0; i < size; i++)
		payload[i] = (uint8_t)ctl_rand(&st);
	int exit_code = CTL_EXIT_OK;
	uint64_t done = 0, sum = 0, mn = UINT64_MAX, mx = 0;
	for (uint64_t i = 0; i < count; i++) {
		struct mfma_error e;
		if ((rc = mfma_ping(c, payload, size, &rtt[i], &e)) < 0) {
			exit_code = ctl_fail(ctl, "ping", rc, &e);
			break;
		}
		done++;
		sum += rtt[i];
		mn = rtt[i] < mn ? rtt[i] : mn;
		mx = rtt[i] > mx ? rtt[i] : mx;
		if (!ctl->json) {
			char t[32];
			ctl_format_ns(rtt[i], t, sizeof(t));
			printf("pong from %s: seq=%" PRIu64 " bytes=%" PRIu64 " time=%s\n",
			       mfma_endpoint(c), i + 1, size, t);
			fflush(stdout);
		}
		if (interval && i + 1 < count) {
			struct timespec ts = { (time_t)(interval / 1000),
					       (long)(interval % 1000) * 1000000L };
			nanosleep(&ts, NULL);
		}
	}
	if (exit_code == CTL_EXIT_OK) {
		if (ctl->json) {
			struct json *j = &ctl->j;
			json_object_begin(j);
			json_kv_string(j, "endpoint", mfma_endpoint(c));
			json_kv_uint(j, "count", done);
			json_kv_uint(j, "payload_bytes", size);
			json_key(j, "round_trip_ns");
			json_array_begin(j);
			for (uint64_t i = 0; i < done; i++)
				json_uint(j, rtt[i]);
			json_array_end(j);
			json_kv_uint(j, "min_ns", mn);
			json_kv_uint(j, "avg_ns", sum / done);
			json_kv_uint(j, "max_ns", mx);
			json_object_end(j);
		} else if (done > 1) {
			char a[32], b[32], d[32];
			ctl_format_ns(mn, a, sizeof(a));
			ctl_format_ns(sum / done, b, sizeof(b));
			ctl_format_ns(mx, d, sizeof(d));
			printf("%" PRIu64 " pings: min %s, avg %s, max %s\n", done, a, b, d);
		}
	}
	free(payload);
	free(rtt);
	mfma_close(c);
	return exit_code;
}

/* ---- status ---- */

static void status_json(struct ctl *ctl, mfma_client *c, const struct mfma_status *s)
{
	struct json *j = &ctl->j;
	json_object_begin(j);
	json_kv_string(j, "endpoint", mfma_endpoint(c));
	json_kv_string(j, "version", s->version);
	json_kv_uint(j, "uptime_ns", s->uptime_ns);
	json_kv_uint(j, "weight_budget", s->weight_budget);
	json_kv_uint(j, "weight_bytes", s->weight_bytes);
	json_key(j, "devices");
	json_array_begin(j);
	for (size_t i = 0; i < s->n_devices; i++) {
		const struct mfma_device_status *d = &s->devices[i];
		json_object_begin(j);
		json_kv_uint(j, "index", d->index);
		json_kv_string(j, "backend", d->backend);
		json_kv_string(j, "arch", d->arch);
		json_kv_string(j, "name", d->name);
		json_kv_uint(j, "mem_total", d->mem_total);
		json_kv_uint(j, "mem_used", d->mem_used);
		json_kv_uint(j, "queue_depth", d->queue_depth);
		json_kv_uint(j, "in_flight", d->in_flight);
		json_kv_uint(j, "completed", d->completed);
		json_kv_uint(j, "failed", d->failed);
		json_kv_uint(j, "loop_starts", d->loop_starts);
		json_kv_string(j, "fault", d->fault ? d->fault : "");
		uint64_t ns[WORKER_PHASES];
		worker_phase_ns(d, ns);
		json_key(j, "worker_ns");
		json_object_begin(j);
		for (size_t k = 0; k < WORKER_PHASES; k++)
			json_kv_uint(j, worker_phase_names[k], ns[k]);
		json_object_end(j);
		json_key(j, "variants");
		json_array_begin(j);
		for (size_t v = 0; v < d->n_variants; v++)
			json_string(j, d->variants[v]);
		json_array_end(j);
		/* "name:state" on the wire, an object here. */
		json_key(j, "providers");
		json_array_begin(j);
		for (size_t v = 0; v < d->n_providers; v++) {
			char name[64];
			const char *p = d->providers[v], *colon = strchr(p, ':');
			snprintf(name, sizeof(name), "%.*s", colon ? (int)(colon - p) : (int)strlen(p),
				 p);
			json_object_begin(j);
			json_kv_string(j, "name", name);
			json_kv_string(j, "state", colon ? colon + 1 : "available");
			json_object_end(j);
		}
		json_array_end(j);
		json_object_end(j);
	}
	json_array_end(j);
	json_key(j, "weights");
	json_array_begin(j);
	for (size_t i = 0; i < s->n_weights; i++)
		ctl_json_weight(j, &s->weights[i], 0, -1);
	json_array_end(j);
	json_declared(j, s->declared, s->n_declared);
	const struct mfma_counters *k = &s->counters;
	json_key(j, "counters");
	json_object_begin(j);
	json_kv_uint(j, "requests", k->requests);
	json_kv_uint(j, "ok", k->ok);
	json_kv_uint(j, "failed", k->failed);
	json_kv_uint(j, "busy", k->busy);
	json_kv_uint(j, "connections_open", k->connections_open);
	json_kv_uint(j, "connections_total", k->connections_total);
	json_kv_uint(j, "in_flight", k->in_flight);
	json_kv_uint(j, "malformed", k->malformed);
	json_object_end(j);
	json_object_end(j);
}

static void status_text(mfma_client *c, const struct mfma_status *s)
{
	char up[64], used[32], budget[32];
	ctl_format_uptime(s->uptime_ns, up, sizeof(up));
	printf("mfmad %s at %s, up %s\n", s->version[0] ? s->version : "(unknown version)",
	       mfma_endpoint(c), up);
	ctl_format_bytes(s->weight_bytes, used, sizeof(used));
	ctl_format_bytes(s->weight_budget, budget, sizeof(budget));
	printf("weights: %zu resident, %s of %s\n\n", s->n_weights, used,
	       s->weight_budget ? budget : "unlimited");

	struct table t;
	table_init(&t, 8);
	table_row(&t, "DEV", "BACKEND", "ARCH", "NAME", "MEMORY USED/TOTAL", "QUEUE", "IN FLIGHT",
		  "DONE/FAILED");
	for (size_t i = 0; i < s->n_devices; i++) {
		const struct mfma_device_status *d = &s->devices[i];
		char idx[16], mem[80], a[32], b[32], q[16], f[16], df[48];
		snprintf(idx, sizeof(idx), "%u", d->index);
		ctl_format_bytes(d->mem_used, a, sizeof(a));
		ctl_format_bytes(d->mem_total, b, sizeof(b));
		snprintf(mem, sizeof(mem), "%s / %s", a, b);
		snprintf(q, sizeof(q), "%u", d->queue_depth);
		snprintf(f, sizeof(f), "%u", d->in_flight);
		snprintf(df, sizeof(df), "%" PRIu64 "/%" PRIu64, d->completed, d->failed);
		table_row(&t, idx, d->backend, d->arch, d->name, mem, q, f, df);
	}
	table_print(&t, "");
	for (size_t i = 0; i < s->n_devices; i++) {
		const struct mfma_device_status *d = &s->devices[i];
		if (d->fault && d->fault[0])
			printf("DOWN: %s\n", d->fault);
		printf("device %u variants:", d->index);
		for (size_t v = 0; v < d->n_variants; v++)
			printf("%s %s", v ? "," : "", d->variants[v]);
		printf("%s\n", d->n_variants ? "" : " (none)");
		print_worker(d);
		if (!d->n_providers)
			continue;
		printf("device %u providers:", d->index);
		for (size_t v = 0; v < d->n_providers; v++) {
			const char *p = d->providers[v], *colon = strchr(p, ':');
			printf("%s %.*s%s%s%s", v ? "," : "",
			       colon ? (int)(colon - p) : (int)strlen(p), p, colon ? " (" : "",
			       colon ? colon + 1 : "", colon ? ")" : "");
		}
		putchar('\n');
	}
	if (s->n_weights) {
		putchar('\n');
		ctl_print_weights(s->weights, s->n_weights);
	}
	print_declared(s->declared, s->n_declared);
	const struct mfma_counters *k = &s->counters;
	printf("\nrequests: %" PRIu64 " total, %" PRIu64 " ok, %" PRIu64 " failed, %" PRIu64
	       " busy, %" PRIu64 " malformed, %" PRIu64 " in flight\n",
	       k->requests, k->ok, k->failed, k->busy, k->malformed, k->in_flight);
	printf("connections: %" PRIu64 " open, %" PRIu64 " since start\n", k->connections_open,
	       k->connections_total);
}

int ctl_cmd_status(struct ctl *ctl, int argc, char **argv)
{
	int rc = parse_plain(ctl, "status", argc, argv, 0);
	if (rc != CTL_CONTINUE)
		return rc;
	mfma_client *c;
	if ((rc = ctl_connect(ctl, &c)) != 0)
		return rc;
	struct mfma_status s;
	struct mfma_error e;
	if ((rc = mfma_status(c, &s, &e)) < 0) {
		rc = ctl_fail(ctl, "status", rc, &e);
		mfma_close(c);
		return rc;
	}
	if (ctl->json)
		status_json(ctl, c, &s);
	else
		status_text(c, &s);
	mfma_status_free(&s);
	mfma_close(c);
	return CTL_EXIT_OK;
}

/* ---- weights ---- */

int ctl_cmd_load(struct ctl *ctl, int argc, char **argv)
{
	enum { OPT_SPARSE = CTL_OPT_FIRST_COMMAND_OPTION, OPT_DTYPE, OPT_DEVICE, OPT_REPLACE };
	static const struct option opts[] = {
		CTL_COMMON_LONG,
		{ "sparse", required_argument, NULL, OPT_SPARSE },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "replace", no_argument, NULL, OPT_REPLACE },
		{ NULL, 0, NULL, 0 },
	};
	enum ctl_sparse sparse = CTL_SPARSE_NONE;
	enum mfma_dtype dtype = MFMA_DT_NONE;
	struct mfma_load_args args;
	char err[512];
	int opt, rc = 0;
	mfma_load_args_init(&args);
	while ((opt = getopt_long(argc, argv, CTL_COMMON_SHORT, opts, NULL)) != -1) {
		switch (opt) {
		case OPT_SPARSE: rc = ctl_parse_sparse("--sparse", optarg, &sparse, err, sizeof(err)); break;
		case OPT_DTYPE: rc = ctl_parse_dtype("--dtype", optarg, CTL_DT_INPUTS, &dtype, err, sizeof(err)); break;
		case OPT_DEVICE: rc = ctl_parse_int("--device", optarg, 0, 1 << 20, &args.device, err, sizeof(err)); break;
		case OPT_REPLACE: args.replace = true; break;
		default:
			rc = ctl_common_option(ctl, "load", opt, optarg);
			if (rc != CTL_CONTINUE)
				return rc;
			rc = 0;
			continue;
		}
		if (rc < 0)
			return ctl_usage("load", "%s", err);
	}
	if (argc - optind != 2)
		return ctl_usage("load", "expected NAME and A.npy");
	args.name = argv[optind];

	struct ctl_matrix a;
	struct ctl_packed pk;
	if ((rc = ctl_read_matrix(argv[optind + 1], dtype, true, &a, err, sizeof(err))) < 0)
		return ctl_fail_local(ctl, rc == -ENOMEM ? CTL_EXIT_LOCAL : CTL_EXIT_USAGE, "%s", err);
	if ((rc = ctl_make_operand(&a, sparse, &args.a, &pk, err, sizeof(err))) < 0) {
		ctl_matrix_free(&a);
		return ctl_fail_local(ctl, rc == -ENOMEM ? CTL_EXIT_LOCAL : CTL_EXIT_USAGE, "%s", err);
	}
	mfma_client *c;
	if ((rc = ctl_connect(ctl, &c)) != 0)
		goto out;
	ctl_progress(ctl, c);
	struct mfma_load_result res;
	struct mfma_error e;
	/* The load's round trip, which on a GPU includes the daemon warming
	 * the weight (cuda.warmup): the cost of a load is seen where it is
	 * paid. */
	const uint64_t t0 = mfma_clock_ns();
	rc = mfma_load_weight(c, &args, &res, &e);
	const uint64_t took = mfma_clock_ns() - t0;
	if (rc < 0) {
		rc = ctl_fail(ctl, "load", rc, &e);
	} else {
		const int stored = mfma_load_result_stored(&res);
		if (ctl->json) {
			ctl_json_weight(&ctl->j, &res.weight, took, stored);
		} else {
			char bytes[32], devs[256];
			ctl_format_bytes(res.weight.bytes, bytes, sizeof(bytes));
			devices_str(&res.weight, devs, sizeof(devs));
			printf("loaded %s: %ux%u %s %s, %s per device, on device%s %s, in %.1f ms\n",
			       res.weight.name, res.weight.rows, res.weight.cols,
			       mfma_dtype_name(ctl_dtype(res.weight.dtype)), res.weight.sparse ? "2:4" : "dense",
			       bytes, res.weight.n_devices == 1 ? "" : "s", devs, took / 1e6);
		}
		/* It serves, but a restart will not bring it back. */
		if (stored == 0)
			fprintf(stderr, "mfmactl: load: '%s' is resident but the daemon could not store "
				"it (weights.persist; its log says why): a restart will not restore it\n",
				res.weight.name);
		mfma_load_result_free(&res);
		rc = CTL_EXIT_OK;
	}
	mfma_close(c);
out:
	ctl_packed_free(&pk);
	ctl_matrix_free(&a);
	return rc;
}

int ctl_cmd_unload(struct ctl *ctl, int argc, char **argv)
{
	int rc = parse_plain(ctl, "unload", argc, argv, 1);
	if (rc != CTL_CONTINUE)
		return rc;
	const char *name = argv[optind];
	mfma_client *c;
	if ((rc = ctl_connect(ctl, &c)) != 0)
		return rc;
	struct mfma_error e;
	if ((rc = mfma_unload_weight(c, name, &e)) < 0) {
		rc = ctl_fail(ctl, "unload", rc, &e);
	} else {
		if (ctl->json) {
			json_object_begin(&ctl->j);
			json_kv_string(&ctl->j, "unloaded", name);
			json_object_end(&ctl->j);
		} else {
			printf("unloaded %s\n", name);
		}
		rc = CTL_EXIT_OK;
	}
	mfma_close(c);
	return rc;
}

int ctl_cmd_drain(struct ctl *ctl, int argc, char **argv)
{
	int rc = parse_plain(ctl, "drain", argc, argv, 0);
	if (rc != CTL_CONTINUE)
		return rc;
	mfma_client *c;
	if ((rc = ctl_connect(ctl, &c)) != 0)
		return rc;
	struct mfma_error e;
	if ((rc = mfma_drain(c, &e)) < 0) {
		rc = ctl_fail(ctl, "drain", rc, &e);
	} else {
		if (ctl->json) {
			json_object_begin(&ctl->j);
			json_kv_string(&ctl->j, "draining", mfma_endpoint(c));
			json_object_end(&ctl->j);
		} else {
			printf("draining %s\n", mfma_endpoint(c));
		}
		rc = CTL_EXIT_OK;
	}
	mfma_close(c);
	return rc;
}

int ctl_cmd_weights(struct ctl *ctl, int argc, char **argv)
{
	int rc = parse_plain(ctl, "weights", argc, argv, 0);
	if (rc != CTL_CONTINUE)
		return rc;
	mfma_client *c;
	if ((rc = ctl_connect(ctl, &c)) != 0)
		return rc;
	struct mfma_weight_list l;
	struct mfma_error e;
	if ((rc = mfma_list_weights(c, &l, &e)) < 0) {
		rc = ctl_fail(ctl, "weights", rc, &e);
		mfma_close(c);
		return rc;
	}
	if (ctl->json) {
		json_object_begin(&ctl->j);
		json_key(&ctl->j, "weights");
		json_array_begin(&ctl->j);
		for (size_t i = 0; i < l.n_weights; i++)
			ctl_json_weight(&ctl->j, &l.weights[i], 0, -1);
		json_array_end(&ctl->j);
		json_declared(&ctl->j, l.declared, l.n_declared);
		json_object_end(&ctl->j);
	} else {
		if (l.n_weights == 0)
			printf("no resident weights\n");
		else
			ctl_print_weights(l.weights, l.n_weights);
		print_declared(l.declared, l.n_declared);
	}
	mfma_weight_list_free(&l);
	mfma_close(c);
	return CTL_EXIT_OK;
}

/* ---- random ---- */

int ctl_cmd_random(struct ctl *ctl, int argc, char **argv)
{
	enum { OPT_SHAPE = CTL_OPT_FIRST_COMMAND_OPTION, OPT_DTYPE, OPT_SPARSE24, OPT_SEED };
	static const struct option opts[] = {
		CTL_COMMON_LONG,
		{ "output", required_argument, NULL, 'o' },
		{ "shape", required_argument, NULL, OPT_SHAPE },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "sparse24", no_argument, NULL, OPT_SPARSE24 },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ NULL, 0, NULL, 0 },
	};
	const char *out = NULL;
	uint32_t rows = 0, cols = 0;
	enum mfma_dtype dtype = MFMA_DT_NONE;
	bool sparse = false, have_seed = false;
	uint64_t seed = 0;
	char err[512];
	int opt, rc = 0;
	while ((opt = getopt_long(argc, argv, CTL_COMMON_SHORT "o:", opts, NULL)) != -1) {
		switch (opt) {
		case 'o': out = optarg; break;
		case OPT_SHAPE: rc = ctl_parse_shape("--shape", optarg, &rows, &cols, err, sizeof(err)); break;
		case OPT_DTYPE: rc = ctl_parse_dtype("--dtype", optarg, CTL_DT_INPUTS, &dtype, err, sizeof(err)); break;
		case OPT_SPARSE24: sparse = true; break;
		case OPT_SEED:
			rc = ctl_parse_u64("--seed", optarg, 0, UINT64_MAX, &seed, err, sizeof(err));
			have_seed = true;
			break;
		default:
			rc = ctl_common_option(ctl, "random", opt, optarg);
			if (rc != CTL_CONTINUE)
				return rc;
			rc = 0;
			continue;
		}
		if (rc < 0)
			return ctl_usage("random", "%s", err);
	}
	if (optind != argc)
		return ctl_usage("random", "unexpected argument '%s'", argv[optind]);
	if (!out || !rows || dtype == MFMA_DT_NONE)
		return ctl_usage("random", "-o FILE, --shape RxC and --dtype are required");
	if (sparse && cols % 4 != 0)
		return ctl_usage("random", "--sparse24 needs the columns to be a multiple of 4, "
				 "not %u", cols);
	if (!have_seed) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
		       ((uint64_t)getpid() << 32);
	}
	struct ctl_matrix m;
	if (ctl_matrix_alloc(&m, dtype, rows, cols) < 0)
		return ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory for a %ux%u %s matrix",
				      rows, cols, mfma_dtype_name(dtype));
	ctl_random_matrix(m.data, dtype, rows, cols, sparse, seed);
	rc = ctl_write_matrix(out, dtype, rows, cols, m.data, err, sizeof(err));
	ctl_matrix_free(&m);
	if (rc < 0)
		return ctl_fail_local(ctl, CTL_EXIT_LOCAL, "%s", err);
	if (ctl->json) {
		json_object_begin(&ctl->j);
		json_kv_string(&ctl->j, "output", out);
		json_kv_uint(&ctl->j, "rows", rows);
		json_kv_uint(&ctl->j, "cols", cols);
		json_kv_string(&ctl->j, "dtype", mfma_dtype_name(dtype));
		json_kv_bool(&ctl->j, "sparse24", sparse);
		json_kv_uint(&ctl->j, "seed", seed);
		json_object_end(&ctl->j);
	} else {
		printf("wrote %s: %ux%u %s%s, seed %" PRIu64 "\n", out, rows, cols,
		       mfma_dtype_name(dtype), sparse ? " 2:4" : "", seed);
	}
	return CTL_EXIT_OK;
}
