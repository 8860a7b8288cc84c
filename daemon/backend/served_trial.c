#include "served_trial.h"

uint64_t served_trial_median(uint64_t *v, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		uint64_t x = v[i];
		size_t j = i;
		for (; j > 0 && v[j - 1] > x; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
	return v[n / 2];
}

/* runs past what a trial keeps count as that many. */
static uint32_t bounded(uint32_t runs)
{
	return runs < SERVED_TRIAL_RUNS_MAX ? runs : SERVED_TRIAL_RUNS_MAX;
}

unsigned served_trial_size(unsigned measured, uint32_t runs)
{
	if (measured < 2 || runs == 0)
		return 0;
	return measured < SERVED_TRIAL_MAX ? measured : SERVED_TRIAL_MAX;
}

int served_trial_slot(const struct served_trial *tr, unsigned measured, uint32_t runs)
{
	const unsigned k = served_trial_size(measured, runs);
	runs = bounded(runs);
	if (k == 0 || tr->over)
		return -1;
	for (unsigned s = 0; s < k; s++)
		if (tr->taken[s] < runs)
			return (int)s;
	return -1;
}

bool served_trial_note(struct served_trial *tr, unsigned measured, uint32_t runs, int slot,
		       uint64_t kernel_ns, const char *variant, struct served_trial_end *end)
{
	const unsigned k = served_trial_size(measured, runs);
	runs = bounded(runs);
	if (k == 0 || tr->over || slot < 0 || (unsigned)slot >= k)
		return false;
	tr->variant[slot] = variant;
	if (!tr->warmed[slot]) {
		tr->warmed[slot] = true;
		return false;
	}
	if (tr->taken[slot] < runs)
		tr->ns[slot][tr->taken[slot]++] = kernel_ns;
	for (unsigned s = 0; s < k; s++)
		if (tr->taken[s] < runs)
			return false;
	tr->over = true;
	end->n = (uint8_t)k;
	for (unsigned s = 0; s < k; s++) {
		uint64_t med = served_trial_median(tr->ns[s], runs);
		/* Insertion by median; an equal one stays behind the slot
		 * measured faster. */
		unsigned j = s;
		for (; j > 0 && end->median_ns[j - 1] > med; j--) {
			end->median_ns[j] = end->median_ns[j - 1];
			end->slot[j] = end->slot[j - 1];
		}
		end->median_ns[j] = med;
		end->slot[j] = (uint8_t)s;
	}
	return true;
}
