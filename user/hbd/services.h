/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The control plane's endpoints: the control socket (api.h) and the metrics endpoint. */
#ifndef HBD_SERVICES_H
#define HBD_SERVICES_H

struct hbd_daemon;

/* Opens the control socket and the metrics endpoint if configured (logs what failed): at the
 * start, or for a successor once its predecessor has closed them. 0 or -errno.
 */
int hbd_services_open(struct hbd_daemon *d);

#endif
