/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Prometheus metrics over HTTP (libmicrohttpd, its own thread): GET /metrics. */
#ifndef HBD_METRICS_H
#define HBD_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct hbd_daemon;
struct hbd_metrics;

/* "ADDR:PORT", "[V6ADDR]:PORT", ":PORT" or "PORT"; the address defaults to 127.0.0.1 so the
 * metrics stay on the host unless asked otherwise. Returns 0 or -EINVAL.
 */
int hbd_metrics_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len);

/* Starts serving; *port gets the bound port (useful with port 0). Returns 0 or -errno. */
int hbd_metrics_start(struct hbd_metrics **out, struct hbd_daemon *d, const char *addr,
		      uint16_t *port);
void hbd_metrics_stop(struct hbd_metrics *m);

/* The exposition text (also what tests compare); malloc'd, *len set. NULL on ENOMEM. */
char *hbd_metrics_render(struct hbd_metrics *m, size_t *len);

#endif
