/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Tells valgrind about memory the kernel filled through io_uring, which it cannot see. */
#ifndef HBD_VG_H
#define HBD_VG_H

/* Provided buffers and getsockopt results are written by the kernel after the syscall that
 * handed them over returned, so memcheck would call them uninitialised. The client request is
 * a few no-op instructions when not running under valgrind.
 */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <sched.h>
#include <valgrind/memcheck.h>
#define HBD_KERNEL_WROTE(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
/* valgrind (3.19) runs io_uring_enter as a non-blocking syscall, holding its one big lock while
 * the ring waits, and a worker that loops between waits never reaches a scheduling point: the
 * other threads (the control thread's sigtimedwait) starve. Yield once per loop iteration, but
 * only under valgrind.
 */
#define HBD_VALGRIND_YIELD()             \
	do {                             \
		if (RUNNING_ON_VALGRIND) \
			sched_yield();   \
	} while (0)
/* valgrind 3.19 mishandles IORING_ENTER_EXT_ARG (a wait with a timeout): it then waits forever */
#define HBD_ON_VALGRIND (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef HBD_KERNEL_WROTE
#define HBD_KERNEL_WROTE(p, n) ((void)(p), (void)(n))
#define HBD_VALGRIND_YIELD() ((void)0)
#define HBD_ON_VALGRIND false
#endif

#endif
