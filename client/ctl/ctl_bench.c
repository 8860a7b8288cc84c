/* mfmactl bench: a closed loop.  One thread per connection, each keeping
 * its share of the requests in flight with mfma_gemm_submit/mfma_wait;
 * every thread starts measuring at the same barrier, after its warmup. */
#include "ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_gemm.h"
#include "ctl_util.h"
#include "mfma_clock.h"

struct bench_opts {
	uint64_t requests, concurrency, connections, warmup, seed;
	uint32_t m, n, k;
	bool have_m, have_k;
	enum mfma_dtype dtype, out_dtype;
	bool sparse, resident, dtype_given;
	bool samples; /* --samples: every latency in the JSON */
	bool shm;     /* --shm: B and D through a shared-memory region per connection */
	bool check;   /* --check: every answer against a float64 reference */
	uint32_t spin_us; /* the clients' spin window (--spin-us, MFMA_SPIN_US) */
	bool cork;    /* --cork: the refills of freed slots in one write */
	bool own_d;   /* --own-d: one D buffer of ours per request in flight */
	enum ctl_sparse mode;
	const char *weight;
	int device;
};

/* Which kernel variants answered, with how many answers each: the first
 * BENCH_VARIANTS names seen, the rest counted together. */
#define BENCH_VARIANTS 16
struct bench_variants {
	char name[BENCH_VARIANTS][64];
	uint64_t count[BENCH_VARIANTS];
	size_t n;
	uint64_t other;
};

static void variants_add(struct bench_variants *v, const char *name, uint64_t k)
{
	for (size_t i = 0; i < v->n; i++)
		if (strcmp(v->name[i], name) == 0) {
			v->count[i] += k;
			return;
		}
	if (v->n == BENCH_VARIANTS) {
		v->other += k;
		return;
	}
	snprintf(v->name[v->n], sizeof(v->name[v->n]), "%s", name);
	v->count[v->n++] = k;
}

/* The slowest answer of a load, as the server timed it: where a tail
 * request's time went (a stall the percentiles do not show). */
struct bench_slowest {
	uint64_t round_trip, queue, h2d, kernel, d2h, total, wait;
	uint32_t batch;
	char variant[64];
};

struct bench_conn {
	pthread_t tid;
	mfma_client *c;
	const struct mfma_gemm_args *args;
	mfma_region *rg;    /* --shm: B, then one D per request slot */
	char *d_own;        /* --own-d: one D per request slot, d_bytes apart */
	size_t d_at, d_bytes;
	pthread_barrier_t *start;
	uint64_t warmup, requests, slots;
	int timeout_ms;
	bool cork; /* the requests refilling freed slots go out in one write */
	/* results */
	uint64_t *lat;
	size_t nlat;
	uint64_t errors;
	uint64_t queue, h2d, kernel, d2h, total; /* sums over successful requests */
	uint64_t encode, send, wait, decode, unexplained; /* the client's side, summed */
	struct bench_variants variants;
	double launch_kernel_ns; /* each request's share of its launch's kernel time */
	double launches;         /* each request's share of its launch (1 / its size) */
	struct bench_slowest slowest;
	/* --check: this connection's own B (so that a batch joins different
	 * columns), A as sent or loaded, the float64 reference of A.B, and
	 * what the answers came to. */
	bool check;
	struct ctl_matrix b_own;
	const struct ctl_matrix *a;
	double *ref;
	uint64_t checked, check_failed;
	double worst, tolerance;
	char check_why[160];
	int rc;                                  /* first failure */
	struct mfma_error err;
	bool fatal; /* the connection broke: it stopped early */
};

static void note_error(struct bench_conn *bc, int rc, const struct mfma_error *e)
{
	bc->errors++;
	if (bc->rc == 0) {
		bc->rc = rc;
		bc->err = *e;
	}
	if (!MFMA_IS_REMOTE(rc))
		bc->fatal = true;
}

/* --check: the float64 reference of this connection's A.B, before its
 * first request. */
static int check_prepare(struct bench_conn *bc, const struct mfma_gemm_args *args)
{
	const struct ctl_matrix *a = bc->a, *b = &bc->b_own;
	bc->ref = malloc((size_t)a->rows * b->cols * sizeof(double) + 1);
	if (!bc->ref)
		return -ENOMEM;
	struct mfma_gemm g = {
		.m = a->rows, .n = b->cols, .k = a->cols,
		.in_dtype = a->dtype,
		.out_dtype = args->out_dtype != MFMA_TYPE_NONE ? ctl_dtype(args->out_dtype)
							      : mfma_out_dtype_default(a->dtype),
		.alpha = 1.0f, .a = a->data, .b = b->data,
		.d = bc->ref, /* checked for presence only: the reference writes out */
	};
	return cpu_gemm_ref_f64(&g, bc->ref);
}

/* --check: one answer against the reference, by the tolerance its output
 * type and K allow (mfmactl submit --check's). */
