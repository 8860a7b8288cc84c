/* block_list.c built into a module of its own for test_block_list_unload:
 * a thread keeps a block on a list of the module's, so that its exit
 * would call the module's destructor for the thread's lists. */
#include <stdlib.h>

#include "block_list.h"

static _Thread_local struct block_list list;

/* Keeps one block on the calling thread's list: 1, or 0 when the list
 * declined it (nothing kept in this build). */
int module_keep_one(void)
{
	void *p = malloc(64);
	if (block_list_keep(&list, p, 4))
		return 1;
	free(p);
	return 0;
}
