/* Answer frames carved from arenas of anonymous memory (frame_arena.h).
 *
 * The bookkeeping lives outside the arena, so that what a device copies
 * into the arena can never corrupt it: the free extents in address order
 * (first fit; a freed block merges with its neighbours), and for each
 * grain that starts a block handed out, the block's length.  One mutex
 * per arena: a device's worker carves while the loop and the post thread
 * free, a few times per answer, never for long.
 *
 * Which allocator owns a frame is told by address: a table of the live
 * arenas' ranges, read under a reader lock (only creating and destroying
 * an arena write it).  The lock matters: a frame's range is looked up
 * while another arena may be going away, and its memory reused by malloc
 * for the very pointer being freed; the table is updated before that
 * memory is unmapped.  Without arenas (the CPU backend) a free is a plain
 * free() after one atomic load. */
#include "frame_arena.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* A free extent, in grains. */
struct extent {
	uint32_t at, len;
};

struct frame_arena {
	unsigned char *base;
	size_t bytes;
	uint32_t grains;
	pthread_mutex_t mu;
	/* Free extents by address, never adjacent (they merge); at most one
	 * per two grains. */
	struct extent *ext;
	size_t next;
	/* blk[g]: the length in grains of the block handed out at grain g,
	 * 0 where none starts. */
	uint32_t *blk;
	size_t used_grains, frames;
	bool closed;
};

static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct frame_arena *table[FRAME_ARENA_MAX];
static _Atomic unsigned table_count;

static size_t grains_of(size_t bytes)
{
	return (bytes + FRAME_ARENA_GRAIN - 1) / FRAME_ARENA_GRAIN;
}

/* The arena whose range holds p, or NULL. */
static struct frame_arena *owner_of(const void *p)
{
	if (!p || atomic_load_explicit(&table_count, memory_order_acquire) == 0)
		return NULL;
	uintptr_t a = (uintptr_t)p;
	struct frame_arena *found = NULL;
	pthread_rwlock_rdlock(&table_lock);
	for (size_t i = 0; i < FRAME_ARENA_MAX && !found; i++) {
		struct frame_arena *t = table[i];
		if (t && a >= (uintptr_t)t->base && a - (uintptr_t)t->base < t->bytes)
			found = t;
	}
	pthread_rwlock_unlock(&table_lock);
	return found;
}

static void destroy(struct frame_arena *a)
{
	pthread_rwlock_wrlock(&table_lock);
	for (size_t i = 0; i < FRAME_ARENA_MAX; i++)
		if (table[i] == a) {
			table[i] = NULL;
			atomic_fetch_sub_explicit(&table_count, 1, memory_order_release);
		}
	pthread_rwlock_unlock(&table_lock);
	/* Out of the table first: once unmapped, malloc may hand these
	 * addresses out as heap frames. */
	if (a->base)
		munmap(a->base, a->bytes);
	pthread_mutex_destroy(&a->mu);
	free(a->ext);
	free(a->blk);
	free(a);
}

int frame_arena_create(size_t len, struct frame_arena **out)
{
	*out = NULL;
	if (len == 0 || len > FRAME_ARENA_MAX_BYTES)
		return -EINVAL;
	struct frame_arena *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	size_t grains = grains_of(len);
	a->grains = (uint32_t)grains;
	a->bytes = grains * FRAME_ARENA_GRAIN;
	pthread_mutex_init(&a->mu, NULL);
	a->ext = malloc((grains / 2 + 1) * sizeof(*a->ext));
	a->blk = calloc(grains, sizeof(*a->blk));
	void *m = MAP_FAILED;
	if (a->ext && a->blk)
		m = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		destroy(a);
		return -ENOMEM;
	}
	a->base = m;
	a->ext[0] = (struct extent){ 0, a->grains };
	a->next = 1;
	int rc = -ENOSPC;
	pthread_rwlock_wrlock(&table_lock);
	for (size_t i = 0; i < FRAME_ARENA_MAX; i++)
		if (!table[i]) {
			table[i] = a;
			atomic_fetch_add_explicit(&table_count, 1, memory_order_release);
			rc = 0;
			break;
		}
	pthread_rwlock_unlock(&table_lock);
	if (rc < 0) {
		destroy(a);
		return rc;
	}
	*out = a;
	return 0;
}

void *frame_arena_base(const struct frame_arena *a)
{
	return a->base;
}

size_t frame_arena_bytes(const struct frame_arena *a)
{
	return a->bytes;
}

void frame_arena_usage(struct frame_arena *a, struct frame_arena_usage *u)
{
	pthread_mutex_lock(&a->mu);
	*u = (struct frame_arena_usage){ .bytes = a->bytes,
					 .used = a->used_grains * FRAME_ARENA_GRAIN,
					 .frames = a->frames,
					 .extents = a->next };
	for (size_t i = 0; i < a->next; i++)
		if (a->ext[i].len * (size_t)FRAME_ARENA_GRAIN > u->largest)
			u->largest = a->ext[i].len * (size_t)FRAME_ARENA_GRAIN;
	pthread_mutex_unlock(&a->mu);
}