static void check_answer(struct bench_conn *bc, const struct mfma_gemm_result *r)
{
	const struct ctl_matrix *a = bc->a;
	bool ok;
	double rel = 0;
	bc->checked++;
	if (r->d.rows != a->rows || r->d.cols != bc->b_own.cols) {
		ok = false;
		snprintf(bc->check_why, sizeof(bc->check_why), "D is %ux%u, expected %ux%u",
			 r->d.rows, r->d.cols, a->rows, bc->b_own.cols);
	} else {
		rel = cpu_rel_frobenius(r->d.data, ctl_dtype(r->d.dtype), bc->ref,
					(size_t)a->rows * bc->b_own.cols);
		bc->tolerance = mfma_check_tolerance(r->d.dtype, a->cols);
		ok = ctl_within_tolerance(rel, bc->tolerance);
		if (!ok && !bc->check_why[0])
			snprintf(bc->check_why, sizeof(bc->check_why),
				 "relative Frobenius error %.3g over the tolerance %.2g", rel,
				 bc->tolerance);
	}
	bc->worst = ctl_worse_error(bc->worst, rel);
	bc->check_failed += !ok;
}

static void *bench_thread(void *arg)
{
	struct bench_conn *bc = arg;
	struct mfma_gemm_result r;
	struct mfma_error e;
	struct mfma_gemm_args args = *bc->args;
	char *base = bc->rg ? mfma_region_data(bc->rg) : NULL;
	/* Where each slot's D goes: after B in the region, or our own. */
	char *dbase = base ? base + bc->d_at : bc->d_own;
	int rc;

	bc->args = &args;
	if (bc->check) {
		args.b = ctl_as_mfma(&bc->b_own);
		if ((rc = check_prepare(bc, &args)) < 0) {
			struct mfma_error why = { .code = rc };
			snprintf(why.message, sizeof(why.message), "the float64 reference: %s",
				 strerror(-rc));
			note_error(bc, rc, &why);
		}
	}
	if (base) {
		memcpy(base, args.b.data, args.b.bytes);
		args.b.data = base;
	}
	if (dbase) {
		args.d = dbase;
		args.d_bytes = base ? 0 : bc->d_bytes; /* in the region: to its end */
	}
	for (uint64_t i = 0; i < bc->warmup && !bc->fatal; i++) {
		rc = mfma_gemm(bc->c, bc->args, &r, &e);
		if (rc < 0) {
			/* A request the daemon refuses in the warmup will be
			 * refused in the loop too: say it once, stop. */
			note_error(bc, rc, &e);
			bc->fatal = true;
		}
		mfma_gemm_result_free(&r);
	}
	pthread_barrier_wait(bc->start);
	uint64_t submitted = 0, done = 0;
	/* Corked, every answer already here is taken (a wait of 0) before
	 * the slots it freed are refilled, and the refills go out in one
	 * write with the next wait (mfma_cork). */
	bool draining = false;
	if (bc->cork)
		mfma_cork(bc->c);
	while (!bc->fatal && done < bc->requests) {
		while (!draining && submitted < bc->requests && submitted - done < bc->slots) {
			uint64_t id;
			/* Each request in flight its own D (answers may come
			 * back out of order: a reused slot is only a benchmark's
			 * overwrite, never a fault). */
			if (dbase)
				args.d = dbase + (submitted % bc->slots) * bc->d_bytes;
			if ((rc = mfma_gemm_submit(bc->c, bc->args, &id, &e)) < 0) {
				note_error(bc, rc, &e);
				break;
			}
			submitted++;
		}
		if (bc->fatal)
			break;
		uint64_t id;
		rc = mfma_wait(bc->c, MFMA_ANY, draining ? 0 : bc->timeout_ms, &id, &r, &e);
		if (draining && rc == -ETIMEDOUT) {
			draining = false; /* none left: refill */
			continue;
		}
		draining = false;
		if (rc < 0) {
			note_error(bc, rc, &e);
			if (!bc->fatal)
				done++;
			continue;
		}
		done++;
		bc->lat[bc->nlat++] = r.round_trip_ns;
		bc->queue += r.timing.queue_ns;
		bc->h2d += r.timing.h2d_ns;
		bc->kernel += r.timing.kernel_ns;
		bc->d2h += r.timing.d2h_ns;
		bc->total += r.timing.total_ns;
		bc->encode += r.client.encode_ns;
		bc->send += r.client.send_ns;
		bc->wait += r.client.wait_ns;
		bc->decode += r.client.decode_ns;
		bc->unexplained += ctl_unexplained_ns(r.client.wait_ns, r.timing.total_ns);
		uint32_t br = r.timing.batch_requests ? r.timing.batch_requests : 1;
		bc->launches += 1.0 / br;
		bc->launch_kernel_ns += (double)r.timing.kernel_ns / br;
		variants_add(&bc->variants, r.variant && r.variant[0] ? r.variant : "?", 1);
		if (r.round_trip_ns > bc->slowest.round_trip) {
			bc->slowest = (struct bench_slowest){
				.round_trip = r.round_trip_ns, .queue = r.timing.queue_ns,
				.h2d = r.timing.h2d_ns, .kernel = r.timing.kernel_ns,
				.d2h = r.timing.d2h_ns, .total = r.timing.total_ns,
				.wait = r.client.wait_ns, .batch = br,
			};
			snprintf(bc->slowest.variant, sizeof(bc->slowest.variant), "%s",
				 r.variant && r.variant[0] ? r.variant : "?");
		}
		if (bc->check)
			check_answer(bc, &r);
		mfma_gemm_result_free(&r);
		draining = bc->cork && submitted > done;
	}
	if (bc->cork && (rc = mfma_uncork(bc->c, &e)) < 0)
		note_error(bc, rc, &e);
	return NULL;
}

