/* The arena request frames are read into (read_arena.h). */
#include "read_arena.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame_arena.h"
#include "wire_split.h"

static void *carve(void *arg, size_t len)
{
	/* Offset 0 on a grain: a frame read from its first byte keeps the
	 * 16-byte alignment the client gave its matrices (Request.pad). */
	return frame_arena_alloc(arg, len, 0);
}

/* A testing aid: the arena without a GPU to register it, so that the
 * daemon's handling of its frames runs under the sanitizers where there
 * is none.  "1" or unset. */
#define CPU_READS_ENV "MFMAD_TEST_CPU_PINNED_READS"

/* Whether some device will register the arena: otherwise it buys nothing
 * (the CPU reads any memory alike), and its pages, once touched, would
 * stay resident where the heap gives them back. */
static bool wanted(const struct daemon *d)
{
	const char *e = getenv(CPU_READS_ENV);
	if (e && strcmp(e, "1") == 0)
		return true;
	for (int i = 0; i < d->ndev; i++)
		if (d->dev[i].ops->host_register)
			return true;
	return false;
}

int read_arena_open(struct daemon *d, char *err, size_t errlen)
{
	d->read_arena = NULL;
	if (d->cfg.pinned_read_bytes == 0 || !wanted(d))
		return 0;
	int rc = frame_arena_create((size_t)d->cfg.pinned_read_bytes, &d->read_arena);
	if (rc < 0) {
		snprintf(err, errlen,
			 "cannot map %" PRIu64 " MiB for request frames (%s); "
			 "limits.pinned_reads_mb = 0 turns them off",
			 d->cfg.pinned_read_bytes >> 20, strerror(-rc));
		return rc;
	}
	/* Smaller buffers hold no matrix the decode leaves in the frame. */
	d->read_mem = (struct frame_mem){ .alloc = carve, .free = frame_arena_free,
					  .owns = frame_arena_owns, .cut = frame_arena_cut,
					  .arg = d->read_arena, .min = WIRE_SPLIT_MIN_BYTES };
	return 0;
}

void read_arena_close(struct daemon *d)
{
	frame_arena_close(d->read_arena);
	d->read_arena = NULL;
}

const struct frame_mem *read_arena_mem(const struct daemon *d)
{
	return d->read_arena ? &d->read_mem : NULL;
}

int read_arena_register(struct device *v, char *err, size_t errlen)
{
	struct frame_arena *a = v->d->read_arena;
	v->reads_handle = NULL;
	if (!a || !v->ops->host_register || v->open_rc < 0)
		return 0;
	return v->ops->host_register(v->bdev, frame_arena_base(a), frame_arena_bytes(a),
				     BACKEND_HOST_FRAMES, &v->reads_handle, err, errlen);
}

void read_arena_unregister(struct device *v)
{
	if (v->reads_handle)
		v->ops->host_unregister(v->bdev, v->reads_handle);
	v->reads_handle = NULL;
}
