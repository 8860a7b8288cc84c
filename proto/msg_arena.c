/* The decoder's bump arena (msg_arena.h). */
#include "msg_arena.h"

#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "block_list.h"

/* Every piece is aligned as malloc's are. */
#define ALIGN alignof(max_align_t)

/* A block past the first: its own malloc, linked for the final free. */
struct more {
	struct more *next;
	alignas(max_align_t) unsigned char data[];
};

struct msg_arena {
	size_t used, cap; /* in the first block, data */
	struct more *more;
	size_t more_bytes; /* of the blocks past the first */
	alignas(max_align_t) unsigned char data[];
};

static size_t round_up(size_t n)
{
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* This thread's freed arenas of MSG_ARENA_REQUEST_BYTES. */
static _Thread_local struct block_list kept;

static bool request_sized(size_t cap)
{
	return cap == round_up(MSG_ARENA_REQUEST_BYTES);
}

struct msg_arena *msg_arena_new(size_t bytes)
{
	bytes = round_up(bytes);
	struct msg_arena *a = request_sized(bytes) ? block_list_take(&kept) : NULL;
	if (!a)
		a = malloc(sizeof(*a) + bytes);
	if (!a)
		return NULL;
	*a = (struct msg_arena){ .cap = bytes };
	return a;
}

/* A piece's size in the arena: size rounded to ALIGN, or 0 when that
 * overflows. */
static size_t piece_size(size_t size)
{
	size_t n = round_up(size ? size : 1);
	return n < size ? 0 : n;
}

/* n bytes (a piece_size) from the first block, or NULL when they do not
 * fit. */
static void *first_block(struct msg_arena *a, size_t n)
{
	if (a->cap - a->used < n)
		return NULL;
	void *p = a->data + a->used;
	a->used += n;
	return p;
}

static void *arena_alloc_bounded(void *data, size_t size)
{
	size_t n = piece_size(size);
	return n ? first_block(data, n) : NULL;
}

static void *arena_alloc(void *data, size_t size)
{
	struct msg_arena *a = data;
	size_t n = piece_size(size);
	if (!n)
		return NULL;
	void *p = first_block(a, n);
	if (p)
		return p;
	/* What does not fit gets a block of its own: the first block's room
	 * stays for the small pieces that follow a large copy. */
	if (n > SIZE_MAX - sizeof(struct more))
		return NULL;
	struct more *m = malloc(sizeof(*m) + n);
	if (!m)
		return NULL;
	m->next = a->more;
	a->more = m;
	a->more_bytes += sizeof(*m) + n;
	return m->data;
}

static void arena_free(void *data, void *p)
{
	(void)data;
	(void)p;
}

size_t msg_arena_bytes(const struct msg_arena *a)
{
	return a ? sizeof(*a) + a->cap + a->more_bytes : 0;
}

ProtobufCAllocator msg_arena_allocator(struct msg_arena *a)
{
	return (ProtobufCAllocator){ .alloc = arena_alloc, .free = arena_free, .allocator_data = a };
}

ProtobufCAllocator msg_arena_allocator_bounded(struct msg_arena *a)
{
	return (ProtobufCAllocator){ .alloc = arena_alloc_bounded, .free = arena_free,
				     .allocator_data = a };
}

void msg_arena_free(struct msg_arena *a)
{
	if (!a)
		return;
	for (struct more *m = a->more, *next; m; m = next) {
		next = m->next;
		free(m);
	}
	if (!request_sized(a->cap) || !block_list_keep(&kept, a, BLOCK_LIST_KEPT))
		free(a);
}
