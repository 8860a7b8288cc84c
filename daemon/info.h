/* The requests answered on the loop from what the daemon knows: ping,
 * status (devices, weights, counters) and the weight list. */
#ifndef MFMAD_INFO_H
#define MFMAD_INFO_H

#include "daemon.h"
#include "mfma.pb-c.h"
#include "reply.h"

void info_ping(struct daemon *d, const struct request *r, const Mfma__V1__Ping *ping);
void info_status(struct daemon *d, const struct request *r);
void info_list(struct daemon *d, const struct request *r);

#endif
