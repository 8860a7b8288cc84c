/* Shared-memory regions: a client on the Unix socket registers a sealed
 * memfd once (its descriptor travels with the RegisterRegion frame); the
 * daemon maps it, registers it with each device's runtime
 * (backend_ops.host_register) and answers with an id.  A GEMM then names
 * (region, offset, length) for B, C or D instead of carrying the bytes.
 *
 * A region belongs to its connection: only that connection can name it,
 * and it goes when the connection closes or the client unregisters it.
 * It is reference counted: the registration holds one reference, every
 * request that uses it one more, so the mapping (and the device
 * registration) stays until the last request using it has finished; an
 * UnregisterRegion is answered only then.
 *
 * Loop thread, except that the device jobs run on the workers. */
#ifndef MFMAD_REGIONS_H
#define MFMAD_REGIONS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "mfma.pb-c.h"
#include "reply.h"

struct conn;
struct region;

/* RegisterRegion: takes the descriptor that came with the frame (always,
 * so that a refused registration leaves none behind), checks, maps and
 * registers it, and answers. */
void regions_handle_register(struct daemon *d, const struct request *r,
			     const Mfma__V1__RegisterRegion *m);
/* UnregisterRegion: answered once no request uses the region. */
void regions_handle_unregister(struct daemon *d, const struct request *r,
			       const Mfma__V1__UnregisterRegion *m);

/* The bytes a GEMM names: ref must name a region of connection c and
 * [offset, offset + need) must lie inside it (ref->length, when given,
 * must be need).  On success *rg holds a reference (regions_unref) and
 * *p points at the bytes.  field names the operand in the error ("b"). */
int regions_use(struct conn *c, const Mfma__V1__RegionRef *ref, uint64_t need,
		const char *field, struct region **rg, void **p, char *err, size_t errlen);
/* Whether [a, a + alen) of region ra and [b, b + blen) of rb overlap: the
 * same bytes of one file (two regions of one memfd share its pages). */
bool regions_overlap(const struct region *ra, const void *a, size_t alen, const struct region *rb,
		     const void *b, size_t blen);
uint64_t regions_id(const struct region *rg);
void regions_unref(struct daemon *d, struct region *rg);

/* The connection is closing: its regions go once unused. */
void regions_conn_closed(struct daemon *d, struct conn *c);

#endif
