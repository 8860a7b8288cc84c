/* The devices the daemon serves on: the backends compiled in, as a
 * table, and the devices each one found.  Probing runs on the main
 * thread before the loop; open and close run on the device's worker. */
#ifndef MFMAD_DEVICES_H
#define MFMAD_DEVICES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "daemon.h"

struct device {
	struct daemon *d;
	int index;              /* daemon-wide */
	int bindex;             /* within its backend */
	const struct backend_ops *ops;
	struct backend_device_info info;
	void *bdev;             /* the backend's device; worker thread only */
	struct stats_device *st;
	uint64_t budget;        /* weight bytes allowed */
	uint64_t weight_bytes;  /* reserved and resident; loop thread (st mirrors it) */
	/* Written by the worker before sched_start returns, read-only after. */
	int open_rc;
	char open_err[256];
	/* devices_fault: the device lost its context (DEVICE_LOST once
	 * lost_err is written, by whichever thread saw it first). */
	_Atomic int lost;
	char lost_err[256];
	/* read_arena.c: host_register's handle for the arena of request
	 * frames, and why the device could not register it ("" if it did). */
	void *reads_handle;
	char reads_err[256];
};

/* Finds the devices of every enabled backend (GPUs first, then the CPU
 * as configured) and fills d->dev and d->ndev. */
int devices_probe(struct daemon *d, char *err, size_t errlen);
void devices_free(struct daemon *d);

/* Worker thread: opens the device (filling open_rc / open_err), closes it. */
void devices_open(struct device *v);
void devices_close(struct device *v);
/* Worker thread: the worker enters phase (enum stats_worker_phase); the
 * time since its last change is counted to the phase it leaves, which is
 * returned so that a nested section can go back to it. */
int devices_phase(struct device *v, int phase);
/* Logs what the device is and whether it opened (main thread). */
void devices_report(const struct device *v);

enum { DEVICE_SERVES, DEVICE_LOSING, DEVICE_LOST };

/* Whether the device takes work: it opened, and has not lost its
 * context since.  Any thread. */
bool devices_up(const struct device *v);
/* Why a device that is not up is not (its open's error, or the fault
 * that lost it), as a sentence naming the device. */
void devices_why_down(const struct device *v, char *buf, size_t len);
/* A backend call on v returned rc (its sentence in err): when that says
 * the device can run nothing more (-ENOTRECOVERABLE), the device takes no
 * more work, and the first thread to see it logs why.  Whether it did.
 * Any thread. */
bool devices_fault(struct device *v, int rc, const char *err);

/* Whether the device is up and has a kernel for this input dtype and A. */
bool devices_runs(const struct device *v, enum mfma_dtype t, bool sparse);
/* Whether any device of the daemon has such a kernel (up or not). */
bool devices_any_runs(const struct daemon *d, enum mfma_dtype t, bool sparse);

#endif
