/* libmfmaclient: the public calls.  Each builds its Request with
 * protobuf-c (pointing at the caller's matrices, never copying them),
 * packs it behind a frame header (a large one in pieces that leave the
 * matrices where they are, send_request) and turns the Response into the
 * public structs, which point into the unpacked message (or the receive
 * buffer, for a large D) instead of copying it. */
#include "client_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mfma_dtype.h"
#include "wire_split.h"

/* The public element types travel as the wire's DType and mean what the
 * kernels' enum mfma_dtype means (mfmactl converts between the two), so
 * all three must keep the same numbers. */
#define SAME_TYPE(pub, wire, kern)                                                 \
	_Static_assert((int)(pub) == (int)(wire) && (int)(pub) == (int)(kern),     \
		       #pub " differs from the wire or the kernels")
SAME_TYPE(MFMA_TYPE_NONE, MFMA__V1__DTYPE__DTYPE_UNSPECIFIED, MFMA_DT_NONE);
SAME_TYPE(MFMA_TYPE_F32, MFMA__V1__DTYPE__F32, MFMA_DT_F32);
SAME_TYPE(MFMA_TYPE_F16, MFMA__V1__DTYPE__F16, MFMA_DT_F16);
SAME_TYPE(MFMA_TYPE_BF16, MFMA__V1__DTYPE__BF16, MFMA_DT_BF16);
SAME_TYPE(MFMA_TYPE_I8, MFMA__V1__DTYPE__I8, MFMA_DT_I8);
SAME_TYPE(MFMA_TYPE_I32, MFMA__V1__DTYPE__I32, MFMA_DT_I32);

static const char *str(const char *s)
{
	return s ? s : "";
}

/* protobuf-c wants non-const pointers for bytes fields it only reads. */
static uint8_t *unconst(const void *p)
{
	return (uint8_t *)(uintptr_t)p;
}

static int fail_remote(const Mfma__V1__Status *st, struct mfma_error *err)
{
	int code = st->has_code ? (int)st->code : MFMA_CODE_INTERNAL;
	/* A code this library does not know (the wire carries any int32)
	 * must still read as the daemon's failure: MFMA_EREMOTE of a
	 * negative one would be 0 or a local errno. */
	if (code == MFMA_CODE_OK || !client_code_known(code)) {
		if (err) {
			err->code = MFMA_CODE_INTERNAL;
			snprintf(err->message, sizeof(err->message),
				 "the daemon answered status code %d, which this client does not know",
				 code);
		}
		return MFMA_EREMOTE(MFMA_CODE_INTERNAL);
	}
	if (err) {
		err->code = code;
		if (st->message && *st->message)
			snprintf(err->message, sizeof(err->message), "%s", st->message);
		else
			snprintf(err->message, sizeof(err->message), "the daemon answered %s",
				 mfma_code_name(code));
	}
	return MFMA_EREMOTE(code);
}

static bool is_error(const Mfma__V1__Response *resp)
{
	return resp->status && resp->status->has_code && resp->status->code != MFMA__V1__CODE__OK;
}

/* ---- building ---- */

static int check_dtype(enum mfma_type t, const char *field, struct mfma_error *err)
{
	if (mfma_type_size(t) == 0)
		return client_fail(err, -EINVAL, "%s.dtype=%d is not a known element type", field,
				   (int)t);
	return 0;
}

static int matrix_to_wire(const struct mfma_matrix *m, Mfma__V1__Matrix *w, const char *field,
			  struct mfma_error *err)
{
	int rc = check_dtype(m->dtype, field, err);
	if (rc < 0)
		return rc;
	if (m->bytes && !m->data)
		return client_fail(err, -EINVAL, "%s.data is NULL but %s.bytes=%zu", field, field,
				   m->bytes);
	w->has_rows = w->has_cols = w->has_dtype = w->has_data = 1;
	w->rows = m->rows;
	w->cols = m->cols;
	w->dtype = (Mfma__V1__DType)m->dtype;
	w->data.len = m->bytes;
	w->data.data = unconst(m->data);
	return 0;
}

struct wire_operand {
	Mfma__V1__Operand op;
	Mfma__V1__Matrix dense;
	Mfma__V1__Sparse24 sparse;
};

static int operand_to_wire(const struct mfma_operand *a, struct wire_operand *w, bool allow_weight,
			   struct mfma_error *err)
{
	mfma__v1__operand__init(&w->op);
	mfma__v1__matrix__init(&w->dense);
	mfma__v1__sparse24__init(&w->sparse);
	switch (a->kind) {
	case MFMA_OPERAND_DENSE: {
		int rc = matrix_to_wire(&a->dense, &w->dense, "a", err);
		if (rc < 0)
			return rc;
		if (a->sparsity > MFMA_SPARSITY_PRUNE_24)
			return client_fail(err, -EINVAL, "a.sparsity=%d is not DENSE, VALIDATE_24 "
					   "or PRUNE_24", (int)a->sparsity);
		w->op.kind_case = MFMA__V1__OPERAND__KIND_DENSE;
		w->op.dense = &w->dense;
		w->op.has_sparsity = a->sparsity != MFMA_SPARSITY_DENSE;
		w->op.sparsity = (Mfma__V1__Sparsity)a->sparsity;
		return 0;
	}
	case MFMA_OPERAND_SPARSE24: {
		const struct mfma_sparse24 *s = &a->sparse;
		int rc = check_dtype(s->dtype, "a", err);
		if (rc < 0)
			return rc;
		if ((s->values_bytes && !s->values) || (s->meta_bytes && !s->meta))
			return client_fail(err, -EINVAL, "a.values or a.meta is NULL with a "
					   "non-zero byte count");
		w->sparse.has_rows = w->sparse.has_cols = w->sparse.has_dtype = 1;
		w->sparse.rows = s->rows;
		w->sparse.cols = s->cols;
		w->sparse.dtype = (Mfma__V1__DType)s->dtype;
		w->sparse.has_values = w->sparse.has_meta = 1;
		w->sparse.values.len = s->values_bytes;
		w->sparse.values.data = unconst(s->values);
		w->sparse.meta.len = s->meta_bytes;
		w->sparse.meta.data = unconst(s->meta);
		w->op.kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
		w->op.sparse = &w->sparse;
		return 0;
	}
	case MFMA_OPERAND_WEIGHT:
		if (!allow_weight)
			return client_fail(err, -EINVAL, "a weight cannot be loaded from another "
					   "weight; give a dense or 2:4 matrix");
		if (!a->weight || !*a->weight)
			return client_fail(err, -EINVAL, "a.weight (the weight name) is empty");
		w->op.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
		w->op.weight = (char *)(uintptr_t)a->weight;
		return 0;
	}
	return client_fail(err, -EINVAL, "a.kind=%d is not DENSE, SPARSE24 or WEIGHT", (int)a->kind);
}

struct wire_gemm {
	Mfma__V1__Gemm g;
	struct wire_operand a;
	Mfma__V1__Matrix b, c;
	Mfma__V1__RegionRef rb, rc, rd;
};

/* The D a GEMM's answer must hold: N columns (B's), M rows where the
 * request says (0: a resident weight's, unknown here). */
static void d_shape_of(const struct mfma_gemm_args *a, uint32_t *rows, uint32_t *cols)
{
	*cols = a->b.cols;
	*rows = a->a.kind == MFMA_OPERAND_DENSE	   ? a->a.dense.rows
		: a->a.kind == MFMA_OPERAND_SPARSE24 ? a->a.sparse.rows
						     : 0;
}

/* A matrix whose bytes lie in one of the client's regions travels as a
 * reference to them instead. */
static void use_region(mfma_client *c, Mfma__V1__Matrix *w, Mfma__V1__RegionRef *ref)
{
	struct mfma_region *rg = client_region_of(c, w->data.data, w->data.len);
	if (!rg || w->data.len == 0)
		return;
	mfma__v1__region_ref__init(ref);
	ref->has_region = ref->has_offset = ref->has_length = 1;
	ref->region = rg->id;
	ref->offset = (uint64_t)(w->data.data - (uint8_t *)rg->base);
	ref->length = w->data.len;
	w->region = ref;
	w->has_data = 0;
	w->data.len = 0;
	w->data.data = NULL;
}

static int gemm_to_wire(mfma_client *cl, const struct mfma_gemm_args *args, struct wire_gemm *w,
			struct mfma_error *err)
{
	int rc;
	if (!args)
		return client_fail(err, -EINVAL, "gemm args must not be NULL");
	/* Regions do not survive a reconnect (mfma.h): a matrix in one that
	 * went with a lost connection is refused, not sent as plain memory. */
	const char *lost = NULL;
	if (client_region_lost_at(cl, args->b.data))
		lost = "b";
	else if (args->c && client_region_lost_at(cl, args->c->data))
		lost = "c";
	else if (client_region_lost_at(cl, args->d))
		lost = "d";
	if (lost) {
		if (err) {
			err->code = MFMA_CODE_NOT_FOUND;
			snprintf(err->message, sizeof(err->message),
				 "%s lies in a region that went with a lost connection (regions do "
				 "not survive a reconnect): make a new one with mfma_region_create",
				 lost);
		}
		return MFMA_EREMOTE(MFMA_CODE_NOT_FOUND);
	}
	mfma__v1__gemm__init(&w->g);
	mfma__v1__matrix__init(&w->b);
	mfma__v1__matrix__init(&w->c);
	if ((rc = operand_to_wire(&args->a, &w->a, true, err)) < 0)
		return rc;
	if ((rc = matrix_to_wire(&args->b, &w->b, "b", err)) < 0)
		return rc;
	w->g.a = &w->a.op;
	w->g.b = &w->b;
	use_region(cl, &w->b, &w->rb);
	if (args->c) {
		if ((rc = matrix_to_wire(args->c, &w->c, "c", err)) < 0)
			return rc;
		w->g.c = &w->c;
		use_region(cl, &w->c, &w->rc);
	}
	w->g.has_alpha = w->g.has_beta = w->g.has_device = 1;
	w->g.alpha = args->alpha;
	w->g.beta = args->beta;
	w->g.device = args->device;
	if (args->out_dtype != MFMA_TYPE_NONE) {
		if ((rc = check_dtype(args->out_dtype, "out", err)) < 0)
			return rc;
		w->g.has_out_dtype = 1;
		w->g.out_dtype = (Mfma__V1__DType)args->out_dtype;
	}
	w->g.has_priority = args->priority != 0;
	w->g.priority = args->priority;
	w->g.has_timeout_us = args->timeout_us != 0;
	w->g.timeout_us = args->timeout_us;
	if (args->d) {
		/* D's size as the daemon will make it: M from A, N from B. */
		enum mfma_type out = args->out_dtype != MFMA_TYPE_NONE ? args->out_dtype
				     : args->b.dtype == MFMA_TYPE_I8 ? MFMA_TYPE_I32 : MFMA_TYPE_F32;
		uint32_t m, n;
		d_shape_of(args, &m, &n);
		struct mfma_region *rg = NULL;
		size_t len = (size_t)m * n * mfma_type_size(out);
		/* A resident weight's M is the daemon's to know: the region must
		 * hold D from d to its end at most, and the daemon checks the
		 * exact span. */
		if (args->a.kind == MFMA_OPERAND_WEIGHT) {
			rg = client_region_of(cl, args->d, args->d_bytes ? args->d_bytes : 1);
			len = args->d_bytes;
		} else {
			if (args->d_bytes && args->d_bytes < len)
				return client_fail(err, -EINVAL, "d holds %zu bytes (d_bytes), but D is "
						   "%ux%u: %zu bytes", args->d_bytes, m, args->b.cols,
						   len);
			rg = client_region_of(cl, args->d, len);
		}
		if (!rg && !args->d_bytes)
			return client_fail(err, -EINVAL, "d is outside the client's regions: give its "
					   "size in d_bytes (the library copies D there)");
		if (rg) {
			mfma__v1__region_ref__init(&w->rd);
			w->rd.has_region = w->rd.has_offset = 1;
			w->rd.region = rg->id;
			w->rd.offset = (uint64_t)((uint8_t *)args->d - (uint8_t *)rg->base);
			w->rd.has_length = len != 0;
			w->rd.length = len;
			w->g.d = &w->rd;
		}
	}
	return 0;
}

/* Requests that change nothing (a GEMM is pure) may be sent again when
 * their answer was lost with the connection, or a draining daemon
 * refused them. */
static bool resendable(const Mfma__V1__Request *req)
{
	switch (req->body_case) {
	case MFMA__V1__REQUEST__BODY_GEMM:
	case MFMA__V1__REQUEST__BODY_PING:
	case MFMA__V1__REQUEST__BODY_STATUS:
	case MFMA__V1__REQUEST__BODY_LIST_WEIGHTS: return true;
	default: return false;
	}
}

static bool names_region(const Mfma__V1__Request *req)
{
	const Mfma__V1__Gemm *g = req->body_case == MFMA__V1__REQUEST__BODY_GEMM ? req->gemm : NULL;
	return g && ((g->b && g->b->region) || (g->c && g->c->region) || g->d);
}

/* Until when a request may be resent: its own timeout, else the
 * client's, else CLIENT_RESEND_WINDOW_MS. */
static uint64_t resend_deadline(const mfma_client *c, const Mfma__V1__Request *req)
{
	uint64_t now = mfma_clock_ns();
	if (req->body_case == MFMA__V1__REQUEST__BODY_GEMM && req->gemm->has_timeout_us &&
	    req->gemm->timeout_us)
		return now + req->gemm->timeout_us * 1000u;
	if (c->timeout_ms >= 0)
		return now + (uint64_t)c->timeout_ms * 1000000u;
	return now + (uint64_t)CLIENT_RESEND_WINDOW_MS * 1000000u;
}

/* A frame packed in pieces.  protobuf-c packs into a ProtobufCBuffer by
 * handing over each key, length and field in turn, a bytes field as its
 * own pointer: the large ones stay pieces pointing at the caller's
 * memory, everything else is copied into scratch (the frame header
 * first), so the matrices reach the socket without a copy (writev). */
struct gather {
	ProtobufCBuffer base;
	uint8_t *scratch;
	size_t slen, scap;
	struct gather_piece {
		const uint8_t *ext; /* NULL: scratch + off */
		size_t off, len;
	} *pc;
	size_t npc, cappc;
	bool oom;
};

static bool gather_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first)
{
	if (need <= *cap)
		return true;
	size_t ncap = *cap ? *cap : first;
	while (ncap < need)
		ncap *= 2;
	void *np = realloc(*p, ncap * elem);
	if (!np)
		return false;
	*p = np;
	*cap = ncap;
	return true;
}

