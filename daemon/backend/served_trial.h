/* A bucket's served trial (cuda.served_trial), the pure part: the
 * measure at warm time times each candidate in a block of launches back
 * to back, which ranks them differently from serving them one request at
 * a time (a lone launch, a library from a CUDA graph, a weight held in L2
 * between requests: bench/RESULTS.md).  So the first served launches of a
 * bucket go to its candidates (SERVED_TRIAL_MAX at most), a block of `runs`
 * timed launches each (after an untimed first) in the measured order, and
 * then they are ordered by the median of their kernel times as served.
 * Pure memory; the CUDA backend keeps one per (weight, N bucket, output
 * type) and runs what it says. */
#ifndef MFMAD_SERVED_TRIAL_H
#define MFMAD_SERVED_TRIAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Candidates a trial serves at most: four, every provider a CUDA device
 * has, so that none is left out however the measure ranks it.  With two,
 * then three, the kernel that serves fastest was left out whenever the
 * back-to-back ranking put it third, then fourth (the 4096x4096 2:4
 * weight on an H100, bench/RESULTS.md). */
#define SERVED_TRIAL_MAX 4
/* Timed launches a candidate keeps (cuda.served_trial's bound). */
#define SERVED_TRIAL_RUNS_MAX 64

struct served_trial {
	uint8_t taken[SERVED_TRIAL_MAX]; /* timed launches of each so far */
	bool warmed[SERVED_TRIAL_MAX];   /* its untimed first launch ran */
	bool over;
	uint64_t ns[SERVED_TRIAL_MAX][SERVED_TRIAL_RUNS_MAX];
	const char *variant[SERVED_TRIAL_MAX]; /* the variant each last ran */
};

/* How a trial ended: the candidates (slots of the measured order) by their
 * medians, fastest first (ties keep the measured order), and those
 * medians. */
struct served_trial_end {
	uint8_t n;
	uint8_t slot[SERVED_TRIAL_MAX];
	uint64_t median_ns[SERVED_TRIAL_MAX];
};

/* The median of n >= 1 times, the upper one of an even n (sorts them in
 * place). */
uint64_t served_trial_median(uint64_t *v, size_t n);

/* Candidates in the trial of a bucket with `measured` candidates ranked:
 * at most SERVED_TRIAL_MAX, 0 when there are fewer than two or runs is 0. */
unsigned served_trial_size(unsigned measured, uint32_t runs);

/* Which slot of the measured order this served launch tries: the slots in
 * order, a block of runs + 1 launches each (runs at most
 * SERVED_TRIAL_RUNS_MAX: more count as that many); -1 once the trial is
 * over or when there is none (served_trial_size 0). */
int served_trial_slot(const struct served_trial *tr, unsigned measured, uint32_t runs);

/* Counts a served launch of `slot` (its kernel time, its variant), the
 * first of each block untimed.  Returns true when it ends the trial, with
 * *end filled; false otherwise. */
bool served_trial_note(struct served_trial *tr, unsigned measured, uint32_t runs, int slot,
		       uint64_t kernel_ns, const char *variant, struct served_trial_end *end);

#endif
