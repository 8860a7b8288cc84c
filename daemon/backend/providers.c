#include "providers.h"

#include "backend.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Keep each list in the order of its family's table (cuda.c's and hip.c's
 * providers[]): the index is the bit of provider_policy.exclude. */
static const char *const cuda_names[] = { "wgmma", "ours", "cublaslt", "cusparselt" };
static const char *const hip_names[] = { "ours" };

const char *const *providers_names(enum provider_family f, size_t *n)
{
	if (f == PROVIDERS_HIP) {
		*n = sizeof(hip_names) / sizeof(hip_names[0]);
		return hip_names;
	}
	*n = sizeof(cuda_names) / sizeof(cuda_names[0]);
	return cuda_names;
}

int providers_index(enum provider_family f, const char *name)
{
	size_t n;
	const char *const *names = providers_names(f, &n);
	for (size_t i = 0; name && i < n; i++)
		if (strcmp(names[i], name) == 0)
			return (int)i;
	return -ENOENT;
}

const char *providers_list(enum provider_family f, char *buf, size_t len)
{
	size_t n, off = 0;
	const char *const *names = providers_names(f, &n);
	buf[0] = '\0';
	for (size_t i = 0; i < n && off < len; i++) {
		int w = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", names[i]);
		if (w < 0)
			break;
		off += (size_t)w;
	}
	return buf;
}

int providers_check(enum provider_family f, size_t i, size_t count, const char *name, char *err,
		    size_t errlen)
{
	size_t n;
	const char *const *names = providers_names(f, &n);
	if (n == count && i < n && strcmp(names[i], name) == 0)
		return 0;
	snprintf(err, errlen, "%s: provider %zu is %s in the backend's table but %s in providers.c "
		 "(a build error: keep the two lists alike)", f == PROVIDERS_HIP ? "hip" : "cuda", i,
		 name, i < n ? names[i] : "absent");
	return -EINVAL;
}

size_t providers_pick(const struct provider_policy *p, size_t n, providers_ask_fn ask, void *ctx,
		      int *rc, char *err, size_t errlen)
{
	const int prefer = p ? p->prefer : -1;
	bool refused = false;
	*rc = -ENOTSUP;
	/* j == 0 is the pinned provider; j > 0 is entry j - 1 of the table. */
	for (size_t j = 0; j <= n; j++) {
		if (j == 0 && (prefer < 0 || (size_t)prefer >= n))
			continue;
		const size_t i = j == 0 ? (size_t)prefer : j - 1;
		if ((j > 0 && (int)i == prefer) || provider_excluded(p, i))
			continue;
		char why[256];
		const int r = ask(i, ctx, refused ? why : err, refused ? sizeof(why) : errlen);
		if (r == 0) {
			*rc = 0;
			return i;
		}
		if (r > 0)
			continue;
		if (!refused)
			*rc = r;
		refused = true;
	}
	return n;
}

void providers_describe(const struct provider_policy *p, enum provider_family f, size_t i,
			char *buf, size_t len)
{
	size_t n;
	const char *const *names = providers_names(f, &n);
	if (i >= n)
		return;
	const char *state = provider_excluded(p, i) ? ":excluded"
			    : p && p->prefer == (int)i ? ":pinned"
						       : "";
	char item[64];
	snprintf(item, sizeof(item), "%s%s", names[i], state);
	backend_list_add(buf, len, item);
}