static void gather_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
	struct gather *g = (struct gather *)(void *)b;
	if (g->oom || len == 0)
		return;
	bool ext = len >= WIRE_SPLIT_MIN_BYTES;
	struct gather_piece *last = g->npc ? &g->pc[g->npc - 1] : NULL;
	bool extend = !ext && last && !last->ext;
	if ((!extend && !gather_grow((void **)&g->pc, &g->cappc, g->npc + 1, sizeof(*g->pc), 8)) ||
	    (!ext && !gather_grow((void **)&g->scratch, &g->scap, g->slen + len, 1, 256))) {
		g->oom = true;
		return;
	}
	if (extend) {
		g->pc[g->npc - 1].len += len;
	} else {
		g->pc[g->npc++] = (struct gather_piece){ .ext = ext ? data : NULL, .off = g->slen,
							 .len = len };
	}
	if (!ext) {
		memcpy(g->scratch + g->slen, data, len);
		g->slen += len;
	}
}

/* Where the packing of a message puts its first large bytes field
 * (SIZE_MAX: it has none), learnt by packing it into this, which keeps
 * nothing. */
struct first_large {
	ProtobufCBuffer base;
	size_t at, found;
};

static void first_large_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
	struct first_large *f = (struct first_large *)(void *)b;
	(void)data;
	if (f->found == SIZE_MAX && len >= WIRE_SPLIT_MIN_BYTES)
		f->found = f->at;
	f->at += len;
}

