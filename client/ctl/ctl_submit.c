/* mfmactl submit: one GEMM from .npy files, its timing, and optionally a
 * check against a float64 reference computed here. */
#include "ctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gemm.h"
#include "ctl_util.h"
#include "sparse24.h"

struct submit_opts {
	const char *a, *weight, *b, *c, *out;
	enum ctl_sparse sparse;
	enum mfma_dtype dtype, out_dtype;
	float alpha, beta;
	bool have_beta, check;
	bool shm; /* --shm: B, C and D through a shared-memory region */
	int device;
	uint32_t priority;
	uint64_t deadline_us;
};

/* The A the daemon actually multiplies under PRUNE_24.  The daemon
 * refuses a K that is not a multiple of 4 under PRUNE_24, and the check
 * only runs on an answer, so K is whole groups of 4 here. */
static int pruned_copy(const struct ctl_matrix *a, struct ctl_matrix *out)
{
	struct ctl_packed pk;
	if (a->cols % 4 != 0)
		return -EINVAL;
	int rc = ctl_packed_alloc(&pk, a);
	if (rc == 0 && (rc = ctl_matrix_alloc(out, a->dtype, a->rows, a->cols)) == 0) {
		rc = sparse24_prune(a->data, a->dtype, a->rows, a->cols, pk.values, pk.meta);
		if (rc == 0)
			rc = sparse24_decompress(pk.values, pk.meta, a->dtype, a->rows, a->cols,
						 out->data, NULL, NULL);
		if (rc < 0)
			ctl_matrix_free(out);
	}
	ctl_packed_free(&pk);
	return rc;
}

struct check_result {
	double rel_error, tolerance;
	bool ok;
	char why[256]; /* set when the check could not even compare */
};

/* prune: the daemon multiplied A pruned to 2:4 (--sparse prune, or a
 * weight held in 2:4 form: pruning an A that already is 2:4 leaves it). */
static int check_gemm(const struct submit_opts *o, bool prune, const struct ctl_matrix *a,
		      const struct ctl_matrix *b, const struct ctl_matrix *c,
		      const struct mfma_gemm_result *r, struct check_result *out)
{
	struct ctl_matrix pruned;
	const struct ctl_matrix *aref = a;
	memset(out, 0, sizeof(*out));
	if (r->d.rows != a->rows || r->d.cols != b->cols) {
		snprintf(out->why, sizeof(out->why), "D is %ux%u, expected %ux%u", r->d.rows,
			 r->d.cols, a->rows, b->cols);
		return 0;
	}
	if (prune) {
		int prc = pruned_copy(a, &pruned);
		if (prc < 0)
			return prc;
		aref = &pruned;
	}
	size_t count = (size_t)a->rows * b->cols;
	double *ref = malloc(count * sizeof(double) + 1);
	if (!ref) {
		if (aref != a)
			ctl_matrix_free(&pruned);
		return -ENOMEM;
	}
	struct mfma_gemm g = {
		.m = a->rows,
		.n = b->cols,
		.k = a->cols,
		.in_dtype = a->dtype,
		.out_dtype = ctl_dtype(r->d.dtype),
		.alpha = o->alpha,
		.beta = c ? o->beta : 0.0f,
		.a_sparse = false,
		.a = aref->data,
		.b = b->data,
		.c = c ? c->data : NULL,
		.d = (void *)(uintptr_t)r->d.data,
	};
	int rc = cpu_gemm_ref_f64(&g, ref);
	if (rc == 0) {
		out->rel_error = cpu_rel_frobenius(r->d.data, g.out_dtype, ref, count);
		out->tolerance = mfma_check_tolerance(r->d.dtype, a->cols);
		out->ok = ctl_within_tolerance(out->rel_error, out->tolerance);
	}
	free(ref);
	if (aref != a)
		ctl_matrix_free(&pruned);
	return rc;
}

/* The weight's shape and form, from the daemon, for checking a GEMM on it
 * against the A the user says it was loaded from. */
static void weight_check_prep(mfma_client *cl, const char *name, const struct ctl_matrix *a,
			      bool *prune, struct check_result *chk)
{
	struct mfma_weight_list wl = { 0 };
	struct mfma_error e;
	if (mfma_list_weights(cl, &wl, &e) < 0) {
		snprintf(chk->why, sizeof(chk->why), "cannot list the weights: %.200s", e.message);
		return;
	}
	const struct mfma_weight_info *w = NULL;
	for (size_t i = 0; i < wl.n_weights && !w; i++)
		if (strcmp(wl.weights[i].name, name) == 0)
			w = &wl.weights[i];
	if (!w)
		snprintf(chk->why, sizeof(chk->why), "weight '%s' is no longer loaded", name);
	else if (w->rows != a->rows || w->cols != a->cols)
		snprintf(chk->why, sizeof(chk->why), "-a is %ux%u but weight '%s' is %ux%u: not "
			 "the matrix it was loaded from", a->rows, a->cols, name, w->rows, w->cols);
	else
		*prune = w->sparse;
	mfma_weight_list_free(&wl);
}

