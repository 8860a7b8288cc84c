/* A GEMM request: admission on the loop (validation, limits, the choice
 * of device), the work on the device's worker (the A operand's content
 * checks, the backend's GEMM, the answer's encoding) and the answer on
 * the loop. */
#ifndef MFMAD_GEMM_H
#define MFMAD_GEMM_H

#include <stdint.h>

#include "daemon.h"
#include "mfma.pb-c.h"
#include "reply.h"
#include "request_msg.h"

/* Takes the decoded request and the frame its matrices are in (m is left
 * empty: the request frees both when it is done).  decode_ns: time spent
 * decoding the frame off the loop, reported in the answer's prep time. */
void gemm_handle(struct daemon *d, const struct request *r, struct request_msg *m,
		 uint64_t decode_ns);

#endif