/* The pad field (wire_pad) that puts req's first large matrix at an
 * aligned offset of its frame, so that the daemon leaves it in the
 * buffer it reads it into instead of copying it: its length, 0 for none. */
static size_t pad_for(const Mfma__V1__Request *req, uint8_t pad[WIRE_PAD_FIELD_MAX])
{
	struct first_large f = { .base = { .append = first_large_append }, .found = SIZE_MAX };
	protobuf_c_message_pack_to_buffer(&req->base, &f.base);
	return f.found == SIZE_MAX ? 0 : wire_pad(FRAME_HEADER_SIZE + f.found, pad);
}

/* Packs req (n bytes, pad first: npad bytes) behind a frame header in
 * pieces: *scratch holds the small ones, *iov (niov entries) all of them
 * in order. */
static int pack_gather(const Mfma__V1__Request *req, size_t n, const uint8_t *pad, size_t npad,
		       uint8_t **scratch, struct iovec **iov, size_t *niov)
{
	struct gather g = { .base = { .append = gather_append } };
	uint8_t head[FRAME_HEADER_SIZE];
	frame_header_put(head, (uint32_t)(npad + n));
	gather_append(&g.base, sizeof(head), head);
	gather_append(&g.base, npad, pad);
	size_t packed = protobuf_c_message_pack_to_buffer(&req->base, &g.base);
	struct iovec *v = g.oom ? NULL : malloc(g.npc * sizeof(*v));
	if (!v || packed != n) {
		free(v);
		free(g.scratch);
		free(g.pc);
		return -ENOMEM;
	}
	for (size_t i = 0; i < g.npc; i++)
		v[i] = (struct iovec){ .iov_base = g.pc[i].ext ? (void *)(uintptr_t)g.pc[i].ext
							       : g.scratch + g.pc[i].off,
				       .iov_len = g.pc[i].len };
	*niov = g.npc;
	free(g.pc);
	*scratch = g.scratch;
	*iov = v;
	return 0;
}

/* The largest answer req can get: a GEMM's D (M x N of at most 4 bytes)
 * with room for the rest of the answer, where M is known here (a GEMM on
 * a resident weight: no bound, M is the daemon's); a ping's payload back;
 * 0 for the others (client_response_limit's floor). */
static uint64_t response_bound(const Mfma__V1__Request *req)
{
	const uint64_t rest = (uint64_t)1 << 20;
	if (req->body_case == MFMA__V1__REQUEST__BODY_PING)
		return (req->ping->has_payload ? req->ping->payload.len : 0) + rest;
	if (req->body_case != MFMA__V1__REQUEST__BODY_GEMM)
		return 0;
	const Mfma__V1__Gemm *g = req->gemm;
	const Mfma__V1__Operand *a = g->a;
	uint64_t m = !a ? 0
		     : a->kind_case == MFMA__V1__OPERAND__KIND_DENSE && a->dense ? a->dense->rows
		     : a->kind_case == MFMA__V1__OPERAND__KIND_SPARSE && a->sparse ? a->sparse->rows
										 : 0;
	uint64_t n = g->b ? g->b->cols : 0;
	return m ? m * n * 4 + rest : UINT64_MAX;
}

/* Packs req (its id set here) behind a frame header and sends it; on a
 * lost connection, reconnects first.  A resendable request keeps its
 * frame until answered: when the connection breaks while it is sent, it
 * stays in flight and goes again on the next connection.
 *
 * A large frame goes out in pieces, the matrices straight from the
 * caller's memory.  A blocking call keeps those pieces for a resend (the
 * caller's matrices outlive the call, and the call drops them when it
 * returns); a submitted GEMM keeps a flat copy instead, since its caller
 * may reuse the matrices once mfma_gemm_submit returns. */
