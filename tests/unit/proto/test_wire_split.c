/* The split decode: random requests and answers packed by protobuf-c
 * decode, split, to exactly what protobuf-c's own decode makes of them
 * (both packed again and compared byte for byte), with the large fields
 * pointing into the payload; merged, mutated and truncated payloads
 * decode to the same thing or fail the same way, and never crash.  The
 * GEMM request's own decoder (wire_gemm.h) is held to the same on every
 * one of them: it declines, or it makes what protobuf-c makes; so is the
 * answer's, on answers of every kind and their corruptions. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mfma.pb-c.h"
#include "msg_arena.h"
#include "wire_gemm.h"
#include "wire_split.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return n ? (uint32_t)(rng % n) : 0;
}

/* Sizes around the threshold, and none at all. */
static size_t rnd_size(void)
{
	static const size_t sizes[] = { 0, 1, 100, 4095, 4096, 4097, 20000, 70000 };
	return sizes[rnd(sizeof(sizes) / sizeof(sizes[0]))];
}

/* A pool the random messages' bytes point into. */
static uint8_t pool[80000];

static ProtobufCBinaryData rnd_bytes(void)
{
	size_t n = rnd_size();
	return (ProtobufCBinaryData){ .len = n, .data = pool + rnd((uint32_t)(sizeof(pool) - n)) };
}

struct gen {
	Mfma__V1__Request req;
	Mfma__V1__Gemm g;
	Mfma__V1__LoadWeight lw;
	Mfma__V1__Ping ping;
	Mfma__V1__GetStatus st;
	Mfma__V1__Operand op;
	Mfma__V1__Matrix a, b, c;
	Mfma__V1__Sparse24 s;
	Mfma__V1__RegionRef rb;
};

static void rnd_matrix(Mfma__V1__Matrix *m)
{
	mfma__v1__matrix__init(m);
	m->has_rows = m->has_cols = m->has_dtype = 1;
	m->rows = rnd(5000);
	m->cols = rnd(300);
	m->dtype = (Mfma__V1__DType)rnd(6);
	m->has_data = rnd(8) != 0;
	if (m->has_data)
		m->data = rnd_bytes();
}

static void rnd_operand(struct gen *x, bool weight_ok)
{
	mfma__v1__operand__init(&x->op);
	switch (rnd(weight_ok ? 3 : 2)) {
	case 0:
		rnd_matrix(&x->a);
		x->op.kind_case = MFMA__V1__OPERAND__KIND_DENSE;
		x->op.dense = &x->a;
		x->op.has_sparsity = rnd(2);
		x->op.sparsity = (Mfma__V1__Sparsity)rnd(3);
		break;
	case 1:
		mfma__v1__sparse24__init(&x->s);
		x->s.has_rows = x->s.has_cols = 1;
		x->s.rows = rnd(100);
		x->s.cols = rnd(100) * 4;
		x->s.has_values = rnd(4) != 0;
		x->s.values = rnd_bytes();
		x->s.has_meta = rnd(4) != 0;
		x->s.meta = rnd_bytes();
		x->op.kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
		x->op.sparse = &x->s;
		break;
	default:
		x->op.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
		x->op.weight = "w1";
		break;
	}
}

static void rnd_request(struct gen *x)
{
	memset(x, 0, sizeof(*x));
	mfma__v1__request__init(&x->req);
	x->req.has_id = 1;
	x->req.id = rnd(UINT32_MAX);
	switch (rnd(5)) {
	case 0:
	case 1:
		mfma__v1__gemm__init(&x->g);
		if (rnd(8)) {
			rnd_operand(x, true);
			x->g.a = &x->op;
		}
		rnd_matrix(&x->b);
		x->g.b = &x->b;
		if (rnd(4) == 0) {
			mfma__v1__region_ref__init(&x->rb);
			x->rb.has_region = 1;
			x->rb.region = 7;
			x->b.region = &x->rb;
		}
		if (rnd(2)) {
			rnd_matrix(&x->c);
			x->g.c = &x->c;
		}
		x->g.has_alpha = rnd(2);
		x->g.alpha = 0.5f;
		x->g.has_timeout_us = rnd(2);
		x->g.timeout_us = rnd(100000);
		x->req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
		x->req.gemm = &x->g;
		break;
	case 2:
		mfma__v1__load_weight__init(&x->lw);
		x->lw.name = "weight.name";
		rnd_operand(x, false);
		x->lw.a = &x->op;
		x->req.body_case = MFMA__V1__REQUEST__BODY_LOAD_WEIGHT;
		x->req.load_weight = &x->lw;
		break;
	case 3:
		mfma__v1__ping__init(&x->ping);
		x->ping.has_payload = 1;
		x->ping.payload = rnd_bytes();
		x->req.body_case = MFMA__V1__REQUEST__BODY_PING;
		x->req.ping = &x->ping;
		break;
	default:
		mfma__v1__get_status__init(&x->st);
		x->req.body_case = MFMA__V1__REQUEST__BODY_STATUS;
		x->req.status = &x->st;
		break;
	}
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
	*len = protobuf_c_message_get_packed_size(m);
	uint8_t *b = malloc(*len ? *len : 1);
	assert_non_null(b);
	assert_int_equal(protobuf_c_message_pack(m, b), *len);
	return b;
}

