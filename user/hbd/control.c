// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The control thread's loop: one poll over the signals, the control socket and the workers'
 * event doorbell, with a tick for the liveness stamp, the device-table sweep and systemd.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "api.h"
#include "control.h"
#include "log.h"
#include "notify.h"
#include "reload.h"
#include "upgrade.h"
#include "worker.h"

#define CONTROL_TICK_MS 250
#define SWEEP_BUDGET 4096 /* device-table slots looked at per control tick */
#define EVENT_BATCH 256

static void deliver_events(struct hbd_daemon *d)
{
	struct hbd_event ev[EVENT_BATCH];
	uint64_t dropped;
	uint32_t n;

	do {
		n = hbd_events_take(&d->ctl.events, ev, EVENT_BATCH, &dropped);
		for (uint32_t i = 0; d->ctl.api && i < n; i++)
			hbd_api_event(d->ctl.api, &ev[i]);
		if (dropped) {
			__atomic_fetch_add(&d->ctl.events_lost, dropped, __ATOMIC_RELAXED);
			if (d->ctl.api)
				hbd_api_lost(d->ctl.api, dropped);
		}
	} while (n == EVENT_BATCH);
}

static void tick(struct hbd_daemon *d, uint64_t grace_ns)
{
	if (d->kern.offload) {
		int rc = hbd_maps_stamp(&d->kern.maps, hb_mono_ns(), grace_ns);

		if (rc)
			hb_warn("config stamp: %s", strerror(-rc));
	}
	hbd_nic_check(&d->kern.nic, hb_mono_ms());
	hbd_devices_sweep(d->devices, hb_realtime_ms(), d->lim.window_ms, SWEEP_BUDGET);
	hbd_keytab_sweep(&d->sources, hb_mono_us(), SWEEP_BUDGET);
	hbd_keytab_sweep(&d->data_rl, hb_mono_us(), SWEEP_BUDGET);
	hbd_notify_tick(d, hb_mono_ms());
}

static int on_signal(struct hbd_daemon *d, int sigfd)
{
	struct signalfd_siginfo si;
	struct hbd_reload_result res;
	char why[512];

	while (read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			hb_info("SIGHUP: reloading the key store");
			hbd_keys_reload(d, &res, why, sizeof(why)); /* it logs either way */
			continue;
		}
		if (si.ssi_signo == SIGUSR2) {
			hbd_upgrade_request(d); /* it logs either way */
			continue;
		}
		if (hbd_upgrade_busy(d) && !d->upg.successor) {
			/* an old daemon mid-upgrade finishes it (it exits after it anyway); if the
			 * upgrade fails, it drains then
			 */
			hb_info("%s: finishing the upgrade under way first",
				strsignal((int)si.ssi_signo));
			d->upg.term_pending = (int)si.ssi_signo;
			continue;
		}
		hb_info("%s: draining", strsignal((int)si.ssi_signo));
		return 1;
	}
	return 0;
}

int hbd_control_loop(struct hbd_daemon *d, int sigfd)
{
	const uint64_t grace_ns = (uint64_t)(d->cfg->grace_s * 1e9);
	struct pollfd pfd[2 + 1 + HBD_API_MAX_CLIENTS];
	uint64_t next_tick = 0;

	for (;;) {
		uint64_t now = hb_mono_ms();
		int n = 0, rc;

		if (now >= next_tick) {
			tick(d, grace_ns);
			next_tick = now + CONTROL_TICK_MS;
		}
		if (__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE)) {
			hb_err("a worker failed: stopping");
			return HBD_EXIT_FAIL;
		}
		if (hbd_upgrade_poll(d)) {
			d->upg.handed = true; /* every device is the successor's now */
			return HBD_EXIT_OK;
		}
		if (d->upg.term_pending && !hbd_upgrade_busy(d)) {
			hb_info("%s: draining", strsignal(d->upg.term_pending));
			return HBD_EXIT_OK;
		}
		pfd[n++] = (struct pollfd){ .fd = sigfd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = d->ctl.events.efd, .events = POLLIN };
		if (d->ctl.api)
			n += hbd_api_pollfds(d->ctl.api, pfd + n,
					     (int)(sizeof(pfd) / sizeof(pfd[0])) - n);
		/* an upgrade under way is driven every 10 ms; requests waiting from the last pass
		 * are handled at once, after the tick above */
		rc = poll(pfd, (nfds_t)n,
			  d->ctl.api && hbd_api_busy(d->ctl.api) ? 0
			  : hbd_upgrade_busy(d)			 ? 10
						: (int)(next_tick > now ? next_tick - now : 0));
		if (rc < 0 && errno != EINTR) {
			hb_err("control poll: %s", strerror(errno));
			return HBD_EXIT_FAIL;
		}
		if (rc < 0 || (rc == 0 && !(d->ctl.api && hbd_api_busy(d->ctl.api))))
			continue;
		if ((pfd[0].revents & POLLIN) && on_signal(d, sigfd))
			return HBD_EXIT_OK;
		if (pfd[1].revents & POLLIN)
			deliver_events(d);
		if (d->ctl.api)
			hbd_api_handle(d->ctl.api, pfd + 2, n - 2);
		hbd_ctl_flush(d); /* downlink wake-ups queued while handling requests */
	}
}