/* --resident: the weight bench loaded is unloaded on SIGINT, SIGTERM or
 * SIGHUP too (Ctrl-C left it resident).  The handler only writes the
 * signal's number to a pipe (any thread may take a signal: the BLAS
 * library starts threads of its own); a thread reading the pipe unloads
 * the weight over the control connection, which is used under the lock by
 * whoever holds it, then ends the process by the signal. */
struct bench_guard {
	pthread_mutex_t lock;
	mfma_client *ctrl;
	const char *wname;
	bool loaded;
};

static int guard_pipe[2] = { -1, -1 };

static void guard_handler(int sig)
{
	const int saved = errno;
	const unsigned char c = (unsigned char)sig;
	(void)!write(guard_pipe[1], &c, 1);
	errno = saved;
}

static void *guard_thread(void *arg)
{
	struct bench_guard *g = arg;
	unsigned char c;
	ssize_t r;
	while ((r = read(guard_pipe[0], &c, 1)) < 0 && errno == EINTR)
		;
	if (r != 1)
		return NULL;
	/* The lock is held for the whole upload of the weight: the unload
	 * waits for its end (the daemon would keep a weight whose last bytes
	 * were sent), and the user is told why nothing stops yet. */
	if (pthread_mutex_trylock(&g->lock) != 0) {
		fprintf(stderr, "mfmactl: bench: interrupted; the weight is unloaded once its upload "
				"ends\n");
		pthread_mutex_lock(&g->lock);
	}
	if (g->loaded) {
		struct mfma_error e;
		mfma_set_timeout(g->ctrl, 2000);
		if (mfma_unload_weight(g->ctrl, g->wname, &e) < 0)
			fprintf(stderr, "mfmactl: bench: unloading %s: %s\n", g->wname, e.message);
		g->loaded = false;
	}
	/* End as the signal ends a process (status 128 + sig for a shell). */
	signal(c, SIG_DFL);
	raise(c);
	return NULL;
}

/* Starts the guard before the weight is loaded; where it cannot start,
 * bench runs without it.  A signal that was ignored stays ignored. */
static void guard_start(struct bench_guard *g, mfma_client *ctrl, const char *wname)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	pthread_t tid;
	g->ctrl = ctrl;
	g->wname = wname;
	if (pipe2(guard_pipe, O_CLOEXEC) != 0)
		return;
	if (pthread_create(&tid, NULL, guard_thread, g) != 0) {
		close(guard_pipe[0]);
		close(guard_pipe[1]);
		return;
	}
	pthread_detach(tid);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction sa = { .sa_handler = guard_handler, .sa_flags = SA_RESTART }, old;
		sigemptyset(&sa.sa_mask);
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaction(sigs[i], &sa, NULL);
	}
}