/* Whether two messages pack to the same bytes. */
static void assert_same_packed(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
	size_t n1, n2;
	uint8_t *b1 = pack(a, &n1), *b2 = pack(b, &n2);
	assert_int_equal(n1, n2);
	assert_memory_equal(b1, b2, n1);
	free(b1);
	free(b2);
}

/* Where a large field's bytes sit in buf: itself when the split left it
 * in place, else the first copy of its bytes there. */
static const uint8_t *field_in(const uint8_t *buf, size_t len, const ProtobufCBinaryData *f)
{
	if (f->data >= buf && f->data + f->len <= buf + len)
		return f->data;
	return memmem(buf, len, f->data, f->len);
}

static bool aligned(const uint8_t *p)
{
	return ((uintptr_t)p & (WIRE_SPLIT_ALIGN - 1)) == 0;
}

/* The bytes fields of a Request that may stay in buf (wire_split_gemm_paths). */
static size_t request_matrices(const Mfma__V1__Request *r, ProtobufCBinaryData *f[4])
{
	size_t n = 0;
	if (r->body_case != MFMA__V1__REQUEST__BODY_GEMM)
		return 0;
	const Mfma__V1__Gemm *g = r->gemm;
	if (g->b && g->b->has_data)
		f[n++] = &g->b->data;
	if (g->c && g->c->has_data)
		f[n++] = &g->c->data;
	if (g->a && g->a->kind_case == MFMA__V1__OPERAND__KIND_DENSE && g->a->dense->has_data)
		f[n++] = &g->a->dense->data;
	if (g->a && g->a->kind_case == MFMA__V1__OPERAND__KIND_SPARSE) {
		if (g->a->sparse->has_values)
			f[n++] = &g->a->sparse->values;
		if (g->a->sparse->has_meta)
			f[n++] = &g->a->sparse->meta;
	}
	return n;
}

static bool points_into(const ProtobufCBinaryData *f, const uint8_t *buf, size_t len)
{
	return f->len && f->data >= buf && f->data + f->len <= buf + len;
}

/* Whether every matrix that holds at least the threshold points into buf
 * exactly when its bytes start there at an element boundary
 * (WIRE_SPLIT_ALIGN) and the decoder keeps them there (`keeps`), and is
 * an aligned copy otherwise; returns how many point into buf. */
static size_t check_in_place(const ProtobufCMessage *m, const uint8_t *buf, size_t len, bool keeps)
{
	ProtobufCBinaryData *f[4];
	size_t n = request_matrices((const Mfma__V1__Request *)m, f), kept = 0;
	for (size_t i = 0; i < n; i++) {
		bool in_place = points_into(f[i], buf, len);
		kept += in_place;
		if (!keeps || f[i]->len < WIRE_SPLIT_MIN_BYTES) {
			assert_false(in_place);
			continue;
		}
		const uint8_t *at = field_in(buf, len, f[i]);
		assert_non_null(at);
		/* A copied field whose bytes occur twice (b and c drawn from
		 * the same random slice) cannot be placed: only its copy's
		 * alignment is checked then. */
		bool twice = memmem(at + 1, (size_t)(buf + len - at - 1), f[i]->data, f[i]->len);
		if (in_place || !twice)
			assert_int_equal(in_place, aligned(at));
		assert_true(aligned(f[i]->data));
	}
	return kept;
}

/* The split decode of buf against protobuf-c's: both fail, or both
 * decode to messages that pack to the same bytes.  Returns whether it
 * decoded. */
static bool same_as_plain(const ProtobufCMessageDescriptor *desc,
			  const struct wire_split_path *paths, size_t npaths, const uint8_t *buf,
			  size_t len)
{
	ProtobufCMessage *plain = protobuf_c_message_unpack(desc, NULL, len, buf);
	ProtobufCMessage *split =
		wire_split_unpack(desc, paths, npaths, WIRE_SPLIT_MIN_BYTES, buf, len, NULL);
	assert_true((plain == NULL) == (split == NULL));
	if (plain)
		assert_same_packed(plain, split);
	protobuf_c_message_free_unpacked(plain, NULL);
	wire_split_free(split, paths, npaths, buf, len);
	return plain != NULL;
}

/* wire_gemm_decode of buf, as the daemon calls it for a frame it keeps
 * (large matrices left in buf, into an arena), the same with malloc (the
 * matrices in buf let go before protobuf-c frees the rest; a decline after
 * one was left there must let it go itself, or ASan sees buf freed), and
 * copying everything (with malloc, freed field by field by protobuf-c):
 * NULL, or what protobuf-c makes of buf, with the matrices where the
 * split leaves them.  Returns whether the daemon's call took it. */
static size_t kept_total; /* matrices the daemon's call left in buf */

