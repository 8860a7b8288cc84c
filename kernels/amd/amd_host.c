/* Host side of the AMD kernels (see amd_kernels.h). */
#include "amd_kernels.h"

#include <elf.h>
#include <errno.h>
#include <string.h>

static const char *const arch_names[AMD_NARCH] = { "gfx908", "gfx90a", "gfx942", "gfx950" };

int amd_arch_parse(const char *gcn_arch_name, enum amd_arch *arch)
{
	if (!gcn_arch_name || !arch)
		return -EINVAL;
	size_t len = strcspn(gcn_arch_name, ":");
	for (int a = 0; a < AMD_NARCH; a++) {
		if (strlen(arch_names[a]) == len && strncmp(arch_names[a], gcn_arch_name, len) == 0) {
			*arch = (enum amd_arch)a;
			return 0;
		}
	}
	return -ENOENT;
}

const char *amd_arch_name(enum amd_arch arch)
{
	return (unsigned)arch < AMD_NARCH ? arch_names[arch] : "unknown";
}

/* Variant names: hip.<arch>.<dense|sp24>.<dtype>.<how>, stable strings a
 * response can point at.  Order: elem (f16, bf16, i8) x (dense, sparse). */
static const char *const variant_names[AMD_NARCH][AMD_NELEM * 2] = {
	[AMD_GFX908] = {
		"hip.gfx908.dense.f16.mfma16x16x16",
		"hip.gfx908.sp24.f16.ldsexpand.mfma16x16x16",
		"hip.gfx908.dense.bf16.mfma16x16x8",
		"hip.gfx908.sp24.bf16.ldsexpand.mfma16x16x8",
		"hip.gfx908.dense.i8.mfma16x16x16",
		"hip.gfx908.sp24.i8.ldsexpand.mfma16x16x16",
	},
	[AMD_GFX90A] = {
		"hip.gfx90a.dense.f16.mfma16x16x16",
		"hip.gfx90a.sp24.f16.ldsexpand.mfma16x16x16",
		"hip.gfx90a.dense.bf16.mfma16x16x16_1k",
		"hip.gfx90a.sp24.bf16.ldsexpand.mfma16x16x16_1k",
		"hip.gfx90a.dense.i8.mfma16x16x16",
		"hip.gfx90a.sp24.i8.ldsexpand.mfma16x16x16",
	},
	[AMD_GFX942] = {
		"hip.gfx942.dense.f16.mfma16x16x16",
		"hip.gfx942.sp24.f16.smfmac16x16x32",
		"hip.gfx942.dense.bf16.mfma16x16x16",
		"hip.gfx942.sp24.bf16.smfmac16x16x32",
		"hip.gfx942.dense.i8.mfma16x16x32",
		"hip.gfx942.sp24.i8.smfmac16x16x64",
	},
	[AMD_GFX950] = {
		"hip.gfx950.dense.f16.mfma16x16x32",
		"hip.gfx950.sp24.f16.smfmac16x16x64",
		"hip.gfx950.dense.bf16.mfma16x16x32",
		"hip.gfx950.sp24.bf16.smfmac16x16x64",
		"hip.gfx950.dense.i8.mfma16x16x64",
		"hip.gfx950.sp24.i8.smfmac16x16x64",
	},
};

static const char *const kernel_names[AMD_NELEM * 2] = {
	"mfmad_gemm_dense_f16", "mfmad_gemm_sp24_f16",  "mfmad_gemm_dense_bf16",
	"mfmad_gemm_sp24_bf16", "mfmad_gemm_dense_i8", "mfmad_gemm_sp24_i8",
};

size_t amd_variant_count(void)
{
	return AMD_NELEM * 2;
}

/* The configuration comes from amd_cfg_get, the very function the device
 * code runs, so the table cannot disagree with the kernels. */
int amd_variant_at(enum amd_arch arch, size_t i, struct amd_variant *v)
{
	if ((unsigned)arch >= AMD_NARCH || i >= amd_variant_count() || !v)
		return -EINVAL;
	v->kernel = kernel_names[i];
	v->name = variant_names[arch][i];
	v->cfg = amd_cfg_get(arch, (enum amd_elem)(i / 2), i % 2 == 1);
	return 0;
}

int amd_variant_get(enum amd_arch arch, enum mfma_dtype in, bool sparse, struct amd_variant *v)
{
	size_t e;
	switch (in) {
	case MFMA_DT_F16: e = AMD_E_F16; break;
	case MFMA_DT_BF16: e = AMD_E_BF16; break;
	case MFMA_DT_I8: e = AMD_E_I8; break;
	default: return -ENOTSUP;
	}
	return amd_variant_at(arch, e * 2 + (sparse ? 1 : 0), v);
}

int amd_meta_convert(const struct amd_cfg *c, const uint32_t *canon, uint32_t m, uint32_t k,
		     void *out, size_t out_size)
{
	if (!c || !c->smfmac || k % 4 != 0 || !out)
		return -EINVAL;
	uint64_t need = amd_meta_bytes(c, m, k);
	if (out_size < need || (!canon && m > 0 && k > 0))
		return -EINVAL;
	uint8_t *o = out;
	unsigned fb = amd_meta_field_bytes(c);
	uint64_t blocks = ((uint64_t)m + 15) / 16, steps = amd_meta_steps(c, k);
	for (uint64_t rb = 0; rb < blocks; rb++)
		for (uint64_t s = 0; s < steps; s++)
			for (unsigned lane = 0; lane < AMD_WAVE; lane++) {
				uint32_t f = amd_meta_field(c, canon, m, k, rb, s, lane);
				uint8_t *p = o + amd_meta_offset(c, k, rb, s, lane);
				for (unsigned b = 0; b < fb; b++)
					p[b] = (uint8_t)(f >> (8 * b));
			}
	return 0;
}

/* Reads a struct out of the image at off, refusing anything that does
 * not lie wholly inside it. */
static int elf_read(const void *data, size_t size, uint64_t off, void *dst, size_t len)
{
	if (off > size || len > size - off)
		return -EINVAL;
	memcpy(dst, (const char *)data + off, len);
	return 0;
}

int amd_elf_has_symbol(const void *data, size_t size, const char *name)
{
	Elf64_Ehdr eh;
	if (!data || !name || elf_read(data, size, 0, &eh, sizeof(eh)) < 0)
		return -EINVAL;
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_shentsize != sizeof(Elf64_Shdr))
		return -EINVAL;
	size_t nlen = strlen(name);
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh, strsh;
		if (elf_read(data, size, eh.e_shoff + (uint64_t)i * sizeof(sh), &sh, sizeof(sh)) < 0)
			return -EINVAL;
		if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)
			continue;
		if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh.e_shnum ||
		    elf_read(data, size, eh.e_shoff + (uint64_t)sh.sh_link * sizeof(strsh), &strsh,
			     sizeof(strsh)) < 0 ||
		    strsh.sh_offset > size || strsh.sh_size > size - strsh.sh_offset)
			return -EINVAL;
		const char *strtab = (const char *)data + strsh.sh_offset;
		for (uint64_t s = 0; s < sh.sh_size / sizeof(Elf64_Sym); s++) {
			Elf64_Sym sym;
			if (elf_read(data, size, sh.sh_offset + s * sizeof(sym), &sym, sizeof(sym)) < 0)
				return -EINVAL;
			/* The name must end inside the string table. */
			if (sym.st_name >= strsh.sh_size || strsh.sh_size - sym.st_name <= nlen)
				continue;
			if (memcmp(strtab + sym.st_name, name, nlen + 1) == 0)
				return 1;
		}
	}
	return 0;
}
