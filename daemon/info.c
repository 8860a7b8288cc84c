#include "info.h"

#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "declare.h"
#include "devices.h"
#include "mfma_clock.h"
#include "mfmad_build.h"
#include "weights.h"

void info_ping(struct daemon *d, const struct request *r, const Mfma__V1__Ping *ping)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__Pong pong = MFMA__V1__PONG__INIT;
	if (ping->has_payload) {
		pong.has_payload = 1;
		pong.payload = ping->payload;
	}
	resp.body_case = MFMA__V1__RESPONSE__BODY_PONG;
	resp.pong = &pong;
	reply(d, r, &resp);
}

void info_status(struct daemon *d, const struct request *r)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__StatusResult sr = MFMA__V1__STATUS_RESULT__INIT;
	Mfma__V1__Counters ct = MFMA__V1__COUNTERS__INIT;
	Mfma__V1__DeviceInfo di[STATS_MAX_DEVICES];
	Mfma__V1__DeviceInfo *dip[STATS_MAX_DEVICES];
	char *variants[STATS_MAX_DEVICES][64];
	char varbuf[STATS_MAX_DEVICES][sizeof(d->dev[0].info.variants)];
	char *providers[STATS_MAX_DEVICES][PROVIDERS_MAX];
	char provbuf[STATS_MAX_DEVICES][sizeof(d->dev[0].info.providers)];
	char faultbuf[STATS_MAX_DEVICES][600];
	struct weight_list wl;
	struct declare_list dl;
	if (weights_list(d, &wl) < 0) {
		reply_status(d, r, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (declare_list(d, &dl) < 0) {
		weights_list_free(&wl);
		reply_status(d, r, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	/* One clock for the uptime and the workers' running phases. */
	const uint64_t now = mfma_clock_ns();
	for (int i = 0; i < d->ndev; i++) {
		struct device *v = &d->dev[i];
		mfma__v1__device_info__init(&di[i]);
		di[i].has_index = di[i].has_mem_total = di[i].has_mem_used = di[i].has_queue_depth = 1;
		di[i].has_in_flight = di[i].has_completed = di[i].has_failed = 1;
		di[i].index = (uint32_t)i;
		di[i].backend = (char *)v->ops->name;
		di[i].arch = v->info.arch;
		di[i].name = v->info.name;
		di[i].mem_total = v->info.mem_total;
		di[i].mem_used = STATS_GET(v->st->weight_bytes);
		di[i].queue_depth = (uint32_t)STATS_GET(v->st->queued);
		di[i].in_flight = (uint32_t)STATS_GET(v->st->in_flight);
		di[i].completed = STATS_GET(v->st->completed);
		di[i].failed = STATS_GET(v->st->failed);
		di[i].has_worker_idle_ns = di[i].has_worker_prepare_ns = di[i].has_worker_launch_ns = 1;
		di[i].has_worker_wait_ns = di[i].has_worker_answers_ns = 1;
		uint64_t wns[STATS_WORKER_NPHASES];
		stats_worker_read(v->st, now, wns);
		di[i].worker_idle_ns = wns[STATS_WORKER_IDLE];
		di[i].worker_prepare_ns = wns[STATS_WORKER_PREPARE];
		di[i].worker_launch_ns = wns[STATS_WORKER_LAUNCH];
		di[i].worker_wait_ns = wns[STATS_WORKER_WAIT];
		di[i].worker_answers_ns = wns[STATS_WORKER_ANSWERS];
		di[i].has_loop_starts = 1;
		di[i].loop_starts = STATS_GET(v->st->loop_starts);
		if (!devices_up(v)) {
			devices_why_down(v, faultbuf[i], sizeof(faultbuf[i]));
			di[i].fault = faultbuf[i];
		}
		/* The variant list is one comma-separated string in the backend. */
		snprintf(varbuf[i], sizeof(varbuf[i]), "%s", v->info.variants);
		size_t nv = 0;
		char *save = NULL;
		for (char *t = strtok_r(varbuf[i], ",", &save); t && nv < 64;
		     t = strtok_r(NULL, ",", &save))
			variants[i][nv++] = t;
		di[i].n_variants = nv;
		di[i].variants = variants[i];
		snprintf(provbuf[i], sizeof(provbuf[i]), "%s", v->info.providers);
		size_t np = 0;
		for (char *t = strtok_r(provbuf[i], ",", &save); t && np < PROVIDERS_MAX;
		     t = strtok_r(NULL, ",", &save))
			providers[i][np++] = t;
		di[i].n_providers = np;
		di[i].providers = providers[i];
		dip[i] = &di[i];
	}
	uint64_t ok = 0, failed = 0, busy = 0, malformed = 0;
	for (int kd = 0; kd < STATS_NKINDS; kd++) {
		for (int res = 0; res < STATS_NRESULTS; res++) {
			uint64_t n = STATS_GET(d->stats.requests[kd][res]);
			if (res == STATS_OK)
				ok += n;
			else
				failed += n;
			if (res == STATS_BUSY)
				busy += n;
			if (res == STATS_MALFORMED)
				malformed += n;
		}
	}
	ct.has_requests = ct.has_ok = ct.has_failed = ct.has_busy = ct.has_connections_open = 1;
	ct.has_connections_total = ct.has_in_flight = ct.has_malformed = 1;
	ct.requests = ok + failed + 1; /* this one too */
	ct.ok = ok;
	ct.failed = failed;
	ct.busy = busy;
	ct.malformed = malformed;
	ct.connections_open = STATS_GET(d->stats.connections_open);
	ct.connections_total = STATS_GET(d->stats.connections_total);
	ct.in_flight = conn_daemon_unanswered(d); /* not those answered already */
	sr.version = (char *)MFMAD_VERSION;
	sr.has_uptime_ns = sr.has_weight_budget = sr.has_weight_bytes = 1;
	sr.uptime_ns = now - d->stats.start_ns;
	sr.weight_budget = STATS_GET(d->stats.weight_budget);
	sr.weight_bytes = STATS_GET(d->stats.weight_bytes);
	sr.n_devices = (size_t)d->ndev;
	sr.devices = dip;
	sr.n_weights = wl.n;
	sr.weights = wl.ptrs;
	sr.counters = &ct;
	sr.n_declared = dl.n;
	sr.declared = dl.ptrs;
	resp.body_case = MFMA__V1__RESPONSE__BODY_STATUS_RESULT;
	resp.status_result = &sr;
	reply(d, r, &resp);
	weights_list_free(&wl);
	declare_list_free(&dl);
}

void info_list(struct daemon *d, const struct request *r)
{
	Mfma__V1__Response resp = MFMA__V1__RESPONSE__INIT;
	Mfma__V1__ListWeightsResult lr = MFMA__V1__LIST_WEIGHTS_RESULT__INIT;
	struct weight_list wl;
	struct declare_list dl;
	if (weights_list(d, &wl) < 0) {
		reply_status(d, r, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (declare_list(d, &dl) < 0) {
		weights_list_free(&wl);
		reply_status(d, r, MFMA__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	lr.n_weights = wl.n;
	lr.weights = wl.ptrs;
	lr.n_declared = dl.n;
	lr.declared = dl.ptrs;
	resp.body_case = MFMA__V1__RESPONSE__BODY_LIST_WEIGHTS;
	resp.list_weights = &lr;
	reply(d, r, &resp);
	weights_list_free(&wl);
	declare_list_free(&dl);
}