static bool gemm_decoder_agrees(const uint8_t *buf, size_t len)
{
	ProtobufCMessage *plain = protobuf_c_message_unpack(&mfma__v1__request__descriptor, NULL,
							     len, buf);
	size_t nplain = 0;
	uint8_t *bplain = plain ? pack(plain, &nplain) : NULL;
	struct msg_arena *a = msg_arena_new(MSG_ARENA_REQUEST_BYTES);
	assert_non_null(a);
	ProtobufCAllocator al = msg_arena_allocator(a);
	size_t kept = 99, kept_malloc = 99, split_kept = 0;
	Mfma__V1__Request *got[3] = {
		wire_gemm_decode(buf, len, WIRE_SPLIT_MIN_BYTES, &kept, &al),
		wire_gemm_decode(buf, len, WIRE_SPLIT_MIN_BYTES, &kept_malloc, NULL),
		wire_gemm_decode(buf, len, 0, NULL, NULL),
	};
	for (int i = 0; i < 3; i++) {
		/* The three take the same requests. */
		assert_true((got[i] == NULL) == (got[0] == NULL));
		if (!got[i])
			continue;
		assert_non_null(plain);
		assert_int_equal(got[i]->body_case, MFMA__V1__REQUEST__BODY_GEMM);
		size_t n;
		uint8_t *b = pack(&got[i]->base, &n);
		assert_int_equal(n, nplain);
		assert_memory_equal(b, bplain, n);
		free(b);
		assert_int_equal(check_in_place(&got[i]->base, buf, len, i < 2),
				 i == 0 ? kept : i == 1 ? kept_malloc : 0);
	}
	if (got[0]) {
		/* Where the split leaves them. */
		ProtobufCMessage *split = wire_split_unpack(&mfma__v1__request__descriptor,
							    wire_split_gemm_paths, wire_split_gemm_npaths,
							    WIRE_SPLIT_MIN_BYTES, buf, len, &split_kept);
		assert_non_null(split);
		assert_int_equal(kept, split_kept);
		kept_total += kept;
		wire_split_free(split, wire_split_gemm_paths, wire_split_gemm_npaths, buf, len);
		ProtobufCBinaryData *f[4];
		size_t n = request_matrices(got[1], f);
		for (size_t i = 0; i < n; i++)
			if (points_into(f[i], buf, len))
				*f[i] = (ProtobufCBinaryData){ 0 };
		protobuf_c_message_free_unpacked(&got[1]->base, NULL);
		protobuf_c_message_free_unpacked(&got[2]->base, NULL);
	} else {
		assert_int_equal(kept, 0);
		assert_int_equal(kept_malloc, 0);
	}
	msg_arena_free(a);
	protobuf_c_message_free_unpacked(plain, NULL);
	free(bplain);
	return got[0] != NULL;
}

static bool same_request(const uint8_t *buf, size_t len)
{
	gemm_decoder_agrees(buf, len);
	return same_as_plain(&mfma__v1__request__descriptor, wire_split_gemm_paths,
			     wire_split_gemm_npaths, buf, len);
}

/* The GEMM requests a client sends (one field each, matrices of any
 * size or in regions): the GEMM decoder takes them, not only declines,
 * and declines every other body. */
static void test_gemm_decoder_takes_plain_gemms(void **state)
{
	(void)state;
	unsigned gemms = 0, taken = 0, small_gemms = 0;
	kept_total = 0;
	for (int it = 0; it < 3000; it++) {
		struct gen x;
		rnd_request(&x);
		size_t len;
		uint8_t *buf = pack(&x.req.base, &len);
		bool took = gemm_decoder_agrees(buf, len);
		bool gemm = x.req.body_case == MFMA__V1__REQUEST__BODY_GEMM;
		bool small = gemm && len < WIRE_SPLIT_MIN_BYTES;
		/* Every GEMM the generator makes is in the plain form, large
		 * matrices or not: taken; every other body declined. */
		assert_int_equal(took, gemm);
		gemms += gemm;
		small_gemms += small;
		taken += took;
		free(buf);
	}
	print_message("%u GEMMs of 3000 requests, %u of them small, %u taken, %zu matrices left "
		      "in the payload\n",
		      gemms, small_gemms, taken, kept_total);
	assert_true(small_gemms > 100);
	assert_true(kept_total > 50);
}

static void test_random_requests(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(pool); i++)
		pool[i] = (uint8_t)rnd(256);
	unsigned split_some = 0;
	for (int it = 0; it < 3000; it++) {
		struct gen x;
		rnd_request(&x);
		size_t len;
		uint8_t *buf = pack(&x.req.base, &len);
		assert_true(same_request(buf, len));
		size_t kept;
		ProtobufCMessage *m = wire_split_unpack(&mfma__v1__request__descriptor,
							wire_split_gemm_paths,
							wire_split_gemm_npaths,
							WIRE_SPLIT_MIN_BYTES, buf, len, &kept);
		assert_non_null(m);
		check_in_place(m, buf, len, true);
		wire_split_free(m, wire_split_gemm_paths, wire_split_gemm_npaths, buf, len);
		size_t small = 0;
		struct wire_split_field f[WIRE_SPLIT_MAX_PATHS];
		assert_int_equal(wire_split(buf, len, wire_split_gemm_paths,
					    wire_split_gemm_npaths, WIRE_SPLIT_MIN_BYTES, NULL,
					    &small, NULL),
				 0);
		uint8_t *sb = malloc(small + 1);
		int n = wire_split(buf, len, wire_split_gemm_paths, wire_split_gemm_npaths,
				   WIRE_SPLIT_MIN_BYTES, sb, &small, f);
		assert_true(n >= 0);
		size_t taken = 0;
		for (int k = 0; k < n; k++) {
			assert_true(f[k].len >= WIRE_SPLIT_MIN_BYTES);
			assert_true(f[k].offset + f[k].len <= len);
			taken += f[k].len;
		}
		assert_true(small + taken <= len);
		assert_int_equal(kept, (size_t)n);
		split_some += n > 0;
		free(sb);
		free(buf);
	}
	/* The generator does reach the split (not only the fallback): some
	 * of its large fields start at an element boundary (a quarter of
	 * them, by chance of the layout). */
	print_message("%u of 3000 requests split\n", split_some);
	assert_true(split_some > 150);
}

