/* Checks on the wire bytes of a message that protobuf-c's decoder lets
 * through but C strings cannot carry, and the one sanitiser for client
 * bytes echoed back in a protobuf string.  Pure: bytes in, verdict out. */
#ifndef MFMA_WIRE_CHECK_H
#define MFMA_WIRE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* protobuf-c hands a string field over as a NUL-terminated char *, so
 * "ok\0tail" would be read as "ok".  Walks buf (a message that decoded
 * with desc) by the descriptor and returns -EINVAL, with err naming the
 * field ("load_weight.name has a NUL byte at offset 2"), when a string
 * field holds a NUL byte; 0 otherwise. */
int wire_check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
		       char *err, size_t errlen);

/* protobuf-c's decoder keeps, for every field it meets, a slot of its
 * scanner and, for a field it does not know, a record and a copy of its
 * bytes in a block of its own: some fifty times the two bytes a field can
 * take on the wire, so a frame of nothing but unknown fields costs fifty
 * times its size to decode.  Counts the fields of buf (a message of desc)
 * and of the sub-messages the decoder would unpack, as it meets them, and
 * returns the count, or max + 1 as soon as it is over max; what does not
 * walk as protobuf ends the count there (the decoder judges it). */
size_t wire_count_fields(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
			 size_t max);

/* Replaces, in place, every byte that is not part of a valid UTF-8
 * sequence (overlong forms, surrogates and code points over U+10FFFF
 * included) by '?', so a message that echoes client bytes is a valid
 * protobuf string that strict parsers accept. */
void wire_utf8_sanitize(char *s);

#endif
