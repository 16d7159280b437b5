// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd: the hbeat io_uring daemon (options in opts.c, the daemon in daemon.c and worker.c). */
#include "hbd.h"

int main(int argc, char **argv)
{
	struct hbd_config cfg;
	int rc;

	hbd_config_defaults(&cfg);
	rc = hbd_parse_args(argc, argv, &cfg);
	if (rc)
		return rc > 0 ? HBD_EXIT_OK : HBD_EXIT_USAGE;
	return hbd_run(&cfg);
}