/* Protobuf wire pieces written by hand, for what protobuf-c's encoder
 * never writes: 32-bit fields sent as wider varints, fields in any order. */
struct wbuf {
	uint8_t b[512];
	size_t n;
};

static void put_varint(struct wbuf *w, uint64_t v)
{
	do {
		w->b[w->n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
		v >>= 7;
	} while (v);
}

static void put_key(struct wbuf *w, uint32_t num, uint32_t type)
{
	put_varint(w, (uint64_t)num << 3 | type);
}

static void put_sub(struct wbuf *w, uint32_t num, const struct wbuf *sub)
{
	put_key(w, num, 2);
	put_varint(w, sub->n);
	memcpy(w->b + w->n, sub->b, sub->n);
	w->n += sub->n;
}

/* A value for a varint field: small, at the 32-bit edges, or any 64 bits
 * (a negative int32 is sent sign-extended to ten bytes). */
static uint64_t rnd_value(void)
{
	switch (rnd(5)) {
	case 0: return rnd(300);
	case 1: return 0xffffffffull - rnd(3);
	case 2: return 0x100000000ull + rnd(300);
	case 3: return (uint64_t)-(int64_t)(1 + rnd(5));
	default: return (uint64_t)rnd(UINT32_MAX) << 32 | rnd(UINT32_MAX);
	}
}

/* A message of the given varint fields (numbers 1..n) in random order,
 * each present or not, then the submessage fields after them. */
static void rnd_varints(struct wbuf *w, uint32_t n)
{
	uint32_t order[8];
	for (uint32_t i = 0; i < n; i++)
		order[i] = i + 1;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = rnd(i), t = order[i - 1];
		order[i - 1] = order[j];
		order[j] = t;
	}
	for (uint32_t i = 0; i < n; i++)
		if (rnd(4)) {
			put_key(w, order[i], 0);
			put_varint(w, rnd_value());
		}
}

/* GEMMs with every scalar field the decoder reads at values protobuf-c's
 * encoder would not write: the same as protobuf-c's decode, and taken. */
static void test_gemm_decoder_wide_varints(void **state)
{
	(void)state;
	for (int it = 0; it < 3000; it++) {
		struct wbuf rb = { 0 }, dr = { 0 }, mb = { 0 }, op = { 0 }, g = { 0 }, req = { 0 };
		rnd_varints(&rb, 3); /* RegionRef: region, offset, length */
		rnd_varints(&dr, 3);
		rnd_varints(&mb, 3); /* Matrix: rows, cols, dtype */
		if (rnd(2))
			put_sub(&mb, 5, &rb);
		/* A weight name, now and then with a NUL byte: declined. */
		bool nul = rnd(8) == 0;
		if (nul || rnd(2)) {
			put_key(&op, 3, 2);
			put_varint(&op, 2);
			memcpy(op.b + op.n, nul ? "w\0" : "w1", 2);
			op.n += 2;
		}
		if (rnd(2)) {
			put_key(&op, 4, 0); /* sparsity */
			put_varint(&op, rnd_value());
		}
		put_sub(&g, 1, &op);
		put_sub(&g, 2, &mb);
		for (uint32_t f = 6; f <= 9; f++) /* out_dtype, device, priority, timeout_us */
			if (rnd(2)) {
				put_key(&g, f, 0);
				put_varint(&g, rnd_value());
			}
		if (rnd(2)) {
			put_key(&g, 4 + rnd(2), 5); /* alpha or beta */
			for (int k = 0; k < 4; k++)
				g.b[g.n++] = (uint8_t)rnd(256);
		}
		if (rnd(2))
			put_sub(&g, 10, &dr);
		if (rnd(2)) {
			put_key(&req, 1, 0);
			put_varint(&req, rnd_value());
		}
		put_sub(&req, 2, &g);
		assert_int_equal(gemm_decoder_agrees(req.b, req.n), !nul);
	}
}

/* A decoder's check on a buffer (same_request, answer_decoder_agrees). */
typedef bool (*decode_check)(const uint8_t *buf, size_t len);

/* n bytes in a buffer of exactly that size (ASan sees overreads), through
 * check. */
static bool exact(const uint8_t *buf, size_t n, decode_check check)
{
	uint8_t *t = malloc(n ? n : 1);
	memcpy(t, buf, n);
	bool r = check(t, n);
	free(t);
	return r;
}

/* a and b back to back, which protobuf reads as one message. */
static bool joined(const uint8_t *a, size_t la, const uint8_t *b, size_t lb, decode_check check)
{
	uint8_t *t = malloc(la + lb);
	memcpy(t, a, la);
	memcpy(t + la, b, lb);
	bool r = check(t, la + lb);
	free(t);
	return r;
}

/* buf cut at every step-th length, then n copies with one to three bytes
 * of its first span bytes (where the keys and lengths are) changed. */
static void damaged(const uint8_t *buf, size_t len, size_t step, int n, size_t span,
		    decode_check check)
{
	for (size_t cut = 0; cut < len; cut += step)
		exact(buf, cut, check);
	span = len < span ? len : span;
	uint8_t *t = malloc(len ? len : 1);
	for (int m = 0; m < n; m++) {
		memcpy(t, buf, len);
		for (int k = 0; k < 1 + (int)rnd(3) && span; k++)
			t[rnd((uint32_t)span)] = (uint8_t)rnd(256);
		check(t, len);
	}
	free(t);
}

