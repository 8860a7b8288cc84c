/* What a lone request's copies cost across the bus: host to device and
 * device to host, for the sizes of a decode request's B and D, from pinned
 * memory (cuMemHostAlloc, the daemon's frames) and from a sealed memfd
 * registered with cuMemHostRegister (a client's region), as one copy or
 * split into pieces on one stream or on as many streams.  Each figure is
 * the median wall time of 200 copies from the first enqueue to the end
 * event's synchronize, the time a request waits for them, beside the
 * median of the events' elapsed time.  A benchmark: never run by meson
 * test.
 *
 *   copy_bench [SIZE_KIB ...]   (default 128 458 512 1792) */
#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mfma_clock.h"
#include "nv_driver.h"

#define RUNS 200
#define MAX_STREAMS 4

#define CU(call)                                                                      \
	do {                                                                          \
		CUresult r_ = (call);                                                 \
		if (r_ != CUDA_SUCCESS) {                                             \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				nv_result_str(r_));                                   \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

static CUstream streams[MAX_STREAMS];
static CUevent ev_start, ev_end, ev_piece[MAX_STREAMS];

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double median_us(uint64_t *v)
{
	qsort(v, RUNS, sizeof(*v), cmp_u64);
	return (double)v[RUNS / 2] / 1000.0;
}

/* One copy of bytes in `pieces` pieces over `nstreams` streams (piece i on
 * stream i % nstreams); the other streams wait for the first's start and
 * the first waits for their ends.  to_dev: host -> device. */
static void copy_once(bool to_dev, CUdeviceptr dev, unsigned char *host, size_t bytes,
		      int pieces, int nstreams)
{
	CU(nv_drv.cuEventRecord(ev_start, streams[0]));
	for (int s = 1; s < nstreams; s++)
		CU(nv_drv.cuStreamWaitEvent(streams[s], ev_start, 0));
	size_t piece = (bytes / (size_t)pieces + 4095) & ~(size_t)4095;
	for (int i = 0; i < pieces; i++) {
		size_t off = (size_t)i * piece;
		if (off >= bytes)
			break;
		size_t len = bytes - off < piece ? bytes - off : piece;
		CUstream st = streams[i % nstreams];
		if (to_dev)
			CU(nv_drv.cuMemcpyHtoDAsync(dev + off, host + off, len, st));
		else
			CU(nv_drv.cuMemcpyDtoHAsync(host + off, dev + off, len, st));
	}
	for (int s = 1; s < nstreams; s++) {
		CU(nv_drv.cuEventRecord(ev_piece[s], streams[s]));
		CU(nv_drv.cuStreamWaitEvent(streams[0], ev_piece[s], 0));
	}
	CU(nv_drv.cuEventRecord(ev_end, streams[0]));
	CU(nv_drv.cuEventSynchronize(ev_end));
}

static void row(const char *mem, bool to_dev, CUdeviceptr dev, unsigned char *host, size_t bytes,
		int pieces, int nstreams)
{
	uint64_t wall[RUNS], gpu[RUNS];
	for (int i = 0; i < 10; i++)
		copy_once(to_dev, dev, host, bytes, pieces, nstreams);
	for (int i = 0; i < RUNS; i++) {
		uint64_t t0 = mfma_clock_ns();
		copy_once(to_dev, dev, host, bytes, pieces, nstreams);
		wall[i] = mfma_clock_ns() - t0;
		float ms = 0;
		CU(nv_drv.cuEventElapsedTime(&ms, ev_start, ev_end));
		gpu[i] = (uint64_t)(ms * 1e6);
	}
	double w = median_us(wall), g = median_us(gpu);
	printf("| %-8s | %s | %8zu | %6d | %7d | %8.1f | %8.1f | %6.1f |\n", mem,
	       to_dev ? "h2d" : "d2h", bytes >> 10, pieces, nstreams, w, g,
	       (double)bytes / (g * 1e3));
}

int main(int argc, char **argv)
{
	size_t kib[16] = { 128, 458, 512, 1792 };
	int nsizes = 4;
	if (argc > 1) {
		nsizes = 0;
		for (int i = 1; i < argc && nsizes < 16; i++)
			kib[nsizes++] = strtoul(argv[i], NULL, 10);
	}
	char err[256];
	if (nv_driver_open(err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	CU(nv_drv.cuInit(0));
	CUdevice cudev;
	CUcontext ctx;
	CU(nv_drv.cuDeviceGet(&cudev, 0));
	CU(nv_drv.cuDevicePrimaryCtxRetain(&ctx, cudev));
	CU(nv_drv.cuCtxSetCurrent(ctx));
	for (int s = 0; s < MAX_STREAMS; s++) {
		CU(nv_drv.cuStreamCreate(&streams[s], CU_STREAM_NON_BLOCKING));
		CU(nv_drv.cuEventCreate(&ev_piece[s], CU_EVENT_DISABLE_TIMING));
	}
	CU(nv_drv.cuEventCreate(&ev_start, CU_EVENT_DEFAULT));
	CU(nv_drv.cuEventCreate(&ev_end, CU_EVENT_DEFAULT));

	size_t most = 0;
	for (int i = 0; i < nsizes; i++)
		most = kib[i] << 10 > most ? kib[i] << 10 : most;
	CUdeviceptr dev;
	CU(nv_drv.cuMemAlloc(&dev, most));
	void *pinned;
	CU(nv_drv.cuMemHostAlloc(&pinned, most, 0));
	int fd = memfd_create("copy_bench", MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)most) < 0) {
		perror("memfd");
		return 1;
	}
	unsigned char *region = mmap(NULL, most, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (region == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(region, 1, most);
	memset(pinned, 1, most);
	CU(nv_drv.cuMemHostRegister(region, most, 0));

	printf("# copies across the bus: median of %d, wall = first enqueue to the end event's "
	       "synchronize, gpu = the events' elapsed time, GB/s from gpu\n", RUNS);
	printf("| memory   | dir | KiB      | pieces | streams | wall us  | gpu us   | GB/s   |\n");
	printf("|----------|-----|----------|--------|---------|----------|----------|--------|\n");
	const int shapes[][2] = { { 1, 1 }, { 2, 1 }, { 2, 2 }, { 4, 2 }, { 4, 4 } };
	for (int i = 0; i < nsizes; i++) {
		size_t bytes = kib[i] << 10;
		for (int dir = 0; dir < 2; dir++)
			for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
				row("pinned", dir == 0, dev, pinned, bytes, shapes[s][0],
				    shapes[s][1]);
				row("memfd", dir == 0, dev, region, bytes, shapes[s][0],
				    shapes[s][1]);
			}
	}
	/* How the host learns that a copy ended: the end event's synchronize,
	 * or a flag the stream writes into mapped pinned memory after the copy
	 * (cuStreamWriteValue32), read in a spin. */
	if (!nv_drv.cuStreamWriteValue32) {
		fprintf(stderr, "copy_bench: the driver has no cuStreamWriteValue32\n");
		return 1;
	}
	volatile uint32_t *flag;
	void *flag_host;
	CUdeviceptr flag_dev;
	CU(nv_drv.cuMemHostAlloc(&flag_host, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	CU(nv_drv.cuMemHostGetDevicePointer(&flag_dev, flag_host, 0));
	flag = flag_host;
	*flag = 0;
	printf("# the end of a d2h copy into the memfd: event synchronize against a flag written by the "
	       "stream (median wall us of %d)\n", RUNS);
	printf("| KiB | event sync | flag spin |\n|---:|---:|---:|\n");
	const size_t ends[] = { 0, 128, 458 };
	uint32_t seq = 0;
	for (size_t e = 0; e < sizeof(ends) / sizeof(ends[0]); e++) {
		size_t bytes = ends[e] << 10;
		uint64_t ev_wall[RUNS], fl_wall[RUNS];
		for (int i = -10; i < RUNS; i++) {
			uint64_t t0 = mfma_clock_ns();
			if (bytes)
				CU(nv_drv.cuMemcpyDtoHAsync(region, dev, bytes, streams[0]));
			CU(nv_drv.cuEventRecord(ev_end, streams[0]));
			CU(nv_drv.cuEventSynchronize(ev_end));
			if (i >= 0)
				ev_wall[i] = mfma_clock_ns() - t0;
			t0 = mfma_clock_ns();
			if (bytes)
				CU(nv_drv.cuMemcpyDtoHAsync(region, dev, bytes, streams[0]));
			CU(nv_drv.cuEventRecord(ev_end, streams[0]));
			CU(nv_drv.cuStreamWriteValue32(streams[0], flag_dev, ++seq, 0));
			while (*flag != seq)
				;
			if (i >= 0)
				fl_wall[i] = mfma_clock_ns() - t0;
		}
		printf("| %zu | %.1f | %.1f |\n", ends[e], median_us(ev_wall), median_us(fl_wall));
	}
	CU(nv_drv.cuStreamSynchronize(streams[0]));
	CU(nv_drv.cuMemFreeHost(flag_host));

	/* The floor: the two events alone. */
	uint64_t wall[RUNS];
	for (int i = 0; i < RUNS; i++) {
		uint64_t t0 = mfma_clock_ns();
		CU(nv_drv.cuEventRecord(ev_start, streams[0]));
		CU(nv_drv.cuEventRecord(ev_end, streams[0]));
		CU(nv_drv.cuEventSynchronize(ev_end));
		wall[i] = mfma_clock_ns() - t0;
	}
	printf("# two events alone, wall: %.1f us\n", median_us(wall));
	CU(nv_drv.cuMemHostUnregister(region));
	munmap(region, most);
	close(fd);
	CU(nv_drv.cuMemFreeHost(pinned));
	CU(nv_drv.cuMemFree(dev));
	return 0;
}
