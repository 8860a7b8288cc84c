/* FNV-1a, 64 bits: the checksum of the files the daemon keeps in its
 * state directory (weights_store.c, choice_cache.c).  It catches a torn or
 * damaged file, not a forged one. */
#ifndef MFMAD_FNV_H
#define MFMAD_FNV_H

#include <stddef.h>
#include <stdint.h>

#define FNV64_INIT 0xcbf29ce484222325ull

static inline uint64_t fnv64(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

#endif
