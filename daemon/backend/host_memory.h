/* The host memory this process may use: the machine's, or less where a
 * control group caps it (a systemd unit's MemoryMax=, a container's
 * memory limit).  The CPU backend's devices share it; their weight budget
 * is taken from it, so that a weight that does not fit is refused with
 * RESOURCE_EXHAUSTED rather than the process killed by the cgroup. */
#ifndef MFMAD_HOST_MEMORY_H
#define MFMAD_HOST_MEMORY_H

#include <stdint.h>

/* The lowest memory limit of the process's control group and its
 * ancestors (cgroup v2 memory.max; v1 memory.limit_in_bytes), read under
 * root ("" for the real filesystem, a directory laid out the same way in
 * tests), or UINT64_MAX when none applies or none can be read. */
uint64_t host_memory_cgroup_limit(const char *root);

/* phys bytes of the machine, capped by the control group's limit. */
uint64_t host_memory_usable(uint64_t phys, const char *root);

#endif
