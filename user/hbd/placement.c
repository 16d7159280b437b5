// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Worker CPUs and socket steering for hbd --cpus. */
#include "placement.h"

#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/utsname.h>

int hbd_placement_check(const cpu_set_t *want, char *why, size_t whylen)
{
	cpu_set_t allowed, outside;
	char a[256], o[256];

	if (sched_getaffinity(0, sizeof(allowed), &allowed)) {
		snprintf(why, whylen, "sched_getaffinity: %m");
		return -errno;
	}
	CPU_XOR(&outside, want, &allowed);
	CPU_AND(&outside, &outside, want);
	if (!CPU_COUNT(&outside))
		return 0;
	hb_cpus_format(&outside, o, sizeof(o));
	hb_cpus_format(&allowed, a, sizeof(a));
	snprintf(why, whylen, "CPU %s is not one hbd may run on (online and allowed: %s)", o, a);
	return -EINVAL;
}

int hbd_placement_cpu(const cpu_set_t *set, unsigned i)
{
	unsigned n = (unsigned)CPU_COUNT(set), k;

	if (!n)
		return -1;
	k = i % n;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (CPU_ISSET(c, set) && !k--)
			return c;
	}
	return -1;
}

int hbd_placement_steer(int fd, int cpu)
{
	return setsockopt(fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, sizeof(cpu)) ? -errno : 0;
}

int hbd_placement_kernel_steers(void)
{
	struct utsname u;
	unsigned major = 0, minor = 0;

	if (uname(&u) || sscanf(u.release, "%u.%u", &major, &minor) != 2)
		return 0;
	return major > 6 || (major == 6 && minor >= 1);
}
