/* Prints, per arch and kernel, the launch facts the host decides: the
 * dynamic LDS the HIP backend passes, the stage depth and the size of the
 * argument struct it copies into the kernarg segment.  The
 * instruction check (check_code_objects.py) prints them next to what the
 * compiler reports, since dynamic LDS is not in the code object's notes. */
#include <stdio.h>

#include "amd_kernels.h"

int main(void)
{
	for (int a = 0; a < AMD_NARCH; a++)
		for (size_t i = 0; i < amd_variant_count(); i++) {
			struct amd_variant v;
			if (amd_variant_at((enum amd_arch)a, i, &v) < 0)
				return 1;
			printf("%s %s lds=%u bk=%u ki=%u args=%zu name=%s\n",
			       amd_arch_name((enum amd_arch)a), v.kernel, amd_lds_bytes(&v.cfg), v.cfg.bk,
			       v.cfg.ki, sizeof(struct amd_gemm_args), v.name);
		}
	return 0;
}
