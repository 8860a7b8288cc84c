/* The configuration parser on arbitrary text: accepted, or refused with
 * "NAME:LINE: reason"; never a crash or a leak. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* libconfig 1.5 leaks its scanner's string buffer (strbuf_append) on some
 * syntax errors, such as a string left open.  Not ours to fix: the daemon
 * parses only at start and on SIGHUP, so a broken file leaks a few bytes
 * per reload. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libconfig.so\n";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	struct mfmad_config cfg;
	config_defaults(&cfg);
	char err[512] = "";
	int rc = config_load_string(&cfg, text, "fuzz.conf", err, sizeof(err));
	if (rc < 0 && strncmp(err, "fuzz.conf:", 10) != 0)
		__builtin_trap();
	if (rc == 0) {
		struct mfmad_config def;
		config_defaults(&def);
		char buf[256];
		config_restart_only_changes(&def, &cfg, buf, sizeof(buf));
	}
	free(text);
	return 0;
}
