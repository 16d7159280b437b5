// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Counter sums and their JSON form; the names come from the ABI's X-macro. */
#include "stats.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void hbd_stats_sum(const struct hb_ustats *slots, unsigned n, struct hb_ustats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < n; i++) {
#define ADD(name) out->name += __atomic_load_n(&slots[i].name, __ATOMIC_RELAXED);
		HB_USTATS(ADD)
#undef ADD
	}
}

int hbd_stats_json(const struct hb_ustats *s, char *buf, size_t cap)
{
	size_t n = 0;
	int k;

	k = snprintf(buf, cap, "{");
	if (k < 0 || (size_t)k >= cap)
		return -ENOSPC;
	n = (size_t)k;
#define FMT(name)                                                                          \
	k = snprintf(buf + n, cap - n, "%s\"" #name "\":%" PRIu64, n > 1 ? "," : "",       \
		     (uint64_t)s->name);                                                   \
	if (k < 0 || (size_t)k >= cap - n)                                                 \
		return -ENOSPC;                                                            \
	n += (size_t)k;
	HB_USTATS(FMT)
#undef FMT
	if (n + 2 > cap)
		return -ENOSPC;
	buf[n++] = '}';
	buf[n] = 0;
	return (int)n;
}