static int send_request(mfma_client *c, Mfma__V1__Request *req, bool user, int fd, uint64_t *idp,
			struct mfma_error *err)
{
	uint64_t t0 = c->encode_t0 ? c->encode_t0 : mfma_clock_ns();
	c->encode_t0 = 0;
	/* A frame that carries a descriptor, or names regions (which belong
	 * to the connection it was sent on), cannot go again elsewhere. */
	bool keep = resendable(req) && c->neps > 0 && fd < 0 && !names_region(req);
	uint64_t deadline = resend_deadline(c, req);
	int rc = c->dead ? client_reconnect(c, deadline, err) : 0;
	if (rc < 0)
		return rc;
	uint64_t id = c->next_id++;
	if (c->next_id == MFMA_ANY)
		c->next_id = 1;
	req->has_id = 1;
	req->id = id;
	size_t n = protobuf_c_message_get_packed_size(&req->base);
	uint8_t pad[WIRE_PAD_FIELD_MAX];
	size_t npad = n >= WIRE_SPLIT_MIN_BYTES ? pad_for(req, pad) : 0;
	if (n > UINT32_MAX - npad)
		return client_fail(err, -EMSGSIZE, "request of %zu bytes exceeds the frame limit "
				   "of 4 GiB", n);
	uint8_t *buf = NULL;
	struct iovec *iov = NULL;
	size_t niov = 0;
	if (fd < 0 && !(keep && user) && n >= WIRE_SPLIT_MIN_BYTES) {
		if (pack_gather(req, n, pad, npad, &buf, &iov, &niov) < 0)
			return client_fail(err, -ENOMEM, "out of memory packing a request of %zu "
					   "bytes", n);
	} else {
		buf = malloc(FRAME_HEADER_SIZE + npad + n);
		if (!buf)
			return client_fail(err, -ENOMEM, "out of memory packing a request of %zu "
					   "bytes", n);
		frame_header_put(buf, (uint32_t)(npad + n));
		memcpy(buf + FRAME_HEADER_SIZE, pad, npad);
		protobuf_c_message_pack(&req->base, buf + FRAME_HEADER_SIZE + npad);
	}
	n += npad;
	if ((rc = client_pending_add(c, id, user)) < 0) {
		free(buf);
		free(iov);
		return client_fail(err, rc, "out of memory");
	}
	client_pending_find(c, id)->max_resp = response_bound(req);
	if (keep) {
		struct client_pending *p = client_pending_find(c, id);
		p->frame = buf;
		p->frame_len = FRAME_HEADER_SIZE + n;
		p->iov = iov;
		p->niov = niov;
		p->deadline_ns = deadline;
	}
	/* Corked, a submitted frame in one piece waits with the others
	 * (mfma_cork); anything else goes after them. */
	bool hold = c->corked && user && !iov && fd < 0;
	uint64_t t_first = mfma_clock_ns();
	if (hold) {
		rc = client_hold(c, id, buf, FRAME_HEADER_SIZE + n, err);
	} else if ((rc = client_flush_held(c, err)) == 0) {
		t_first = mfma_clock_ns();
		rc = iov ? client_send_iov(c, iov, niov, FRAME_HEADER_SIZE + n, fd, &t_first, err)
			 : client_send_frame_fd(c, buf, FRAME_HEADER_SIZE + n, fd, &t_first, err);
	}
	uint64_t t_sent = mfma_clock_ns();
	if (!keep) {
		free(buf);
		free(iov);
	}
	/* Answers read while sending may have moved entries: find it again. */
	struct client_pending *p = client_pending_find(c, id);
	if (rc < 0 && !(keep && p && c->dead)) {
		if (p)
			client_pending_remove(c, p);
		return rc;
	}
	if (p) {
		/* A held frame's send times are stamped when it is written. */
		if (!hold) {
			p->t_send_ns = t_first;
			p->t_sent_ns = t_sent;
		}
		p->encode_ns = t_first - t0;
	}
	*idp = id;
	return 0;
}

/* Takes the answer out of the table, with the receive buffer its D is
 * in (rx; NULL for calls whose answers carry no matrix).  On a daemon
 * error the response is freed and MFMA_EREMOTE(code) returned. */
static int take(mfma_client *c, struct client_pending *p, Mfma__V1__Response__BodyCase want,
		Mfma__V1__Response **out, uint64_t *rtt, struct client_rx *rx,
		struct mfma_error *err)
{
	Mfma__V1__Response *resp = p->resp;
	struct client_rx prx = p->rx;
	p->resp = NULL;
	p->rx = (struct client_rx){ 0 };
	if (rtt)
		*rtt = p->t_recv_ns - p->t_send_ns;
	c->last = (struct mfma_client_timing){
		.encode_ns = p->encode_ns,
		.send_ns = p->t_sent_ns - p->t_send_ns,
		/* An answer read while the request was still being sent
		 * waited for nothing. */
		.wait_ns = p->t_recv_ns > p->t_sent_ns ? p->t_recv_ns - p->t_sent_ns : 0,
		.decode_ns = p->unpack_ns,
	};
	client_pending_remove(c, p);
	int rc = 0;
	if (is_error(resp))
		rc = fail_remote(resp->status, err);
	else if (want != MFMA__V1__RESPONSE__BODY__NOT_SET && resp->body_case != want)
		rc = client_fail(err, -EPROTO, "the daemon answered with body %d where %d was "
				 "expected", (int)resp->body_case, (int)want);
	else if (!rx && (prx.frame || prx.arena))
		rc = client_fail(err, -EPROTO, "the daemon answered with a GEMM result where "
				 "none was expected");
	if (rc < 0) {
		client_response_free(resp, &prx);
		return rc;
	}
	*out = resp;
	if (rx)
		*rx = prx;
	return 0;
}

/* One blocking round trip, with a descriptor on the frame when fd >= 0.
 * A resendable request whose answer was lost (the connection broke, or
 * the daemon was draining) is sent again on a new connection, to the same
 * endpoint or the next in the list, within the call's timeout
 * (client_wait); one that carries a descriptor never is.  A GEMM's D goes
 * straight into d_dst (d_bytes long; NULL: none) as its answer is read,
 * when it comes after the request is sent (client.c, place_d); one read
 * while sending is copied there after (gemm_result_from). */
