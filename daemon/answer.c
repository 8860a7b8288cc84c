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

/* Room laid out for the fields after D: their longest encoding
 * (tail_room) with strings of up to 200 bytes together; longer ones grow
 * the frame.  Small enough that an answer without D (its D in a region)
 * stays in glibc's per-thread cache sizes (up to 1032 bytes): with 1024
 * here every such answer went through malloc's bins, a third of the
 * worker's instructions a job at N=1. */
#define TAIL_ROOM 384

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

/* The writers below put a field at p and return the byte after it; the
 * caller has made room (tail_room). */
static uint8_t *put_u64(uint8_t *p, unsigned field, protobuf_c_boolean has, uint64_t v)
{
	if (!has)
		return p;
	p += put_key(p, field, WT_VARINT);
	return p + wire_varint_put(p, v);
}

static uint8_t *put_bytes(uint8_t *p, unsigned field, const void *b, size_t len)
{
	p += put_key(p, field, WT_LEN);
	p += wire_varint_put(p, len);
	if (len)
		memcpy(p, b, len);
	return p + len;
}

/* An optional string: absent when NULL (protobuf-c's rule, the schema
 * giving these no default). */
static uint8_t *put_str(uint8_t *p, unsigned field, const char *s)
{
	return s ? put_bytes(p, field, s, strlen(s)) : p;
}

/* The messages after D, field by field in number order as protobuf-c
 * packs them (its generic packer, sizing each message twice, took some
 * 3,000 instructions an answer: most of a post thread's work,
 * bench/RESULTS.md). */
static uint8_t *put_timing(uint8_t *p, const void *msg)
{
	const Mfma__V1__Timing *t = msg;
	p = put_u64(p, 1, t->has_queue_ns, t->queue_ns);
	p = put_u64(p, 2, t->has_h2d_ns, t->h2d_ns);
	p = put_u64(p, 3, t->has_kernel_ns, t->kernel_ns);
	p = put_u64(p, 4, t->has_d2h_ns, t->d2h_ns);
	p = put_u64(p, 5, t->has_total_ns, t->total_ns);
	p = put_u64(p, 6, t->has_prep_ns, t->prep_ns);
	p = put_u64(p, 7, t->has_batch_requests, t->batch_requests);
	return put_u64(p, 8, t->has_batch_columns, t->batch_columns);
}

static uint8_t *put_device(uint8_t *p, const void *msg)
{
	const Mfma__V1__DeviceRef *dev = msg;
	p = put_u64(p, 1, dev->has_index, dev->index);
	p = put_str(p, 2, dev->backend);
	return put_str(p, 3, dev->arch);
}

/* Status OK: its code, an enum (int32: a negative one would take ten
 * bytes; OK is 0). */
static uint8_t *put_status_ok(uint8_t *p, const void *msg)
{
	(void)msg;
	return put_u64(p, 1, 1, (uint64_t)(int64_t)MFMA__V1__CODE__OK);
}

/* A submessage field: its key, then its body written after room for a
 * one-byte length; a body of 128 bytes or more moves up to make room for
 * its longer one. */
static uint8_t *put_message(uint8_t *p, unsigned field, uint8_t *(*body)(uint8_t *, const void *),
			    const void *msg)
{
	p += put_key(p, field, WT_LEN);
	uint8_t *b = p + 1;
	size_t len = (size_t)(body(b, msg) - b);
	size_t ll = wire_varint_put(NULL, len);
	if (ll > 1)
		memmove(b + ll - 1, b, len);
	wire_varint_put(p, len);
	return p + ll + len;
}

/* The most the fields after D take: every key and length at its longest
 * (a field's key 1 byte, a length or value WIRE_VARINT_MAX), and the
 * strings. */
static size_t tail_room(const Mfma__V1__DeviceRef *dev, size_t vlen)
{
	const size_t field = 1 + WIRE_VARINT_MAX;
	size_t timing = field + 8 * field, device = field + 3 * field, status = 2 * field;
	return timing + device + status + field + vlen + (dev->backend ? strlen(dev->backend) : 0) +
	       (dev->arch ? strlen(dev->arch) : 0);
}

int answer_finish(struct answer *a, const Mfma__V1__Timing *t, const Mfma__V1__DeviceRef *dev,
		  const char *variant)
{
	size_t vlen = variant ? strlen(variant) : 0;
	size_t need = tail_room(dev, vlen);
	size_t at = a->d_at + a->d_bytes;
	if (at + need > a->cap) {
		/* Longer strings than the room allows: grow (moves D, rarely),
		 * onto the heap for a carved frame, which cannot grow in place. */
		uint8_t *f = a->carved ? malloc(at + need) : realloc(a->frame, at + need);
		if (!f)
			return -ENOMEM;
		if (a->carved) {
			memcpy(f, a->frame, at);
			frame_arena_free(a->frame);
			a->carved = false;
		}
		a->frame = f;
		a->cap = at + need;
	}
	uint8_t *p = a->frame + at;
	p = put_message(p, 2, put_timing, t);          /* GemmResult.timing */
	p = put_message(p, 3, put_device, dev);        /* GemmResult.device */
	p = put_bytes(p, 4, variant, vlen);            /* GemmResult.variant */
	size_t gemm_len = (size_t)(p - a->frame) - (a->gemm_len_at + 5);
	p = put_message(p, 2, put_status_ok, NULL);    /* Response.status */
	at = (size_t)(p - a->frame);
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
