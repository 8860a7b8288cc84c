/* Protobuf base-128 varints, read from a bounded buffer and written:
 * the one implementation the wire walkers (wire_check.c, wire_split.c)
 * share.  Header-only: each call is a few instructions. */
#ifndef MFMA_WIRE_VARINT_H
#define MFMA_WIRE_VARINT_H

#include <stddef.h>
#include <stdint.h>

/* The longest varint: ten bytes for 64 bits. */
#define WIRE_VARINT_MAX 10u

/* Reads the varint at buf[*pos] (at most len bytes in all) into *out and
 * moves *pos past it; -1 when it runs past len or over ten bytes. */
static inline int wire_varint_get(const uint8_t *buf, size_t len, size_t *pos, uint64_t *out)
{
	/* One byte: every key of the schema, and most sizes and lengths. */
	if (*pos < len && buf[*pos] < 0x80) {
		*out = buf[(*pos)++];
		return 0;
	}
	uint64_t v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (*pos >= len)
			return -1;
		uint8_t b = buf[(*pos)++];
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -1;
}

/* Writes v at p (room for WIRE_VARINT_MAX bytes) and returns its length;
 * p may be NULL to learn the length only. */
static inline size_t wire_varint_put(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		if (p)
			p[n] = (uint8_t)(v | 0x80);
		n++;
		v >>= 7;
	}
	if (p)
		p[n] = (uint8_t)v;
	return n + 1;
}

#endif
