/* The CUDA driver API, opened at run time (see nv_driver.h). */
#include "nv_driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct nv_driver nv_drv;

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
				CUdriverProcAddressQueryResult *);

static pthread_once_t open_once = PTHREAD_ONCE_INIT;
static int open_rc;
static char open_err[256];
static get_proc_fn get_proc; /* the driver's cuGetProcAddress, once open */

/* Entry point name in the version our headers declare, stored in *slot
 * (a function pointer of nv_drv): whether the driver has it (NULL stored
 * if not). */
static bool resolve(get_proc_fn get_proc, const char *name, void *slot)
{
	void *p = NULL;
	CUdriverProcAddressQueryResult q;
	if (get_proc(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS)
		p = NULL;
	memcpy(slot, &p, sizeof(p));
	return p != NULL;
}

static void open_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		open_rc = -ENOENT;
		snprintf(open_err, sizeof(open_err), "no NVIDIA driver: %s", dlerror());
		return;
	}
	/* cuGetProcAddress itself is found by its versioned symbol; it then
	 * hands out each entry point in the version matching our headers. */
	void *sym = dlsym(lib, "cuGetProcAddress_v2");
	memcpy(&get_proc, &sym, sizeof(get_proc));
	if (!get_proc) {
		open_rc = -ENOSYS;
		snprintf(open_err, sizeof(open_err),
			 "the NVIDIA driver library has no cuGetProcAddress_v2 (driver too old for CUDA %d)",
			 CUDA_VERSION);
		return;
	}
	/* The required entry points fail the open when missing; the optional
	 * ones stay NULL. */
#define NV_DRIVER_RESOLVE(fn)                                                             \
	if (!resolve(get_proc, #fn, &nv_drv.fn)) {                                        \
		open_rc = -ENOSYS;                                                        \
		snprintf(open_err, sizeof(open_err),                                      \
			 "the NVIDIA driver has no %s for CUDA %d (driver too old?)", #fn, \
			 CUDA_VERSION);                                                   \
		return;                                                                   \
	}
	NV_DRIVER_FUNCS(NV_DRIVER_RESOLVE)
#undef NV_DRIVER_RESOLVE
#define NV_DRIVER_RESOLVE_OPTIONAL(fn) resolve(get_proc, #fn, &nv_drv.fn);
	NV_DRIVER_OPTIONAL_FUNCS(NV_DRIVER_RESOLVE_OPTIONAL)
#undef NV_DRIVER_RESOLVE_OPTIONAL
	open_rc = 0;
}

int nv_driver_open(char *err, size_t errlen)
{
	pthread_once(&open_once, open_driver);
	if (open_rc < 0 && err && errlen)
		snprintf(err, errlen, "%s", open_err);
	return open_rc;
}

void *nv_driver_sym(const char *name)
{
	void *p = NULL;
	if (nv_driver_open(NULL, 0) < 0 || !resolve(get_proc, name, &p))
		return NULL;
	return p;
}

CUresult nv_copy_rows_in(CUdeviceptr dst, size_t dpitch, const void *hsrc, CUdeviceptr dsrc, size_t spitch,
			 size_t width, size_t rows, CUstream s)
{
	CUDA_MEMCPY2D c2;
	memset(&c2, 0, sizeof(c2));
	c2.srcMemoryType = hsrc ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
	c2.srcHost = hsrc;
	c2.srcDevice = hsrc ? 0 : dsrc;
	c2.srcPitch = spitch;
	c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c2.dstDevice = dst;
	c2.dstPitch = dpitch;
	c2.WidthInBytes = width;
	c2.Height = rows;
	return nv_drv.cuMemcpy2DAsync(&c2, s);
}

const char *nv_result_str(CUresult r)
{
	const char *s = NULL;
	if (nv_drv.cuGetErrorString && nv_drv.cuGetErrorString(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

int nv_result_errno(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS: return 0;
	case CUDA_ERROR_OUT_OF_MEMORY: return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE: return -EINVAL;
	case CUDA_ERROR_NO_DEVICE: return -ENODEV;
	case CUDA_ERROR_NO_BINARY_FOR_GPU: return -ENOEXEC;
	/* The context is lost: every later call in it fails the same way. */
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
		return -ENOTRECOVERABLE;
	default: return -EIO;
	}
}

int nv_device_attrs(CUdevice dev, struct nv_device_attrs *a, char *err, size_t errlen)
{
	static const struct {
		CUdevice_attribute attr;
		const char *what;
	} q[] = {
		{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability" },
		{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability" },
		{ CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count" },
		{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory per block" },
	};
	int v[4] = { 0 };
	for (size_t i = 0; i < 4; i++) {
		CUresult r = nv_drv.cuDeviceGetAttribute(&v[i], q[i].attr, dev);
		if (r != CUDA_SUCCESS) {
			if (err && errlen)
				snprintf(err, errlen, "cuDeviceGetAttribute(%s) failed: %s", q[i].what,
					 nv_result_str(r));
			return nv_result_errno(r);
		}
	}
	*a = (struct nv_device_attrs){ .cc = v[0] * 10 + v[1], .sms = v[2], .smem_optin = v[3] };
	return 0;
}
