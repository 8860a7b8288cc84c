/* A thread's list of freed blocks of one size, kept for reuse.
 *
 * The daemon's loop allocates a request's pieces (its decoder arena, its
 * job) in bursts of hundreds and frees them in bursts, and glibc's
 * per-thread cache keeps only seven blocks of a size: the rest of each
 * burst went through malloc's bins, about 1,100 of the loop's instructions
 * a request (bench/RESULTS.md).  A list is a singly linked stack through
 * the blocks themselves, declared _Thread_local (or static, used by one
 * thread) by its owner, so no lock is needed; a block taken from one
 * thread's list may be kept on another's (they are plain malloc blocks).
 * The blocks on a thread's lists are freed when the thread exits (the
 * client library's threads come and go with the application's); a thread
 * keeps on at most BLOCK_LIST_LISTS lists.
 *
 * Under AddressSanitizer nothing is kept: every block goes back to free,
 * so that a use after free is still caught.  Pure: no I/O. */
#ifndef MFMA_BLOCK_LIST_H
#define MFMA_BLOCK_LIST_H

#include <stdbool.h>

/* The bound the daemon's lists use: more than one of the loop's bursts
 * (hundreds of requests), so that what a thread holds stays bounded. */
#define BLOCK_LIST_KEPT 1024

/* The most lists one thread keeps blocks on; past it a keep declines. */
#define BLOCK_LIST_LISTS 8

struct block_list {
	void *head;
	unsigned n;
	bool exit_freed; /* listed with the thread's lists freed at its exit */
};

/* A block from the list, or NULL when it is empty (the caller mallocs). */
void *block_list_take(struct block_list *l);

/* Keeps p (a malloc block at least a pointer long, of the list's size) on
 * the list unless it holds max already, or it is the thread's first keep
 * on l and the thread keeps on BLOCK_LIST_LISTS lists already: false
 * then, and the caller frees p. */
bool block_list_keep(struct block_list *l, void *p, unsigned max);

/* Whether lists keep anything in this build (false under AddressSanitizer). */
bool block_list_keeps(void);

#endif
