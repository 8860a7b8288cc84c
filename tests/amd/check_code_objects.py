#!/usr/bin/env python3
"""Instruction check of the AMD code objects (no GPU needed).

    check_code_objects.py OBJDUMP READELF KERNEL_INFO ARCH=PATH [ARCH=PATH ...]

For every code object: it is a raw ELF for that arch with code object v4;
every kernel is there and uses exactly the matrix instruction the issue
asks of that arch (and gfx908/gfx90a no v_smfmac at all); no kernel uses
scratch (private segment 0, no spills, no scratch instructions); each
takes exactly the argument bytes the host passes.  #mma counts the matrix
instructions in the code (one stage of the unrolled K loop).  Prints
each kernel's VGPR/AGPR/SGPR/LDS use and the occupancy they allow.

The expected instructions below come from issue 3, not from the code.
"""
import re
import subprocess
import sys

EXPECT = {
    "gfx908": {
        "f16": "v_mfma_f32_16x16x16f16", "bf16": "v_mfma_f32_16x16x8bf16", "i8": "v_mfma_i32_16x16x16i8",
        "sp24_f16": "v_mfma_f32_16x16x16f16", "sp24_bf16": "v_mfma_f32_16x16x8bf16",
        "sp24_i8": "v_mfma_i32_16x16x16i8",
    },
    "gfx90a": {
        "f16": "v_mfma_f32_16x16x16f16", "bf16": "v_mfma_f32_16x16x16bf16_1k", "i8": "v_mfma_i32_16x16x16i8",
        "sp24_f16": "v_mfma_f32_16x16x16f16", "sp24_bf16": "v_mfma_f32_16x16x16bf16_1k",
        "sp24_i8": "v_mfma_i32_16x16x16i8",
    },
    "gfx942": {
        "f16": "v_mfma_f32_16x16x16_f16", "bf16": "v_mfma_f32_16x16x16_bf16", "i8": "v_mfma_i32_16x16x32_i8",
        "sp24_f16": "v_smfmac_f32_16x16x32_f16", "sp24_bf16": "v_smfmac_f32_16x16x32_bf16",
        "sp24_i8": "v_smfmac_i32_16x16x64_i8",
    },
    "gfx950": {
        "f16": "v_mfma_f32_16x16x32_f16", "bf16": "v_mfma_f32_16x16x32_bf16", "i8": "v_mfma_i32_16x16x64_i8",
        "sp24_f16": "v_smfmac_f32_16x16x64_f16", "sp24_bf16": "v_smfmac_f32_16x16x64_bf16",
        "sp24_i8": "v_smfmac_i32_16x16x64_i8",
    },
}
NO_SMFMAC = ("gfx908", "gfx90a")
LDS_PER_CU = {"gfx908": 65536, "gfx90a": 65536, "gfx942": 65536, "gfx950": 163840}
# Waves per SIMD the hardware holds at most.
MAX_WAVES = {"gfx908": 10, "gfx90a": 8, "gfx942": 8, "gfx950": 8}
WAVES_PER_GROUP = 4
MATRIX_OP = re.compile(r"\b(v_s?mfmac?_[a-z0-9_]+)")


def kernel_key(name):
    # mfmad_gemm_dense_f16 -> f16, mfmad_gemm_sp24_bf16 -> sp24_bf16
    rest = name[len("mfmad_gemm_"):]
    return rest[len("dense_"):] if rest.startswith("dense_") else rest


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def notes(readelf, path):
    """Per kernel: the metadata fields as strings."""
    kernels, cur = {}, None
    for line in run([readelf, "--notes", path]).splitlines():
        m = re.match(r"\s+(?:- )?\.([a-z_]+):\s+(.*)$", line)
        if not m:
            continue
        key, val = m.group(1), m.group(2).strip()
        if key == "agpr_count" and line.lstrip().startswith("- "):
            cur = {}
        if cur is None:
            continue
        cur.setdefault(key, val)
        if key == "name":
            kernels[val] = cur
        if key == "wavefront_size":
            cur = None
    return kernels


def disassembly(objdump, path, lines=None):
    """Per function: its instruction mnemonics (and, in lines, the whole
    instruction text of each matrix instruction)."""
    funcs, cur, name = {}, None, None
    for line in run([objdump, "-d", path]).splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:", line)
        if m:
            name = m.group(1)
            cur = funcs.setdefault(name, [])
            continue
        m = re.match(r"^\s+([a-z][a-z0-9_]+)", line)
        if cur is not None and m:
            cur.append(m.group(1))
            if lines is not None and MATRIX_OP.match(m.group(1)):
                lines.setdefault(name, []).append(line.split("//")[0].strip())
    return funcs


# The kernels pass cbsz = abid = blgp = 0 everywhere: on SMFMAC a non-zero
# abid/cbsz selects another byte/half of the index register (the lane
# tables are for CBSZ = ABID = 0), on MFMA they broadcast A or permute B.
# The lane emulator cannot see these immediates, so they are checked here.
MODIFIER = re.compile(r"\b(cbsz|abid|blgp):")


