#!/usr/bin/env python3
"""Writes the CDNA4 (gfx950) layout tables the lane emulator reads.

AMD's matrix instruction calculator has no CDNA4 tables, so these are
written from documentation, in the calculator's *_matlayout.csv format:

- dense v_mfma_f32_16x16x32_{f16,bf16}: reference/amd-matrix-cores.md §3
  (lane l holds A[l%16][8*(l/16)+e] and B[8*(l/16)+e][l%16], e = 0..7),
  from CK xdlops_gemm.hpp and the builtin types.
- dense v_mfma_i32_16x16x64_i8: by the same rule with 16 bytes per lane
  (the CDNA4 builtin reference gives 16 i8 per lane in a v4int).  For a
  dense instruction only the pairing of A and B slots matters, and it is
  the same here for both.
- v_smfmac_f32_16x16x64_{f16,bf16}: reference/amd-matrix-cores.md §2
  (ck_tile sparse_gfx9.hpp and an independent emulator agree): lane 16g+r
  holds the compressed groups 4g..4g+3 of row r, one group per VGPR, the
  index nibble of group 4g+j at bits [4j+3:4j]; B element e of lane 16g+j
  is B[32*(e/8) + 8g + e%8][j].
- D: the 16x16 accumulator layout of every instruction here.

None of this has been checked on hardware: tests built on these tables
say "checked against documentation only".  Rerun to regenerate:
    python3 gen_cdna4_doc.py   (in this folder)
"""

HEAD = "Architecture: CDNA4 (documentation-derived, NOT a vendor table)\nInstruction: {}\n"


def write(name, instr, header, rows):
    with open(name, "w") as f:
        f.write(HEAD.format(instr))
        f.write("lane," + ",".join(header) + "\n")
        for lane, cells in enumerate(rows):
            f.write(str(lane) + "," + ",".join(cells) + "\n")


def fields(nregs, width):
    per = 32 // width
    out = []
    for v in range(nregs):
        for p in range(per):
            if width == 32:
                out.append("v%d" % v)
            else:
                out.append("v%d.[%d:%d]" % (v, width * p + width - 1, width * p))
    return out


def dense(prefix, instr, k, width):
    per_lane = k // 4
    nregs = per_lane * width // 32
    a = [["A[%d][%d]" % (l % 16, per_lane * (l // 16) + e) for e in range(per_lane)] for l in range(64)]
    b = [["B[%d][%d]" % (per_lane * (l // 16) + e, l % 16) for e in range(per_lane)] for l in range(64)]
    write(prefix + "_A_matlayout.csv", instr, fields(nregs, width), a)
    write(prefix + "_B_matlayout.csv", instr, fields(nregs, width), b)
    write_d(prefix, instr)


def write_d(prefix, instr):
    d = [["D[%d][%d]" % (4 * (l // 16) + q, l % 16) for q in range(4)] for l in range(64)]
    write(prefix + "_D_matlayout.csv", instr, fields(4, 32), d)


def smfmac_16x16x64(prefix, instr):
    def group(mat, r, k0):
        return " ".join("%s[%d][%d]" % (mat, r, k0 + i) for i in range(4))

    a = [[group("A", l % 16, 16 * (l // 16) + 4 * j) for j in range(4)] for l in range(64)]
    k = [[group("K", l % 16, 16 * (l // 16) + 4 * j) for j in range(4)] for l in range(64)]
    b = [["B[%d][%d]" % (32 * (e // 8) + 8 * (l // 16) + e % 8, l % 16) for e in range(16)]
         for l in range(64)]
    write(prefix + "_A_matlayout.csv", instr, fields(4, 32), a)
    write(prefix + "_k_matlayout.csv", instr, ["v0.[%d:%d]" % (4 * j + 3, 4 * j) for j in range(4)], k)
    write(prefix + "_B_matlayout.csv", instr, fields(8, 16), b)
    write_d(prefix, instr)


dense("cdna4doc_v_mfma_f32_16x16x32_f16", "V_MFMA_F32_16X16X32_F16", 32, 16)
dense("cdna4doc_v_mfma_f32_16x16x32_bf16", "V_MFMA_F32_16X16X32_BF16", 32, 16)
dense("cdna4doc_v_mfma_i32_16x16x64_i8", "V_MFMA_I32_16X16X64_I8", 64, 8)
smfmac_16x16x64("cdna4doc_v_smfmac_f32_16x16x64_f16", "V_SMFMAC_F32_16X16X64_F16")
smfmac_16x16x64("cdna4doc_v_smfmac_f32_16x16x64_bf16", "V_SMFMAC_F32_16X16X64_BF16")
