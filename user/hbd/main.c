// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbd: the hbeat io_uring daemon (options in opts.c, the daemon in daemon.c and worker.c). */
#include <unistd.h>

#include "hbd.h"

int main(int argc, char **argv)
{
	struct hbd_config cfg;
	int rc;

	hbd_config_defaults(&cfg);
	rc = hbd_parse_args(argc, argv, &cfg);
	if (rc)
		return rc > 0 ? HBD_EXIT_OK : HBD_EXIT_USAGE;
	/* the path, not /proc/self/exe's inode: an upgrade runs whatever binary is there now */
	cfg.argv = argv;
	if (readlink("/proc/self/exe", cfg.exe, sizeof(cfg.exe) - 1) < 0)
		cfg.exe[0] = 0;
	return hbd_run(&cfg);
}
