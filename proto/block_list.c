/* A thread's list of freed blocks (block_list.h). */
#include "block_list.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

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

/* The lists this thread has kept blocks on: emptied, the blocks freed, by
 * the key's destructor when the thread exits (glibc runs it while the
 * thread's _Thread_local lists are still there; the main thread's, at
 * process exit, are left to the process's end). */
struct thread_lists {
	struct block_list *l[BLOCK_LIST_LISTS];
	unsigned n;
};

static _Thread_local struct thread_lists mine;
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static bool have_exit_key;

static void free_at_exit(void *arg)
{
	struct thread_lists *t = arg;
	for (unsigned i = 0; i < t->n; i++) {
		void *p;
		while ((p = block_list_take(t->l[i])) != NULL)
			free(p);
		t->l[i]->exit_freed = false;
	}
	t->n = 0;
}

static void make_exit_key(void)
{
	have_exit_key = pthread_key_create(&exit_key, free_at_exit) == 0;
}

/* A library unloaded (dlclose of the client library) takes free_at_exit
 * with it: the key goes first, so that no thread's exit calls into the
 * unmapped code (its kept blocks are then left to the process). */
__attribute__((destructor)) static void drop_exit_key(void)
{
	if (have_exit_key)
		pthread_key_delete(exit_key);
	have_exit_key = false;
}

/* Lists l with the thread's lists freed at its exit; false when it cannot
 * be (no key, or the thread's table full). */
static bool list_for_exit(struct block_list *l)
{
	if (l->exit_freed)
		return true;
	pthread_once(&exit_once, make_exit_key);
	if (!have_exit_key || mine.n == BLOCK_LIST_LISTS)
		return false;
	if (mine.n == 0 && pthread_setspecific(exit_key, &mine) != 0)
		return false;
	mine.l[mine.n++] = l;
	l->exit_freed = true;
	return true;
}

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
	if (KEEP_NOTHING || !p || l->n >= max || !list_for_exit(l))
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