static void print_text(const struct submit_opts *o, uint32_t m, uint32_t n, uint32_t k,
		       const struct mfma_gemm_result *r, const struct check_result *chk)
{
	char q[32], p[32], h[32], kr[32], d[32], t[32], rt[32];
	ctl_format_ns(r->timing.queue_ns, q, sizeof(q));
	ctl_format_ns(r->timing.prep_ns, p, sizeof(p));
	ctl_format_ns(r->timing.h2d_ns, h, sizeof(h));
	ctl_format_ns(r->timing.kernel_ns, kr, sizeof(kr));
	ctl_format_ns(r->timing.d2h_ns, d, sizeof(d));
	ctl_format_ns(r->timing.total_ns, t, sizeof(t));
	ctl_format_ns(r->round_trip_ns, rt, sizeof(rt));
	printf("D: %ux%u %s%s%s\n", r->d.rows, r->d.cols, mfma_dtype_name(ctl_dtype(r->d.dtype)),
	       o->out ? " written to " : "", o->out ? o->out : "");
	printf("device %u (%s, %s), variant %s\n", r->device.index, r->device.backend,
	       r->device.arch, r->variant[0] ? r->variant : "(not named)");
	printf("timing: queue %s, prep %s, copy in %s, kernel %s, copy out %s, server total %s, "
	       "round trip %s\n", q, p, h, kr, d, t, rt);
	char ce[32], cs[32], cw[32], cd[32], un[32];
	const struct mfma_client_timing *ct = &r->client;
	ctl_format_ns(ct->encode_ns, ce, sizeof(ce));
	ctl_format_ns(ct->send_ns, cs, sizeof(cs));
	ctl_format_ns(ct->wait_ns, cw, sizeof(cw));
	ctl_format_ns(ct->decode_ns, cd, sizeof(cd));
	ctl_format_ns(ctl_unexplained_ns(ct->wait_ns, r->timing.total_ns), un, sizeof(un));
	printf("client: encode %s, send %s, wait %s, decode %s; unexplained %s (the wait less the "
	       "server total: socket, wake-ups)\n", ce, cs, cw, cd, un);
	printf("GFLOP/s (2*M*N*K = %.4g): %.2f over the kernel, %.2f over the round trip\n",
	       2.0 * m * n * k, ctl_gflops(m, n, k, r->timing.kernel_ns),
	       ctl_gflops(m, n, k, r->round_trip_ns));
	if (o->check) {
		if (chk->why[0])
			printf("check: FAILED: %s\n", chk->why);
		else if (chk->tolerance == 0.0)
			printf("check: relative Frobenius error %.3g, exact match required: %s\n",
			       chk->rel_error, chk->ok ? "ok" : "FAILED");
		else
			printf("check: relative Frobenius error %.3g, tolerance %.2g: %s\n",
			       chk->rel_error, chk->tolerance, chk->ok ? "ok" : "FAILED");
	}
}

