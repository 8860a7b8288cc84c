/* A GEMM request's own decoder (wire_gemm.h). */
#include "wire_gemm.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "wire_varint.h"

enum { WT_VARINT = 0, WT_LEN = 2, WT_I32 = 5 };

/* The decode under way: where the pieces come from and the longest bytes
 * field it copies. */
struct dec {
	ProtobufCAllocator *alloc;
	size_t max_bytes;
};

/* One field of a message: its number, wire type and value (a varint, the
 * four bytes of a fixed32, or a length-delimited slice). */
struct field {
	uint32_t num;
	uint32_t type;
	uint64_t v;
	const uint8_t *at;
	size_t n;
};

/* The schema's messages have fields 1 to 15: a bit each. */
#define MAX_FIELD 15

/* The next field of the message buf[0, len) from *pos into f, once each:
 * -1 for a field out of range, seen before (in *seen), or malformed. */
static int next(const uint8_t *buf, size_t len, size_t *pos, uint32_t *seen, struct field *f)
{
	uint64_t key;
	if (wire_varint_get(buf, len, pos, &key) < 0 || key >> 3 == 0 || key >> 3 > MAX_FIELD)
		return -1;
	f->num = (uint32_t)(key >> 3);
	f->type = (uint32_t)(key & 7);
	if (*seen & (1u << f->num))
		return -1;
	*seen |= 1u << f->num;
	switch (f->type) {
	case WT_VARINT:
		return wire_varint_get(buf, len, pos, &f->v);
	case WT_I32:
		if (len - *pos < 4)
			return -1;
		f->v = (uint64_t)buf[*pos] | (uint64_t)buf[*pos + 1] << 8 |
		       (uint64_t)buf[*pos + 2] << 16 | (uint64_t)buf[*pos + 3] << 24;
		*pos += 4;
		return 0;
	case WT_LEN:
		if (wire_varint_get(buf, len, pos, &f->v) < 0 || f->v > len - *pos)
			return -1;
		f->at = buf + *pos;
		f->n = (size_t)f->v;
		*pos += f->n;
		return 0;
	default:
		return -1;
	}
}

static void *get(const struct dec *d, size_t n)
{
	return d->alloc ? d->alloc->alloc(d->alloc->allocator_data, n) : malloc(n);
}

/* A submessage's struct, initialised as protobuf-c's decoder does. */
#define NEW(d, type, init, out)                                        \
	do {                                                           \
		(out) = get((d), sizeof(type));                        \
		if (out)                                               \
			*(out) = (type)init;                           \
	} while (0)

/* A bytes field as protobuf-c copies it: NULL data when empty. */
static int bytes(const struct dec *d, const struct field *f, protobuf_c_boolean *has,
		 ProtobufCBinaryData *out)
{
	if (f->type != WT_LEN || f->n > d->max_bytes)
		return -1;
	out->data = NULL;
	out->len = f->n;
	*has = 1;
	if (f->n == 0)
		return 0;
	out->data = get(d, f->n);
	if (!out->data)
		return -1;
	memcpy(out->data, f->at, f->n);
	return 0;
}

/* A string field: its bytes and a NUL.  One that holds a NUL byte itself
 * is declined: the daemon refuses those, naming the field, after
 * protobuf-c's decode (wire_check_strings). */
static int string(const struct dec *d, const struct field *f, char **out)
{
	if (f->type != WT_LEN || f->n > d->max_bytes || memchr(f->at, 0, f->n) ||
	    !(*out = get(d, f->n + 1)))
		return -1;
	memcpy(*out, f->at, f->n);
	(*out)[f->n] = '\0';
	return 0;
}

/* Scalars: protobuf-c keeps a 32-bit field's low 32 bits. */
static int u32(const struct field *f, protobuf_c_boolean *has, uint32_t *out)
{
	if (f->type != WT_VARINT)
		return -1;
	*out = (uint32_t)f->v;
	*has = 1;
	return 0;
}