def occupancy(arch, vgpr, agpr, lds):
    if arch == "gfx908":
        # Separate 256-entry ArchVGPR and AccVGPR files, granule 4.
        g = lambda n: max(4, -(-n // 4) * 4)
        by_reg = min(256 // g(vgpr), 256 // g(agpr) if agpr else 99)
    else:
        # One 512-entry file per lane (gfx90a+), granule 8.
        by_reg = 512 // max(8, -(-vgpr // 8) * 8)
    by_lds = (LDS_PER_CU[arch] // lds) * WAVES_PER_GROUP // 4 if lds else 99
    return min(by_reg, by_lds, MAX_WAVES[arch]), by_reg, by_lds


def main(argv):
    if len(argv) < 5:
        sys.stderr.write(__doc__)
        return 2
    objdump, readelf, info_exe = argv[1:4]
    info = {}
    for line in run([info_exe]).splitlines():
        f = line.split()
        info[(f[0], f[1])] = dict(kv.split("=", 1) for kv in f[2:])
    errors = []
    for pair in argv[4:]:
        arch, _, path = pair.partition("=")
        header = run([readelf, "-h", path])
        if "AMDGPU - HSA" not in header or not re.search(r"Flags:.*\b%s\b" % arch, header):
            errors.append("%s: %s is not an HSA code object for %s" % (arch, path, arch))
            continue
        # ELF ABI version 2 is code object v4.
        if not re.search(r"ABI Version:\s+2\b", header):
            errors.append("%s: not code object v4 (see kernels/amd/meson.build)" % arch)
        meta = notes(readelf, path)
        mma_lines = {}
        funcs = disassembly(objdump, path, mma_lines)
        for fn, ls in mma_lines.items():
            for l in ls:
                if MODIFIER.search(l):
                    errors.append("%s: %s: %s has a cbsz/abid/blgp modifier; the layouts "
                                  "checked are for 0" % (arch, fn, l))
                    break
                if l.startswith("v_smfmac") and not re.search(r",\s*v\d+\s*$", l):
                    errors.append("%s: %s: %s: the index operand is not an ArchVGPR" % (arch, fn, l))
                    break
        expect = EXPECT.get(arch)
        if expect is None:
            errors.append("%s: no expectations for this arch" % arch)
            continue
        if arch in NO_SMFMAC:
            for fn, ops in funcs.items():
                if any(o.startswith("v_smfmac") for o in ops):
                    errors.append("%s: %s uses v_smfmac, which %s does not have" % (arch, fn, arch))
        print("%s (%s)" % (arch, path))
        print("  %-12s %-28s %5s %5s %5s %6s %5s %-24s %s" %
              ("kernel", "matrix instruction", "vgpr", "agpr", "sgpr", "lds", "#mma", "waves/SIMD",
               "LDS bank conflicts (1 = none): A/B store, A/B read"))
        for key, want in expect.items():
            name = "mfmad_gemm_" + ("" if key.startswith("sp24") else "dense_") + key
            if name not in meta or name not in funcs:
                errors.append("%s: kernel %s is missing" % (arch, name))
                continue
            k, ops = meta[name], funcs[name]
            used = sorted({o for o in ops if MATRIX_OP.match(o)})
            if used != [want]:
                errors.append("%s: %s uses %s, want exactly %s" % (arch, name, used or "nothing", want))
            if k.get("private_segment_fixed_size") != "0":
                errors.append("%s: %s uses %s bytes of scratch" %
                              (arch, name, k.get("private_segment_fixed_size")))
            if k.get("vgpr_spill_count", "0") != "0":
                errors.append("%s: %s spills %s VGPRs" % (arch, name, k.get("vgpr_spill_count")))
            if k.get("uses_dynamic_stack", "false") != "false":
                errors.append("%s: %s uses a dynamic stack" % (arch, name))
            scratch_ops = [o for o in ops if o.startswith("scratch_")]
            if scratch_ops:
                errors.append("%s: %s has scratch instructions %s" % (arch, name, sorted(set(scratch_ops))))
            # The host copies struct amd_gemm_args into the kernarg segment
            # (hipModuleLaunchKernel's extra): the sizes must agree.
            if k.get("kernarg_segment_size") != info[(arch, name)]["args"]:
                errors.append("%s: %s takes %s bytes of arguments, the host passes %s" %
                              (arch, name, k.get("kernarg_segment_size"), info[(arch, name)]["args"]))
            vgpr, agpr = int(k.get("vgpr_count", "0")), int(k.get("agpr_count", "0"))
            lds = int(k.get("group_segment_fixed_size", "0")) + int(info[(arch, name)]["lds"])
            occ, by_reg, by_lds = occupancy(arch, vgpr, agpr, lds)
            n_mma = sum(1 for o in ops if MATRIX_OP.match(o))
            i = info[(arch, name)]
            print("  %-12s %-28s %5d %5d %5s %6d %5d %2d/%-2d (regs %d, lds %d)    %s/%s, %s/%s" %
                  (name[len("mfmad_gemm_"):], want, vgpr, agpr, k.get("sgpr_count", "?"), lds, n_mma,
                   occ, MAX_WAVES[arch], by_reg, by_lds,
                   i["a_store"], i["b_store"], i["a_read"], i["b_read"]))
    for e in errors:
        print("FAIL: " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
