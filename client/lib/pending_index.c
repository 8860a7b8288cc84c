/* The id -> entry hash of a client's requests in flight (pending_index.h). */
#include "pending_index.h"

#include <errno.h>
#include <stdlib.h>

/* Ids come in order (1, 2, 3, ...): mixed so that they spread. */
static size_t place_of(uint64_t id, size_t cap)
{
	id ^= id >> 30;
	id *= 0xbf58476d1ce4e5b9ull;
	id ^= id >> 27;
	id *= 0x94d049bb133111ebull;
	id ^= id >> 31;
	return (size_t)id & (cap - 1);
}

/* The place of id, or of the empty place where it would go. */
static size_t probe(const struct pending_index *x, uint64_t id)
{
	size_t i = place_of(id, x->cap);
	while (x->slots[i] && x->ids[i] != id)
		i = (i + 1) & (x->cap - 1);
	return i;
}

static int grow(struct pending_index *x)
{
	const size_t cap = x->cap ? x->cap * 2 : 64;
	if (cap > SIZE_MAX / sizeof(uint64_t))
		return -ENOMEM;
	struct pending_index bigger = { .ids = malloc(cap * sizeof(uint64_t)),
					.slots = calloc(cap, sizeof(uint32_t)), .cap = cap };
	if (!bigger.ids || !bigger.slots) {
		free(bigger.ids);
		free(bigger.slots);
		return -ENOMEM;
	}
	for (size_t i = 0; i < x->cap; i++)
		if (x->slots[i]) {
			size_t j = probe(&bigger, x->ids[i]);
			bigger.ids[j] = x->ids[i];
			bigger.slots[j] = x->slots[i];
		}
	bigger.n = x->n;
	free(x->ids);
	free(x->slots);
	*x = bigger;
	return 0;
}

int pending_index_put(struct pending_index *x, uint64_t id, uint32_t slot)
{
	if (slot == UINT32_MAX)
		return -EINVAL;
	if (x->cap) {
		size_t i = probe(x, id);
		if (x->slots[i]) {
			x->slots[i] = slot + 1;
			return 0;
		}
	}
	if ((x->n + 1) * 2 > x->cap) {
		int rc = grow(x);
		if (rc < 0)
			return rc;
	}
	size_t i = probe(x, id);
	x->ids[i] = id;
	x->slots[i] = slot + 1;
	x->n++;
	return 0;
}

bool pending_index_get(const struct pending_index *x, uint64_t id, uint32_t *slot)
{
	if (!x->cap)
		return false;
	size_t i = probe(x, id);
	if (!x->slots[i])
		return false;
	*slot = x->slots[i] - 1;
	return true;
}

void pending_index_del(struct pending_index *x, uint64_t id)
{
	if (!x->cap)
		return;
	size_t i = probe(x, id);
	if (!x->slots[i])
		return;
	x->slots[i] = 0;
	x->n--;
	/* Shift back what follows in the run, each entry to the first empty
	 * place between its home and where it is, so that no probe for it
	 * stops early at the hole. */
	const size_t mask = x->cap - 1;
	for (size_t j = (i + 1) & mask; x->slots[j]; j = (j + 1) & mask) {
		size_t home = place_of(x->ids[j], x->cap);
		/* Whether home lies cyclically in (i, j]: then it stays. */
		bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (stays)
			continue;
		x->ids[i] = x->ids[j];
		x->slots[i] = x->slots[j];
		x->slots[j] = 0;
		i = j;
	}
}

void pending_index_free(struct pending_index *x)
{
	free(x->ids);
	free(x->slots);
	*x = (struct pending_index){ 0 };
}
