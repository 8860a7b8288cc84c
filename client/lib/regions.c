/* libmfmaclient: shared-memory regions (mfma.h).  A region is a memfd,
 * sealed so that it can neither shrink nor grow (the daemon maps it and
 * must never find its pages gone), mapped here and registered with the
 * daemon on this connection; requests.c turns pointers inside one into
 * region references (the client's list of them is region_table.c's). */
#include "client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int mfma_region_create(mfma_client *c, size_t bytes, mfma_region **region, struct mfma_error *err)
{
	if (!c || !region || bytes == 0)
		return client_fail(err, -EINVAL, "mfma_region_create: client and region must not be "
				   "NULL and bytes (%zu) must be at least 1", bytes);
	*region = NULL;
	int rc = client_check_alive(c, err);
	if (rc < 0)
		return rc;
	if (!c->is_unix)
		return client_fail(err, MFMA_EREMOTE(MFMA_CODE_FAILED_PRECONDITION),
				   "regions need a Unix-socket connection; %s is TCP", c->endpoint);
	long page = sysconf(_SC_PAGESIZE);
	size_t size = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
	if (size < bytes)
		return client_fail(err, -EINVAL, "mfma_region_create: bytes=%zu is too large", bytes);
	struct mfma_region *rg = calloc(1, sizeof(*rg));
	if (!rg)
		return client_fail(err, -ENOMEM, "out of memory");
	rg->fd = memfd_create("mfma-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (rg->fd < 0) {
		rc = client_fail(err, -errno, "memfd_create: %s", strerror(errno));
		goto fail;
	}
	if (ftruncate(rg->fd, (off_t)size) < 0 ||
	    fcntl(rg->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		rc = client_fail(err, -errno, "sizing and sealing a memfd of %zu bytes: %s", size,
				 strerror(errno));
		goto fail;
	}
	rg->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, rg->fd, 0);
	if (rg->base == MAP_FAILED) {
		rg->base = NULL;
		rc = client_fail(err, -errno, "mapping a memfd of %zu bytes: %s", size,
				 strerror(errno));
		goto fail;
	}
	rg->size = size;
	if ((rc = client_region_register(c, rg->fd, size, &rg->id, err)) < 0)
		goto fail;
	rg->next = c->regions;
	c->regions = rg;
	*region = rg;
	client_ok(err);
	return 0;
fail:
	client_region_free(rg);
	return rc;
}

int mfma_region_destroy(mfma_client *c, mfma_region *region, struct mfma_error *err)
{
	int rc = 0;
	if (!c || !region) {
		client_ok(err);
		return 0;
	}
	for (struct mfma_region **pp = &c->regions; *pp; pp = &(*pp)->next) {
		if (*pp == region) {
			*pp = region->next;
			break;
		}
	}
	/* The daemon answers once no request uses it: only then may the
	 * pages go (it has them mapped itself, so unmapping here first
	 * would be safe for it, but not for a D still being written). */
	if (region->id)
		rc = client_region_unregister(c, region->id, err);
	client_region_free(region);
	if (rc == 0)
		client_ok(err);
	return rc;
}

void *mfma_region_data(const mfma_region *region)
{
	return region ? region->base : NULL;
}

size_t mfma_region_size(const mfma_region *region)
{
	return region ? region->size : 0;
}
