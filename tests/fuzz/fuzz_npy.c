/* The .npy reader (kernels/common/npy.c, mfmactl's and mfmad's) on
 * arbitrary files: parsed or refused with a message, and a parse that
 * succeeds describes data inside the file. */
#include <stddef.h>
#include <stdint.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct npy_info info;
	char err[256];
	if (npy_parse(data, size, &info, err, sizeof(err)) == 0) {
		if (info.data_offset > size || info.data_bytes > size - info.data_offset ||
		    info.data_bytes != (size_t)info.rows * info.cols * npy_type_size(info.type))
			__builtin_trap();
		volatile uint8_t sink = info.data_bytes ? data[info.data_offset + info.data_bytes - 1] : 0;
		(void)sink;
	} else if (err[0] == '\0') {
		__builtin_trap(); /* every refusal says why */
	}
	return 0;
}
