/* A small JSON writer for mfmactl --json, and a validator the tests use
 * to check that output.  The writer keeps track of commas and nesting so
 * the commands only say what they emit; strings are escaped per RFC 8259
 * and bytes that are not valid UTF-8 become U+FFFD, so the output is
 * valid JSON whatever the daemon sent. */
#ifndef MFMA_JSON_H
#define MFMA_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 32

struct json {
	FILE *f;
	int indent; /* spaces per level; 0 writes one line */
	int depth;
	bool first[JSON_MAX_DEPTH]; /* nothing written yet at this level */
	bool after_key;
};

void json_init(struct json *j, FILE *f, int indent);

void json_object_begin(struct json *j);
void json_object_end(struct json *j);
void json_array_begin(struct json *j);
void json_array_end(struct json *j);
void json_key(struct json *j, const char *key);

void json_string(struct json *j, const char *s);
void json_string_n(struct json *j, const char *s, size_t n);
void json_uint(struct json *j, uint64_t v);
void json_int(struct json *j, int64_t v);
void json_double(struct json *j, double v); /* NaN and infinities as null */
void json_bool(struct json *j, bool v);
void json_null(struct json *j);

/* key + value in one call, the common case in objects. */
void json_kv_string(struct json *j, const char *key, const char *v);
void json_kv_uint(struct json *j, const char *key, uint64_t v);
void json_kv_int(struct json *j, const char *key, int64_t v);
void json_kv_double(struct json *j, const char *key, double v);
void json_kv_bool(struct json *j, const char *key, bool v);

/* Writes s (n bytes) as a quoted JSON string. */
void json_write_escaped(FILE *f, const char *s, size_t n);

/* 0 when text (n bytes) is exactly one JSON value, optionally surrounded
 * by whitespace; -EINVAL with the offset and the reason in err
 * otherwise. */
int json_validate(const char *text, size_t n, char *err, size_t errlen);

#endif