void *frame_arena_alloc(struct frame_arena *a, size_t len, size_t at)
{
	if (!a || len == 0 || at >= len || len > a->bytes)
		return NULL;
	/* The base and every block are grain-aligned, and a grain is a
	 * multiple of the alignment: the pad is the same for every block. */
	size_t pad = (FRAME_ARENA_ALIGN - at % FRAME_ARENA_ALIGN) % FRAME_ARENA_ALIGN;
	size_t need = grains_of(pad + len);
	void *p = NULL;
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < a->next && !a->closed; i++) {
		struct extent *e = &a->ext[i];
		if (e->len < need)
			continue;
		uint32_t g = e->at;
		a->blk[g] = (uint32_t)need;
		e->at += (uint32_t)need;
		e->len -= (uint32_t)need;
		if (e->len == 0) {
			memmove(e, e + 1, (a->next - i - 1) * sizeof(*e));
			a->next--;
		}
		a->used_grains += need;
		a->frames++;
		p = a->base + (size_t)g * FRAME_ARENA_GRAIN + pad;
		break;
	}
	pthread_mutex_unlock(&a->mu);
	return p;
}

/* Under the mutex: block g's grains back into the free extents. */
static void give_back(struct frame_arena *a, uint32_t g)
{
	uint32_t len = a->blk[g];
	if (len == 0)
		abort(); /* not a frame of this arena, or freed twice */
	a->blk[g] = 0;
	a->used_grains -= len;
	a->frames--;
	/* The first extent after the block. */
	size_t lo = 0, hi = a->next;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->ext[mid].at < g)
			lo = mid + 1;
		else
			hi = mid;
	}
	bool joins_prev = lo > 0 && a->ext[lo - 1].at + a->ext[lo - 1].len == g;
	bool joins_next = lo < a->next && g + len == a->ext[lo].at;
	if (joins_prev && joins_next) {
		a->ext[lo - 1].len += len + a->ext[lo].len;
		memmove(&a->ext[lo], &a->ext[lo + 1], (a->next - lo - 1) * sizeof(*a->ext));
		a->next--;
	} else if (joins_prev) {
		a->ext[lo - 1].len += len;
	} else if (joins_next) {
		a->ext[lo].at = g;
		a->ext[lo].len += len;
	} else {
		memmove(&a->ext[lo + 1], &a->ext[lo], (a->next - lo) * sizeof(*a->ext));
		a->ext[lo] = (struct extent){ g, len };
		a->next++;
	}
}

void frame_arena_free(void *frame)
{
	struct frame_arena *a = owner_of(frame);
	if (!a) {
		free(frame);
		return;
	}
	/* A live frame keeps its arena: no one destroys it under us. */
	uint32_t g = (uint32_t)(((unsigned char *)frame - a->base) / FRAME_ARENA_GRAIN);
	pthread_mutex_lock(&a->mu);
	give_back(a, g);
	bool last = a->closed && a->frames == 0;
	pthread_mutex_unlock(&a->mu);
	if (last)
		destroy(a);
}

bool frame_arena_cut(void *frame, size_t len)
{
	struct frame_arena *a = owner_of(frame);
	if (!a || len == 0)
		return false;
	size_t at = (size_t)((unsigned char *)frame - a->base);
	uint32_t g = (uint32_t)(at / FRAME_ARENA_GRAIN);
	uint32_t keep = (uint32_t)grains_of(at % FRAME_ARENA_GRAIN + len);
	pthread_mutex_lock(&a->mu);
	uint32_t had = a->blk[g];
	bool cut = keep < had;
	if (cut) {
		/* The tail becomes a block of its own, then goes back as a
		 * freed one does. */
		a->blk[g] = keep;
		a->blk[g + keep] = had - keep;
		a->frames++;
		give_back(a, g + keep);
	}
	pthread_mutex_unlock(&a->mu);
	return cut;
}

void frame_arena_close(struct frame_arena *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	a->closed = true;
	bool last = a->frames == 0;
	pthread_mutex_unlock(&a->mu);
	if (last)
		destroy(a);
}

size_t frame_arena_size(const void *frame)
{
	struct frame_arena *a = owner_of(frame);
	if (!a)
		return frame ? malloc_usable_size((void *)(uintptr_t)frame) : 0;
	/* The caller holds the frame: its block's entry does not change. */
	uint32_t g = (uint32_t)(((const unsigned char *)frame - a->base) / FRAME_ARENA_GRAIN);
	return (size_t)a->blk[g] * FRAME_ARENA_GRAIN;
}

bool frame_arena_owns(const void *frame)
{
	return owner_of(frame) != NULL;
}
