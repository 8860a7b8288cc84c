#!/bin/sh
# Builds bench/nvidia/wgmma_bench.cu (the sm_90a wgmma.sp kernels' probe,
# checks and benchmark) into .devlibs/wgmma_bench, with the resource
# report of every kernel in .devlibs/wgmma_ptxas.txt: registers, spills
# (must be 0) and ptxas's C7515 "wgmma serialized" notes (must be none).
# The binary links the CUDA runtime statically and cuBLAS dynamically, so
# it runs on the GPU machine as built here.
set -eu
cd "$(dirname "$0")/../.."
mkdir -p .devlibs
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# The plan is the daemon's (C, pure): built with the C compiler.
for f in nv_plan nv_wgmma_plan; do
	cc -std=c17 -O2 -I/usr/local/cuda/include -Ikernels/nvidia -Ikernels/common \
		-c kernels/nvidia/$f.c -o "$T/$f.o"
done
nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v \
	-Ikernels/nvidia -Ikernels/common -o .devlibs/wgmma_bench bench/nvidia/wgmma_bench.cu \
	"$T/nv_plan.o" "$T/nv_wgmma_plan.o" -lcublas 2>.devlibs/wgmma_ptxas.txt ||
	{ cat .devlibs/wgmma_ptxas.txt; exit 1; }
grep -E "C7515|spill stores" .devlibs/wgmma_ptxas.txt | grep -vE " 0 bytes spill stores" || true
