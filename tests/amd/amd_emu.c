/* See amd_emu.h.  The CSV format is the calculator's:
 *
 *   Architecture: CDNA3
 *   Instruction: V_SMFMAC_F32_16X16X32_F16
 *   lane,v0.[15:0],v0.[31:16],...      (or v0,v1 for whole registers)
 *   0,A[0][0],A[1][0],...              (or "A[0][0] A[0][1] A[0][2] A[0][3]")
 */
#include "amd_emu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mfma_dtype.h"

#define MAX_COLS 32
#define MAX_K 128

struct col {
	unsigned reg, lo, width;
};

static int parse_col(const char *s, struct col *c)
{
	unsigned hi, lo;
	if (sscanf(s, "v%u.[%u:%u]", &c->reg, &hi, &lo) == 3) {
		if (hi < lo || hi > 31)
			return -EINVAL;
		c->lo = lo;
		c->width = hi - lo + 1;
		return 0;
	}
	if (sscanf(s, "v%u", &c->reg) == 1) {
		c->lo = 0;
		c->width = 32;
		return 0;
	}
	return -EINVAL;
}

/* "A[3][12]" or "A[3][12] A[3][13] A[3][14] A[3][15]" into a field. */
static int parse_cell(char *s, struct emu_field *f)
{
	unsigned n = 0, i0 = 0, k0 = 0;
	for (char *save = NULL, *t = strtok_r(s, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		char mat;
		unsigned i, k;
		if (sscanf(t, "%c[%u][%u]", &mat, &i, &k) != 3 || i >= 64 || k >= MAX_K)
			return -EINVAL;
		if (n == 0) {
			i0 = i;
			k0 = k;
		} else if (i != i0 || k != k0 + n) {
			return -EINVAL; /* a group is 4 consecutive K of one row */
		}
		n++;
	}
	if (n != 1 && n != 4)
		return -EINVAL;
	f->n = (uint8_t)n;
	f->i = (uint16_t)i0;
	f->k = (uint16_t)k0;
	return 0;
}

static int load_table(struct emu_table *t, const char *path, char *name, size_t namelen,
		      char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	if (!fp) {
		snprintf(err, errlen, "cannot open %s", path);
		return -ENOENT;
	}
	char line[4096];
	struct col cols[MAX_COLS];
	size_t ncols = 0, cap = 0;
	int rc = 0;
	t->n = 0;
	t->f = NULL;
	while (fgets(line, sizeof(line), fp)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (strncmp(line, "Instruction: ", 13) == 0) {
			if (name)
				snprintf(name, namelen, "%.95s", line + 13);
			continue;
		}
		if (strncmp(line, "lane,", 5) == 0) {
			ncols = 0;
			char *save = NULL;
			for (char *c = strtok_r(line + 5, ",", &save); c; c = strtok_r(NULL, ",", &save)) {
				if (ncols == MAX_COLS || parse_col(c, &cols[ncols]) < 0) {
					rc = -EINVAL;
					goto out;
				}
				ncols++;
			}
			continue;
		}
		if (ncols == 0)
			continue; /* preamble */
		char *save = NULL;
		char *lane_s = strtok_r(line, ",", &save);
		unsigned lane;
		if (!lane_s || sscanf(lane_s, "%u", &lane) != 1 || lane >= EMU_LANES) {
			rc = -EINVAL;
			goto out;
		}
		for (size_t c = 0; c < ncols; c++) {
			char *cell = strtok_r(NULL, ",", &save);
			if (!cell) {
				rc = -EINVAL;
				goto out;
			}
			if (t->n == cap) {
				cap = cap ? 2 * cap : 256;
				struct emu_field *nf = realloc(t->f, cap * sizeof(*nf));
				if (!nf) {
					rc = -ENOMEM;
					goto out;
				}
				t->f = nf;
			}
			struct emu_field *f = &t->f[t->n];
			f->lane = (uint8_t)lane;
			f->reg = (uint8_t)cols[c].reg;
			f->lo = (uint8_t)cols[c].lo;
			f->width = (uint8_t)cols[c].width;
			if (parse_cell(cell, f) < 0) {
				rc = -EINVAL;
				goto out;
			}
			t->n++;
		}
	}
	if (t->n == 0)
		rc = -EINVAL;
out:
	fclose(fp);
	if (rc < 0) {
		snprintf(err, errlen, "%s: not a layout table this emulator reads", path);
		free(t->f);
		t->f = NULL;
		t->n = 0;
	}
	return rc;
}

int emu_load(struct emu_instr *ins, const char *dir, const char *prefix, enum amd_elem elem,
	     bool sparse, char *err, size_t errlen)
{
	memset(ins, 0, sizeof(*ins));
	ins->elem = elem;
	ins->sparse = sparse;
	char path[1024];
	struct {
		struct emu_table *t;
		const char *m;
	} parts[] = { { &ins->a, "A" }, { &ins->b, "B" }, { &ins->d, "D" }, { &ins->idx, "k" } };
	for (size_t p = 0; p < (sparse ? 4u : 3u); p++) {
		snprintf(path, sizeof(path), "%s/%s_%s_matlayout.csv", dir, prefix, parts[p].m);
		int rc = load_table(parts[p].t, path, p == 0 ? ins->name : NULL, sizeof(ins->name),
				    err, errlen);
		if (rc < 0) {
			emu_free(ins);
			return rc;
		}
	}
	for (size_t n = 0; n < ins->a.n && !sparse; n++)
		if (ins->a.f[n].n != 1) {
			snprintf(err, errlen, "%s: a dense A table with a group of 4", ins->name);
			emu_free(ins);
			return -EINVAL;
		}
	/* Each stored group of A to the index bits that place it. */
	if (sparse) {
		ins->a_idx = calloc(ins->a.n, sizeof(*ins->a_idx));
		if (!ins->a_idx) {
			emu_free(ins);
			return -ENOMEM;
		}
		for (size_t n = 0; n < ins->a.n; n++) {
			const struct emu_field *f = &ins->a.f[n];
			size_t q = 0;
			while (q < ins->idx.n && !(ins->idx.f[q].i == f->i && ins->idx.f[q].k == f->k))
				q++;
			if (f->n != 4 || q == ins->idx.n) {
				snprintf(err, errlen, "%s: A[%u][%u] is not a group with an index field",
					 ins->name, f->i, f->k);
				emu_free(ins);
				return -EINVAL;
			}
			ins->a_idx[n] = q;
		}
	}
	/* K from the tables: the largest K index any B entry names. */
	for (size_t i = 0; i < ins->b.n; i++)
		if (ins->b.f[i].i + 1u > ins->k)
			ins->k = ins->b.f[i].i + 1u; /* B[k][j]: the first index is K */
	return 0;
}

void emu_free(struct emu_instr *ins)
{
	free(ins->a.f);
	free(ins->b.f);
	free(ins->d.f);
	free(ins->idx.f);
	free(ins->a_idx);
	ins->a_idx = NULL;
	memset(&ins->a, 0, sizeof(ins->a));
	memset(&ins->b, 0, sizeof(ins->b));
	memset(&ins->d, 0, sizeof(ins->d));
	memset(&ins->idx, 0, sizeof(ins->idx));
}

double emu_decode(enum amd_elem e, uint32_t bits)
{
	switch (e) {
	case AMD_E_F16: return mfma_f16_to_f32((uint16_t)bits);
	case AMD_E_BF16: return mfma_bf16_to_f32((uint16_t)bits);
	default: return (int8_t)(uint8_t)bits;
	}
}

static uint32_t bits_of(uint32_t w, unsigned lo, unsigned width)
{
	return width == 32 ? w : (w >> lo) & ((1u << width) - 1u);
}

int emu_run(const struct emu_instr *ins, const uint32_t a[EMU_LANES][EMU_A_REGS],
	    const uint32_t b[EMU_LANES][EMU_B_REGS], const uint32_t idx[EMU_LANES],
	    uint32_t acc[EMU_LANES][4], char *err, size_t errlen)
{
	static double am[16][MAX_K], bm[MAX_K][16];
	memset(am, 0, sizeof(am));
	memset(bm, 0, sizeof(bm));
	for (size_t n = 0; n < ins->a.n; n++) {
		const struct emu_field *f = &ins->a.f[n];
		uint32_t w = a[f->lane][f->reg];
		if (f->n == 1) {
			am[f->i][f->k] = emu_decode(ins->elem, bits_of(w, f->lo, f->width));
			continue;
		}
		/* A group of 4 along K: the field holds its two stored values,
		 * the lower half first; the index table says which lane's
		 * index bits give their positions. */
		const struct emu_field *kf = &ins->idx.f[ins->a_idx[n]];
		unsigned nib = bits_of(idx[kf->lane], kf->lo, kf->width);
		unsigned i0 = nib & 3u, i1 = nib >> 2;
		if (i0 >= i1) {
			snprintf(err, errlen,
				 "%s: lane %u index bits [%u:%u] = 0x%x for A[%u][%u..%u] is not an "
				 "ordered pair",
				 ins->name, kf->lane, kf->lo + 3u, kf->lo, nib, f->i, f->k, f->k + 3u);
			return -EINVAL;
		}
		unsigned half = f->width / 2;
		am[f->i][f->k + i0] = emu_decode(ins->elem, bits_of(w, f->lo, half));
		am[f->i][f->k + i1] = emu_decode(ins->elem, bits_of(w, f->lo + half, half));
	}
	for (size_t n = 0; n < ins->b.n; n++) {
		const struct emu_field *f = &ins->b.f[n];
		bm[f->i][f->k] = emu_decode(ins->elem, bits_of(b[f->lane][f->reg], f->lo, f->width));
	}
	for (size_t n = 0; n < ins->d.n; n++) {
		const struct emu_field *f = &ins->d.f[n];
		double s = 0.0;
		for (unsigned k = 0; k < ins->k; k++)
			s += am[f->i][k] * bm[k][f->k];
		uint32_t *c = &acc[f->lane][f->reg];
		if (ins->elem == AMD_E_I8) {
			/* Exact: |s| < 2^53; the hardware wraps at 32 bits. */
			*c = (uint32_t)*c + (uint32_t)(int64_t)s;
		} else {
			float cf;
			memcpy(&cf, c, 4);
			cf = (float)((double)cf + s);
			memcpy(c, &cf, 4);
		}
	}
	return 0;
}
