/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The control thread's loop (control.c), which daemon.c runs once the workers are up. */
#ifndef HBD_CONTROL_H
#define HBD_CONTROL_H

struct hbd_daemon;

/* Signals, control socket, worker events, ticks. Returns an enum hbd_exit when a signal or a
 * failed worker ends the daemon.
 */
int hbd_control_loop(struct hbd_daemon *d, int sigfd);

#endif
