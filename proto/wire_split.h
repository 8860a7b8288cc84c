/* Decoding a message without copying its large bytes fields.
 *
 * protobuf-c's unpack copies every bytes field into memory of its own,
 * so a GEMM frame's matrices were copied once more on each side after
 * the socket had already put them in a buffer.  The split finds the
 * large bytes fields at known paths in the encoded payload, builds a
 * small copy of the payload without them (the enclosing messages' length
 * prefixes rewritten), lets protobuf-c unpack only that, and points the
 * unpacked fields back at the original bytes.  Pure: bytes in, message
 * out, no I/O. */
#ifndef MFMA_WIRE_SPLIT_H
#define MFMA_WIRE_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* A field is left in place only when its bytes start at a multiple of
 * this (the widest element: f32, i32, 2:4 metadata words), since its
 * readers (the CPU kernels, a client's typed D) take it as such; others
 * are copied by protobuf-c, as without the split.  The frame's own
 * position in memory decides, so about a quarter of large fields stay
 * in place in a frame read at an arbitrary offset. */
#define WIRE_SPLIT_ALIGN 4u

/* The schema nests four levels deep (Request.load_weight.a.dense.data). */
#define WIRE_SPLIT_MAX_DEPTH 6
/* Paths one call looks for (the set in one bitmask). */
#define WIRE_SPLIT_MAX_PATHS 16

/* A bytes field by its field numbers from the top message down, e.g.
 * Request.gemm.b.data is {3, {2, 2, 4}}.  Every step but the last is a
 * singular message field, the last a singular bytes field. */
struct wire_split_path {
	unsigned depth;
	uint32_t field[WIRE_SPLIT_MAX_DEPTH];
};

/* One field taken out: its bytes are [offset, offset + len) of the
 * original payload, and it is paths[path]. */
struct wire_split_field {
	size_t offset, len;
	unsigned path;
};

/* Writes into small (room for *small_len bytes) the payload buf without
 * the fields at paths that hold at least min_len (>= 1) bytes, and their
 * places into fields (room for npaths).  small may be NULL to learn the
 * size only (*small_len is then set, fields untouched).  Returns how
 * many fields were taken out (0: none; small is then a copy of buf), or
 * -EINVAL when the walk cannot vouch for the result: a truncated or
 * malformed field on a path, a field on a path that occurs twice in its
 * message (protobuf merges those, the split would not), npaths out of
 * range; -ENOSPC when small is too small.  Callers then decode buf
 * whole, whose decoder reports what is wrong with it. */
int wire_split(const uint8_t *buf, size_t len, const struct wire_split_path *paths, size_t npaths,
	       size_t min_len, uint8_t *small, size_t *small_len, struct wire_split_field *fields);

/* protobuf_c_message_unpack of buf, with the bytes fields at paths that
 * hold at least min_len bytes pointing into buf instead of copied: buf
 * must outlive the message, which is freed with wire_split_free (never
 * protobuf_c_message_free_unpacked, which would free buf's bytes).  Where
 * the split is not possible (wire_split fails, or a field taken out is
 * not in the decoded message: the losing member of a oneof sent twice)
 * it decodes buf whole, as plain protobuf-c does.  *in_place (may be
 * NULL) is how many fields point into buf: with 0, buf may go at once.
 * NULL when buf does not decode, or out of memory. */
ProtobufCMessage *wire_split_unpack(const ProtobufCMessageDescriptor *desc,
				    const struct wire_split_path *paths, size_t npaths,
				    size_t min_len, const uint8_t *buf, size_t len, size_t *in_place);

/* Frees a message from wire_split_unpack (NULL is fine): the fields that
 * point into buf are let go first. */
void wire_split_free(ProtobufCMessage *m, const struct wire_split_path *paths, size_t npaths,
		     const uint8_t *buf, size_t len);

/* The paths mfmad and its clients split: a GEMM request's matrices (A,
 * B, C) and its answer's D; and the size from which a field is worth it
 * (below it, protobuf-c's copy costs less than the walk).  A LoadWeight's
 * matrix is still copied: the weight registry keeps the request across
 * its own asynchronous steps, and a load is rare. */
extern const struct wire_split_path wire_split_gemm_paths[];
extern const size_t wire_split_gemm_npaths;
extern const struct wire_split_path wire_split_response_paths[];
extern const size_t wire_split_response_npaths;
#define WIRE_SPLIT_MIN_BYTES 4096u

/* A request's pad field (Request.pad, number 15): ignored by the daemon,
 * it lets a client move the large matrix after it to a WIRE_PAD_ALIGN
 * boundary of the frame, sent first in the message.  A reader's buffer
 * is malloc'd (16-byte aligned) and a large frame starts at its
 * beginning, so the matrix is then aligned in memory too and stays in
 * place (WIRE_SPLIT_ALIGN) instead of being copied by protobuf-c. */
#define WIRE_PAD_ALIGN 16u
#define WIRE_PAD_MAX 64u
/* The most bytes wire_pad writes: key, length and WIRE_PAD_ALIGN + 1. */
#define WIRE_PAD_FIELD_MAX (2u + WIRE_PAD_ALIGN + 1u)

/* The pad field that moves bytes now at frame offset `at` to the next
 * WIRE_PAD_ALIGN boundary when written just before them: its bytes into
 * out (room for WIRE_PAD_FIELD_MAX), and how many (0: at is aligned). */
size_t wire_pad(size_t at, uint8_t out[WIRE_PAD_FIELD_MAX]);

#endif