static int call_fd(mfma_client *c, Mfma__V1__Request *req, int fd,
		   Mfma__V1__Response__BodyCase want, Mfma__V1__Response **out, uint64_t *rtt,
		   struct client_rx *rx, void *d_dst, size_t d_bytes, struct mfma_error *err)
{
	uint64_t id;
	struct client_pending *p;
	int rc = send_request(c, req, false, fd, &id, err);
	if (rc < 0)
		return rc;
	if (d_dst && (p = client_pending_find(c, id)) != NULL && !p->resp) {
		p->d_dst = d_dst;
		p->d_bytes = d_bytes;
	}
	rc = client_wait(c, id, c->timeout_ms, &p, err);
	if (rc < 0) {
		/* Never sent again: its frame may point at the caller's
		 * matrices, which are the caller's again once this returns. */
		if ((p = client_pending_find(c, id)) != NULL) {
			p->abandoned = true;
			client_pending_drop_frame(p);
		}
		return rc;
	}
	return take(c, p, want, out, rtt, rx, err);
}

static int call(mfma_client *c, Mfma__V1__Request *req, Mfma__V1__Response__BodyCase want,
		Mfma__V1__Response **out, uint64_t *rtt, struct mfma_error *err)
{
	return call_fd(c, req, -1, want, out, rtt, NULL, NULL, 0, err);
}

/* ---- decoding ---- */

/* The region of this client with id, or NULL. */
static struct mfma_region *region_by_id(mfma_client *c, uint64_t id)
{
	for (struct mfma_region *rg = c->regions; rg; rg = rg->next)
		if (id && rg->id == id)
			return rg;
	return NULL;
}

/* What mfma_gemm_result.priv holds: the answer and the receive buffer
 * its D may be in. */
struct client_result {
	Mfma__V1__Response *resp;
	struct client_rx rx;
};

/* Where the answer's D lies, checked against what the request asked:
 * rows x cols (rows 0: any), in a region only where the request put it
 * (dst), else as bytes of its own shape.  0 with *data and *bytes set, or
 * -EPROTO with err. */
static int d_where(mfma_client *c, const Mfma__V1__Matrix *d, const void *dst, uint32_t rows,
		   uint32_t cols, const void **data, uint64_t *bytes, struct mfma_error *err)
{
	const size_t es = mfma_type_size((enum mfma_type)d->dtype);
	/* rows x cols fits 64 bits; times es may not. */
	const uint64_t elems = (uint64_t)d->rows * d->cols;
	const uint64_t want = es && elems <= UINT64_MAX / es ? elems * es : 0;
	if (d->cols != cols || (rows && d->rows != rows) || (elems && !want))
		return rows ? client_fail(err, -EPROTO, "the daemon's D is %ux%u, where the request "
					  "asked for %ux%u", d->rows, d->cols, rows, cols)
			    : client_fail(err, -EPROTO, "the daemon's D is %ux%u, where the request "
					  "asked for %u columns", d->rows, d->cols, cols);
	*bytes = want;
	if (!d->region) {
		*data = d->data.data;
		return es && want == d->data.len
			       ? 0
			       : client_fail(err, -EPROTO, "the daemon's D is %ux%u dtype %d with %zu "
					     "bytes, which do not match", d->rows, d->cols,
					     (int)d->dtype, d->data.len);
	}
	/* D written into our region: only where the request asked for it,
	 * and without bytes of its own (they would be taken for the
	 * region's, and freed with the result). */
	const struct mfma_region *rg = region_by_id(c, d->region->region);
	*data = rg ? (const uint8_t *)rg->base + d->region->offset : NULL;
	if (!rg || !es || d->region->offset > rg->size || want > rg->size - d->region->offset ||
	    *data != dst || d->data.len)
		return client_fail(err, -EPROTO, "the daemon's D names region %llu at offset %llu "
				   "(and carries %zu bytes), which is not where the request asked "
				   "for D", (unsigned long long)d->region->region,
				   (unsigned long long)d->region->offset, d->data.len);
	return 0;
}

/* dst: where the caller wants D (mfma_gemm_args.d), or NULL: D is then
 * pointed at where it is, in the receive buffer (rx) or the answer;
 * rows, cols: the D asked for (rows 0: any).  Takes resp and rx. */
static int gemm_result_from(mfma_client *c, Mfma__V1__Response *resp, struct client_rx *rx,
			    uint64_t rtt, void *dst, size_t dst_bytes, uint32_t rows, uint32_t cols,
			    struct mfma_gemm_result *r, struct mfma_error *err)
{
	uint64_t t0 = mfma_clock_ns();
	const Mfma__V1__GemmResult *g =
		resp->body_case == MFMA__V1__RESPONSE__BODY_GEMM ? resp->gemm : NULL;
	memset(r, 0, sizeof(*r));
	struct client_result *box = malloc(sizeof(*box));
	if (!box) {
		client_response_free(resp, rx);
		return client_fail(err, -ENOMEM, "out of memory");
	}
	box->resp = resp;
	box->rx = *rx;
	*rx = (struct client_rx){ 0 };
	r->priv = box; /* from here on every error frees it, after its message */
	const void *data = NULL;
	uint64_t want = 0;
	int rc = !g || !g->d ? client_fail(err, -EPROTO, "the daemon's GEMM answer carries no D "
					   "matrix")
			     : d_where(c, g->d, dst, rows, cols, &data, &want, err);
	if (rc == 0 && dst && !g->d->region && want > dst_bytes)
		rc = client_fail(err, -EMSGSIZE, "D is %ux%u, %llu bytes, but d holds %zu (d_bytes): "
				 "not copied", g->d->rows, g->d->cols, (unsigned long long)want,
				 dst_bytes);
	if (rc < 0) {
		mfma_gemm_result_free(r);
		return rc;
	}
	const Mfma__V1__Matrix *d = g->d;
	if (dst && !d->region && want) {
		if (data != dst) /* else placed there as it was decoded (client.c, place_d) */
			memcpy(dst, data, (size_t)want);
		data = dst;
	}
	struct client_rx *kept = &box->rx;
	if (kept->frame && data == dst) {
		/* D is the caller's now: the receive buffer goes at once. */
		g->d->data = (ProtobufCBinaryData){ 0 };
		free(kept->frame);
		*kept = (struct client_rx){ 0 };
	} else if (kept->frame) {
		/* D stays in the receive buffer as long as the result: cut it
		 * at the answer's end, so the read space beyond goes back. */
		size_t at = (size_t)(kept->payload - kept->frame);
		size_t dat = (size_t)((const uint8_t *)data - kept->frame);
		uint8_t *nb = realloc(kept->frame, at + kept->len);
		if (nb) {
			kept->frame = nb;
			kept->payload = nb + at;
			g->d->data.data = nb + dat;
			data = nb + dat;
		}
	}
	r->d.rows = d->rows;
	r->d.cols = d->cols;
	r->d.dtype = (enum mfma_type)d->dtype;
	r->d.data = data;
	r->d.bytes = (size_t)want;
	if (g->timing) {
		r->timing.queue_ns = g->timing->queue_ns;
		r->timing.h2d_ns = g->timing->h2d_ns;
		r->timing.kernel_ns = g->timing->kernel_ns;
		r->timing.d2h_ns = g->timing->d2h_ns;
		r->timing.total_ns = g->timing->total_ns;
		r->timing.prep_ns = g->timing->prep_ns;
		r->timing.batch_requests = g->timing->batch_requests;
		r->timing.batch_columns = g->timing->batch_columns;
	}
	r->device.index = g->device ? g->device->index : 0;
	r->device.backend = str(g->device ? g->device->backend : NULL);
	r->device.arch = str(g->device ? g->device->arch : NULL);
	r->variant = str(g->variant);
	r->round_trip_ns = rtt;
	r->client = c->last;
	r->client.decode_ns += mfma_clock_ns() - t0;
	return 0;
}