static int parse(struct ctl *ctl, int argc, char **argv, struct bench_opts *o)
{
	enum {
		OPT_CONNECTIONS = CTL_OPT_FIRST_COMMAND_OPTION, OPT_M, OPT_N, OPT_K, OPT_DTYPE,
		OPT_OUT_DTYPE, OPT_SPARSE, OPT_WEIGHT, OPT_RESIDENT, OPT_WARMUP, OPT_DEVICE,
		OPT_SEED, OPT_SAMPLES, OPT_SHM, OPT_CHECK, OPT_CORK, OPT_OWN_D,
	};
	static const struct option opts[] = {
		CTL_COMMON_LONG,
		{ "requests", required_argument, NULL, 'n' },
		{ "concurrency", required_argument, NULL, 'j' },
		{ "connections", required_argument, NULL, OPT_CONNECTIONS },
		{ "m", required_argument, NULL, OPT_M },
		{ "n", required_argument, NULL, OPT_N },
		{ "k", required_argument, NULL, OPT_K },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "out-dtype", required_argument, NULL, OPT_OUT_DTYPE },
		{ "sparse", optional_argument, NULL, OPT_SPARSE },
		{ "weight", required_argument, NULL, OPT_WEIGHT },
		{ "resident", no_argument, NULL, OPT_RESIDENT },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "samples", no_argument, NULL, OPT_SAMPLES },
		{ "shm", no_argument, NULL, OPT_SHM },
		{ "check", no_argument, NULL, OPT_CHECK },
		{ "cork", no_argument, NULL, OPT_CORK },
		{ "own-d", no_argument, NULL, OPT_OWN_D },
		{ NULL, 0, NULL, 0 },
	};
	const uint64_t dim_max = 1u << 20;
	char err[256];
	uint64_t v;
	int opt, rc;
	bool have_warmup = false;
	memset(o, 0, sizeof(*o));
	o->requests = 100;
	o->concurrency = 1;
	o->m = o->n = o->k = 256;
	o->dtype = MFMA_DT_F16;
	o->device = -1;
	o->seed = 1;
	while ((opt = getopt_long(argc, argv, CTL_COMMON_SHORT "n:j:", opts, NULL)) != -1) {
		rc = 0;
		switch (opt) {
		case 'n': rc = ctl_parse_u64("--requests", optarg, 1, 100000000, &o->requests, err, sizeof(err)); break;
		case 'j': rc = ctl_parse_u64("--concurrency", optarg, 1, 4096, &o->concurrency, err, sizeof(err)); break;
		case OPT_CONNECTIONS: rc = ctl_parse_u64("--connections", optarg, 1, 4096, &o->connections, err, sizeof(err)); break;
		case OPT_M:
			rc = ctl_parse_u64("--m", optarg, 1, dim_max, &v, err, sizeof(err));
			o->m = (uint32_t)v;
			o->have_m = true;
			break;
		case OPT_N:
			rc = ctl_parse_u64("--n", optarg, 1, dim_max, &v, err, sizeof(err));
			o->n = (uint32_t)v;
			break;
		case OPT_K:
			rc = ctl_parse_u64("--k", optarg, 1, dim_max, &v, err, sizeof(err));
			o->k = (uint32_t)v;
			o->have_k = true;
			break;
		case OPT_DTYPE:
			rc = ctl_parse_dtype("--dtype", optarg, CTL_DT_INPUTS, &o->dtype, err, sizeof(err));
			o->dtype_given = true;
			break;
		case OPT_OUT_DTYPE: rc = ctl_parse_dtype("--out-dtype", optarg, CTL_DT_OUTPUTS, &o->out_dtype, err, sizeof(err)); break;
		case OPT_SPARSE:
			o->sparse = true;
			o->mode = CTL_SPARSE_PACKED;
			if (optarg)
				rc = ctl_parse_sparse("--sparse", optarg, &o->mode, err, sizeof(err));
			break;
		case OPT_WEIGHT: o->weight = optarg; break;
		case OPT_RESIDENT: o->resident = true; break;
		case OPT_WARMUP:
			rc = ctl_parse_u64("--warmup", optarg, 0, 1000000, &o->warmup, err, sizeof(err));
			have_warmup = true;
			break;
		case OPT_DEVICE: rc = ctl_parse_int("--device", optarg, -1, 1 << 20, &o->device, err, sizeof(err)); break;
		case OPT_SEED: rc = ctl_parse_u64("--seed", optarg, 0, UINT64_MAX, &o->seed, err, sizeof(err)); break;
		case OPT_SAMPLES: o->samples = true; break;
		case OPT_SHM: o->shm = true; break;
		case OPT_CHECK: o->check = true; break;
		case OPT_CORK: o->cork = true; break;
		case OPT_OWN_D: o->own_d = true; break;
		default:
			rc = ctl_common_option(ctl, "bench", opt, optarg);
			if (rc != CTL_CONTINUE)
				return rc;
			continue;
		}
		if (rc < 0)
			return ctl_usage("bench", "%s", err);
	}
	if (optind != argc) {
		/* bench's --sparse stands alone (packed) or takes its mode
		 * after '=': `--sparse prune`, as submit and load take it,
		 * leaves the mode here. */
		enum ctl_sparse mode;
		char e2[8];
		if (o->sparse && ctl_parse_sparse("--sparse", argv[optind], &mode, e2, sizeof(e2)) == 0)
			return ctl_usage("bench", "unexpected argument '%s': bench takes a mode as "
					 "--sparse=%s", argv[optind], argv[optind]);
		return ctl_usage("bench", "unexpected argument '%s'", argv[optind]);
	}
	if (o->weight && o->resident)
		return ctl_usage("bench", "--weight and --resident exclude each other");
	if (o->weight && o->sparse)
		return ctl_usage("bench", "--sparse does not apply to --weight: the weight's "
				 "sparsity was chosen when it was loaded");
	if (o->weight && (o->have_m || o->have_k))
		return ctl_usage("bench", "--m and --k come from the weight with --weight");
	if (o->check && o->weight)
		return ctl_usage("bench", "--check needs the A it sends or loads: not with --weight");
	if (o->check && o->sparse && o->mode == CTL_SPARSE_PRUNE)
		return ctl_usage("bench", "--check takes --sparse=packed or validate, whose A is "
				 "already 2:4, not prune");
	/* One per request in flight, up to the daemon's default
	 * limits.max_connections_per_user: more would be refused to a user
	 * other than root (the rest pipeline on these). */
	if (!o->connections)
		o->connections = o->concurrency < 64 ? o->concurrency : 64;
	if (o->connections > o->concurrency)
		return ctl_usage("bench", "--connections %" PRIu64 " is more than the concurrency "
				 "%" PRIu64, o->connections, o->concurrency);
	if (o->sparse && o->mode == CTL_SPARSE_PACKED && o->k % 4 != 0)
		return ctl_usage("bench", "--sparse needs --k to be a multiple of 4, not %u", o->k);
	if (!have_warmup)
		o->warmup = 1;
	return CTL_CONTINUE;
}

/* Finds the weight for --weight: its shape and dtype set M, K and the
 * input type. */
