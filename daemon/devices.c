/* The backends compiled in, as one table, and the devices they found. */
#include "devices.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "choices.h"
#include "log.h"
#include "mfma_clock.h"
#include "read_arena.h"

/* In the order devices are numbered: GPUs first, the CPU last (it serves
 * where no GPU does, or beside them when cpu.enabled = true). */
static const struct backend_entry {
	const struct backend_ops *ops; /* NULL: not built into this mfmad */
	const char *name;
	size_t enable; /* offset of its enum backend_enable in the config */
	bool gpu;
} backends[] = {
#ifdef MFMAD_HAVE_CUDA
	{ &backend_cuda, "cuda", offsetof(struct mfmad_config, cuda), true },
#else
	{ NULL, "cuda", offsetof(struct mfmad_config, cuda), true },
#endif
#ifdef MFMAD_HAVE_HIP
	{ &backend_hip, "hip", offsetof(struct mfmad_config, hip), true },
#else
	{ NULL, "hip", offsetof(struct mfmad_config, hip), true },
#endif
	{ &backend_cpu, "cpu", offsetof(struct mfmad_config, cpu), false },
};

static enum backend_enable enable_of(const struct mfmad_config *c, const struct backend_entry *b)
{
	return *(const enum backend_enable *)(const void *)((const char *)c + b->enable);
}

static void add_devices(struct daemon *d, const struct backend_ops *b, int count)
{
	for (int i = 0; i < count && d->ndev < STATS_MAX_DEVICES; i++) {
		struct device *v = &d->dev[d->ndev];
		memset(v, 0, sizeof(*v));
		v->d = d;
		v->index = d->ndev;
		v->bindex = i;
		v->ops = b;
		v->open_rc = 1;
		if (b->describe(i, &v->info) < 0)
			snprintf(v->info.name, sizeof(v->info.name), "%s device %d", b->name, i);
		v->st = &d->stats.dev[v->index];
		snprintf(v->st->backend, sizeof(v->st->backend), "%s", b->name);
		snprintf(v->st->arch, sizeof(v->st->arch), "%s", v->info.arch);
		snprintf(v->st->name, sizeof(v->st->name), "%s", v->info.name);
		v->st->mem_total = v->info.mem_total;
		v->budget = d->cfg.weight_budget_bytes ? d->cfg.weight_budget_bytes
						       : v->info.mem_total / 4 * 3;
		d->ndev++;
	}
}

/* What the backends are told of the configuration, at probe and open. */
static void backend_config_of(const struct daemon *d, struct backend_config *bc)
{
	*bc = (struct backend_config){ .cpu_threads = d->cfg.cpu_threads,
				       .cpu_devices = d->cfg.cpu_devices,
				       .cuda_providers = d->cfg.cuda_providers,
				       .cuda_graphs = d->cfg.cuda_graphs,
				       .cuda_copy_stream = d->cfg.cuda_copy_stream,
				       .cuda_dma_part_bytes = d->cfg.cuda_dma_part_bytes,
				       .cuda_region_copies = d->cfg.cuda_region_copies,
				       .cuda_out_stream = d->cfg.cuda_out_stream,
				       .cuda_gate = d->cfg.cuda_gate,
				       .cuda_tile_out = d->cfg.cuda_tile_out,
				       .cuda_served_trial = d->cfg.cuda_served_trial,
				       .cuda_pinned_answer_bytes = d->cfg.cuda_pinned_answer_bytes,
				       .hip_providers = d->cfg.hip_providers,
				       .choices = choices_hook(d) };
}

/* Probes one backend; 0 or more devices added, or a negative code when an
 * enabled (not "auto") backend cannot serve. */
static int probe_one(struct daemon *d, const struct backend_entry *b, char *err, size_t errlen)
{
	enum backend_enable en = enable_of(&d->cfg, b);
	if (en == BACKEND_OFF)
		return 0;
	if (!b->ops) {
		if (en == BACKEND_ON) {
			snprintf(err, errlen, "%s.enabled = true but this mfmad was built without the %s backend",
				 b->name, b->name);
			return -ENOTSUP;
		}
		return 0;
	}
	struct backend_config bc;
	backend_config_of(d, &bc);
	char berr[256] = "";
	int n = b->ops->probe(&bc, berr, sizeof(berr));
	if (n < 0) {
		if (en == BACKEND_ON || !b->gpu) {
			snprintf(err, errlen, "%s backend: %s", b->name, berr);
			return n;
		}
		log_warn("%s backend unavailable: %s", b->name, berr);
		return 0;
	}
	if (n == 0) {
		if (en == BACKEND_ON) {
			snprintf(err, errlen, "%s backend is enabled but found no device", b->name);
			return -ENODEV;
		}
		log_info("%s backend: no device", b->name);
		return 0;
	}
	if (b->gpu)
		log_info("%s backend: %d device(s)", b->name, n);
	add_devices(d, b->ops, n);
	return n;
}

