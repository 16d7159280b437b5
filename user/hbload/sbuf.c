// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A ring's send-buffer pool: allocation and release (see sbuf.h). */
#include "sbuf.h"

#include <errno.h>
#include <stdlib.h>

int hbl_sbufs_init(struct hbl_sbufs *p)
{
	p->mem = malloc((size_t)HBL_SBUF_COUNT * HBL_SBUF_SIZE);
	p->ids = malloc(HBL_SBUF_COUNT * sizeof(*p->ids));
	p->nfree = 0;
	if (!p->mem || !p->ids)
		return -ENOMEM;
	/* stacked so the first get returns buffer 0 */
	for (unsigned i = 0; i < HBL_SBUF_COUNT; i++)
		p->ids[i] = (uint16_t)(HBL_SBUF_COUNT - 1 - i);
	p->nfree = HBL_SBUF_COUNT;
	return 0;
}

void hbl_sbufs_free(struct hbl_sbufs *p)
{
	free(p->mem);
	free(p->ids);
	p->mem = NULL;
	p->ids = NULL;
	p->nfree = 0;
}