static void print_json(struct ctl *ctl, const struct submit_opts *o, uint32_t m, uint32_t n,
		       uint32_t k, enum mfma_dtype in, const struct mfma_gemm_result *r,
		       const struct check_result *chk)
{
	struct json *j = &ctl->j;
	json_object_begin(j);
	json_kv_uint(j, "m", m);
	json_kv_uint(j, "n", n);
	json_kv_uint(j, "k", k);
	json_kv_string(j, "dtype", mfma_dtype_name(in));
	json_kv_string(j, "out_dtype", mfma_dtype_name(ctl_dtype(r->d.dtype)));
	json_key(j, "device");
	json_object_begin(j);
	json_kv_uint(j, "index", r->device.index);
	json_kv_string(j, "backend", r->device.backend);
	json_kv_string(j, "arch", r->device.arch);
	json_object_end(j);
	json_kv_string(j, "variant", r->variant);
	json_key(j, "timing");
	json_object_begin(j);
	json_kv_uint(j, "queue_ns", r->timing.queue_ns);
	json_kv_uint(j, "prep_ns", r->timing.prep_ns);
	json_kv_uint(j, "h2d_ns", r->timing.h2d_ns);
	json_kv_uint(j, "kernel_ns", r->timing.kernel_ns);
	json_kv_uint(j, "d2h_ns", r->timing.d2h_ns);
	json_kv_uint(j, "total_ns", r->timing.total_ns);
	json_kv_uint(j, "round_trip_ns", r->round_trip_ns);
	json_kv_uint(j, "client_encode_ns", r->client.encode_ns);
	json_kv_uint(j, "client_send_ns", r->client.send_ns);
	json_kv_uint(j, "client_wait_ns", r->client.wait_ns);
	json_kv_uint(j, "client_decode_ns", r->client.decode_ns);
	json_kv_uint(j, "unexplained_ns", ctl_unexplained_ns(r->client.wait_ns, r->timing.total_ns));
	json_object_end(j);
	json_kv_double(j, "gflops_kernel", ctl_gflops(m, n, k, r->timing.kernel_ns));
	json_kv_double(j, "gflops_round_trip", ctl_gflops(m, n, k, r->round_trip_ns));
	json_key(j, "output");
	if (o->out)
		json_string(j, o->out);
	else
		json_null(j);
	if (o->check) {
		json_key(j, "check");
		json_object_begin(j);
		if (chk->why[0]) {
			json_kv_string(j, "error", chk->why);
		} else {
			json_kv_double(j, "rel_error", chk->rel_error);
			json_kv_double(j, "tolerance", chk->tolerance);
		}
		json_kv_bool(j, "ok", chk->ok);
		json_object_end(j);
	}
	json_object_end(j);
}

static int parse(struct ctl *ctl, int argc, char **argv, struct submit_opts *o)
{
	enum {
		OPT_ALPHA = CTL_OPT_FIRST_COMMAND_OPTION, OPT_BETA, OPT_SPARSE, OPT_DTYPE,
		OPT_OUT_DTYPE, OPT_DEVICE, OPT_PRIORITY, OPT_DEADLINE, OPT_CHECK, OPT_SHM,
	};
	static const struct option opts[] = {
		CTL_COMMON_LONG,
		{ "a", required_argument, NULL, 'a' },
		{ "weight", required_argument, NULL, 'w' },
		{ "b", required_argument, NULL, 'b' },
		{ "c", required_argument, NULL, 'c' },
		{ "output", required_argument, NULL, 'o' },
		{ "alpha", required_argument, NULL, OPT_ALPHA },
		{ "beta", required_argument, NULL, OPT_BETA },
		{ "sparse", required_argument, NULL, OPT_SPARSE },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "out-dtype", required_argument, NULL, OPT_OUT_DTYPE },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "priority", required_argument, NULL, OPT_PRIORITY },
		{ "deadline", required_argument, NULL, OPT_DEADLINE },
		{ "check", no_argument, NULL, OPT_CHECK },
		{ "shm", no_argument, NULL, OPT_SHM },
		{ NULL, 0, NULL, 0 },
	};
	char err[256];
	uint64_t prio = 0;
	int opt, rc;
	memset(o, 0, sizeof(*o));
	o->alpha = 1.0f;
	o->device = -1;
	while ((opt = getopt_long(argc, argv, CTL_COMMON_SHORT "a:w:b:c:o:", opts, NULL)) != -1) {
		rc = 0;
		switch (opt) {
		case 'a': o->a = optarg; break;
		case 'w': o->weight = optarg; break;
		case 'b': o->b = optarg; break;
		case 'c': o->c = optarg; break;
		case OPT_SHM: o->shm = true; break;
		case 'o': o->out = optarg; break;
		case OPT_ALPHA: rc = ctl_parse_float("--alpha", optarg, &o->alpha, err, sizeof(err)); break;
		case OPT_BETA:
			rc = ctl_parse_float("--beta", optarg, &o->beta, err, sizeof(err));
			o->have_beta = true;
			break;
		case OPT_SPARSE: rc = ctl_parse_sparse("--sparse", optarg, &o->sparse, err, sizeof(err)); break;
		case OPT_DTYPE: rc = ctl_parse_dtype("--dtype", optarg, CTL_DT_INPUTS, &o->dtype, err, sizeof(err)); break;
		case OPT_OUT_DTYPE: rc = ctl_parse_dtype("--out-dtype", optarg, CTL_DT_OUTPUTS, &o->out_dtype, err, sizeof(err)); break;
		case OPT_DEVICE: rc = ctl_parse_int("--device", optarg, -1, 1 << 20, &o->device, err, sizeof(err)); break;
		case OPT_PRIORITY:
			rc = ctl_parse_u64("--priority", optarg, 0, UINT32_MAX, &prio, err, sizeof(err));
			o->priority = (uint32_t)prio;
			break;
		case OPT_DEADLINE: rc = ctl_parse_u64("--deadline", optarg, 1, UINT64_MAX / 1000, &o->deadline_us, err, sizeof(err)); break;
		case OPT_CHECK: o->check = true; break;
		default:
			rc = ctl_common_option(ctl, "submit", opt, optarg);
			if (rc != CTL_CONTINUE)
				return rc;
			continue;
		}
		if (rc < 0)
			return ctl_usage("submit", "%s", err);
	}
	if (optind != argc)
		return ctl_usage("submit", "unexpected argument '%s'", argv[optind]);
	if (!o->a && !o->weight)
		return ctl_usage("submit", "give -a A.npy or --weight NAME");
	if (o->a && o->weight && !o->check)
		return ctl_usage("submit", "-a with --weight is only for --check (the daemon "
				 "multiplies the resident weight): drop one of them");
	if (!o->b)
		return ctl_usage("submit", "-b B.npy is required");
	if (o->weight && o->sparse != CTL_SPARSE_NONE)
		return ctl_usage("submit", "--sparse applies to -a; a weight's sparsity was chosen "
				 "when it was loaded");
	if (o->weight && o->check && !o->a)
		return ctl_usage("submit", "--check with --weight needs the matrix the weight was "
				 "loaded from: add -a A.npy (read for the reference only, not sent)");
	if (o->c && !o->have_beta)
		o->beta = 1.0f;
	return CTL_CONTINUE;
}

