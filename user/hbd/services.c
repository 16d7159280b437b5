// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Opens the control plane's endpoints, at the start (daemon.c) or after an upgrade (upgrade.c). */
#include "services.h"

#include <string.h>

#include "api.h"
#include "log.h"
#include "metrics.h"
#include "worker.h"

int hbd_services_open(struct hbd_daemon *d)
{
	const struct hbd_config *cfg = d->cfg;
	char why[512];
	int rc;

	d->upg.services_pending = false;
	if (cfg->control && (rc = hbd_api_open(&d->ctl.api, d, cfg->control, why, sizeof(why)))) {
		hb_err("control socket: %s", why);
		return rc;
	}
	if (cfg->metrics &&
	    (rc = hbd_metrics_start(&d->ctl.metrics, d, cfg->metrics, &d->ctl.metrics_port))) {
		hb_err("metrics on %s: %s", cfg->metrics, strerror(-rc));
		return rc;
	}
	return 0;
}
