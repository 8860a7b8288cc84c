#include "request_msg.h"

#include <stdlib.h>
#include <string.h>

#include "frame_arena.h"
#include "msg_arena.h"
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
