// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* libFuzzer entry point; the Makefile builds one binary per target with -DHBF_TARGET=hbf_x. */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	return HBF_TARGET(data, n);
}
