/* The arena request frames are read into (limits.pinned_reads_mb): one
 * block of host memory, mapped at start, that every GPU registers once
 * with its runtime when it opens.  A connection's read buffers come from
 * it (frame_mem, proto/frame.h), so a GEMM request's B and C, left in the
 * frame by the decode, lie in pinned memory the device copies straight
 * from: DMA for one request, and a batch's join kernel reading every
 * request's part across the bus in one launch, with no host copy through
 * a staging buffer on the device's worker.  Buffers that do not fit come
 * from malloc, as without the arena; nothing waits for room.
 *
 * Threading: buffers are carved on the loop or a reader thread and freed
 * wherever a request ends (frame_arena.h).  Lifetime: opened before the
 * devices, closed after them; its memory goes with the last frame. */
#ifndef MFMAD_READ_ARENA_H
#define MFMAD_READ_ARENA_H

#include "daemon.h"
#include "devices.h"
#include "frame.h"

/* After the devices are probed, before they open: maps the arena as
 * configured (none when limits.pinned_reads_mb is 0, or when no device
 * registers host memory): 0, or a negative errno with err saying why. */
int read_arena_open(struct daemon *d, char *err, size_t errlen);
void read_arena_close(struct daemon *d);

/* What a connection's frame reader takes its buffers from; NULL without
 * an arena. */
const struct frame_mem *read_arena_mem(const struct daemon *d);

/* Worker thread, right after the device opens and before it closes: the
 * device registers the arena with its runtime (a device without
 * host_register, the CPU, has nothing to do), and lets it go.  A device
 * that cannot register it copies from it through its staging buffers, as
 * from malloc'ed frames: err says why, for the log. */
int read_arena_register(struct device *v, char *err, size_t errlen);
void read_arena_unregister(struct device *v);

#endif
