/* A batched launch on an NVIDIA GPU (mfma_gemm.nparts >= 2), whichever
 * provider runs its GEMM: the parts' B (and C) are gathered into joined
 * matrices on the device, the provider runs one GEMM over them as over any
 * request (cuda_dev_on_device tells the device layer that those operands
 * are already there), and the joined D is split back into the parts.
 *
 * Worker thread of the device, context current.  0 or a negative code with
 * a sentence in err. */
#ifndef MFMAD_CUDA_BATCH_H
#define MFMAD_CUDA_BATCH_H

#include "cuda_device.h"
#include "cuda_widths.h"

struct cuda_batch;

/* Probe time: whether the build has the batch's kernels for compute
 * capability cc (the device batches only then). */
bool cuda_batch_usable(int cc);

/* cuda_batch_width, the joined width of n columns, is in cuda_widths.h. */

/* How a device's batches move their parts (the daemon's cuda.* options).
 * copy_stream (cuda.copy_stream): a batch whose B and C lie in mapped
 * memory is gathered on a stream of its own, beside the previous batch's
 * GEMM and copy out, into the other of two sets of buffers.  dma_part
 * (cuda.dma_parts_kb, bytes): an operand whose parts lie in mapped memory,
 * none larger, moves by the copy engines, not the copy kernel.
 * region_copies (cuda.region_copies): an operand whose parts all lie in
 * clients' regions moves by the copy engines, whatever their size, and a
 * batch whose B and C do is gathered on the copy stream.  The copy engines
 * only where the driver has them (cuda_batch_dma_usable).  out_stream
 * (cuda.out_stream), where the copy stream is open (either of the two
 * above): a batch whose D parts all lie in mapped memory is split and
 * copied out on a stream of its own, beside the next batch's GEMM. */
struct cuda_batch_cfg {
	bool copy_stream;
	uint64_t dma_part;
	bool region_copies;
	bool out_stream;
};

/* Loads the data-movement kernels; NULL *b with -ENOEXEC when the build
 * has none for this GPU (the device then does not batch). */
int cuda_batch_open(struct cuda_dev *dev, const struct cuda_batch_cfg *cfg, struct cuda_batch **b,
		    char *err, size_t errlen);
/* Whether the driver has the batched copy the copy engines need
 * (cuMemcpyBatchAsync, CUDA 13's); after the driver is open. */
bool cuda_batch_dma_usable(void);
void cuda_batch_close(struct cuda_batch *b);

/* Records the START mark, gathers g's parts onto the device and fills one
 * with the single GEMM the provider runs: g's shape and scalars, n the
 * joined width (cuda_batch_width of the parts' total), b, c and d the
 * joined matrices' device addresses.  On success the operands stay set on the device until
 * cuda_batch_out or cuda_batch_abort. */
int cuda_batch_in(struct cuda_batch *b, struct cuda_dev *dev, const struct mfma_gemm *g,
		  struct mfma_gemm *one, char *err, size_t errlen);
/* After the provider's launch: splits the joined D into the parts, copies
 * them out and waits (the end of the copy out); clears the operands.
 * With *left not 0 on entry, a copy out that the device makes itself
 * (every part in memory it maps) is not waited for: *left is then the
 * event set + 1 for cuda_dev_finish; else 0, and it was waited for.  With
 * the out stream such a copy out runs there, the end mark with it. */
int cuda_batch_out(struct cuda_batch *b, struct cuda_dev *dev, const struct mfma_gemm *g, int *left,
		   char *err, size_t errlen);
/* Clears the operands after a failed launch and waits for the copy
 * stream (the caller drains the device's). */
void cuda_batch_abort(struct cuda_batch *b, struct cuda_dev *dev);

#endif
