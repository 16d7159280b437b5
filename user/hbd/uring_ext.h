/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* SQE preparation the installed liburing (2.3) has no helper for. */
#ifndef HBD_URING_EXT_H
#define HBD_URING_EXT_H

#include <liburing.h>
#include <stdint.h>
#include <string.h>

/* From the kernel uapi (linux/io_uring.h, 6.7+; vmlinux/x86/vmlinux.h has it too). */
#define HBD_SOCKET_URING_OP_GETSOCKOPT 2

/* getsockopt on a socket through IORING_OP_URING_CMD, so a direct descriptor (no regular fd)
 * can be asked for SO_COOKIE. Hand-filled because liburing 2.3 predates io_uring_prep_cmd_sock
 * (2.5) and its struct io_uring_sqe lacks the level/optname/optlen/optval member names; the
 * same bytes are written through the older names, exactly where io_uring/cmd_net.c reads them:
 *   cmd_op  in the off union          level/optname  in the addr union (low/high 32 bits)
 *   optlen  in the file_index union   optval         in addr3
 * The CQE's res is the option length, or -errno. Only SOL_SOCKET is supported by the kernel.
 */
static inline void hbd_prep_getsockopt(struct io_uring_sqe *sqe, int fd, uint32_t level,
				       uint32_t optname, void *optval, uint32_t optlen)
{
	const uint32_t lo[2] = { level, optname };

	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
	sqe->cmd_op = HBD_SOCKET_URING_OP_GETSOCKOPT;
	memcpy(&sqe->addr, lo, sizeof(lo));
	sqe->file_index = optlen;
	sqe->addr3 = (uint64_t)(uintptr_t)optval;
}

#endif
