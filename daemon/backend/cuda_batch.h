/* A batched launch on an NVIDIA GPU (mfma_gemm.nparts >= 2), whichever
 * provider runs its GEMM: the parts' B (and C) are gathered into joined
 * matrices on the device, the provider runs one GEMM over them as over any
 * request (cuda_dev_on_device tells the device layer that those operands
 * are already there), and the joined D is split back into the parts.
 *
 * Two ways to run one.  In step (cuda_batch_in, the provider's launch,
 * cuda_batch_out): everything on the device's stream, the copy out waited
 * for.  Pipelined (cuda_batch_start, the launch, cuda_batch_launched, and
 * later cuda_batch_wait), when every part lies in registered regions: the
 * gathers run on a stream of their own into one of two slots, so a batch's
 * copies in overlap the previous batch's GEMM and copies out, and nothing
 * is waited for until cuda_batch_wait.
 *
 * Worker thread of the device, context current.  0 or a negative code with
 * a sentence in err. */
#ifndef MFMAD_CUDA_BATCH_H
#define MFMAD_CUDA_BATCH_H

#include "cuda_device.h"

struct cuda_batch;
struct cuda_batch_slot;

/* Probe time: whether the build has the batch's kernels for compute
 * capability cc (the device batches only then). */
bool cuda_batch_usable(int cc);

/* The width of the joined matrices for n columns of parts: rounded up, so
 * that the batches of a load (any total from 2 to thousands of columns)
 * come in a few widths, and a provider that plans per N (cuSPARSELt
 * searches its algorithms for each N it sees, some 60 ms on the H200)
 * plans once per width.  The padding columns are zero and never copied
 * out. */
uint32_t cuda_batch_width(uint32_t n);

/* Loads the data-movement kernels and makes the gathers' stream. */
int cuda_batch_open(struct cuda_dev *dev, struct cuda_batch **b, char *err, size_t errlen);
void cuda_batch_close(struct cuda_batch *b);

/* In step.  Records the START mark, gathers g's parts onto the device and
 * fills one with the single GEMM the provider runs: g's shape and
 * scalars, n the joined width, b, c and d the joined matrices' device
 * addresses.  On success the operands stay set on the device until
 * cuda_batch_out or cuda_batch_abort. */
int cuda_batch_in(struct cuda_batch *b, struct cuda_dev *dev, const struct mfma_gemm *g,
		  struct mfma_gemm *one, char *err, size_t errlen);
/* After the provider's launch: splits the joined D into the parts, copies
 * them out and waits (the end of the copy out); clears the operands. */
int cuda_batch_out(struct cuda_batch *b, struct cuda_dev *dev, const struct mfma_gemm *g, char *err,
		   size_t errlen);
/* Clears the operands and the marks after a failed launch, frees slot
 * (may be NULL); the caller drains. */
void cuda_batch_abort(struct cuda_batch *b, struct cuda_dev *dev, struct cuda_batch_slot *slot);

/* Pipelined.  -EAGAIN when g cannot go this way (a part outside the
 * regions the device maps, or both slots taken): run it in step.  Else
 * queues the gathers into a free slot, makes the device's stream wait for
 * them, sets the operands and the slot's marks on the device, fills one as
 * cuda_batch_in does and *slot. */
int cuda_batch_start(struct cuda_batch *b, struct cuda_dev *dev, const struct mfma_gemm *g,
		     struct mfma_gemm *one, struct cuda_batch_slot **slot, char *err,
		     size_t errlen);
/* After the provider's launch of a started batch: queues the split and the
 * copies out, marks the end, and restores the device's own operands and
 * marks.  variant is what ran (kept for cuda_batch_wait). */
int cuda_batch_launched(struct cuda_batch *b, struct cuda_dev *dev, const struct mfma_gemm *g,
			struct cuda_batch_slot *slot, const char *variant, char *err,
			size_t errlen);
/* Waits for a started batch's end, fills its timing and frees the slot.
 * A kernel fault surfaces here. */
int cuda_batch_wait(struct cuda_batch_slot *slot, struct backend_timing *t, char *err,
		    size_t errlen);

#endif
