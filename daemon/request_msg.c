#include "request_msg.h"

#include <stdlib.h>
#include <string.h>

#include "wire_split.h"

void request_msg_decode(struct request_msg *m, const uint8_t *payload, size_t len, uint8_t *frame,
			size_t cap)
{
	*m = (struct request_msg){ .frame = frame, .frame_cap = cap, .payload = payload, .len = len };
	if (frame)
		m->req = (Mfma__V1__Request *)wire_split_unpack(
			&mfma__v1__request__descriptor, wire_split_gemm_paths, wire_split_gemm_npaths,
			WIRE_SPLIT_MIN_BYTES, payload, len, NULL);
	else
		m->req = mfma__v1__request__unpack(NULL, len, payload);
}

void request_msg_free(struct request_msg *m)
{
	if (!m)
		return;
	if (m->frame)
		wire_split_free(m->req ? &m->req->base : NULL, wire_split_gemm_paths,
				wire_split_gemm_npaths, m->payload, m->len);
	else if (m->req)
		mfma__v1__request__free_unpacked(m->req, NULL);
	free(m->frame);
	memset(m, 0, sizeof(*m));
}
