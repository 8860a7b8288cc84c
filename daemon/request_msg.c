#include "request_msg.h"

#include <stdlib.h>
#include <string.h>

#include "frame_arena.h"
#include "msg_arena.h"
#include "wire_check.h"
#include "wire_gemm.h"
#include "wire_split.h"

static size_t large(const ProtobufCBinaryData *b, protobuf_c_boolean has)
{
	return has && b->len >= WIRE_SPLIT_MIN_BYTES;
}

/* The GEMM's matrices on wire_split_gemm_paths that are large. */
static size_t count_large(const Mfma__V1__Request *r)
{
	if (!r || r->body_case != MFMA__V1__REQUEST__BODY_GEMM || !r->gemm)
		return 0;
	const Mfma__V1__Gemm *g = r->gemm;
	size_t n = 0;
	if (g->b)
		n += large(&g->b->data, g->b->has_data);
	if (g->c)
		n += large(&g->c->data, g->c->has_data);
	if (g->a && g->a->kind_case == MFMA__V1__OPERAND__KIND_DENSE && g->a->dense)
		n += large(&g->a->dense->data, g->a->dense->has_data);
	if (g->a && g->a->kind_case == MFMA__V1__OPERAND__KIND_SPARSE && g->a->sparse)
		n += large(&g->a->sparse->values, g->a->sparse->has_values) +
		     large(&g->a->sparse->meta, g->a->sparse->has_meta);
	return n;
}

void request_msg_decode(struct request_msg *m, const uint8_t *payload, size_t len, uint8_t *frame,
			size_t cap)
{
	*m = (struct request_msg){ .frame = frame, .frame_cap = cap, .payload = payload, .len = len };
	/* A GEMM in the plain form a client sends: its own decoder, into an
	 * arena (proto/wire_gemm.h), its large matrices left in the frame
	 * where there is one, as the split below would leave them. */
	m->arena = msg_arena_new(MSG_ARENA_REQUEST_BYTES);
	if (m->arena) {
		ProtobufCAllocator arena = msg_arena_allocator(m->arena);
		m->req = wire_gemm_decode(payload, len, frame ? WIRE_SPLIT_MIN_BYTES : 0, &m->in_place,
					  &arena);
		if (!m->req) {
			msg_arena_free(m->arena);
			m->arena = NULL;
		}
	}
	/* Protobuf-c's decode costs some hundred bytes a field, whatever the
	 * field's own size: counted first, so that a frame of tiny fields is
	 * refused instead of taking fifty times its size. */
	if (!m->req && wire_count_fields(&mfma__v1__request__descriptor, payload, len,
					 REQUEST_FIELDS_MAX) > REQUEST_FIELDS_MAX) {
		m->too_many_fields = true;
		return;
	}
	/* Everything else as protobuf-c decodes it, with malloc (the registry
	 * keeps a LoadWeight's message past the frame and frees it field by
	 * field); with a frame, a GEMM's large matrices left in it. */
	if (!m->req && frame)
		m->req = (Mfma__V1__Request *)wire_split_unpack(
			&mfma__v1__request__descriptor, wire_split_gemm_paths, wire_split_gemm_npaths,
			WIRE_SPLIT_MIN_BYTES, payload, len, &m->in_place);
	else if (!m->req)
		m->req = mfma__v1__request__unpack(NULL, len, payload);
	m->large = count_large(m->req);
}

/* Bytes of msg (and its sub-messages) held outside [lo, hi): bytes
 * fields the decode copied, strings, unknown fields. */
static size_t copied_bytes(const ProtobufCMessage *msg, const uint8_t *lo, const uint8_t *hi)
{
	size_t n = 0;
	for (unsigned i = 0; i < msg->n_unknown_fields; i++)
		n += msg->unknown_fields[i].len;
	const ProtobufCMessageDescriptor *desc = msg->descriptor;
	for (unsigned f = 0; f < desc->n_fields; f++) {
		const ProtobufCFieldDescriptor *fd = &desc->fields[f];
		if (fd->type != PROTOBUF_C_TYPE_BYTES && fd->type != PROTOBUF_C_TYPE_STRING &&
		    fd->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		const char *base = (const char *)msg;
		if ((fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    *(const uint32_t *)(base + fd->quantifier_offset) != fd->id)
			continue;
		if (fd->type == PROTOBUF_C_TYPE_BYTES && fd->label == PROTOBUF_C_LABEL_OPTIONAL &&
		    !(fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    !*(const protobuf_c_boolean *)(base + fd->quantifier_offset))
			continue;
		size_t count = 1;
		const char *at = base + fd->offset;
		size_t stride = 0;
		if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
			count = *(const size_t *)(base + fd->quantifier_offset);
			at = *(const char *const *)at;
			stride = fd->type == PROTOBUF_C_TYPE_BYTES ? sizeof(ProtobufCBinaryData)
								   : sizeof(void *);
		}
		for (size_t i = 0; i < count && at; i++, at += stride) {
			if (fd->type == PROTOBUF_C_TYPE_BYTES) {
				const ProtobufCBinaryData *b = (const ProtobufCBinaryData *)at;
				if (b->data && !(b->data >= lo && b->data < hi))
					n += b->len;
			} else if (fd->type == PROTOBUF_C_TYPE_STRING) {
				const char *s = *(const char *const *)at;
				if (s && s != fd->default_value)
					n += strlen(s) + 1;
			} else if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
				const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)at;
				if (sub)
					n += sub->descriptor->sizeof_message + copied_bytes(sub, lo, hi);
			}
		}
	}
	return n;
}

size_t request_msg_held_bytes(const struct request_msg *m)
{
	if (!m->frame)
		return 0;
	/* The GEMM decoder's copies are all in its arena: no walk. */
	if (m->arena)
		return m->frame_cap + msg_arena_bytes(m->arena);
	return m->frame_cap + (m->req ? copied_bytes(&m->req->base, m->frame, m->frame + m->frame_cap)
				      : 0);
}

void request_msg_free(struct request_msg *m)
{
	if (!m)
		return;
	if (m->arena)
		/* The message and every field the decoder copied: no walk. */
		msg_arena_free(m->arena);
	else if (m->frame)
		wire_split_free(m->req ? &m->req->base : NULL, wire_split_gemm_paths,
				wire_split_gemm_npaths, m->payload, m->len);
	else if (m->req)
		mfma__v1__request__free_unpacked(m->req, NULL);
	frame_arena_free(m->frame);
	memset(m, 0, sizeof(*m));
}