/* --shm: B and C copied into a region of the connection, D to be
 * written after them; args then point there (the library sends
 * references instead of bytes).  M comes from A, or from the weight. */
static int shm_args(struct ctl *ctl, mfma_client *cl, const struct submit_opts *o,
		    const struct ctl_matrix *a, struct mfma_gemm_args *args, struct mfma_matrix *cm,
		    mfma_region **rg)
{
	struct mfma_error e;
	uint32_t m = a->rows;
	if (o->weight) {
		struct mfma_weight_list wl;
		int rc = mfma_list_weights(cl, &wl, &e);
		if (rc < 0)
			return ctl_fail(ctl, "submit --shm: listing the weights", rc, &e);
		m = 0;
		for (size_t i = 0; i < wl.n_weights; i++)
			if (strcmp(wl.weights[i].name, o->weight) == 0)
				m = wl.weights[i].rows;
		mfma_weight_list_free(&wl);
		if (m == 0)
			return ctl_fail_local(ctl, CTL_EXIT_DAEMON, "submit: no resident weight is "
					      "named '%s'", o->weight);
	}
	enum mfma_type out = args->out_dtype != MFMA_TYPE_NONE ? args->out_dtype
			     : ctl_type(mfma_out_dtype_default(ctl_dtype(args->b.dtype)));
	size_t cb = args->c ? args->c->bytes : 0;
	size_t db = (size_t)m * args->b.cols * mfma_type_size(out);
	/* 64-byte aligned pieces: what a DMA engine likes best. */
	size_t boff = 0, coff = (args->b.bytes + 63) & ~(size_t)63, doff = (coff + cb + 63) & ~(size_t)63;
	int rc = mfma_region_create(cl, doff + db, rg, &e);
	if (rc < 0)
		return ctl_fail(ctl, "submit --shm: creating the region", rc, &e);
	char *base = mfma_region_data(*rg);
	memcpy(base + boff, args->b.data, args->b.bytes);
	args->b.data = base + boff;
	if (args->c) {
		memcpy(base + coff, args->c->data, cb);
		cm->data = base + coff;
		args->c = cm;
	}
	args->d = base + doff;
	return 0;
}

static int input_error(struct ctl *ctl, int rc, const char *err)
{
	return ctl_fail_local(ctl, rc == -ENOMEM ? CTL_EXIT_LOCAL : CTL_EXIT_USAGE, "%s", err);
}