void mfma_gemm_result_free(struct mfma_gemm_result *r)
{
	if (!r)
		return;
	struct client_result *box = r->priv;
	if (box) {
		client_response_free(box->resp, &box->rx);
		free(box);
	}
	memset(r, 0, sizeof(*r));
}

static void weight_from(const Mfma__V1__WeightInfo *w, struct mfma_weight_info *out)
{
	memset(out, 0, sizeof(*out));
	if (!w) {
		out->name = "";
		return;
	}
	out->name = str(w->name);
	out->rows = w->rows;
	out->cols = w->cols;
	out->dtype = (enum mfma_type)w->dtype;
	out->sparse = w->sparse;
	out->bytes = w->bytes;
	out->n_devices = w->n_devices;
	out->devices = w->devices;
	out->requests = w->requests;
	out->launches = w->launches;
}

/* ---- public calls ---- */

void mfma_gemm_args_init(struct mfma_gemm_args *args)
{
	if (!args)
		return;
	memset(args, 0, sizeof(*args));
	args->alpha = 1.0f;
	args->beta = 0.0f;
	args->device = -1;
}

void mfma_load_args_init(struct mfma_load_args *args)
{
	if (!args)
		return;
	memset(args, 0, sizeof(*args));
	args->device = -1;
}

int mfma_gemm_submit(mfma_client *c, const struct mfma_gemm_args *args, uint64_t *id,
		     struct mfma_error *err)
{
	struct wire_gemm w;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	uint64_t sid;
	if (!c || !id)
		return client_fail(err, -EINVAL, "mfma_gemm_submit: client and id must not be NULL");
	uint64_t t0 = mfma_clock_ns();
	int rc = gemm_to_wire(c, args, &w, err);
	if (rc < 0)
		return rc;
	req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	req.gemm = &w.g;
	c->encode_t0 = t0;
	if ((rc = send_request(c, &req, true, -1, &sid, err)) < 0)
		return rc;
	struct client_pending *p = client_pending_find(c, sid);
	if (p) {
		p->d_dst = args->d;
		p->d_bytes = args->d_bytes;
		d_shape_of(args, &p->d_rows, &p->d_cols);
	}
	*id = sid;
	client_ok(err);
	return 0;
}

int mfma_wait(mfma_client *c, uint64_t id, int timeout_ms, uint64_t *done_id,
	      struct mfma_gemm_result *result, struct mfma_error *err)
{
	struct client_pending *p;
	Mfma__V1__Response *resp;
	uint64_t rtt = 0;
	if (!c || !result)
		return client_fail(err, -EINVAL, "mfma_wait: client and result must not be NULL");
	memset(result, 0, sizeof(*result));
	if (id == MFMA_ANY) {
		if (mfma_in_flight(c) == 0)
			return client_fail(err, -ENOENT, "no submitted request is in flight");
	} else {
		p = client_pending_find(c, id);
		if (!p || !p->user)
			return client_fail(err, -ENOENT, "request id %llu is not in flight",
					   (unsigned long long)id);
	}
	int rc = client_wait(c, id, timeout_ms, &p, err);
	if (rc < 0)
		return rc;
	if (done_id)
		*done_id = p->id;
	void *dst = p->d_dst;
	size_t dst_bytes = p->d_bytes;
	const uint32_t d_rows = p->d_rows, d_cols = p->d_cols;
	struct client_rx rx;
	rc = take(c, p, MFMA__V1__RESPONSE__BODY_GEMM, &resp, &rtt, &rx, err);
	if (rc < 0)
		return rc;
	if ((rc = gemm_result_from(c, resp, &rx, rtt, dst, dst_bytes, d_rows, d_cols, result,
				   err)) < 0)
		return rc;
	client_ok(err);
	return 0;
}

int mfma_gemm(mfma_client *c, const struct mfma_gemm_args *args, struct mfma_gemm_result *result,
	      struct mfma_error *err)
{
	struct wire_gemm w;
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Response *resp;
	uint64_t rtt;
	if (!c || !result)
		return client_fail(err, -EINVAL, "mfma_gemm: client and result must not be NULL");
	memset(result, 0, sizeof(*result));
	uint64_t t0 = mfma_clock_ns();
	int rc = gemm_to_wire(c, args, &w, err);
	if (rc < 0)
		return rc;
	req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
	req.gemm = &w.g;
	c->encode_t0 = t0;
	struct client_rx rx;
	if ((rc = call_fd(c, &req, -1, MFMA__V1__RESPONSE__BODY_GEMM, &resp, &rtt, &rx, args->d,
			  args->d_bytes, err)) < 0)
		return rc;
	uint32_t d_rows, d_cols;
	d_shape_of(args, &d_rows, &d_cols);
	if ((rc = gemm_result_from(c, resp, &rx, rtt, args->d, args->d_bytes, d_rows, d_cols, result,
				   err)) < 0)
		return rc;
	client_ok(err);
	return 0;
}

int mfma_ping(mfma_client *c, const void *payload, size_t len, uint64_t *round_trip_ns,
	      struct mfma_error *err)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Ping ping = MFMA__V1__PING__INIT;
	Mfma__V1__Response *resp;
	uint64_t rtt;
	if (!c || (len && !payload))
		return client_fail(err, -EINVAL, "mfma_ping: client is NULL, or payload is NULL "
				   "with len=%zu", len);
	ping.has_payload = len > 0;
	ping.payload.len = len;
	ping.payload.data = unconst(payload);
	req.body_case = MFMA__V1__REQUEST__BODY_PING;
	req.ping = &ping;
	int rc = call(c, &req, MFMA__V1__RESPONSE__BODY_PONG, &resp, &rtt, err);
	if (rc < 0)
		return rc;
	const Mfma__V1__Pong *pong = resp->pong;
	size_t got = pong && pong->has_payload ? pong->payload.len : 0;
	if (got != len || (len && memcmp(pong->payload.data, payload, len) != 0)) {
		rc = client_fail(err, -EPROTO, "ping payload of %zu bytes came back as %zu "
				 "different bytes", len, got);
		mfma__v1__response__free_unpacked(resp, NULL);
		return rc;
	}
	mfma__v1__response__free_unpacked(resp, NULL);
	if (round_trip_ns)
		*round_trip_ns = rtt;
	client_ok(err);
	return 0;
}

