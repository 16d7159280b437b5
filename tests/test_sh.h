/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbt_sh(): a printf-formatted shell command (ip, nsenter, hbctl, bpftool, ...) for the tests
 * that drive the real tools. Static in a header: the Makefile builds only tests/test_*.c.
 */
#ifndef TEST_SH_H
#define TEST_SH_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

/* The command's exit status, or -1 if it could not run or was killed by a signal. */
static inline int hbt_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int hbt_sh(const char *fmt, ...)
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

#endif
