/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The tests' clock (CLOCK_MONOTONIC, which bpf_ktime_get_ns() stamps in too) and sleep. */
#ifndef HT_TIME_H
#define HT_TIME_H

#include <stdint.h>

uint64_t hbt_now_ns(void);
uint64_t ht_now_ms(void);
void ht_sleep_ms(unsigned ms);

#endif /* HT_TIME_H */
