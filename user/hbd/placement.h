/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbd --cpus: each worker on one CPU, and each service socket steered to its worker's CPU, so
 * that a connection's packets, its worker's wakeups and the answers stay on the CPU that
 * received them (no cross-CPU wakeup, no IPI, no cache lines moving between CPUs).
 */
#ifndef HBD_PLACEMENT_H
#define HBD_PLACEMENT_H

#include <stddef.h>

#include "cpus.h"

/* 0 if every CPU of want is one hbd may run on (its affinity at start), else -EINVAL and why. */
int hbd_placement_check(const cpu_set_t *want, char *why, size_t whylen);
/* The CPU worker i runs on: the (i mod n)-th of the n CPUs in set; -1 if set is empty. */
int hbd_placement_cpu(const cpu_set_t *set, unsigned i);
/* Sets SO_INCOMING_CPU = cpu on a service socket: the kernel's SO_REUSEPORT selection then
 * hands a SYN or datagram processed on cpu to a socket of that CPU (Linux 6.1; before, the
 * option is taken but the group ignores it). 0 or -errno. */
int hbd_placement_steer(int fd, int cpu);
/* Whether this kernel's SO_REUSEPORT selection honours SO_INCOMING_CPU (6.1 or later). */
int hbd_placement_kernel_steers(void);

#endif
