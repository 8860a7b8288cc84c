/* A binary min-heap of nodes embedded in the caller's structs, ordered by
 * (key, seq).  Pure: no locking, no I/O; the scheduler wraps one per
 * device with its mutex.  The heap holds pointers, so a node stays where
 * its owner put it. */
#ifndef MFMAD_HEAP_H
#define MFMAD_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct heap_node {
	uint64_t key; /* smaller first */
	uint64_t seq; /* then the order of arrival */
};

struct heap {
	struct heap_node **v;
	size_t len, cap;
};

/* 0, or -ENOMEM (the heap is unchanged). */
int heap_push(struct heap *h, struct heap_node *n);
/* The smallest node, or NULL when empty. */
struct heap_node *heap_pop(struct heap *h);
/* Removes every node for which keep() is false, handing each to drop(),
 * in no particular order; O(len). */
void heap_filter(struct heap *h, bool (*keep)(struct heap_node *n, void *arg),
		 void (*drop)(struct heap_node *n, void *arg), void *arg);
/* Gives every node a new key (rekey sets n->key) and restores the order;
 * O(len). */
void heap_rekey(struct heap *h, void (*rekey)(struct heap_node *n, void *arg), void *arg);
void heap_free(struct heap *h);

#endif
