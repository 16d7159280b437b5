// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* CPU lists. By hand: glibc has cpu_set_t but no parser for the notation, libbpf keeps its own
 * (parse_cpu_mask_str) internal, and libnuma's would be a dependency for twenty lines. */
#include "cpus.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static int cpu_number(const char **p, unsigned *out)
{
	char *end;
	unsigned long v;

	if (**p < '0' || **p > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(*p, &end, 10);
	if (errno || v >= CPU_SETSIZE)
		return -EINVAL;
	*p = end;
	*out = (unsigned)v;
	return 0;
}

int hb_cpus_parse(const char *list, cpu_set_t *set)
{
	const char *p = list;

	CPU_ZERO(set);
	if (!p || !*p)
		return -EINVAL;
	for (;;) {
		unsigned a, b;

		if (cpu_number(&p, &a))
			return -EINVAL;
		b = a;
		if (*p == '-') {
			p++;
			if (cpu_number(&p, &b) || b < a)
				return -EINVAL;
		}
		for (unsigned c = a; c <= b; c++)
			CPU_SET(c, set);
		if (!*p)
			return 0;
		if (*p++ != ',')
			return -EINVAL;
	}
}

size_t hb_cpus_format(const cpu_set_t *set, char *out, size_t len)
{
	size_t n = 0;

	if (len)
		out[0] = '\0';
	for (unsigned c = 0; c < CPU_SETSIZE; c++) {
		unsigned last = c;
		int w;

		if (!CPU_ISSET(c, set))
			continue;
		while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set))
			last++;
		w = last == c ? snprintf(n < len ? out + n : NULL, n < len ? len - n : 0, "%s%u",
					 n ? "," : "", c)
			      : snprintf(n < len ? out + n : NULL, n < len ? len - n : 0, "%s%u-%u",
					 n ? "," : "", c, last);
		if (w > 0)
			n += (size_t)w;
		c = last;
	}
	return n;
}
