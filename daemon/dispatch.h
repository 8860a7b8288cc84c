/* What a connection's frames mean: each is decoded into a Request (on
 * the threadpool when large, or on the reader thread that read it),
 * admitted against the daemon's limits and
 * routed by kind to info, gemm or weights. */
#ifndef MFMAD_DISPATCH_H
#define MFMAD_DISPATCH_H

#include "conn.h"

/* The callbacks every listener gives its connections. */
extern const struct conn_events dispatch_events;

#endif