int mfma_drain(mfma_client *c, struct mfma_error *err)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__Drain dr = MFMA__V1__DRAIN__INIT;
	Mfma__V1__Response *resp;
	if (!c)
		return client_fail(err, -EINVAL, "mfma_drain: client is NULL");
	req.body_case = MFMA__V1__REQUEST__BODY_DRAIN;
	req.drain = &dr;
	int rc = call(c, &req, MFMA__V1__RESPONSE__BODY__NOT_SET, &resp, NULL, err);
	if (rc < 0)
		return rc;
	mfma__v1__response__free_unpacked(resp, NULL);
	client_ok(err);
	return 0;
}

int mfma_authenticate(mfma_client *c, const void *token, size_t len, struct mfma_error *err)
{
	if (!c || !token || len == 0 || len > FRAME_TOKEN_MAX - FRAME_TOKEN_MAGIC_LEN)
		return client_fail(err, -EINVAL, "mfma_authenticate: the token must be 1 to %u bytes",
				   FRAME_TOKEN_MAX - FRAME_TOKEN_MAGIC_LEN);
	int rc = client_send_token(c, token, len, err);
	if (rc < 0)
		return rc;
	/* Sent again on each reconnect of an endpoint list. */
	memcpy(c->token, token, len);
	c->token_len = len;
	/* A right token is not answered; a wrong one is, and the daemon closes:
	 * one ping tells which. */
	return mfma_ping(c, NULL, 0, NULL, err);
}

int mfma_load_weight(mfma_client *c, const struct mfma_load_args *args,
		     struct mfma_load_result *result, struct mfma_error *err)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__LoadWeight lw = MFMA__V1__LOAD_WEIGHT__INIT;
	struct wire_operand a;
	Mfma__V1__Response *resp;
	if (result)
		memset(result, 0, sizeof(*result));
	if (!c || !args)
		return client_fail(err, -EINVAL, "mfma_load_weight: client and args must not be "
				   "NULL");
	if (!args->name || !*args->name)
		return client_fail(err, -EINVAL, "the weight name is empty");
	int rc = operand_to_wire(&args->a, &a, false, err);
	if (rc < 0)
		return rc;
	lw.name = (char *)(uintptr_t)args->name;
	lw.a = &a.op;
	lw.has_device = 1;
	lw.device = args->device;
	lw.has_replace = args->replace;
	lw.replace = args->replace;
	req.body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
	req.load_weight = &lw;
	if ((rc = call(c, &req, MFMA__V1__RESPONSE__BODY__NOT_SET, &resp, NULL, err)) < 0)
		return rc;
	if (result) {
		const Mfma__V1__WeightInfo *w = resp->body_case == MFMA__V1__RESPONSE__BODY_LOAD_WEIGHT
							&& resp->load_weight
						? resp->load_weight->weight
						: NULL;
		weight_from(w, &result->weight);
		result->priv = resp;
	} else {
		mfma__v1__response__free_unpacked(resp, NULL);
	}
	client_ok(err);
	return 0;
}

int mfma_load_result_stored(const struct mfma_load_result *r)
{
	const Mfma__V1__Response *resp = r ? r->priv : NULL;
	if (!resp || resp->body_case != MFMA__V1__RESPONSE__BODY_LOAD_WEIGHT || !resp->load_weight ||
	    !resp->load_weight->has_stored)
		return -1;
	return resp->load_weight->stored ? 1 : 0;
}

void mfma_load_result_free(struct mfma_load_result *r)
{
	if (!r)
		return;
	if (r->priv)
		mfma__v1__response__free_unpacked(r->priv, NULL);
	memset(r, 0, sizeof(*r));
}

int mfma_unload_weight(mfma_client *c, const char *name, struct mfma_error *err)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__UnloadWeight uw = MFMA__V1__UNLOAD_WEIGHT__INIT;
	Mfma__V1__Response *resp;
	if (!c || !name || !*name)
		return client_fail(err, -EINVAL, "mfma_unload_weight: the weight name is empty");
	uw.name = (char *)(uintptr_t)name;
	req.body_case = MFMA__V1__REQUEST__BODY_UNLOAD_WEIGHT;
	req.unload_weight = &uw;
	int rc = call(c, &req, MFMA__V1__RESPONSE__BODY__NOT_SET, &resp, NULL, err);
	if (rc < 0)
		return rc;
	mfma__v1__response__free_unpacked(resp, NULL);
	client_ok(err);
	return 0;
}

static int weights_from(Mfma__V1__WeightInfo **w, size_t n, struct mfma_weight_info **out,
			struct mfma_error *err)
{
	*out = NULL;
	if (n == 0)
		return 0;
	*out = calloc(n, sizeof(**out));
	if (!*out)
		return client_fail(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		weight_from(w[i], &(*out)[i]);
	return 0;
}

static int declared_from(Mfma__V1__DeclaredWeight **w, size_t n,
			 struct mfma_declared_weight **out, struct mfma_error *err)
{
	*out = NULL;
	if (n == 0)
		return 0;
	*out = calloc(n, sizeof(**out));
	if (!*out)
		return client_fail(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		(*out)[i].name = str(w[i]->name);
		(*out)[i].file = str(w[i]->file);
		(*out)[i].state = (enum mfma_declared_state)w[i]->state;
		(*out)[i].message = str(w[i]->message);
	}
	return 0;
}

int mfma_list_weights(mfma_client *c, struct mfma_weight_list *list, struct mfma_error *err)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__ListWeights lw = MFMA__V1__LIST_WEIGHTS__INIT;
	Mfma__V1__Response *resp;
	if (!c || !list)
		return client_fail(err, -EINVAL, "mfma_list_weights: client and list must not be "
				   "NULL");
	memset(list, 0, sizeof(*list));
	req.body_case = MFMA__V1__REQUEST__BODY_LIST_WEIGHTS;
	req.list_weights = &lw;
	int rc = call(c, &req, MFMA__V1__RESPONSE__BODY_LIST_WEIGHTS, &resp, NULL, err);
	if (rc < 0)
		return rc;
	const Mfma__V1__ListWeightsResult *r = resp->list_weights;
	size_t n = r ? r->n_weights : 0;
	list->priv = resp;
	if ((rc = weights_from(r ? r->weights : NULL, n, &list->weights, err)) < 0 ||
	    (rc = declared_from(r ? r->declared : NULL, r ? r->n_declared : 0, &list->declared,
				err)) < 0) {
		mfma_weight_list_free(list);
		return rc;
	}
	list->n_weights = n;
	list->n_declared = r ? r->n_declared : 0;
	client_ok(err);
	return 0;
}

