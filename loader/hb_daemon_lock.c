// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Whether an hbd serves a pin directory: its instance lock, looked up in /proc/locks. */
#include "hb_bpf.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "pins.h"

/* hbd holds an exclusive flock on its lock file for as long as it runs (an upgraded successor
 * inherits it). Trying the lock here, even shared and for an instant, could make an hbd that
 * starts at that moment refuse to run; /proc/locks shows the holder without touching it. Its
 * lines read "1: FLOCK  ADVISORY  WRITE 4242 00:1a:12345 0 EOF" (fs/locks.c: pid, then the
 * device's major and minor in hex and the inode in decimal). */
static int flock_holder(const struct stat *st, int *pid)
{
	char line[256], kind[16], mode[16];
	unsigned maj, min;
	unsigned long ino;
	int p, found = 0;
	FILE *f = fopen("/proc/locks", "re");

	if (!f)
		return -errno;
	while (!found && fgets(line, sizeof(line), f)) {
		/* "N:" or a blocked waiter's "N: ->"; only granted locks have the fields first */
		if (sscanf(line, "%*d: %15s %*s %15s %d %x:%x:%lu", kind, mode, &p, &maj, &min,
			   &ino) != 6)
			continue;
		if (strcmp(kind, "FLOCK") || strcmp(mode, "WRITE"))
			continue;
		if (maj == major(st->st_dev) && min == minor(st->st_dev) && ino == st->st_ino) {
			*pid = p;
			found = 1;
		}
	}
	fclose(f);
	return found;
}

int hbk_daemon_running(const char *pin_dir, int *pid)
{
	char path[PATH_MAX];
	struct stat st;
	int rc;

	*pid = 0;
	/* hbd takes the first place it can create the file in; an older file elsewhere is
	 * harmless, so each one that exists is looked at */
	for (unsigned i = 0; !hb_daemon_lock_path(pin_dir, i, path, sizeof(path)); i++) {
		if (stat(path, &st))
			continue;
		rc = flock_holder(&st, pid);
		if (rc)
			return rc;
	}
	return 0;
}
