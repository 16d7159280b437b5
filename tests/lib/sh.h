/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbt_sh(): a printf-formatted shell command (ip, nsenter, hbctl, bpftool, ...) for the tests
 * that drive the real tools.
 */
#ifndef HT_SH_H
#define HT_SH_H

/* The command's exit status, or -1 if it could not run or was killed by a signal. */
int hbt_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* HT_SH_H */
