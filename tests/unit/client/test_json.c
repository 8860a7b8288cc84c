/* json.c: string escaping (exact bytes), the writer's structure, and the
 * validator on texts that are and are not JSON. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"

/* Runs fn with a memory FILE and returns what it wrote (caller frees). */
static char *capture_escaped(const char *s, size_t n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	json_write_escaped(f, s, n);
	fclose(f);
	return buf;
}

static void expect_escape(const char *in, size_t n, const char *want)
{
	char *got = capture_escaped(in, n);
	if (strcmp(got, want) != 0)
		fail_msg("escaped to %s, want %s", got, want);
	char err[128];
	assert_int_equal(json_validate(got, strlen(got), err, sizeof(err)), 0);
	free(got);
}

static void test_escape(void **state)
{
	(void)state;
	expect_escape("plain", 5, "\"plain\"");
	expect_escape("", 0, "\"\"");
	expect_escape("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
	expect_escape("\n\r\t\b\f", 5, "\"\\n\\r\\t\\b\\f\"");
	expect_escape("\x01\x1f", 2, "\"\\u0001\\u001f\"");
	expect_escape("nul\0in", 6, "\"nul\\u0000in\"");
	expect_escape("/ and \x7f stay", 12, "\"/ and \x7f stay\"");
	/* Valid UTF-8 passes through: 2, 3 and 4-byte sequences. */
	expect_escape("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9,
		      "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
	/* Invalid bytes become U+FFFD one byte at a time: a stray
	 * continuation byte, a truncated sequence, an overlong '/', a UTF-16
	 * surrogate, a code point above U+10FFFF. */
	expect_escape("a\x80z", 3, "\"a\\ufffdz\"");
	expect_escape("\xe2\x82", 2, "\"\\ufffd\\ufffd\"");
	expect_escape("\xc0\xaf", 2, "\"\\ufffd\\ufffd\"");
	expect_escape("\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\"");
	expect_escape("\xf4\x90\x80\x80", 4, "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
}

static char *capture_doc(int indent)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct json j;
	assert_non_null(f);
	json_init(&j, f, indent);
	json_object_begin(&j);
	json_kv_string(&j, "name", "w\"0\n");
	json_kv_uint(&j, "big", UINT64_MAX);
	json_kv_int(&j, "neg", -42);
	json_kv_double(&j, "x", 0.5);
	json_kv_double(&j, "nan", NAN);
	json_kv_double(&j, "inf", INFINITY);
	json_kv_bool(&j, "t", true);
	json_key(&j, "empty");
	json_array_begin(&j);
	json_array_end(&j);
	json_key(&j, "eo");
	json_object_begin(&j);
	json_object_end(&j);
	json_key(&j, "list");
	json_array_begin(&j);
	json_uint(&j, 1);
	json_string(&j, NULL);
	json_null(&j);
	json_object_begin(&j);
	json_kv_bool(&j, "f", false);
	json_object_end(&j);
	json_array_end(&j);
	json_object_end(&j);
	fclose(f);
	return buf;
}

static void test_writer_compact(void **state)
{
	(void)state;
	char *doc = capture_doc(0);
	assert_string_equal(doc, "{\"name\":\"w\\\"0\\n\",\"big\":18446744073709551615,\"neg\":-42,"
				 "\"x\":0.5,\"nan\":null,\"inf\":null,\"t\":true,\"empty\":[],"
				 "\"eo\":{},\"list\":[1,\"\",null,{\"f\":false}]}");
	free(doc);
}

static void test_writer_indented_is_valid(void **state)
{
	(void)state;
	char *doc = capture_doc(2);
	char err[128];
	assert_int_equal(json_validate(doc, strlen(doc), err, sizeof(err)), 0);
	/* Two-space indentation, one member per line, a final newline. */
	assert_non_null(strstr(doc, "{\n  \"name\": \"w\\\"0\\n\",\n  \"big\": "));
	assert_non_null(strstr(doc, "\"list\": [\n    1,\n    \"\",\n    null,\n    {\n"
				    "      \"f\": false\n    }\n  ]\n}\n"));
	assert_non_null(strstr(doc, "\"empty\": [],"));
	free(doc);
}

static void expect_valid(const char *s)
{
	char err[128] = "";
	if (json_validate(s, strlen(s), err, sizeof(err)) != 0)
		fail_msg("'%s' should be valid: %s", s, err);
}

static void expect_invalid(const char *s, const char *why)
{
	char err[128] = "";
	assert_int_equal(json_validate(s, strlen(s), err, sizeof(err)), -EINVAL);
	if (!strstr(err, why))
		fail_msg("'%s': error '%s' does not say '%s'", s, err, why);
}

static void test_validate(void **state)
{
	(void)state;
	expect_valid("{}");
	expect_valid(" [ ] ");
	expect_valid("0");
	expect_valid("-0.5e+10");
	expect_valid("1E-3");
	expect_valid("\"\\u00e9\\n\\/\"");
	expect_valid("{\"a\":[1,2,{\"b\":null}],\"c\":true,\"d\":false}\n");

	expect_invalid("", "expected a value");
	expect_invalid("{", "expected a string key");
	expect_invalid("{\"a\" 1}", "expected ':'");
	expect_invalid("{\"a\":1,}", "expected a string key");
	expect_invalid("[1,]", "unexpected character");
	expect_invalid("[1 2]", "expected ',' or ']'");
	expect_invalid("01", "text after the value");
	expect_invalid("1.", "no digits after the decimal point");
	expect_invalid("1e", "no digits in the exponent");
	expect_invalid("+1", "unexpected character");
	expect_invalid("NaN", "unexpected character");
	expect_invalid("tru", "unexpected character");
	expect_invalid("\"a", "unterminated string");
	expect_invalid("\"a\nb\"", "control character");
	expect_invalid("\"\\x\"", "unknown escape");
	expect_invalid("\"\\u12g4\"", "bad hex digit");
	expect_invalid("\"\xff\"", "invalid UTF-8");
	expect_invalid("{} {}", "text after the value");
	expect_invalid("{'a':1}", "expected a string key");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escape),
		cmocka_unit_test(test_writer_compact),
		cmocka_unit_test(test_writer_indented_is_valid),
		cmocka_unit_test(test_validate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