/* Two messages back to back are one message to protobuf (fields merged,
 * the last scalar kept, a oneof's last member kept): the split declines
 * where it would differ, and the result is the plain one. */
static void test_merged_requests(void **state)
{
	(void)state;
	for (int it = 0; it < 2000; it++) {
		struct gen x, y;
		rnd_request(&x);
		rnd_request(&y);
		size_t l1, l2;
		uint8_t *b1 = pack(&x.req.base, &l1), *b2 = pack(&y.req.base, &l2);
		assert_true(joined(b1, l1, b2, l2, same_request));
		free(b1);
		free(b2);
	}
}

/* Every truncation and random corruption of a few requests: the same
 * verdict as protobuf-c, and no crash (run under ASan in CI). */
static void test_truncated_and_mutated(void **state)
{
	(void)state;
	for (int it = 0; it < 40; it++) {
		struct gen x;
		rnd_request(&x);
		size_t len;
		uint8_t *buf = pack(&x.req.base, &len);
		damaged(buf, len, len > 2000 ? len / 997 : 1, 300, 64, same_request);
		free(buf);
	}
	for (int it = 0; it < 20000; it++) {
		uint8_t g[48];
		size_t n = rnd(sizeof(g) + 1);
		for (size_t i = 0; i < n; i++)
			g[i] = (uint8_t)rnd(256);
		exact(g, n, same_request);
	}
}

/* The answer's D, as the client decodes it. */
static void test_response_d(void **state)
{
	(void)state;
	for (int it = 0; it < 500; it++) {
		Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
		Mfma__V1__GemmResult g = MFMA__V1__GEMM_RESULT__INIT;
		Mfma__V1__Matrix d = MFMA__V1__MATRIX__INIT;
		Mfma__V1__Timing t = MFMA__V1__TIMING__INIT;
		Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
		resp.has_id = 1;
		resp.id = it + 1;
		st.has_code = 1;
		resp.status = &st;
		d.has_rows = d.has_cols = d.has_data = 1;
		d.rows = rnd(100);
		d.data = rnd_bytes();
		g.d = &d;
		t.has_kernel_ns = 1;
		t.kernel_ns = rnd(1000);
		g.timing = &t;
		g.variant = "cpu-f32";
		resp.body_case = MFMA__V1__RESPONSE__BODY_GEMM;
		resp.gemm = &g;
		size_t len;
		uint8_t *buf = pack(&resp.base, &len);
		size_t kept;
		assert_true(same_as_plain(&mfma__v1__response__descriptor, wire_split_response_paths,
					  wire_split_response_npaths, buf, len));
		Mfma__V1__Response *r = (Mfma__V1__Response *)wire_split_unpack(
			&mfma__v1__response__descriptor, wire_split_response_paths,
			wire_split_response_npaths, WIRE_SPLIT_MIN_BYTES, buf, len, &kept);
		assert_non_null(r);
		bool big = d.data.len >= WIRE_SPLIT_MIN_BYTES;
		bool at_boundary = big && aligned(field_in(buf, len, &d.data));
		assert_int_equal(kept, at_boundary);
		assert_int_equal(r->gemm->d->data.len, d.data.len);
		if (d.data.len)
			assert_memory_equal(r->gemm->d->data.data, d.data.data, d.data.len);
		if (at_boundary)
			assert_true(r->gemm->d->data.data > buf &&
				    r->gemm->d->data.data + d.data.len <= buf + len);
		if (big)
			assert_true(aligned(r->gemm->d->data.data));
		wire_split_free(&r->base, wire_split_response_paths, wire_split_response_npaths,
				buf, len);
		free(buf);
	}
}

/* The answer's walker (wire_gemm_answer_decode) against protobuf-c's
 * decode of buf: NULL, or a message that packs to the same bytes, freed
 * by protobuf-c with malloc's allocator as the client library frees it.
 * Returns whether it took buf. */
static bool answer_decoder_agrees(const uint8_t *buf, size_t len)
{
	ProtobufCMessage *plain = protobuf_c_message_unpack(&mfma__v1__response__descriptor, NULL,
							     len, buf);
	Mfma__V1__Response *got = wire_gemm_answer_decode(buf, len, NULL, NULL);
	if (got) {
		assert_non_null(plain);
		assert_same_packed(plain, &got->base);
		assert_true(got->body_case == MFMA__V1__RESPONSE__BODY_GEMM ||
			    got->body_case == MFMA__V1__RESPONSE__BODY__NOT_SET);
		protobuf_c_message_free_unpacked(&got->base, NULL);
	}
	protobuf_c_message_free_unpacked(plain, NULL);
	return got != NULL;
}

/* An answer as the daemon writes them: a GEMM's (D's bytes or its region,
 * timing, device, variant), an error's (status alone), or a pong. */
struct answer {
	Mfma__V1__Response resp;
	Mfma__V1__Status st;
	Mfma__V1__GemmResult g;
	Mfma__V1__Matrix d;
	Mfma__V1__RegionRef dr;
	Mfma__V1__Timing t;
	Mfma__V1__DeviceRef dev;
	Mfma__V1__Pong pong;
};

