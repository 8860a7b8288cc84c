/* Runs a fuzz target without libFuzzer: every file of its seed corpus,
 * then seeded mutations of each (bit flips, byte values, cuts), a fixed
 * number of times.  Deterministic and bounded, so CI runs it on every
 * build; under the sanitizer build it finds what the target traps on.
 *
 * usage: fuzz_corpus_TARGET CORPUS_DIR [MUTATIONS_PER_FILE] */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t s = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void)
{
	s ^= s << 13;
	s ^= s >> 7;
	s ^= s << 17;
	return (uint32_t)s;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS_PER_FILE]\n", argv[0]);
		return 2;
	}
	long muts = argc > 2 ? atol(argv[2]) : 2000;
	DIR *dir = opendir(argv[1]);
	if (!dir) {
		perror(argv[1]);
		return 2;
	}
	struct dirent *e;
	int files = 0;
	long runs = 0;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
		FILE *f = fopen(path, "rb");
		if (!f)
			continue;
		static uint8_t seed[1 << 16], buf[1 << 16];
		size_t n = fread(seed, 1, sizeof(seed), f);
		fclose(f);
		files++;
		LLVMFuzzerTestOneInput(seed, n);
		runs++;
		for (long m = 0; m < muts; m++) {
			size_t len = n;
			memcpy(buf, seed, n);
			int k = 1 + (int)(rnd() % 4);
			for (int i = 0; i < k && len; i++) {
				size_t at = rnd() % len;
				switch (rnd() % 4) {
				case 0: buf[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
				case 1: buf[at] = (uint8_t)rnd(); break;
				case 2: buf[at] = (uint8_t[]){ 0, 0x7f, 0x80, 0xff }[rnd() % 4]; break;
				default: len = at; break;
				}
			}
			LLVMFuzzerTestOneInput(buf, len);
			runs++;
		}
	}
	closedir(dir);
	printf("%s: %d seed files, %ld runs\n", argv[1], files, runs);
	return files > 0 ? 0 : 1;
}
