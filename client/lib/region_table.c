/* libmfmaclient: the client's list of regions (mfma.h), which the
 * connection (client.c), the requests (requests.c) and the public calls
 * (regions.c) share: lookups and freeing, no I/O with the daemon. */
#include "client_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The region, registered on the current connection or lost with an
 * earlier one (lost), that holds [p, p + len), or NULL. */
static struct mfma_region *region_at(mfma_client *c, const void *p, size_t len, bool lost)
{
	uintptr_t x = (uintptr_t)p;
	if (!p || len == 0)
		return NULL;
	for (struct mfma_region *rg = c->regions; rg; rg = rg->next) {
		uintptr_t b = (uintptr_t)rg->base;
		if ((rg->id == 0) == lost && x >= b && x - b <= rg->size &&
		    len <= rg->size - (x - b))
			return rg;
	}
	return NULL;
}

struct mfma_region *client_region_of(mfma_client *c, const void *p, size_t len)
{
	return region_at(c, p, len, false);
}

bool client_region_lost_at(mfma_client *c, const void *p)
{
	return region_at(c, p, 1, true) != NULL;
}

void client_regions_lost(mfma_client *c)
{
	for (struct mfma_region *rg = c->regions; rg; rg = rg->next)
		rg->id = 0;
}

void client_region_free(struct mfma_region *rg)
{
	if (rg->base)
		munmap(rg->base, rg->size);
	if (rg->fd >= 0)
		close(rg->fd);
	free(rg);
}

void client_regions_free(mfma_client *c)
{
	while (c->regions) {
		struct mfma_region *rg = c->regions;
		c->regions = rg->next;
		client_region_free(rg);
	}
}
