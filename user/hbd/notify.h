/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* systemd readiness (Type=notify) and watchdog through libsystemd's sd_notify. Every call is a
 * no-op when hbd does not run under systemd (no NOTIFY_SOCKET).
 */
#ifndef HBD_NOTIFY_H
#define HBD_NOTIFY_H

#include <stdint.h>
#include <sys/types.h>

struct hbd_daemon;

void hbd_notify_ready(struct hbd_daemon *d);
void hbd_notify_reloading(void);
void hbd_notify_reloaded(struct hbd_daemon *d);
void hbd_notify_stopping(void);
/* After an upgrade (SIGUSR2): the successor pid is the service's main process from now on. */
void hbd_notify_mainpid(int pid);
/* Control tick: refreshes STATUS= every few seconds and pets the watchdog if WatchdogSec= is
 * set (at half its period). now_ms is CLOCK_MONOTONIC.
 */
void hbd_notify_tick(struct hbd_daemon *d, uint64_t now_ms);

#endif
