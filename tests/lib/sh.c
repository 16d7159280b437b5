// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Runs the tests' shell commands through system(), with the exit status decoded. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "sh.h"

int hbt_sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int rc, n;

	va_start(ap, fmt);
	n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(cmd)) {
		fprintf(stderr, "hbt_sh: command longer than %zu bytes\n", sizeof(cmd));
		return -1;
	}
	rc = system(cmd);
	return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}