static void rnd_answer(struct answer *a)
{
	memset(a, 0, sizeof(*a));
	mfma__v1__response__init(&a->resp);
	mfma__v1__status__init(&a->st);
	a->resp.has_id = rnd(8) != 0;
	a->resp.id = (uint64_t)rnd(UINT32_MAX) << rnd(33);
	a->st.has_code = 1;
	a->st.code = (Mfma__V1__Code)rnd(10);
	a->st.message = rnd(2) ? "weight 'w' is not loaded" : rnd(2) ? "" : NULL;
	if (rnd(8))
		a->resp.status = &a->st;
	switch (rnd(4)) {
	case 0:
		break; /* an error's answer */
	case 1:
		mfma__v1__pong__init(&a->pong);
		a->resp.body_case = MFMA__V1__RESPONSE__BODY_PONG;
		a->resp.pong = &a->pong;
		break;
	default:
		mfma__v1__gemm_result__init(&a->g);
		mfma__v1__timing__init(&a->t);
		mfma__v1__device_ref__init(&a->dev);
		rnd_matrix(&a->d);
		if (rnd(3) == 0) {
			mfma__v1__region_ref__init(&a->dr);
			a->dr.has_region = a->dr.has_offset = a->dr.has_length = 1;
			a->dr.region = rnd(9);
			a->dr.offset = (uint64_t)rnd(UINT32_MAX) << 8;
			a->dr.length = rnd(1 << 20);
			a->d.region = &a->dr;
			a->d.has_data = 0;
		}
		a->g.d = rnd(8) ? &a->d : NULL;
		a->t.has_queue_ns = rnd(2);
		a->t.queue_ns = rnd(UINT32_MAX);
		a->t.has_kernel_ns = a->t.has_total_ns = 1;
		a->t.kernel_ns = rnd(100000);
		a->t.total_ns = (uint64_t)rnd(UINT32_MAX) * 3;
		a->t.has_batch_requests = a->t.has_batch_columns = rnd(2);
		a->t.batch_requests = rnd(256);
		a->t.batch_columns = rnd(4096);
		a->g.timing = rnd(8) ? &a->t : NULL;
		a->dev.has_index = 1;
		a->dev.index = rnd(8);
		a->dev.backend = "cuda";
		a->dev.arch = rnd(2) ? "sm_90" : NULL;
		a->g.device = rnd(8) ? &a->dev : NULL;
		a->g.variant = rnd(4) ? "wg.sp.f16.n64" : NULL;
		a->resp.body_case = MFMA__V1__RESPONSE__BODY_GEMM;
		a->resp.gemm = &a->g;
		break;
	}
}

/* GEMMs' and errors' answers are taken, others declined; merged pairs,
 * truncations and corruptions of them decode as protobuf-c decodes them
 * or are declined. */
static void test_answer_decoder(void **state)
{
	(void)state;
	unsigned taken = 0, gemms = 0;
	for (int it = 0; it < 2000; it++) {
		struct answer a, b;
		rnd_answer(&a);
		rnd_answer(&b);
		size_t la, lb;
		uint8_t *ba = pack(&a.resp.base, &la), *bb = pack(&b.resp.base, &lb);
		bool took = answer_decoder_agrees(ba, la);
		/* A pong is declined; the rest is taken whole. */
		assert_int_equal(took, a.resp.body_case != MFMA__V1__RESPONSE__BODY_PONG);
		taken += took;
		gemms += a.resp.body_case == MFMA__V1__RESPONSE__BODY_GEMM;
		joined(ba, la, bb, lb, answer_decoder_agrees);
		/* Every cut of the first 200, anywhere corrupted. */
		damaged(ba, la, it < 200 ? 1 : la + 1, 20, la, answer_decoder_agrees);
		free(ba);
		free(bb);
	}
	print_message("%u of 2000 answers taken, %u of them GEMMs'\n", taken, gemms);
	assert_true(gemms > 500);
}

/* The caller's room for a placed D (test_answer_place). */
static uint8_t room[65536];

static void *place_even(void *ctx, uint64_t id, size_t len)
{
	(*(unsigned *)ctx)++;
	return (id & 1) == 0 && len <= sizeof(room) ? room : NULL;
}

/* An answer decoded into an arena with a place callback: the same
 * message as protobuf-c's, D's bytes in the caller's room exactly when
 * the callback gave it (an id before the gemm, even here, D no larger
 * than the room), never asked for without an id read first; and with the
 * id written after the gemm (fields in another order), never placed. */