int devices_probe(struct daemon *d, char *err, size_t errlen)
{
	d->dev = calloc(STATS_MAX_DEVICES, sizeof(*d->dev));
	if (!d->dev) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	int gpus = 0;
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		const struct backend_entry *b = &backends[i];
		/* cpu.enabled = "auto" serves on the CPU only where no GPU was found. */
		if (!b->gpu && enable_of(&d->cfg, b) == BACKEND_AUTO && gpus > 0)
			continue;
		int n = probe_one(d, b, err, errlen);
		if (n < 0)
			return n;
		if (b->gpu)
			gpus += n;
	}
	if (d->ndev == 0) {
		snprintf(err, errlen, "no device to serve on (cpu.enabled = false and no GPU found)");
		return -ENODEV;
	}
	d->stats.ndevices = d->ndev;
	/* The budget is per device; status and /metrics show the total,
	 * beside the total of weight bytes held on all devices. */
	for (int i = 0; i < d->ndev; i++)
		STATS_ADD(d->stats.weight_budget, d->dev[i].budget);
	return 0;
}

void devices_free(struct daemon *d)
{
	free(d->dev);
	d->dev = NULL;
	d->ndev = 0;
}

void devices_open(struct device *v)
{
	struct backend_config bc;
	backend_config_of(v->d, &bc);
	char err[sizeof(v->open_err)] = "";
	devices_phase(v, STATS_WORKER_PREPARE); /* opening the device counts as preparing */
	int rc = v->ops->open(v->bindex, &bc, &v->bdev, err, sizeof(err));
	snprintf(v->open_err, sizeof(v->open_err), "%s", err);
	v->open_rc = rc < 0 ? rc : 0;
	atomic_store_explicit(&v->st->up, rc < 0 ? 0 : 1, memory_order_relaxed);
	v->reads_err[0] = '\0';
	if (read_arena_register(v, err, sizeof(err)) < 0)
		snprintf(v->reads_err, sizeof(v->reads_err), "%s", err);
}

int devices_phase(struct device *v, int phase)
{
	return stats_worker_switch(v->st, phase, mfma_clock_ns());
}

void devices_report(const struct device *v)
{
	if (v->open_rc < 0)
		log_err("device %d (%s %s) failed to open: %s", v->index, v->ops->name, v->info.arch,
			v->open_err);
	log_info("device %d: %s %s \"%s\", %" PRIu64 " MiB, weight budget %" PRIu64
		 " MiB, variants: %s",
		 v->index, v->ops->name, v->info.arch, v->info.name, v->info.mem_total >> 20,
		 v->budget >> 20, v->info.variants[0] ? v->info.variants : "-");
	if (v->reads_err[0])
		log_info("device %d copies request frames through staging: %s", v->index,
			 v->reads_err);
}

void devices_close(struct device *v)
{
	read_arena_unregister(v);
	if (v->bdev)
		v->ops->close(v->bdev);
	v->bdev = NULL;
}

bool devices_up(const struct device *v)
{
	return v->open_rc == 0 && atomic_load_explicit(&v->lost, memory_order_relaxed) == 0;
}

void devices_why_down(const struct device *v, char *buf, size_t len)
{
	if (v->open_rc < 0)
		snprintf(buf, len, "device %d (%s %s) failed to start: %s", v->index, v->ops->name,
			 v->info.arch, v->open_err);
	else if (atomic_load_explicit(&v->lost, memory_order_acquire) == DEVICE_LOST)
		snprintf(buf, len, "device %d (%s %s) lost its context (%s) and takes no work until "
			 "mfmad restarts", v->index, v->ops->name, v->info.arch, v->lost_err);
	else
		snprintf(buf, len, "device %d (%s %s) is losing its context", v->index,
			 v->ops->name, v->info.arch);
}

bool devices_fault(struct device *v, int rc, const char *err)
{
	if (rc != -ENOTRECOVERABLE)
		return false;
	int serves = DEVICE_SERVES;
	if (atomic_compare_exchange_strong(&v->lost, &serves, DEVICE_LOSING)) {
		snprintf(v->lost_err, sizeof(v->lost_err), "%s", err && err[0] ? err : strerror(-rc));
		atomic_store_explicit(&v->lost, DEVICE_LOST, memory_order_release);
		atomic_store_explicit(&v->st->up, 0, memory_order_relaxed);
		log_err("device %d (%s %s) lost its context: %s; it takes no more work until mfmad "
			"restarts", v->index, v->ops->name, v->info.arch, v->lost_err);
	}
	return true;
}

bool devices_runs(const struct device *v, enum mfma_dtype t, bool sparse)
{
	return devices_up(v) && backend_runs(&v->info, t, sparse);
}

bool devices_any_runs(const struct daemon *d, enum mfma_dtype t, bool sparse)
{
	for (int i = 0; i < d->ndev; i++)
		if (backend_runs(&d->dev[i].info, t, sparse))
			return true;
	return false;
}
