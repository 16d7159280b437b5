// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* sd_notify: READY/RELOADING/STOPPING, a one-line STATUS, and the watchdog. */
#include "notify.h"

#include <inttypes.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "worker.h"

#define STATUS_EVERY_MS 5000

static uint64_t next_status_ms, watchdog_ms, next_watchdog_ms;

static void status(struct hbd_daemon *d, const char *prefix)
{
	struct hb_ustats u;

	hb_ustats_sum(d->stats, HB_MAX_WORKERS, &u);
	sd_notifyf(0,
		   "%sSTATUS=%" PRIu64 " devices online (tcp %" PRIu64 ", udp %" PRIu64
		   "), heartbeats %s, %" PRIu64 " answered by hbd",
		   prefix, (uint64_t)(u.tcp_authed + u.udp_active), (uint64_t)u.tcp_authed,
		   (uint64_t)u.udp_active,
		   d->kern.offload ? "answered in the kernel" : "in userspace",
		   (uint64_t)u.pings_user);
}

void hbd_notify_ready(struct hbd_daemon *d)
{
	uint64_t usec = 0;

	/* the watchdog is petted at half its period; from the control tick, so a control thread
	 * that hangs gets hbd restarted */
	if (sd_watchdog_enabled(0, &usec) > 0)
		watchdog_ms = usec / 2000;
	status(d, "READY=1\n");
}

void hbd_notify_reloading(void)
{
	sd_notify(0, "RELOADING=1\nSTATUS=reloading the key store");
}

void hbd_notify_reloaded(struct hbd_daemon *d)
{
	status(d, "READY=1\n");
}

void hbd_notify_stopping(void)
{
	sd_notify(0, "STOPPING=1\nSTATUS=draining: BYE to every device");
}

void hbd_notify_mainpid(int pid)
{
	if (pid > 0)
		sd_notifyf(0, "MAINPID=%d\nSTATUS=handed every device over to pid %d", pid, pid);
}

void hbd_notify_tick(struct hbd_daemon *d, uint64_t now_ms)
{
	if (watchdog_ms && now_ms >= next_watchdog_ms) {
		sd_notify(0, "WATCHDOG=1");
		next_watchdog_ms = now_ms + watchdog_ms;
	}
	if (now_ms >= next_status_ms) {
		status(d, "");
		next_status_ms = now_ms + STATUS_EVERY_MS;
	}
}
