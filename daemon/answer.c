#include "answer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "frame_arena.h"
#include "wire_varint.h"

/* Protobuf wire types. */
enum { WT_VARINT = 0, WT_LEN = 2 };

/* v in exactly five bytes (v < 2^35), continuation bits on the first four. */
static void put_varint5(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 4; i++, v >>= 7)
		p[i] = (uint8_t)(v | 0x80);
	p[4] = (uint8_t)v;
}

static size_t put_key(uint8_t *p, unsigned field, unsigned wt)
{
	return wire_varint_put(p, (uint64_t)field << 3 | wt);
}

/* Bytes the fields after D may take, whatever their values: timing (8
 * varints), device (index, two short strings), variant, status. */
#define TAIL_ROOM 1024

/* region 0: D's bytes in the frame; else a RegionRef in their place.  The
 * frame from alloc when it has room, else the heap. */
static int start(struct answer *a, uint64_t id, uint32_t m, uint32_t n, enum mfma_dtype dt,
		 uint64_t region, uint64_t offset, answer_alloc_fn alloc, void *arg)
{
	memset(a, 0, sizeof(*a));
	size_t d_len = (size_t)m * n * mfma_dtype_size(dt);
	a->d_bytes = region ? 0 : d_len;
	/* The head: at most 4 + 11 (id) + 6 (gemm) + 11 (d) + 3 * 6 + 11,
	 * or with a region 4 + 11 + 6 + 11 + 3 * 6 + 2 + 3 * 11. */
	uint8_t head[128];
	size_t h = FRAME_HEADER_SIZE;
	h += put_key(head + h, 1, WT_VARINT); /* Response.id */
	h += wire_varint_put(head + h, id);
	h += put_key(head + h, 3, WT_LEN);    /* Response.gemm */
	a->gemm_len_at = h;
	h += 5;
	/* GemmResult.d: a Matrix with its data last. */
	uint8_t mat[80];
	size_t mlen = 0;
	mlen += put_key(mat + mlen, 1, WT_VARINT);
	mlen += wire_varint_put(mat + mlen, m);
	mlen += put_key(mat + mlen, 2, WT_VARINT);
	mlen += wire_varint_put(mat + mlen, n);
	mlen += put_key(mat + mlen, 3, WT_VARINT);
	mlen += wire_varint_put(mat + mlen, (uint64_t)dt);
	if (region) {
		uint8_t ref[40];
		size_t rlen = 0;
		rlen += put_key(ref + rlen, 1, WT_VARINT);
		rlen += wire_varint_put(ref + rlen, region);
		rlen += put_key(ref + rlen, 2, WT_VARINT);
		rlen += wire_varint_put(ref + rlen, offset);
		rlen += put_key(ref + rlen, 3, WT_VARINT);
		rlen += wire_varint_put(ref + rlen, d_len);
		mlen += put_key(mat + mlen, 5, WT_LEN); /* Matrix.region */
		mlen += wire_varint_put(mat + mlen, rlen);
		memcpy(mat + mlen, ref, rlen);
		mlen += rlen;
	} else {
		mlen += put_key(mat + mlen, 4, WT_LEN);
		mlen += wire_varint_put(mat + mlen, a->d_bytes);
	}
	h += put_key(head + h, 1, WT_LEN);
	h += wire_varint_put(head + h, mlen + a->d_bytes);
	memcpy(head + h, mat, mlen);
	h += mlen;
	a->d_at = h;
	a->cap = h + a->d_bytes + TAIL_ROOM;
	a->frame = alloc ? alloc(arg, a->cap, a->d_at) : NULL;
	a->carved = a->frame != NULL;
	if (!a->frame)
		a->frame = malloc(a->cap);
	if (!a->frame)
		return -ENOMEM;
	memcpy(a->frame, head, h);
	return 0;
}

int answer_start(struct answer *a, uint64_t id, uint32_t m, uint32_t n, enum mfma_dtype dt,
		 answer_alloc_fn alloc, void *arg)
{
	return start(a, id, m, n, dt, 0, 0, alloc, arg);
}

int answer_start_region(struct answer *a, uint64_t id, uint32_t m, uint32_t n,
			enum mfma_dtype dt, uint64_t region, uint64_t offset)
{
	/* No D in the frame: nothing for a device to copy into it. */
	return start(a, id, m, n, dt, region, offset, NULL, NULL);
}

/* Writes at p + n and counts n; with p NULL it only counts, so that one
 * function gives a message's length and its bytes. */
struct put {
	uint8_t *p;
	size_t n;
};

static void put_varint(struct put *w, uint64_t v)
{
	w->n += wire_varint_put(w->p ? w->p + w->n : NULL, v);
}