static int u64(const struct field *f, protobuf_c_boolean *has, uint64_t *out)
{
	if (f->type != WT_VARINT)
		return -1;
	*out = f->v;
	*has = 1;
	return 0;
}

static int f32(const struct field *f, protobuf_c_boolean *has, float *out)
{
	if (f->type != WT_I32)
		return -1;
	uint32_t bits = (uint32_t)f->v;
	memcpy(out, &bits, sizeof(*out));
	*has = 1;
	return 0;
}

/* An enum: protobuf-c stores the value sent, known to the schema or not. */
#define ENUM(f, has, out)                                                  \
	((f)->type != WT_VARINT ? -1 : (*(has) = 1, *(out) = (__typeof__(*(out)))(uint32_t)(f)->v, 0))

static int region_ref(const struct dec *d, const struct field *at, Mfma__V1__RegionRef **out)
{
	if (at->type != WT_LEN)
		return -1;
	NEW(d, Mfma__V1__RegionRef, MFMA__V1__REGION_REF__INIT, *out);
	Mfma__V1__RegionRef *r = *out;
	if (!r)
		return -1;
	uint32_t seen = 0;
	struct field f;
	for (size_t pos = 0; pos < at->n;) {
		if (next(at->at, at->n, &pos, &seen, &f) < 0)
			return -1;
		int rc = f.num == 1   ? u64(&f, &r->has_region, &r->region)
			 : f.num == 2 ? u64(&f, &r->has_offset, &r->offset)
			 : f.num == 3 ? u64(&f, &r->has_length, &r->length)
				      : -1;
		if (rc < 0)
			return -1;
	}
	return 0;
}

static int matrix(const struct dec *d, const struct field *at, Mfma__V1__Matrix **out)
{
	if (at->type != WT_LEN)
		return -1;
	NEW(d, Mfma__V1__Matrix, MFMA__V1__MATRIX__INIT, *out);
	Mfma__V1__Matrix *m = *out;
	if (!m)
		return -1;
	uint32_t seen = 0;
	struct field f;
	for (size_t pos = 0; pos < at->n;) {
		if (next(at->at, at->n, &pos, &seen, &f) < 0)
			return -1;
		int rc = f.num == 1   ? u32(&f, &m->has_rows, &m->rows)
			 : f.num == 2 ? u32(&f, &m->has_cols, &m->cols)
			 : f.num == 3 ? ENUM(&f, &m->has_dtype, &m->dtype)
			 : f.num == 4 ? bytes(d, &f, &m->has_data, &m->data)
			 : f.num == 5 ? region_ref(d, &f, &m->region)
				      : -1;
		if (rc < 0)
			return -1;
	}
	return 0;
}

static int sparse24(const struct dec *d, const struct field *at, Mfma__V1__Sparse24 **out)
{
	if (at->type != WT_LEN)
		return -1;
	NEW(d, Mfma__V1__Sparse24, MFMA__V1__SPARSE24__INIT, *out);
	Mfma__V1__Sparse24 *s = *out;
	if (!s)
		return -1;
	uint32_t seen = 0;
	struct field f;
	for (size_t pos = 0; pos < at->n;) {
		if (next(at->at, at->n, &pos, &seen, &f) < 0)
			return -1;
		int rc = f.num == 1   ? u32(&f, &s->has_rows, &s->rows)
			 : f.num == 2 ? u32(&f, &s->has_cols, &s->cols)
			 : f.num == 3 ? ENUM(&f, &s->has_dtype, &s->dtype)
			 : f.num == 4 ? bytes(d, &f, &s->has_values, &s->values)
			 : f.num == 5 ? bytes(d, &f, &s->has_meta, &s->meta)
				      : -1;
		if (rc < 0)
			return -1;
	}
	return 0;
}