int ctl_cmd_submit(struct ctl *ctl, int argc, char **argv)
{
	struct submit_opts o;
	struct ctl_matrix a = { 0 }, b = { 0 }, c = { 0 };
	struct ctl_packed pk = { 0 };
	struct mfma_gemm_args args;
	struct mfma_gemm_result res = { 0 };
	struct check_result chk = { 0 };
	struct mfma_error e;
	mfma_client *cl = NULL;
	mfma_region *rg = NULL;
	char err[512];
	int rc = parse(ctl, argc, argv, &o);
	if (rc != CTL_CONTINUE)
		return rc;

	mfma_gemm_args_init(&args);
	enum mfma_dtype in = o.dtype;
	if (o.a && o.weight) {
		/* Only the reference's A: the daemon multiplies the weight. */
		if ((rc = ctl_read_matrix(o.a, o.dtype, true, &a, err, sizeof(err))) < 0) {
			rc = input_error(ctl, rc, err);
			goto out;
		}
		in = a.dtype;
		args.a.kind = MFMA_OPERAND_WEIGHT;
		args.a.weight = o.weight;
	} else if (o.a) {
		if ((rc = ctl_read_matrix(o.a, o.dtype, true, &a, err, sizeof(err))) < 0) {
			rc = input_error(ctl, rc, err);
			goto out;
		}
		in = a.dtype;
		if ((rc = ctl_make_operand(&a, o.sparse, &args.a, &pk, err, sizeof(err))) < 0) {
			rc = input_error(ctl, rc, err);
			goto out;
		}
	} else {
		args.a.kind = MFMA_OPERAND_WEIGHT;
		args.a.weight = o.weight;
	}
	/* B converts only when --dtype asked for it; otherwise it must match A. */
	if ((rc = ctl_read_matrix(o.b, in, o.dtype != MFMA_DT_NONE, &b, err, sizeof(err))) < 0) {
		rc = input_error(ctl, rc, err);
		goto out;
	}
	in = b.dtype;
	enum mfma_dtype out_dt = o.out_dtype != MFMA_DT_NONE ? o.out_dtype
							     : mfma_out_dtype_default(in);
	if (o.c && (rc = ctl_read_matrix(o.c, out_dt, true, &c, err, sizeof(err))) < 0) {
		rc = input_error(ctl, rc, err);
		goto out;
	}
	args.b = ctl_as_mfma(&b);
	struct mfma_matrix cm = ctl_as_mfma(&c);
	args.c = o.c ? &cm : NULL;
	args.alpha = o.alpha;
	args.beta = o.beta;
	args.out_dtype = ctl_type(o.out_dtype);
	args.device = o.device;
	args.priority = o.priority;
	args.timeout_us = o.deadline_us;

	if ((rc = ctl_connect(ctl, &cl)) != 0)
		goto out;
	ctl_progress(ctl, cl);
	if (o.shm && (rc = shm_args(ctl, cl, &o, &a, &args, &cm, &rg)) != 0)
		goto out;
	if ((rc = mfma_gemm(cl, &args, &res, &e)) < 0) {
		rc = ctl_fail(ctl, "submit", rc, &e);
		goto out;
	}
	if (o.out && (rc = ctl_write_matrix(o.out, ctl_dtype(res.d.dtype), res.d.rows, res.d.cols, res.d.data,
					    err, sizeof(err))) < 0) {
		rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "%s", err);
		goto out;
	}
	bool prune = o.sparse == CTL_SPARSE_PRUNE;
	if (o.check && o.weight)
		weight_check_prep(cl, o.weight, &a, &prune, &chk);
	if (o.check && !chk.why[0] && check_gemm(&o, prune, &a, &b, o.c ? &c : NULL, &res, &chk) < 0) {
		rc = ctl_fail_local(ctl, CTL_EXIT_LOCAL, "out of memory computing the reference");
		goto out;
	}
	/* The shape the daemon multiplied: M from D, K from B. */
	uint32_t m = res.d.rows, n = res.d.cols, k = b.rows;
	if (ctl->json)
		print_json(ctl, &o, m, n, k, in, &res, &chk);
	else
		print_text(&o, m, n, k, &res, &chk);
	rc = o.check && !chk.ok ? CTL_EXIT_CHECK : CTL_EXIT_OK;
	if (rc == CTL_EXIT_CHECK)
		fprintf(stderr, "mfmactl: submit: the result is over the tolerance\n");
out:
	mfma_gemm_result_free(&res);
	int drc;
	if (rg && (drc = mfma_region_destroy(cl, rg, &e)) < 0 && rc == CTL_EXIT_OK)
		rc = ctl_fail(ctl, "submit: unregistering the region", drc, &e);
	mfma_close(cl);
	ctl_packed_free(&pk);
	ctl_matrix_free(&a);
	ctl_matrix_free(&b);
	ctl_matrix_free(&c);
	return rc;
}
