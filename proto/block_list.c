/* A thread's list of freed blocks (block_list.h). */
#include "block_list.h"

#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
#define KEEP_NOTHING 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEP_NOTHING 1
#endif
#endif
#ifndef KEEP_NOTHING
#define KEEP_NOTHING 0
#endif

void *block_list_take(struct block_list *l)
{
	void *p = l->head;
	if (p) {
		l->head = *(void **)p;
		l->n--;
	}
	return p;
}

bool block_list_keep(struct block_list *l, void *p, unsigned max)
{
	if (KEEP_NOTHING || !p || l->n >= max)
		return false;
	*(void **)p = l->head;
	l->head = p;
	l->n++;
	return true;
}

bool block_list_keeps(void)
{
	return !KEEP_NOTHING;
}
