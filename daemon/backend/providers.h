/* The kernel providers of each GPU family by name, what the configuration
 * says of them (cuda.providers, hip.providers), and the order in which a
 * backend asks them for a shape.
 *
 * The name lists are the families' provider tables in order (cuda.c,
 * hip.c check theirs against them at probe).  They are compiled into
 * every mfmad, with or without the family, so that a configuration is
 * checked alike on every build and a misspelt name is refused at start
 * wherever it is read. */
#ifndef MFMAD_PROVIDERS_H
#define MFMAD_PROVIDERS_H

#include <stddef.h>
#include <stdint.h>

/* The most providers one family has (a bit each in an exclude mask). */
#define PROVIDERS_MAX 8

enum provider_family { PROVIDERS_CUDA = 0, PROVIDERS_HIP = 1 };

/* A family's provider names in table order; *n gets how many. */
const char *const *providers_names(enum provider_family f, size_t *n);
/* The index of name in the family's list, or -ENOENT. */
int providers_index(enum provider_family f, const char *name);
/* The family's names as "a, b, c" into buf, for messages. */
const char *providers_list(enum provider_family f, char *buf, size_t len);

/* What the configuration says of a family's providers. */
struct provider_policy {
	uint32_t exclude; /* bit i: provider i is never used on the family's devices */
	int prefer;       /* the pinned provider's index: it runs whatever it can, the
	                   * others only what it cannot; -1: none, the measured choice */
};

static inline int provider_excluded(const struct provider_policy *p, size_t i)
{
	return p && (p->exclude >> i) & 1u;
}

/* Checks that entry i of a family's table (of count entries) is named as
 * the list says: 0, or -EINVAL with the mismatch in err (a build error,
 * caught at probe). */
int providers_check(enum provider_family f, size_t i, size_t count, const char *name, char *err,
		    size_t errlen);

/* Provider i's answer to a shape, for providers_pick: 0 it takes it, 1 it
 * does not run on this device (passed over without a word), or a negative
 * errno with the reason in err. */
typedef int (*providers_ask_fn)(size_t i, void *ctx, char *err, size_t errlen);

/* Asks the n providers of a table that p does not exclude, the pinned one
 * first and then the table's order, and returns the index of the first
 * that takes the shape.  When none does it returns n with the first
 * refusal's code in *rc and its reason in err (the later refusals' go to
 * scratch); when none refused, *rc is -ENOTSUP and err stays as the
 * caller set it. */
size_t providers_pick(const struct provider_policy *p, size_t n, providers_ask_fn ask, void *ctx,
		      int *rc, char *err, size_t errlen);

/* A provider's state on a device for status, "name" or "name:pinned" /
 * "name:excluded", appended to the comma-separated list in buf. */
void providers_describe(const struct provider_policy *p, enum provider_family f, size_t i,
			char *buf, size_t len);

#endif
