/* The CUDA driver API, opened at run time.
 *
 * mfmad does not link libcuda: a binary with libcuda.so.1 in its
 * DT_NEEDED list does not even start on a machine without the NVIDIA
 * driver, and there the CUDA backend must report zero devices instead.
 * So the library is dlopen'ed once and every entry point is resolved
 * through cuGetProcAddress for the API version of the headers we were
 * built with; the prototypes (and so the types) still come from cuda.h. */
#ifndef MFMA_NV_DRIVER_H
#define MFMA_NV_DRIVER_H

#include <cuda.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The entry points used; a name that cuda.h maps to a versioned symbol
 * (cuMemAlloc -> cuMemAlloc_v2) gets the type of that version, which is
 * also what cuGetProcAddress returns for CUDA_VERSION.  Not
 * cuCtxSynchronize: CUDA 13's cuda.h declares it without arguments while
 * cuGetProcAddress hands out cuCtxSynchronize_v2(CUcontext) for 13000 (a
 * call with none made compute-sanitizer report "context is destroyed"
 * on the H200); stream synchronisation is what the backends use. */
#define NV_DRIVER_FUNCS(X)                          \
	X(cuInit)                                   \
	X(cuDriverGetVersion)                       \
	X(cuGetErrorString)                         \
	X(cuDeviceGetCount)                         \
	X(cuDeviceGet)                              \
	X(cuDeviceGetName)                          \
	X(cuDeviceGetAttribute)                     \
	X(cuDeviceTotalMem)                         \
	X(cuDevicePrimaryCtxRetain)                 \
	X(cuDevicePrimaryCtxRelease)                \
	X(cuCtxSetCurrent)                          \
	X(cuModuleLoadData)                         \
	X(cuModuleUnload)                           \
	X(cuModuleGetFunction)                      \
	X(cuFuncSetAttribute)                       \
	X(cuFuncGetAttribute)                       \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
	X(cuLaunchKernel)                           \
	X(cuTensorMapEncodeTiled)                   \
	X(cuMemAlloc)                               \
	X(cuMemFree)                                \
	X(cuMemGetInfo)                             \
	X(cuMemHostAlloc)                           \
	X(cuMemFreeHost)                            \
	X(cuMemcpyHtoDAsync)                        \
	X(cuMemcpy2DAsync)                          \
	X(cuMemHostRegister)                        \
	X(cuMemHostUnregister)                      \
	X(cuMemHostGetDevicePointer)                \
	X(cuMemcpyDtoHAsync)                        \
	X(cuMemcpyDtoDAsync)                        \
	X(cuMemsetD8Async)                          \
	X(cuMemsetD32Async)                         \
	X(cuStreamCreate)                           \
	X(cuStreamDestroy)                          \
	X(cuStreamSynchronize)                      \
	X(cuStreamWaitEvent)                        \
	X(cuEventCreate)                            \
	X(cuEventDestroy)                           \
	X(cuEventRecord)                            \
	X(cuEventSynchronize)                       \
	X(cuEventElapsedTime)                       \
	X(cuStreamBeginCapture)                     \
	X(cuStreamEndCapture)                       \
	X(cuGraphInstantiateWithFlags)              \
	X(cuGraphLaunch)                            \
	X(cuGraphExecDestroy)                       \
	X(cuGraphDestroy)

/* Entry points a driver may lack: NULL then, and what needs one says so.
 * cuMemcpyBatchAsync (many copies, one call, on the copy engines) came
 * with CUDA 12.8 and took its present arguments in 13.0.
 * cuStreamWriteValue32 (a stream's write of a word in memory) sets the
 * gate of a wgmma kernel launched before its B (cuda.gate) and is
 * copy_bench's flag.  cuLaunchKernelEx (a launch with attributes) makes
 * the wgmma kernels' programmatic dependent launches. */
#if CUDA_VERSION >= 13000
#define NV_HAVE_BATCH_COPY 1
#define NV_DRIVER_OPTIONAL_FUNCS(X) X(cuMemcpyBatchAsync) X(cuStreamWriteValue32) X(cuLaunchKernelEx)
#else
#define NV_HAVE_BATCH_COPY 0
#define NV_DRIVER_OPTIONAL_FUNCS(X) X(cuStreamWriteValue32) X(cuLaunchKernelEx)
#endif

struct nv_driver {
#define NV_DRIVER_FIELD(fn) __typeof__(&fn) fn;
	NV_DRIVER_FUNCS(NV_DRIVER_FIELD)
	NV_DRIVER_OPTIONAL_FUNCS(NV_DRIVER_FIELD)
#undef NV_DRIVER_FIELD
};

/* Filled by nv_driver_open(); valid once it has returned 0. */
extern struct nv_driver nv_drv;

/* Opens libcuda.so.1 and resolves every entry point (once per process;
 * later calls return the first result).  Returns 0, or -ENOENT when there
 * is no driver library (not an error for the caller: zero devices) or
 * -ENOSYS when it lacks an entry point; err says which. */
int nv_driver_open(char *err, size_t errlen);

/* An entry point nv_drv does not hold (a benchmark's or a probe's), in
 * the version our headers declare, as nv_driver_open resolves its own
 * (opening the driver if need be); NULL when the driver lacks it. */
void *nv_driver_sym(const char *name);

/* One cuMemcpy2DAsync on stream s: rows rows of width bytes, spitch
 * apart in host memory hsrc (or, hsrc NULL, device memory dsrc), into
 * device memory dst, dpitch apart. */
CUresult nv_copy_rows_in(CUdeviceptr dst, size_t dpitch, const void *hsrc, CUdeviceptr dsrc, size_t spitch,
			 size_t width, size_t rows, CUstream s);

/* "cuMemAlloc: out of memory" style text for a CUresult. */
const char *nv_result_str(CUresult r);

/* Negative errno for a CUresult (-ENOMEM for allocation failures). */
int nv_result_errno(CUresult r);

/* What the kernel loaders and the probe read of a device: compute
 * capability (major * 10 + minor), multiprocessors, the shared memory a
 * block may opt into.  0, or the failed query's errno with err filled. */
struct nv_device_attrs {
	int cc, sms, smem_optin;
};
int nv_device_attrs(CUdevice dev, struct nv_device_attrs *a, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
