/* A thread's list of freed blocks of one size, kept for reuse.
 *
 * The daemon's loop allocates a request's pieces (its decoder arena, its
 * job) in bursts of hundreds and frees them in bursts, and glibc's
 * per-thread cache keeps only seven blocks of a size: the rest of each
 * burst went through malloc's bins, about 1,100 of the loop's instructions
 * a request (bench/RESULTS.md).  A list is a singly linked stack through
 * the blocks themselves, declared _Thread_local by its owner, so no lock
 * is needed; a block taken from one thread's list may be kept on
 * another's (they are plain malloc blocks).  Blocks on a thread's list
 * when it exits are not freed: the owner bounds the list (max).
 *
 * Under AddressSanitizer nothing is kept: every block goes back to free,
 * so that a use after free is still caught.  Pure: no I/O. */
#ifndef MFMA_BLOCK_LIST_H
#define MFMA_BLOCK_LIST_H

#include <stdbool.h>

/* The bound the daemon's lists use: more than one of the loop's bursts
 * (hundreds of requests), so that what a thread holds stays bounded. */
#define BLOCK_LIST_KEPT 1024

struct block_list {
	void *head;
	unsigned n;
};

/* A block from the list, or NULL when it is empty (the caller mallocs). */
void *block_list_take(struct block_list *l);

/* Keeps p (a malloc block at least a pointer long, of the list's size) on
 * the list unless it holds max already: false then, and the caller frees
 * p. */
bool block_list_keep(struct block_list *l, void *p, unsigned max);

/* Whether lists keep anything in this build (false under AddressSanitizer). */
bool block_list_keeps(void);

#endif
