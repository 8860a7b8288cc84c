/* Which slot of a provider's plan table a new plan takes (plan_table.h). */
#include "plan_table.h"

#include <string.h>

void plan_table_init(struct plan_table *t, unsigned kept_max)
{
	memset(t, 0, sizeof(*t));
	t->kept_max = kept_max < PLAN_TABLE_KEPT_MAX ? kept_max : PLAN_TABLE_KEPT_MAX;
}

void *plan_table_put(struct plan_table *t, void *plan, bool keep)
{
	const bool kept = keep && t->nkept < t->kept_max;
	unsigned at = PLAN_TABLE_SLOTS;
	/* A free slot first, from next on, so that a table not yet full
	 * replaces nothing. */
	for (unsigned i = 0; i < PLAN_TABLE_SLOTS && at == PLAN_TABLE_SLOTS; i++) {
		const unsigned s = (t->next + i) % PLAN_TABLE_SLOTS;
		if (!t->plan[s])
			at = s;
	}
	/* Else the oldest that is not kept: slots are taken in turn from
	 * next, so the first not kept from there is the oldest.  One always
	 * exists, the kept being at most PLAN_TABLE_KEPT_MAX of the slots. */
	for (unsigned i = 0; i < PLAN_TABLE_SLOTS && at == PLAN_TABLE_SLOTS; i++) {
		const unsigned s = (t->next + i) % PLAN_TABLE_SLOTS;
		if (!t->kept[s])
			at = s;
	}
	void *old = t->plan[at];
	t->plan[at] = plan;
	t->kept[at] = kept;
	t->nkept += kept;
	t->next = (at + 1) % PLAN_TABLE_SLOTS;
	return old;
}
