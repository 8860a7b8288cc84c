/* A provider's table of per-N plans (a library's descriptors and chosen
 * algorithm for one width and output type), and which slot a new plan
 * takes.  Plans made while a weight is warmed at load are kept: never
 * replaced, at most kept_max of them.  Every other plan (the exact N of a
 * single request, a width past the warmed ones, a GEMM on no resident
 * weight) takes a slot that is not kept, the oldest first.  Pure memory:
 * the caller makes, finds and frees its plans. */
#ifndef MFMAD_PLAN_TABLE_H
#define MFMAD_PLAN_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "cuda_widths.h"

/* Room for the warmed plans of one weight (CUDA_WARM_MAX_WIDTHS widths
 * for two output types) and 32 others. */
#define PLAN_TABLE_KEPT_MAX (2 * CUDA_WARM_MAX_WIDTHS)
#define PLAN_TABLE_SLOTS (PLAN_TABLE_KEPT_MAX + 32)

struct plan_table {
	void *plan[PLAN_TABLE_SLOTS]; /* NULL: a free slot */
	bool kept[PLAN_TABLE_SLOTS];
	unsigned kept_max; /* at most PLAN_TABLE_KEPT_MAX; 0: none kept */
	unsigned nkept;
	unsigned next; /* where the search for a slot to replace starts */
};

/* An empty table keeping at most kept_max plans (clamped to
 * PLAN_TABLE_KEPT_MAX). */
void plan_table_init(struct plan_table *t, unsigned kept_max);

/* Puts plan (not NULL) in t: kept when keep and fewer than kept_max are
 * kept, in a free slot when there is one; otherwise in the oldest slot
 * that is not kept.  Returns the plan it replaced, for the caller to
 * free, or NULL. */
void *plan_table_put(struct plan_table *t, void *plan, bool keep);

#endif
