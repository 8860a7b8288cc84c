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

/* A submessage field: key, length, packed bytes. */
static size_t put_message(uint8_t *p, unsigned field, const ProtobufCMessage *msg)
{
	size_t n = put_key(p, field, WT_LEN);
	size_t len = protobuf_c_message_get_packed_size(msg);
	n += wire_varint_put(p + n, len);
	return n + protobuf_c_message_pack(msg, p + n);
}

int answer_finish(struct answer *a, const Mfma__V1__Timing *t, const Mfma__V1__DeviceRef *dev,
		  const char *variant)
{
	Mfma__V1__Status st = MFMA__V1__STATUS__INIT;
	st.has_code = 1;
	st.code = MFMA__V1__CODE__OK;
	size_t vlen = variant ? strlen(variant) : 0;
	size_t need = 3 * 16 + protobuf_c_message_get_packed_size(&t->base) +
		      protobuf_c_message_get_packed_size(&dev->base) + vlen +
		      protobuf_c_message_get_packed_size(&st.base);
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
	uint8_t *p = a->frame;
	at += put_message(p + at, 2, &t->base);   /* GemmResult.timing */
	at += put_message(p + at, 3, &dev->base); /* GemmResult.device */
	at += put_key(p + at, 4, WT_LEN);         /* GemmResult.variant */
	at += wire_varint_put(p + at, vlen);
	memcpy(p + at, variant ? variant : "", vlen);
	at += vlen;
	size_t gemm_len = at - (a->gemm_len_at + 5);
	at += put_message(p + at, 2, &st.base);   /* Response.status */
	if (at - FRAME_HEADER_SIZE > UINT32_MAX || gemm_len >= (1ull << 35))
		return -E2BIG;
	put_varint5(p + a->gemm_len_at, gemm_len);
	frame_header_put(p, (uint32_t)(at - FRAME_HEADER_SIZE));
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
