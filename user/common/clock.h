/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The clocks every hbeat program reads: CLOCK_MONOTONIC in ns, us and ms, CLOCK_REALTIME in ms.
 *
 * Header-only so the device library, which links nothing of hbd, can use it too. The kernel's
 * BPF programs stamp with bpf_ktime_get_ns(), which is CLOCK_MONOTONIC: hb_mono_ns() values
 * and kernel stamps compare directly. Wall-clock time (realtime) is only for what crosses a
 * machine boundary: HELLO timestamps, sink records, presence events.
 */
#ifndef HB_CLOCK_H
#define HB_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t hb_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t hb_mono_ns(void)
{
	return hb_clock_ns(CLOCK_MONOTONIC);
}

static inline uint64_t hb_mono_us(void)
{
	return hb_mono_ns() / 1000;
}

static inline uint64_t hb_mono_ms(void)
{
	return hb_mono_ns() / 1000000;
}

static inline uint64_t hb_realtime_ms(void)
{
	return hb_clock_ns(CLOCK_REALTIME) / 1000000;
}

/* Seconds as a double, for rates and reports. */
static inline double hb_mono_s(void)
{
	return (double)hb_mono_ns() / 1e9;
}

#endif
