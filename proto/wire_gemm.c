/* A GEMM request's own decoder (wire_gemm.h). */
#include "wire_gemm.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "wire_split.h"
#include "wire_varint.h"

enum { WT_VARINT = 0, WT_LEN = 2, WT_I32 = 5 };

/* A Request's matrices: its A (dense data, or a sparse A's values and
 * meta), B and C, at most four of them in a message it takes. */
#define MAX_KEPT 4

/* The decode under way: where the pieces come from, from what length a
 * matrix stays in buf (0: never), and the matrices left there so far. */
struct dec {
	ProtobufCAllocator *alloc;
	size_t keep_from;
	ProtobufCBinaryData *kept[MAX_KEPT];
	size_t nkept;
	/* An answer's: where its D's bytes may go (NULL: a copy of their
	 * own), the Response's id once read, and whether the matrix being
	 * read is the GemmResult's D. */
	const struct wire_answer_place *place;
	uint64_t id;
	bool has_id;
	bool in_d;
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

/* A bytes field as protobuf-c copies it: NULL data when empty.  A
 * matrix (a Request's, `matrix` set) of at least keep_from bytes that
 * starts on an element boundary in buf is left there instead, as
 * wire_split_unpack leaves it (wire_split.h). */
static int bytes(struct dec *d, const struct field *f, bool matrix, protobuf_c_boolean *has,
		 ProtobufCBinaryData *out)
{
	if (f->type != WT_LEN)
		return -1;
	out->data = NULL;
	out->len = f->n;
	*has = 1;
	if (f->n == 0)
		return 0;
	if (matrix && d->keep_from && f->n >= d->keep_from &&
	    ((uintptr_t)f->at & (WIRE_SPLIT_ALIGN - 1)) == 0 && d->nkept < MAX_KEPT) {
		out->data = (uint8_t *)(uintptr_t)f->at;
		d->kept[d->nkept++] = out;
		return 0;
	}
	if (d->in_d && d->place && d->has_id &&
	    (out->data = d->place->fn(d->place->ctx, d->id, f->n)) != NULL) {
		memcpy(out->data, f->at, f->n);
		return 0;
	}
	out->data = get(d, f->n);
	if (!out->data)
		return -1;
	memcpy(out->data, f->at, f->n);
	return 0;
}

/* A string field: its bytes and a NUL.  One that holds a NUL byte itself
 * is declined: the daemon refuses those, naming the field, after
 * protobuf-c's decode (wire_check_strings). */
static int string(struct dec *d, const struct field *f, char **out)
{
	if (f->type != WT_LEN || memchr(f->at, 0, f->n) ||
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

/* A field of the message m: 0, or -1 to decline the whole message. */
typedef int (*field_fn)(struct dec *d, void *m, const struct field *f);

/* The fields of the message at buf[0, len) into m, each through `each`. */
static int walk(struct dec *d, const uint8_t *buf, size_t len, void *m, field_fn each)
{
	uint32_t seen = 0;
	struct field f;
	for (size_t pos = 0; pos < len;)
		if (next(buf, len, &pos, &seen, &f) < 0 || each(d, m, &f) < 0)
			return -1;
	return 0;
}

/* A submessage field: its struct (size bytes, initialised from init as
 * protobuf-c's decoder does), hung on *out before its fields are read so
 * that a decline frees what was made. */
static int sub(struct dec *d, const struct field *f, const void *init, size_t size,
	       field_fn each, void **out)
{
	if (f->type != WT_LEN || !(*out = get(d, size)))
		return -1;
	memcpy(*out, init, size);
	return walk(d, f->at, f->n, *out, each);
}

static const Mfma__V1__RegionRef region_ref_init = MFMA__V1__REGION_REF__INIT;
static const Mfma__V1__Matrix matrix_init = MFMA__V1__MATRIX__INIT;
static const Mfma__V1__Sparse24 sparse24_init = MFMA__V1__SPARSE24__INIT;
static const Mfma__V1__Operand operand_init = MFMA__V1__OPERAND__INIT;
static const Mfma__V1__Gemm gemm_init = MFMA__V1__GEMM__INIT;
static const Mfma__V1__Request request_init = MFMA__V1__REQUEST__INIT;

#define SUB(d, f, name, out) sub((d), (f), &name##_init, sizeof(name##_init), name##_field, (void **)(out))

static int region_ref_field(struct dec *d, void *m, const struct field *f)
{
	(void)d;
	Mfma__V1__RegionRef *r = m;
	switch (f->num) {
	case 1: return u64(f, &r->has_region, &r->region);
	case 2: return u64(f, &r->has_offset, &r->offset);
	case 3: return u64(f, &r->has_length, &r->length);
	default: return -1;
	}
}

static int matrix_field(struct dec *d, void *mm, const struct field *f)
{
	Mfma__V1__Matrix *m = mm;
	switch (f->num) {
	case 1: return u32(f, &m->has_rows, &m->rows);
	case 2: return u32(f, &m->has_cols, &m->cols);
	case 3: return ENUM(f, &m->has_dtype, &m->dtype);
	case 4: return bytes(d, f, true, &m->has_data, &m->data);
	case 5: return SUB(d, f, region_ref, &m->region);
	default: return -1;
	}
}

static int sparse24_field(struct dec *d, void *m, const struct field *f)
{
	Mfma__V1__Sparse24 *s = m;
	switch (f->num) {
	case 1: return u32(f, &s->has_rows, &s->rows);
	case 2: return u32(f, &s->has_cols, &s->cols);
	case 3: return ENUM(f, &s->has_dtype, &s->dtype);
	case 4: return bytes(d, f, true, &s->has_values, &s->values);
	case 5: return bytes(d, f, true, &s->has_meta, &s->meta);
	default: return -1;
	}
}

static int operand_field(struct dec *d, void *m, const struct field *f)
{
	Mfma__V1__Operand *o = m;
	/* One member of the oneof: with two, the last wins in protobuf-c,
	 * after freeing the first; that is its to do. */
	if (f->num <= 3 && o->kind_case != MFMA__V1__OPERAND__KIND__NOT_SET)
		return -1;
	switch (f->num) {
	case 1:
		o->kind_case = MFMA__V1__OPERAND__KIND_DENSE;
		return SUB(d, f, matrix, &o->dense);
	case 2:
		o->kind_case = MFMA__V1__OPERAND__KIND_SPARSE;
		return SUB(d, f, sparse24, &o->sparse);
	case 3:
		o->kind_case = MFMA__V1__OPERAND__KIND_WEIGHT;
		return string(d, f, &o->weight);
	case 4: return ENUM(f, &o->has_sparsity, &o->sparsity);
	default: return -1;
	}
}

static int gemm_field(struct dec *d, void *m, const struct field *f)
{
	Mfma__V1__Gemm *g = m;
	uint32_t device;
	switch (f->num) {
	case 1: return SUB(d, f, operand, &g->a);
	case 2: return SUB(d, f, matrix, &g->b);
	case 3: return SUB(d, f, matrix, &g->c);
	case 4: return f32(f, &g->has_alpha, &g->alpha);
	case 5: return f32(f, &g->has_beta, &g->beta);
	case 6: return ENUM(f, &g->has_out_dtype, &g->out_dtype);
	case 7:
		if (u32(f, &g->has_device, &device) < 0)
			return -1;
		g->device = (int32_t)device;
		return 0;
	case 8: return u32(f, &g->has_priority, &g->priority);
	case 9: return u64(f, &g->has_timeout_us, &g->timeout_us);
	case 10: return SUB(d, f, region_ref, &g->d);
	default: return -1;
	}
}

static int request_field(struct dec *d, void *m, const struct field *f)
{
	Mfma__V1__Request *r = m;
	switch (f->num) {
	case 1: return u64(f, &r->has_id, &r->id);
	case 2:
		r->body_case = MFMA__V1__REQUEST__BODY_GEMM;
		return SUB(d, f, gemm, &r->gemm);
	case 15: return bytes(d, f, false, &r->has_pad, &r->pad);
	default: return -1;
	}
}

Mfma__V1__Request *wire_gemm_decode(const uint8_t *buf, size_t len, size_t keep_from,
				    size_t *in_place, ProtobufCAllocator *alloc)
{
	struct dec d = { .alloc = alloc, .keep_from = keep_from };
	if (in_place)
		*in_place = 0;
	Mfma__V1__Request *r = get(&d, sizeof(*r));
	if (!r)
		return NULL;
	*r = request_init;
	if (buf && walk(&d, buf, len, r, request_field) == 0 &&
	    r->body_case == MFMA__V1__REQUEST__BODY_GEMM) {
		if (in_place)
			*in_place = d.nkept;
		return r;
	}
	/* What was made so far is a valid message once the matrices left in
	 * buf are let go: protobuf-c frees it. */
	for (size_t i = 0; i < d.nkept; i++)
		*d.kept[i] = (ProtobufCBinaryData){ 0 };
	protobuf_c_message_free_unpacked(&r->base, alloc);
	return NULL;
}

/* ---- the answer ---- */

static const Mfma__V1__Status status_init = MFMA__V1__STATUS__INIT;
static const Mfma__V1__Timing timing_init = MFMA__V1__TIMING__INIT;
static const Mfma__V1__DeviceRef device_ref_init = MFMA__V1__DEVICE_REF__INIT;
static const Mfma__V1__GemmResult gemm_result_init = MFMA__V1__GEMM_RESULT__INIT;
static const Mfma__V1__Response response_init = MFMA__V1__RESPONSE__INIT;

static int status_field(struct dec *d, void *m, const struct field *f)
{
	Mfma__V1__Status *s = m;
	switch (f->num) {
	case 1: return ENUM(f, &s->has_code, &s->code);
	case 2: return string(d, f, &s->message);
	default: return -1;
	}
}

static int timing_field(struct dec *d, void *m, const struct field *f)
{
	(void)d;
	Mfma__V1__Timing *t = m;
	switch (f->num) {
	case 1: return u64(f, &t->has_queue_ns, &t->queue_ns);
	case 2: return u64(f, &t->has_h2d_ns, &t->h2d_ns);
	case 3: return u64(f, &t->has_kernel_ns, &t->kernel_ns);
	case 4: return u64(f, &t->has_d2h_ns, &t->d2h_ns);
	case 5: return u64(f, &t->has_total_ns, &t->total_ns);
	case 6: return u64(f, &t->has_prep_ns, &t->prep_ns);
	case 7: return u32(f, &t->has_batch_requests, &t->batch_requests);
	case 8: return u32(f, &t->has_batch_columns, &t->batch_columns);
	default: return -1;
	}
}

static int device_ref_field(struct dec *d, void *m, const struct field *f)
{
	Mfma__V1__DeviceRef *r = m;
	switch (f->num) {
	case 1: return u32(f, &r->has_index, &r->index);
	case 2: return string(d, f, &r->backend);
	case 3: return string(d, f, &r->arch);
	default: return -1;
	}
}

static int gemm_result_field(struct dec *d, void *m, const struct field *f)
{
	Mfma__V1__GemmResult *g = m;
	switch (f->num) {
	case 1: {
		d->in_d = true;
		int rc = SUB(d, f, matrix, &g->d);
		d->in_d = false;
		return rc;
	}
	case 2: return SUB(d, f, timing, &g->timing);
	case 3: return SUB(d, f, device_ref, &g->device);
	case 4: return string(d, f, &g->variant);
	default: return -1;
	}
}

static int response_field(struct dec *d, void *m, const struct field *f)
{
	Mfma__V1__Response *r = m;
	switch (f->num) {
	case 1:
		if (u64(f, &r->has_id, &r->id) < 0)
			return -1;
		d->id = r->id;
		d->has_id = true;
		return 0;
	case 2: return SUB(d, f, status, &r->status);
	case 3:
		r->body_case = MFMA__V1__RESPONSE__BODY_GEMM;
		return SUB(d, f, gemm_result, &r->gemm);
	default: return -1;
	}
}

Mfma__V1__Response *wire_gemm_answer_decode(const uint8_t *buf, size_t len,
					    ProtobufCAllocator *alloc,
					    const struct wire_answer_place *place)
{
	struct dec d = { .alloc = alloc, .place = alloc ? place : NULL };
	Mfma__V1__Response *r = get(&d, sizeof(*r));
	if (!r)
		return NULL;
	*r = response_init;
	if (buf && walk(&d, buf, len, r, response_field) == 0)
		return r;
	protobuf_c_message_free_unpacked(&r->base, alloc);
	return NULL;
}