static int weight_shape(struct ctl *ctl, mfma_client *c, struct bench_opts *o)
{
	struct mfma_weight_list l;
	struct mfma_error e;
	int rc = mfma_list_weights(c, &l, &e);
	if (rc < 0)
		return ctl_fail(ctl, "bench: listing weights", rc, &e);
	rc = -1;
	for (size_t i = 0; i < l.n_weights; i++) {
		if (strcmp(l.weights[i].name, o->weight) != 0)
			continue;
		enum mfma_dtype t = ctl_dtype(l.weights[i].dtype);
		if (o->dtype_given && t != o->dtype) {
			rc = ctl_usage("bench", "weight '%s' is %s, not %s", o->weight,
				       mfma_dtype_name(t), mfma_dtype_name(o->dtype));
			break;
		}
		o->m = l.weights[i].rows;
		o->k = l.weights[i].cols;
		o->dtype = t;
		o->sparse = l.weights[i].sparse;
		rc = CTL_EXIT_OK;
		break;
	}
	mfma_weight_list_free(&l);
	if (rc == -1)
		rc = ctl_fail_local(ctl, CTL_EXIT_DAEMON, "bench: no resident weight is named '%s'",
				    o->weight);
	return rc;
}

static void report(struct ctl *ctl, const struct bench_opts *o, struct bench_conn *bc,
		   uint64_t wall_ns)
{
	size_t n = 0;
	uint64_t errors = 0, q = 0, h = 0, kr = 0, d = 0, t = 0, sum = 0;
	uint64_t ce = 0, cs = 0, cw = 0, cd = 0, cu = 0;
	double busy_ns = 0, launches = 0;
	struct bench_variants var = { .n = 0 };
	struct bench_slowest slow = { .round_trip = 0 };
	uint64_t checked = 0, check_failed = 0;
	double worst = 0, tolerance = 0;
	for (uint64_t i = 0; i < o->connections; i++) {
		checked += bc[i].checked;
		check_failed += bc[i].check_failed;
		worst = ctl_worse_error(worst, bc[i].worst);
		tolerance = bc[i].tolerance > tolerance ? bc[i].tolerance : tolerance;
		for (size_t k = 0; k < bc[i].variants.n; k++)
			variants_add(&var, bc[i].variants.name[k], bc[i].variants.count[k]);
		var.other += bc[i].variants.other;
		if (bc[i].slowest.round_trip > slow.round_trip)
			slow = bc[i].slowest;
		launches += bc[i].launches;
		busy_ns += bc[i].launch_kernel_ns;
		n += bc[i].nlat;
		errors += bc[i].errors;
		q += bc[i].queue;
		h += bc[i].h2d;
		kr += bc[i].kernel;
		d += bc[i].d2h;
		t += bc[i].total;
		ce += bc[i].encode;
		cs += bc[i].send;
		cw += bc[i].wait;
		cd += bc[i].decode;
		cu += bc[i].unexplained;
	}
	uint64_t *lat = malloc((n ? n : 1) * sizeof(*lat));
	size_t at = 0;
	for (uint64_t i = 0; lat && i < o->connections; i++) {
		memcpy(lat + at, bc[i].lat, bc[i].nlat * sizeof(*lat));
		at += bc[i].nlat;
	}
	if (!lat)
		n = 0;
	ctl_sort_u64(lat, n);
	for (size_t i = 0; i < n; i++)
		sum += lat[i];
	double rps = wall_ns ? (double)n * 1e9 / (double)wall_ns : 0.0;
	uint64_t div = n ? n : 1;
	double flops = 2.0 * o->m * o->n * o->k;
	double gf_wall = wall_ns ? flops * (double)n / (double)wall_ns : 0.0;
	/* Over the kernels' own time, each launch counted once: a batch's
	 * kernel time is every one of its requests' kernel_ns. */
	double gf_kernel = busy_ns > 0 ? flops * (double)n / busy_ns : 0.0;
	/* Requests over launches (a launch of 8 is one launch, not 8 of 8). */
	double mean_batch = launches > 0 ? (double)n / launches : 0.0;
	const char *a_kind = o->weight || o->resident ? (o->sparse ? "resident 2:4" : "resident dense")
			     : !o->sparse ? "dense"
			     : o->mode == CTL_SPARSE_PACKED ? "2:4 packed"
			     : o->mode == CTL_SPARSE_VALIDATE ? "2:4 validate" : "prune";
	uint64_t p50 = ctl_percentile(lat, n, 50), p90 = ctl_percentile(lat, n, 90),
		 p99 = ctl_percentile(lat, n, 99);

	if (ctl->json) {
		struct json *j = &ctl->j;
		json_object_begin(j);
		json_kv_uint(j, "requests", n);
		json_kv_uint(j, "errors", errors);
		json_kv_uint(j, "concurrency", o->concurrency);
		json_kv_uint(j, "connections", o->connections);
		json_kv_uint(j, "m", o->m);
		json_kv_uint(j, "n", o->n);
		json_kv_uint(j, "k", o->k);
		json_kv_string(j, "dtype", mfma_dtype_name(o->dtype));
		json_kv_string(j, "a", a_kind);
		json_kv_bool(j, "shm", o->shm);
		json_kv_bool(j, "cork", o->cork);
		json_kv_bool(j, "own_d", o->own_d || o->shm);
		json_kv_uint(j, "spin_us", o->spin_us);
		json_kv_uint(j, "wall_ns", wall_ns);
		json_kv_double(j, "requests_per_s", rps);
		json_key(j, "latency_ns");
		json_object_begin(j);
		json_kv_uint(j, "min", n ? lat[0] : 0);
		json_kv_uint(j, "mean", sum / div);
		json_kv_uint(j, "p50", p50);
		json_kv_uint(j, "p90", p90);
		json_kv_uint(j, "p99", p99);
		json_kv_uint(j, "max", n ? lat[n - 1] : 0);
		json_object_end(j);
		json_kv_double(j, "gflops_wall", gf_wall);
		json_kv_double(j, "gflops_kernel", gf_kernel);
		json_key(j, "server_mean_ns");
		json_object_begin(j);
		json_kv_uint(j, "queue", q / div);
		json_kv_uint(j, "h2d", h / div);
		json_kv_uint(j, "kernel", kr / div);
		json_kv_uint(j, "d2h", d / div);
		json_kv_uint(j, "total", t / div);
		json_object_end(j);
		json_key(j, "client_mean_ns");
		json_object_begin(j);
		json_kv_uint(j, "encode", ce / div);
		json_kv_uint(j, "send", cs / div);
		json_kv_uint(j, "wait", cw / div);
		json_kv_uint(j, "decode", cd / div);
		json_kv_uint(j, "unexplained", cu / div);
		json_object_end(j);
		/* The slowest answer (its round trip is latency_ns.max): the
		 * server's phases of it, its launch's requests and variant. */
		json_key(j, "slowest");
		json_object_begin(j);
		json_kv_uint(j, "round_trip_ns", slow.round_trip);
		json_kv_uint(j, "queue_ns", slow.queue);
		json_kv_uint(j, "h2d_ns", slow.h2d);
		json_kv_uint(j, "kernel_ns", slow.kernel);
		json_kv_uint(j, "d2h_ns", slow.d2h);
		json_kv_uint(j, "total_ns", slow.total);
		json_kv_uint(j, "client_wait_ns", slow.wait);
		json_kv_uint(j, "batch_requests", slow.batch);
		json_kv_string(j, "variant", slow.round_trip ? slow.variant : "");
		json_object_end(j);
		/* Batching: the mean number of requests a launch answered, and
		 * the share of the wall time the device spent in kernels (each
		 * launch counted once). */
		json_kv_double(j, "mean_batch", mean_batch);
		json_kv_double(j, "device_busy", wall_ns ? busy_ns / (double)wall_ns : 0.0);
		if (o->check) {
			json_key(j, "check");
			json_object_begin(j);
			json_kv_uint(j, "answers", checked);
			json_kv_uint(j, "failed", check_failed);
			json_kv_double(j, "worst_rel_error", worst);
			json_kv_double(j, "tolerance", tolerance);
			json_object_end(j);
		}
		/* Which kernels or libraries answered: the measured choice
		 * per N bucket, and for batches per joined width. */
		json_key(j, "variants");
		json_object_begin(j);
		for (size_t k = 0; k < var.n; k++)
			json_kv_uint(j, var.name[k], var.count[k]);
		if (var.other)
			json_kv_uint(j, "other", var.other);
		json_object_end(j);
		if (o->samples) {
			/* The measurements the percentiles come from, for plotting
			 * (python3 -m mfma bench --plot). */
			json_key(j, "latency_samples_ns");
			json_array_begin(j);
			for (size_t i = 0; i < n; i++)
				json_uint(j, lat[i]);
			json_array_end(j);
		}
		json_object_end(j);
	} else {
		char s[8][32];
		char spin[40] = "";
		if (o->spin_us)
			snprintf(spin, sizeof(spin), ", client spin %u us", o->spin_us);
		printf("bench: %zu requests of %ux%ux%u %s (A %s%s), %" PRIu64 " in flight over %" PRIu64
		       " connection%s%s\n", n, o->m, o->n, o->k, mfma_dtype_name(o->dtype), a_kind,
		       o->shm ? ", B and D in shared memory" : "", o->concurrency, o->connections,
		       o->connections == 1 ? "" : "s", spin);
		printf("  throughput   %.1f requests/s, %.2f GFLOP/s\n", rps, gf_wall);
		ctl_format_ns(n ? lat[0] : 0, s[0], sizeof(s[0]));
		ctl_format_ns(sum / div, s[1], sizeof(s[1]));
		ctl_format_ns(p50, s[2], sizeof(s[2]));
		ctl_format_ns(p90, s[3], sizeof(s[3]));
		ctl_format_ns(p99, s[4], sizeof(s[4]));
		ctl_format_ns(n ? lat[n - 1] : 0, s[5], sizeof(s[5]));
		printf("  latency      min %s, mean %s, p50 %s, p90 %s, p99 %s, max %s\n", s[0], s[1],
		       s[2], s[3], s[4], s[5]);
		ctl_format_ns(q / div, s[0], sizeof(s[0]));
		ctl_format_ns(h / div, s[1], sizeof(s[1]));
		ctl_format_ns(kr / div, s[2], sizeof(s[2]));
		ctl_format_ns(d / div, s[3], sizeof(s[3]));
		ctl_format_ns(t / div, s[4], sizeof(s[4]));
		printf("  server mean  queue %s, copy in %s, kernel %s, copy out %s, total %s\n",
		       s[0], s[1], s[2], s[3], s[4]);
		ctl_format_ns(ce / div, s[0], sizeof(s[0]));
		ctl_format_ns(cs / div, s[1], sizeof(s[1]));
		ctl_format_ns(cw / div, s[2], sizeof(s[2]));
		ctl_format_ns(cd / div, s[3], sizeof(s[3]));
		ctl_format_ns(cu / div, s[4], sizeof(s[4]));
		printf("  client mean  encode %s, send %s, wait %s, decode %s; unexplained %s (the "
		       "wait less the server total)\n", s[0], s[1], s[2], s[3], s[4]);
		if (slow.round_trip) {
			ctl_format_ns(slow.round_trip, s[0], sizeof(s[0]));
			ctl_format_ns(slow.queue, s[1], sizeof(s[1]));
			ctl_format_ns(slow.h2d, s[2], sizeof(s[2]));
			ctl_format_ns(slow.kernel, s[3], sizeof(s[3]));
			ctl_format_ns(slow.d2h, s[4], sizeof(s[4]));
			ctl_format_ns(slow.total, s[5], sizeof(s[5]));
			printf("  slowest      %s: server queue %s, copy in %s, kernel %s, copy out %s, "
			       "total %s; %" PRIu32 " request%s in its launch, %s\n", s[0], s[1], s[2],
			       s[3], s[4], s[5], slow.batch, slow.batch == 1 ? "" : "s", slow.variant);
		}
		printf("  kernel       %.2f GFLOP/s over the kernels' time\n", gf_kernel);
		printf("  batching     %.2f requests per launch on average; kernels busy %.1f%% of "
		       "the wall time\n",
		       mean_batch, wall_ns ? 100.0 * busy_ns / (double)wall_ns : 0.0);
		printf("  variants    ");
		for (size_t k = 0; k < var.n; k++)
			printf(" %s %" PRIu64 "%s", var.name[k], var.count[k],
			       k + 1 < var.n || var.other ? "," : "");
		if (var.other)
			printf(" others %" PRIu64, var.other);
		printf("\n");
		if (errors)
			printf("  errors       %" PRIu64 "\n", errors);
		if (o->check)
			printf("  check        %" PRIu64 " answers against float64, %" PRIu64
			       " over the tolerance %.2g; worst relative error %.3g: %s\n",
			       checked, check_failed, tolerance, worst,
			       check_failed ? "FAILED" : "ok");
	}
	free(lat);
}

