/* A host emulation of one AMD 16x16 matrix instruction (MFMA or SMFMAC),
 * for one wave of 64 lanes, whose register layouts are read from the
 * vendor calculator's *_matlayout.csv tables (tests/amd/layouts/) rather
 * than derived from the reasoning the kernels use.
 *
 * Registers are 32-bit words per lane: A up to 4, B up to 8, the SMFMAC
 * index 1 (read with CBSZ = ABID = 0, as the tables describe), the
 * accumulator 4 (f32 or i32 bits). */
#ifndef MFMA_TEST_AMD_EMU_H
#define MFMA_TEST_AMD_EMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amd_lanes.h"

#define EMU_LANES 64
#define EMU_A_REGS 4
#define EMU_B_REGS 8

/* One field of a register: which bits of which lane's register hold which
 * matrix entries (one element, or for sparse A and the index a group of 4
 * along K starting at (i, k)). */
struct emu_field {
	uint8_t lane, reg, lo, width;
	uint8_t n; /* 1, or 4 for a group */
	uint16_t i, k;
};

struct emu_table {
	size_t n;
	struct emu_field *f;
};

struct emu_instr {
	char name[96];     /* the instruction line of the table */
	enum amd_elem elem;
	bool sparse;
	unsigned k;        /* dense K, from the tables */
	struct emu_table a, b, d, idx;
	size_t *a_idx; /* sparse: for each A field, its index field */
};

/* Loads <dir>/<prefix>_{A,B,D[,k]}_matlayout.csv.  0, or -errno with a
 * message in err. */
int emu_load(struct emu_instr *ins, const char *dir, const char *prefix, enum amd_elem elem,
	     bool sparse, char *err, size_t errlen);
void emu_free(struct emu_instr *ins);

/* acc = A.B + acc.  -EINVAL (message in err) when an index nibble is not
 * an ordered pair i0 < i1, which the hardware does not define. */
int emu_run(const struct emu_instr *ins, const uint32_t a[EMU_LANES][EMU_A_REGS],
	    const uint32_t b[EMU_LANES][EMU_B_REGS], const uint32_t idx[EMU_LANES],
	    uint32_t acc[EMU_LANES][4], char *err, size_t errlen);

/* An element's bits (f16, bf16 or i8) as a double. */
double emu_decode(enum amd_elem e, uint32_t bits);

#endif
