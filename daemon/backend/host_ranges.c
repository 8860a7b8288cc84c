#include "host_ranges.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* How many ranges start at or below a: the index after the one that may
 * hold a. */
static size_t upto(const struct host_ranges *r, uintptr_t a)
{
	size_t lo = 0, hi = r->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->v[mid].base <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

bool host_ranges_overlap(const struct host_ranges *r, uintptr_t base, size_t len)
{
	size_t i = upto(r, base);
	/* The range starting at or before base may reach into it, the one
	 * after it may start inside it. */
	if (i > 0 && base - r->v[i - 1].base < r->v[i - 1].len)
		return true;
	return i < r->n && r->v[i].base - base < len;
}

int host_ranges_add(struct host_ranges *r, const struct host_range *x)
{
	if (x->len == 0 || x->base + x->len < x->base)
		return -EINVAL;
	if (host_ranges_overlap(r, x->base, x->len))
		return -EEXIST;
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 16;
		struct host_range *v = realloc(r->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		r->v = v;
		r->cap = cap;
	}
	size_t i = upto(r, x->base);
	memmove(&r->v[i + 1], &r->v[i], (r->n - i) * sizeof(*r->v));
	r->v[i] = *x;
	r->n++;
	return 0;
}

bool host_ranges_remove(struct host_ranges *r, uintptr_t base, struct host_range *out)
{
	size_t i = upto(r, base);
	if (i == 0 || r->v[i - 1].base != base)
		return false;
	i--;
	if (out)
		*out = r->v[i];
	memmove(&r->v[i], &r->v[i + 1], (r->n - i - 1) * sizeof(*r->v));
	r->n--;
	return true;
}

const struct host_range *host_ranges_find(const struct host_ranges *r, const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p;
	size_t i = upto(r, a);
	if (i == 0)
		return NULL;
	const struct host_range *h = &r->v[i - 1];
	return len <= h->len && a - h->base <= h->len - len ? h : NULL;
}

void host_ranges_free(struct host_ranges *r)
{
	free(r->v);
	*r = (struct host_ranges){ 0 };
}
