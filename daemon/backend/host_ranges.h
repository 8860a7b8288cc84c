/* Host memory ranges a device layer registered with its runtime, kept
 * sorted by address so that finding the range a pointer lies in (once per
 * part and operand of every batched launch, against a range per client
 * region) costs a binary search, not a walk over every connection's
 * regions.  Ranges never overlap: host_ranges_add refuses one that would.
 * Pure memory: no runtime calls (the caller registers and unregisters). */
#ifndef MFMAD_HOST_RANGES_H
#define MFMAD_HOST_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct host_range {
	uintptr_t base;
	size_t len;
	bool owned;  /* this device registered it (and unregisters it) */
	bool mapped; /* kernels reach it at base + dev_off */
	bool region; /* a client's shared-memory region (not the daemon's frames) */
	uint64_t dev_off;
};

struct host_ranges {
	struct host_range *v; /* sorted by base */
	size_t n, cap;
};

/* Whether [base, base + len) overlaps a range of r. */
bool host_ranges_overlap(const struct host_ranges *r, uintptr_t base, size_t len);
/* Adds x (len > 0) in address order: 0, -EEXIST when it overlaps a range
 * already there, -ENOMEM. */
int host_ranges_add(struct host_ranges *r, const struct host_range *x);
/* Removes the range that starts at base into *out (when out is not NULL):
 * false when there is none. */
bool host_ranges_remove(struct host_ranges *r, uintptr_t base, struct host_range *out);
/* The range [p, p + len) lies in whole, or NULL. */
const struct host_range *host_ranges_find(const struct host_ranges *r, const void *p, size_t len);
void host_ranges_free(struct host_ranges *r);

#endif
