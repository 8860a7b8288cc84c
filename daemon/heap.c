#include "heap.h"

#include <errno.h>
#include <stdlib.h>

static bool before(const struct heap_node *a, const struct heap_node *b)
{
	return a->key != b->key ? a->key < b->key : a->seq < b->seq;
}

static void sift_up(struct heap *h, size_t i)
{
	struct heap_node *n = h->v[i];
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!before(n, h->v[p]))
			break;
		h->v[i] = h->v[p];
		i = p;
	}
	h->v[i] = n;
}

static void sift_down(struct heap *h, size_t i)
{
	struct heap_node *n = h->v[i];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const struct heap_node *best = n;
		if (l < h->len && before(h->v[l], best)) {
			m = l;
			best = h->v[l];
		}
		if (r < h->len && before(h->v[r], best))
			m = r;
		if (m == i)
			break;
		h->v[i] = h->v[m];
		i = m;
	}
	h->v[i] = n;
}

int heap_push(struct heap *h, struct heap_node *n)
{
	if (h->len == h->cap) {
		size_t ncap = h->cap ? h->cap * 2 : 64;
		struct heap_node **nv = realloc(h->v, ncap * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		h->v = nv;
		h->cap = ncap;
	}
	h->v[h->len++] = n;
	sift_up(h, h->len - 1);
	return 0;
}

struct heap_node *heap_pop(struct heap *h)
{
	if (h->len == 0)
		return NULL;
	struct heap_node *top = h->v[0];
	h->v[0] = h->v[--h->len];
	if (h->len > 0)
		sift_down(h, 0);
	return top;
}

void heap_filter(struct heap *h, bool (*keep)(struct heap_node *n, void *arg),
		 void (*drop)(struct heap_node *n, void *arg), void *arg)
{
	size_t kept = 0;
	for (size_t i = 0; i < h->len; i++) {
		if (keep(h->v[i], arg))
			h->v[kept++] = h->v[i];
		else
			drop(h->v[i], arg);
	}
	h->len = kept;
	/* Floyd's heapify: the kept nodes in any order become a heap in O(n). */
	for (size_t i = h->len / 2; i-- > 0;)
		sift_down(h, i);
}

void heap_rekey(struct heap *h, void (*rekey)(struct heap_node *n, void *arg), void *arg)
{
	for (size_t i = 0; i < h->len; i++)
		rekey(h->v[i], arg);
	for (size_t i = h->len / 2; i-- > 0;)
		sift_down(h, i);
}

void heap_free(struct heap *h)
{
	free(h->v);
	h->v = NULL;
	h->len = h->cap = 0;
}