static void test_answer_place(void **state)
{
	(void)state;
	unsigned placed = 0, asked = 0;
	for (int it = 0; it < 2000; it++) {
		struct answer a;
		rnd_answer(&a);
		size_t len;
		uint8_t *buf = pack(&a.resp.base, &len);
		ProtobufCMessage *plain = protobuf_c_message_unpack(&mfma__v1__response__descriptor,
								     NULL, len, buf);
		struct msg_arena *ar = msg_arena_new(1024);
		assert_non_null(ar);
		ProtobufCAllocator al = msg_arena_allocator(ar);
		unsigned calls = 0;
		struct wire_answer_place place = { .fn = place_even, .ctx = &calls };
		Mfma__V1__Response *got = wire_gemm_answer_decode(buf, len, &al, &place);
		assert_int_equal(got != NULL, a.resp.body_case != MFMA__V1__RESPONSE__BODY_PONG);
		if (got) {
			assert_same_packed(plain, &got->base);
			const Mfma__V1__Matrix *d = got->gemm ? got->gemm->d : NULL;
			bool offered = d && d->data.len && got->has_id && (got->id & 1) == 0 &&
				       d->data.len <= sizeof(room);
			assert_int_equal(d && d->data.data == room, offered);
			assert_int_equal(calls, d && d->data.len && got->has_id);
			placed += offered;
			asked += calls;
		}
		msg_arena_free(ar);
		protobuf_c_message_free_unpacked(plain, NULL);
		/* The id after the gemm: the same answer, nothing placed. */
		if (a.resp.has_id && a.resp.body_case == MFMA__V1__RESPONSE__BODY_GEMM) {
			Mfma__V1__Response body = a.resp, id = MFMA__V1__RESPONSE__INIT;
			body.has_id = 0;
			id.has_id = 1;
			id.id = a.resp.id;
			size_t lb, li;
			uint8_t *bb = pack(&body.base, &lb), *bi = pack(&id.base, &li);
			uint8_t *swapped = malloc(lb + li);
			assert_non_null(swapped);
			memcpy(swapped, bb, lb);
			memcpy(swapped + lb, bi, li);
			ar = msg_arena_new(1024);
			assert_non_null(ar);
			al = msg_arena_allocator(ar);
			calls = 0;
			got = wire_gemm_answer_decode(swapped, lb + li, &al, &place);
			assert_non_null(got);
			assert_int_equal(calls, 0);
			assert_true(!got->gemm->d || got->gemm->d->data.data != room);
			assert_int_equal(got->id, a.resp.id);
			msg_arena_free(ar);
			free(swapped);
			free(bb);
			free(bi);
		}
		free(buf);
	}
	print_message("%u of 2000 answers' D placed (%u asked)\n", placed, asked);
	assert_true(placed > 100);
}

/* Each path names the field it says, by the descriptors. */
static void test_paths_name_their_fields(void **state)
{
	(void)state;
	static const char *const want_req[] = {
		"gemm.b.data", "gemm.c.data", "gemm.a.dense.data", "gemm.a.sparse.values",
		"gemm.a.sparse.meta",
	};
	assert_int_equal(wire_split_gemm_npaths, sizeof(want_req) / sizeof(want_req[0]));
	for (size_t i = 0; i < wire_split_gemm_npaths + wire_split_response_npaths; i++) {
		bool req = i < wire_split_gemm_npaths;
		const struct wire_split_path *p =
			req ? &wire_split_gemm_paths[i]
			    : &wire_split_response_paths[i - wire_split_gemm_npaths];
		const ProtobufCMessageDescriptor *d =
			req ? &mfma__v1__request__descriptor : &mfma__v1__response__descriptor;
		char name[128] = "";
		for (unsigned k = 0; k < p->depth; k++) {
			const ProtobufCFieldDescriptor *f =
				protobuf_c_message_descriptor_get_field(d, p->field[k]);
			assert_non_null(f);
			strcat(name, k ? "." : "");
			strcat(name, f->name);
			assert_int_equal(f->type, k + 1 < p->depth ? PROTOBUF_C_TYPE_MESSAGE
								   : PROTOBUF_C_TYPE_BYTES);
			d = f->descriptor;
		}
		assert_string_equal(name, req ? want_req[i] : "gemm.d.data");
	}
}

/* The small copy by hand: Request{id=5, gemm{b{rows=1, data=5000 x 'x'}}}
 * becomes Request{id=5, gemm{b{rows=1}}} with the lengths rewritten. */
/* A pad field put first moves a GEMM's B to a 16-byte boundary of a
 * 16-aligned frame, whatever the fields before B, and the split then
 * leaves B in place; the padded request decodes to the same request with
 * the pad set and B's bytes intact. */
static void test_pad_aligns_b(void **state)
{
	(void)state;
	static uint8_t bdata[8192];
	for (size_t i = 0; i < sizeof(bdata); i++)
		bdata[i] = (uint8_t)(i * 7 + 1);
	for (uint32_t id = 0; id < 40; id++) {
		Mfma__V1__Request req = MFMA__V1__REQUEST__INIT;
		Mfma__V1__Gemm g = MFMA__V1__GEMM__INIT;
		Mfma__V1__Operand op = MFMA__V1__OPERAND__INIT;
		Mfma__V1__Matrix b = MFMA__V1__MATRIX__INIT;
		char name[64];
		/* Names of every length move B by every offset. */
		snprintf(name, sizeof(name), "%.*s", (int)(id % 23), "wwwwwwwwwwwwwwwwwwwwwwwwwwwwww");
		op.kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
		op.weight = name;
		b.has_rows = b.has_cols = b.has_dtype = b.has_data = 1;
		b.rows = 1024;
		b.cols = 4 + id;
		b.dtype = MFMA__V1__DTYPE__F16;
		b.data = (ProtobufCBinaryData){ .len = WIRE_SPLIT_MIN_BYTES + id * 100, .data = bdata };
		g.a = &op;
		g.b = &b;
		req.has_id = 1;
		req.id = (uint64_t)id * 977;
		req.body_case = MFMA__V1__REQUEST__BODY_GEMM;
		req.gemm = &g;
		size_t n = protobuf_c_message_get_packed_size(&req.base);
		uint8_t *plain = malloc(n);
		assert_non_null(plain);
		protobuf_c_message_pack(&req.base, plain);
		const uint8_t *at = memmem(plain, n, bdata, b.data.len);
		assert_non_null(at);
		size_t b_off = 4 + (size_t)(at - plain); /* behind a 4-byte frame header */
		uint8_t pad[WIRE_PAD_FIELD_MAX];
		size_t npad = wire_pad(b_off, pad);
		assert_true(npad == 0 || (npad >= 2 && npad <= WIRE_PAD_FIELD_MAX));
		assert_int_equal((b_off + npad) % WIRE_PAD_ALIGN, 0);
		/* The frame in a 16-aligned buffer: header, pad, request. */
		uint8_t *frame = aligned_alloc(16, (4 + npad + n + 15) / 16 * 16);
		assert_non_null(frame);
		memcpy(frame + 4, pad, npad);
		memcpy(frame + 4 + npad, plain, n);
		size_t in_place = 0;
		Mfma__V1__Request *got = (Mfma__V1__Request *)wire_split_unpack(
			&mfma__v1__request__descriptor, wire_split_gemm_paths, wire_split_gemm_npaths,
			WIRE_SPLIT_MIN_BYTES, frame + 4, npad + n, &in_place);
		assert_non_null(got);
		assert_int_equal(got->id, req.id);
		assert_int_equal(got->has_pad, npad > 0);
		if (npad)
			assert_int_equal(got->pad.len, npad - 2);
		assert_int_equal(got->gemm->b->data.len, b.data.len);
		assert_memory_equal(got->gemm->b->data.data, bdata, b.data.len);
		assert_true(got->gemm->b->data.data >= frame && got->gemm->b->data.data < frame + 4 + npad + n);
		assert_int_equal(in_place, 1);
		assert_int_equal((uintptr_t)got->gemm->b->data.data % WIRE_PAD_ALIGN, 0);
		wire_split_free(&got->base, wire_split_gemm_paths, wire_split_gemm_npaths, frame + 4,
				npad + n);
		free(frame);
		free(plain);
	}
}