static int operand(const struct dec *d, const struct field *at, Mfma__V1__Operand **out)
{
	if (at->type != WT_LEN)
		return -1;
	NEW(d, Mfma__V1__Operand, MFMA__V1__OPERAND__INIT, *out);
	Mfma__V1__Operand *o = *out;
	if (!o)
		return -1;
	uint32_t seen = 0;
	struct field f;
	for (size_t pos = 0; pos < at->n;) {
		if (next(at->at, at->n, &pos, &seen, &f) < 0)
			return -1;
		/* One member of the oneof: with two, the last wins in
		 * protobuf-c, after freeing the first; that is its to do. */
		if (f.num <= 3 && o->kind_case != MFMA__V1__OPERAND__KIND__NOT_SET)
			return -1;
		int rc;
		switch (f.num) {
		case 1:
			o->kind_case = MFMA__V1__OPERAND__KIND_DENSE;
			rc = matrix(d, &f, &o->dense);
			break;
		case 2:
			o->kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
			rc = sparse24(d, &f, &o->sparse);
			break;
		case 3:
			o->kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
			rc = string(d, &f, &o->weight);
			break;
		case 4: rc = ENUM(&f, &o->has_sparsity, &o->sparsity); break;
		default: rc = -1; break;
		}
		if (rc < 0)
			return -1;
	}
	return 0;
}

static int gemm(const struct dec *d, const struct field *at, Mfma__V1__Gemm **out)
{
	if (at->type != WT_LEN)
		return -1;
	NEW(d, Mfma__V1__Gemm, MFMA__V1__GEMM__INIT, *out);
	Mfma__V1__Gemm *g = *out;
	if (!g)
		return -1;
	uint32_t seen = 0;
	struct field f;
	for (size_t pos = 0; pos < at->n;) {
		if (next(at->at, at->n, &pos, &seen, &f) < 0)
			return -1;
		uint32_t device = (uint32_t)g->device;
		int rc;
		switch (f.num) {
		case 1: rc = operand(d, &f, &g->a); break;
		case 2: rc = matrix(d, &f, &g->b); break;
		case 3: rc = matrix(d, &f, &g->c); break;
		case 4: rc = f32(&f, &g->has_alpha, &g->alpha); break;
		case 5: rc = f32(&f, &g->has_beta, &g->beta); break;
		case 6: rc = ENUM(&f, &g->has_out_dtype, &g->out_dtype); break;
		case 7:
			rc = u32(&f, &g->has_device, &device);
			g->device = (int32_t)device;
			break;
		case 8: rc = u32(&f, &g->has_priority, &g->priority); break;
		case 9: rc = u64(&f, &g->has_timeout_us, &g->timeout_us); break;
		case 10: rc = region_ref(d, &f, &g->d); break;
		default: rc = -1; break;
		}
		if (rc < 0)
			return -1;
	}
	return 0;
}

Mfma__V1__Request *wire_gemm_decode(const uint8_t *buf, size_t len, size_t max_bytes,
				    ProtobufCAllocator *alloc)
{
	const struct dec d = { .alloc = alloc, .max_bytes = max_bytes };
	Mfma__V1__Request *r;
	NEW(&d, Mfma__V1__Request, MFMA__V1__REQUEST__INIT, r);
	if (!r || !buf)
		goto fail;
	uint32_t seen = 0;
	struct field f;
	for (size_t pos = 0; pos < len;) {
		if (next(buf, len, &pos, &seen, &f) < 0)
			goto fail;
		int rc;
		switch (f.num) {
		case 1: rc = u64(&f, &r->has_id, &r->id); break;
		case 15: rc = bytes(&d, &f, &r->has_pad, &r->pad); break;
		case 2:
			r->body_case = MFMA__V1__REQUEST__BODY_GEMM;
			rc = gemm(&d, &f, &r->gemm);
			break;
		default: rc = -1; break;
		}
		if (rc < 0)
			goto fail;
	}
	if (r->body_case == MFMA__V1__REQUEST__BODY_GEMM)
		return r;
fail:
	/* What was made so far is a valid message: protobuf-c frees it. */
	if (r)
		protobuf_c_message_free_unpacked(&r->base, alloc);
	return NULL;
}