static void put_u64(struct put *w, unsigned field, protobuf_c_boolean has, uint64_t v)
{
	if (!has)
		return;
	put_varint(w, (uint64_t)field << 3 | WT_VARINT);
	put_varint(w, v);
}

static void put_bytes(struct put *w, unsigned field, const void *b, size_t len)
{
	put_varint(w, (uint64_t)field << 3 | WT_LEN);
	put_varint(w, len);
	if (w->p && len)
		memcpy(w->p + w->n, b, len);
	w->n += len;
}

/* An optional string: absent when NULL (protobuf-c's rule, the schema
 * giving these no default). */
static void put_str(struct put *w, unsigned field, const char *s)
{
	if (s)
		put_bytes(w, field, s, strlen(s));
}

/* The three messages after D, field by field in number order as
 * protobuf-c packs them (its generic packer took some 3,000 instructions
 * an answer, most of a post thread's work: bench/RESULTS.md). */
static void put_timing(struct put *w, const void *msg)
{
	const Mfma__V1__Timing *t = msg;
	put_u64(w, 1, t->has_queue_ns, t->queue_ns);
	put_u64(w, 2, t->has_h2d_ns, t->h2d_ns);
	put_u64(w, 3, t->has_kernel_ns, t->kernel_ns);
	put_u64(w, 4, t->has_d2h_ns, t->d2h_ns);
	put_u64(w, 5, t->has_total_ns, t->total_ns);
	put_u64(w, 6, t->has_prep_ns, t->prep_ns);
	put_u64(w, 7, t->has_batch_requests, t->batch_requests);
	put_u64(w, 8, t->has_batch_columns, t->batch_columns);
}

static void put_device(struct put *w, const void *msg)
{
	const Mfma__V1__DeviceRef *dev = msg;
	put_u64(w, 1, dev->has_index, dev->index);
	put_str(w, 2, dev->backend);
	put_str(w, 3, dev->arch);
}

/* Status OK: its code, an enum (int32, so a negative one would take ten
 * bytes; OK is 0). */
static void put_status_ok(struct put *w, const void *msg)
{
	(void)msg;
	put_u64(w, 1, 1, (uint64_t)(int64_t)MFMA__V1__CODE__OK);
}

/* A submessage field: key, length, then the body body() writes. */
static void put_message(struct put *w, unsigned field, void (*body)(struct put *, const void *),
			const void *msg)
{
	struct put len = { NULL, 0 };
	body(&len, msg);
	put_varint(w, (uint64_t)field << 3 | WT_LEN);
	put_varint(w, len.n);
	body(w, msg);
}

int answer_finish(struct answer *a, const Mfma__V1__Timing *t, const Mfma__V1__DeviceRef *dev,
		  const char *variant)
{
	/* Everything after D, counted. */
	struct put all = { NULL, 0 };
	put_message(&all, 2, put_timing, t);   /* GemmResult.timing */
	put_message(&all, 3, put_device, dev); /* GemmResult.device */
	put_bytes(&all, 4, variant, variant ? strlen(variant) : 0); /* GemmResult.variant */
	size_t gemm_tail = all.n;
	put_message(&all, 2, put_status_ok, NULL); /* Response.status */
	size_t at = a->d_at + a->d_bytes;
	if (at + all.n > a->cap) {
		/* Longer strings than the room allows: grow (moves D, rarely),
		 * onto the heap for a carved frame, which cannot grow in place. */
		uint8_t *f = a->carved ? malloc(at + all.n) : realloc(a->frame, at + all.n);
		if (!f)
			return -ENOMEM;
		if (a->carved) {
			memcpy(f, a->frame, at);
			frame_arena_free(a->frame);
			a->carved = false;
		}
		a->frame = f;
		a->cap = at + all.n;
	}
	struct put w = { a->frame + at, 0 };
	put_message(&w, 2, put_timing, t);
	put_message(&w, 3, put_device, dev);
	put_bytes(&w, 4, variant, variant ? strlen(variant) : 0);
	put_message(&w, 2, put_status_ok, NULL);
	size_t gemm_len = at + gemm_tail - (a->gemm_len_at + 5);
	at += w.n;
	if (at - FRAME_HEADER_SIZE > UINT32_MAX || gemm_len >= (1ull << 35))
		return -E2BIG;
	put_varint5(a->frame + a->gemm_len_at, gemm_len);
	frame_header_put(a->frame, (uint32_t)(at - FRAME_HEADER_SIZE));
	a->len = at;
	return 0;
}

uint8_t *answer_take(struct answer *a)
{
	uint8_t *f = a->frame;
	a->frame = NULL;
	return f;
}

void answer_free(struct answer *a)
{
	frame_arena_free(a->frame);
	a->frame = NULL;
}
