/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* CPU lists in the kernel's own notation ("0-3,8,10-11", as in /sys/devices/system/cpu/online
 * and taskset -c), parsed into a cpu_set_t and printed back.
 */
#ifndef HB_CPUS_H
#define HB_CPUS_H

#include <sched.h>
#include <stddef.h>

/* Fills set from LIST: comma-separated CPU numbers and ranges A-B (A <= B), each below
 * CPU_SETSIZE. 0, or -EINVAL for anything else (empty, a stray comma, a reversed range). */
int hb_cpus_parse(const char *list, cpu_set_t *set);

/* set in the same notation into out (ranges folded). Returns the length it needed, as
 * snprintf does: a value >= len means out was cut short. */
size_t hb_cpus_format(const cpu_set_t *set, char *out, size_t len);

#endif /* HB_CPUS_H */