static void test_small_copy_bytes(void **state)
{
	(void)state;
	size_t n = 5000;
	/* The data field's bytes start 13 bytes in: at an element boundary
	 * with the frame 3 bytes into a (16-aligned) allocation. */
	uint8_t *mem = malloc(32 + n);
	assert_non_null(mem);
	uint8_t *buf = mem + 3;
	size_t o = 0;
	buf[o++] = 0x08, buf[o++] = 5;            /* id = 5 */
	buf[o++] = 0x12, buf[o++] = 0x90, buf[o++] = 0x27; /* gemm, 5008 bytes */
	buf[o++] = 0x12, buf[o++] = 0x8d, buf[o++] = 0x27; /* b, 5005 bytes */
	buf[o++] = 0x08, buf[o++] = 1;            /* rows = 1 */
	buf[o++] = 0x22, buf[o++] = 0x88, buf[o++] = 0x27; /* data, 5000 bytes */
	size_t at = o;
	memset(buf + o, 'x', n);
	o += n;
	uint8_t small[64];
	size_t sl = sizeof(small);
	struct wire_split_field f[WIRE_SPLIT_MAX_PATHS];
	assert_int_equal(wire_split(buf, o, wire_split_gemm_paths, wire_split_gemm_npaths,
				    4096, small, &sl, f),
			 1);
	static const uint8_t want[] = { 0x08, 5, 0x12, 4, 0x12, 2, 0x08, 1 };
	assert_int_equal(sl, sizeof(want));
	assert_memory_equal(small, want, sizeof(want));
	assert_int_equal(f[0].offset, at);
	assert_int_equal(f[0].len, n);
	assert_int_equal(f[0].path, 0);
	/* The same frame one byte further: its data is off an element
	 * boundary and stays in the small copy. */
	memmove(buf + 1, buf, o);
	sl = 0;
	assert_int_equal(wire_split(buf + 1, o, wire_split_gemm_paths, wire_split_gemm_npaths,
				    4096, NULL, &sl, NULL),
			 0);
	assert_int_equal(sl, o);
	memmove(buf, buf + 1, o);
	/* Too small a buffer, and a bad argument. */
	sl = 4;
	assert_int_equal(wire_split(buf, o, wire_split_gemm_paths, wire_split_gemm_npaths,
				    4096, small, &sl, f),
			 -ENOSPC);
	assert_int_equal(wire_split(buf, o, wire_split_gemm_paths, 0, 4096, small, &sl, f),
			 -EINVAL);
	/* Below the threshold nothing is taken out. */
	sl = 0;
	assert_int_equal(wire_split(buf, o, wire_split_gemm_paths, wire_split_gemm_npaths,
				    n + 1, NULL, &sl, NULL),
			 0);
	assert_int_equal(sl, o);
	/* b twice in gemm: protobuf merges them, the split declines. */
	uint8_t dup[] = { 0x12, 4, 0x12, 0, 0x12, 0 };
	sl = sizeof(small);
	assert_int_equal(wire_split(dup, sizeof(dup), wire_split_gemm_paths,
				    wire_split_gemm_npaths, 1, small, &sl, f),
			 -EINVAL);
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_requests),
		cmocka_unit_test(test_gemm_decoder_takes_plain_gemms),
		cmocka_unit_test(test_gemm_decoder_wide_varints),
		cmocka_unit_test(test_merged_requests),
		cmocka_unit_test(test_truncated_and_mutated),
		cmocka_unit_test(test_response_d),
		cmocka_unit_test(test_answer_decoder),
		cmocka_unit_test(test_answer_place),
		cmocka_unit_test(test_paths_name_their_fields),
		cmocka_unit_test(test_small_copy_bytes),
		cmocka_unit_test(test_pad_aligns_b),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