void mfma_weight_list_free(struct mfma_weight_list *list)
{
	if (!list)
		return;
	free(list->weights);
	free(list->declared);
	if (list->priv)
		mfma__v1__response__free_unpacked(list->priv, NULL);
	memset(list, 0, sizeof(*list));
}

int mfma_status(mfma_client *c, struct mfma_status *st, struct mfma_error *err)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__GetStatus gs = MFMA__V1__GET_STATUS__INIT;
	Mfma__V1__Response *resp;
	if (!c || !st)
		return client_fail(err, -EINVAL, "mfma_status: client and status must not be NULL");
	memset(st, 0, sizeof(*st));
	req.body_case = MFMA__V1__REQUEST__BODY_STATUS;
	req.status = &gs;
	int rc = call(c, &req, MFMA__V1__RESPONSE__BODY_STATUS_RESULT, &resp, NULL, err);
	if (rc < 0)
		return rc;
	const Mfma__V1__StatusResult *r = resp->status_result;
	st->priv = resp;
	st->version = str(r ? r->version : NULL);
	if (!r) {
		client_ok(err);
		return 0;
	}
	st->uptime_ns = r->uptime_ns;
	st->weight_budget = r->weight_budget;
	st->weight_bytes = r->weight_bytes;
	if (r->counters) {
		const Mfma__V1__Counters *k = r->counters;
		st->counters = (struct mfma_counters){
			.requests = k->requests,
			.ok = k->ok,
			.failed = k->failed,
			.busy = k->busy,
			.connections_open = k->connections_open,
			.connections_total = k->connections_total,
			.in_flight = k->in_flight,
			.malformed = k->malformed,
		};
	}
	if (r->n_devices) {
		st->devices = calloc(r->n_devices, sizeof(*st->devices));
		if (!st->devices) {
			mfma_status_free(st);
			return client_fail(err, -ENOMEM, "out of memory");
		}
		st->n_devices = r->n_devices;
		for (size_t i = 0; i < r->n_devices; i++) {
			const Mfma__V1__DeviceInfo *d = r->devices[i];
			struct mfma_device_status *o = &st->devices[i];
			o->index = d->index;
			o->backend = str(d->backend);
			o->arch = str(d->arch);
			o->name = str(d->name);
			o->mem_total = d->mem_total;
			o->mem_used = d->mem_used;
			o->queue_depth = d->queue_depth;
			o->in_flight = d->in_flight;
			o->n_variants = d->n_variants;
			o->variants = (const char *const *)d->variants;
			o->completed = d->completed;
			o->failed = d->failed;
			o->n_providers = d->n_providers;
			o->providers = (const char *const *)d->providers;
			o->worker_idle_ns = d->worker_idle_ns;
			o->worker_prepare_ns = d->worker_prepare_ns;
			o->worker_launch_ns = d->worker_launch_ns;
			o->worker_wait_ns = d->worker_wait_ns;
			o->worker_answers_ns = d->worker_answers_ns;
			o->loop_starts = d->loop_starts;
			o->fault = str(d->fault);
		}
	}
	if ((rc = weights_from(r->weights, r->n_weights, &st->weights, err)) < 0 ||
	    (rc = declared_from(r->declared, r->n_declared, &st->declared, err)) < 0) {
		mfma_status_free(st);
		return rc;
	}
	st->n_weights = r->n_weights;
	st->n_declared = r->n_declared;
	client_ok(err);
	return 0;
}

void mfma_status_free(struct mfma_status *st)
{
	if (!st)
		return;
	free(st->devices);
	free(st->weights);
	free(st->declared);
	if (st->priv)
		mfma__v1__response__free_unpacked(st->priv, NULL);
	memset(st, 0, sizeof(*st));
}

/* ---- regions (regions.c keeps the memory) ---- */

int client_region_register(mfma_client *c, int fd, uint64_t bytes, uint64_t *region,
			   struct mfma_error *err)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__RegisterRegion rr = MFMA__V1__REGISTER_REGION__INIT;
	Mfma__V1__Response *resp;
	rr.has_bytes = 1;
	rr.bytes = bytes;
	req.body_case = MFMA__V1__REQUEST__BODY_REGISTER_REGION;
	req.register_region = &rr;
	int rc = call_fd(c, &req, fd, MFMA__V1__RESPONSE__BODY_REGISTER_REGION, &resp, NULL, NULL,
			 NULL, 0, err);
	if (rc < 0)
		return rc;
	const Mfma__V1__RegisterRegionResult *r = resp->register_region;
	if (r && r->region && region_by_id(c, r->region)) {
		rc = client_fail(err, -EPROTO, "the daemon's answer to register_region gives region "
				 "%llu, which this client already has", (unsigned long long)r->region);
		mfma__v1__response__free_unpacked(resp, NULL);
		return rc;
	}
	if (!r || !r->region || r->bytes != bytes) {
		rc = client_fail(err, -EPROTO, "the daemon's answer to register_region gives region "
				 "%llu of %llu bytes for a region of %llu bytes",
				 (unsigned long long)(r ? r->region : 0),
				 (unsigned long long)(r ? r->bytes : 0), (unsigned long long)bytes);
		mfma__v1__response__free_unpacked(resp, NULL);
		return rc;
	}
	*region = r->region;
	mfma__v1__response__free_unpacked(resp, NULL);
	return 0;
}

int client_region_unregister(mfma_client *c, uint64_t region, struct mfma_error *err)
{
	Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
	Mfma__V1__UnregisterRegion ur = MFMA__V1__UNREGISTER_REGION__INIT;
	Mfma__V1__Response *resp;
	ur.has_region = 1;
	ur.region = region;
	req.body_case = MFMA__V1__REQUEST__BODY_UNREGISTER_REGION;
	req.unregister_region = &ur;
	int rc = call(c, &req, MFMA__V1__RESPONSE__BODY__NOT_SET, &resp, NULL, err);
	if (rc < 0)
		return rc;
	mfma__v1__response__free_unpacked(resp, NULL);
	return 0;
}