int ctl_cmd_bench(struct ctl *ctl, int argc, char **argv)
{
	struct bench_opts o;
	struct ctl_matrix a = { 0 }, b = { 0 };
	struct ctl_packed pk = { 0 };
	struct mfma_gemm_args args;
	struct bench_conn *bc = NULL;
	mfma_client *ctrl = NULL;
	char err[512], wname[64] = "";
	bool barrier = false;
	pthread_barrier_t start;
	struct mfma_error e;
	uint64_t started = 0;
	struct bench_guard guard = { .lock = PTHREAD_MUTEX_INITIALIZER };
	int rc = parse(ctl, argc, argv, &o);
	if (rc != CTL_CONTINUE)
		return rc;

	/* One control connection for the weight and the errors it finds early. */
	if ((rc = ctl_connect(ctl, &ctrl)) != 0)
		return rc;
	o.spin_us = mfma_spin_us(ctrl);
	mfma_gemm_args_init(&args);
	if (o.weight && (rc = weight_shape(ctl, ctrl, &o)) != 0)
		goto out;
	if (!o.weight) {
		bool pattern = o.sparse && o.mode != CTL_SPARSE_PRUNE;
		if (ctl_matrix_alloc(&a, o.dtype, o.m, o.k) < 0) {
			rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory");
			goto out;
		}
		ctl_random_matrix(a.data, o.dtype, o.m, o.k, pattern, o.seed);
		int mode = o.sparse ? (int)o.mode : CTL_SPARSE_NONE;
		if ((rc = ctl_make_operand(&a, mode, &args.a, &pk, err, sizeof(err))) < 0) {
			rc = ctl_fail_local(ctl, rc == -ENOMEM ? CTL_EXIT_LOCAL : CTL_EXIT_USAGE, "%s",
					    err);
			goto out;
		}
	}
	if (o.resident) {
		struct mfma_load_args la;
		mfma_load_args_init(&la);
		snprintf(wname, sizeof(wname), "mfmactl-bench-%ld", (long)getpid());
		la.name = wname;
		la.a = args.a;
		la.device = o.device;
		guard_start(&guard, ctrl, wname);
		pthread_mutex_lock(&guard.lock);
		rc = mfma_load_weight(ctrl, &la, NULL, &e);
		guard.loaded = rc >= 0;
		pthread_mutex_unlock(&guard.lock);
		if (rc < 0) {
			rc = ctl_fail(ctl, "bench: loading the weight", rc, &e);
			goto out;
		}
		o.weight = wname;
	}
	if (o.weight) {
		memset(&args.a, 0, sizeof(args.a));
		args.a.kind = MFMA_OPERAND_WEIGHT;
		args.a.weight = o.weight;
	}
	if (ctl_matrix_alloc(&b, o.dtype, o.k, o.n) < 0) {
		rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory");
		goto out;
	}
	ctl_random_matrix(b.data, o.dtype, o.k, o.n, false, o.seed + 1);
	args.b = ctl_as_mfma(&b);
	args.out_dtype = ctl_type(o.out_dtype);
	args.device = o.device;

	bc = calloc(o.connections, sizeof(*bc));
	if (!bc || pthread_barrier_init(&start, NULL, (unsigned)o.connections + 1) != 0) {
		rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory");
		goto out;
	}
	barrier = true;
	for (uint64_t i = 0; i < o.connections; i++) {
		struct bench_conn *x = &bc[i];
		x->args = &args;
		x->start = &start;
		x->warmup = o.warmup;
		x->timeout_ms = ctl->timeout_ms;
		x->requests = o.requests / o.connections + (i < o.requests % o.connections);
		x->slots = o.concurrency / o.connections + (i < o.concurrency % o.connections);
		x->cork = o.cork && x->slots > 1;
		x->lat = malloc((x->requests ? x->requests : 1) * sizeof(*x->lat));
		if (!x->lat) {
			rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory");
			goto out;
		}
		if ((rc = ctl_connect(ctl, &x->c)) != 0)
			goto out;
		if (o.check) {
			x->check = true;
			x->a = &a;
			if (ctl_matrix_alloc(&x->b_own, o.dtype, o.k, o.n) < 0) {
				rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory");
				goto out;
			}
			ctl_random_matrix(x->b_own.data, o.dtype, o.k, o.n, false, o.seed + 2 + i);
		}
		if (o.shm || o.own_d) {
			enum mfma_type out = args.out_dtype != MFMA_TYPE_NONE ? args.out_dtype
					     : ctl_type(mfma_out_dtype_default(o.dtype));
			x->d_bytes = ((size_t)o.m * o.n * mfma_type_size(out) + 63) & ~(size_t)63;
		}
		if (o.own_d && !o.shm && !(x->d_own = malloc(x->slots * x->d_bytes))) {
			rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory");
			goto out;
		}
		if (o.shm) {
			x->d_at = (args.b.bytes + 63) & ~(size_t)63;
			if ((rc = mfma_region_create(x->c, x->d_at + x->slots * x->d_bytes, &x->rg,
						     &e)) < 0) {
				rc = ctl_fail(ctl, "bench --shm: creating a region", rc, &e);
				goto out;
			}
		}
	}
	for (; started < o.connections; started++) {
		if (pthread_create(&bc[started].tid, NULL, bench_thread, &bc[started]) != 0) {
			rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "cannot start a thread");
			break;
		}
	}
	if (started < o.connections) {
		/* The barrier counts on every thread: the started ones would
		 * wait forever.  Tell them to skip the loop, then release. */
		for (uint64_t i = 0; i < started; i++)
			bc[i].fatal = true;
		for (uint64_t i = started; i < o.connections; i++)
			pthread_barrier_wait(&start);
	}
	pthread_barrier_wait(&start);
	uint64_t t0 = mfma_clock_ns();
	for (uint64_t i = 0; i < started; i++)
		pthread_join(bc[i].tid, NULL);
	uint64_t wall = mfma_clock_ns() - t0;
	if (started < o.connections)
		goto out;

	report(ctl, &o, bc, wall);
	rc = CTL_EXIT_OK;
	for (uint64_t i = 0; i < o.connections; i++) {
		if (bc[i].rc < 0) {
			char what[64];
			snprintf(what, sizeof(what), "bench (%" PRIu64 " failed; the first)",
				 bc[i].errors);
			/* The report is on stdout already: only stderr here. */
			bool json = ctl->json;
			ctl->json = false;
			rc = ctl_fail(ctl, what, bc[i].rc, &bc[i].err);
			ctl->json = json;
			break;
		}
	}
	for (uint64_t i = 0; rc == CTL_EXIT_OK && i < o.connections; i++) {
		if (bc[i].check_failed) {
			fprintf(stderr, "mfmactl: bench --check: %" PRIu64 " of %" PRIu64
				" answers on connection %" PRIu64 " wrong; the first: %s\n",
				bc[i].check_failed, bc[i].checked, i, bc[i].check_why);
			rc = CTL_EXIT_CHECK;
		}
	}
out:
	pthread_mutex_lock(&guard.lock);
	if (guard.loaded && (mfma_unload_weight(ctrl, wname, &e)) < 0)
		fprintf(stderr, "mfmactl: bench: unloading %s: %s\n", wname, e.message);
	guard.loaded = false;
	pthread_mutex_unlock(&guard.lock);
	if (bc) {
		for (uint64_t i = 0; i < o.connections; i++) {
			if (bc[i].rg && mfma_region_destroy(bc[i].c, bc[i].rg, &e) < 0)
				fprintf(stderr, "mfmactl: bench: unregistering a region: %s\n",
					e.message);
			mfma_close(bc[i].c);
			free(bc[i].lat);
			free(bc[i].d_own);
			free(bc[i].ref);
			ctl_matrix_free(&bc[i].b_own);
		}
		free(bc);
	}
	if (barrier)
		pthread_barrier_destroy(&start);
	mfma_close(ctrl);
	ctl_packed_free(&pk);
	ctl_matrix_free(&a);
	ctl_matrix_free(&b);
	return rc;
}
