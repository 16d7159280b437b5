/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* SQE builders for socket operations liburing 2.3 has no helper for (bind, setsockopt).
 *
 * Debian 12 ships liburing 2.3, whose headers predate IORING_OP_BIND (kernel 6.11) and the
 * socket URING_CMD setsockopt (kernel 6.7), but the kernel here (6.18) has both, and they are
 * the only way to bind or set options on a direct descriptor (a socket with no regular fd,
 * which is how hbload holds more sockets than RLIMIT_NOFILE). So the SQEs are filled by hand,
 * field by field, as the kernel's io_uring/net.c (io_bind_prep) and io_uring/cmd_net.c
 * (io_uring_cmd_setsockopt) read them.
 */
#ifndef HBL_URING_EXT_H
#define HBL_URING_EXT_H

#include <endian.h>
#include <liburing.h>
#include <sys/socket.h>

#define HBL_IORING_OP_URING_CMD 46 /* in liburing 2.3's enum too; named here for clarity */
#define HBL_IORING_OP_BIND 56 /* enum io_uring_op, kernel >= 6.11 */
#define HBL_SOCKET_URING_OP_SETSOCKOPT 3 /* enum io_uring_socket_op, kernel >= 6.7 */

_Static_assert(__BYTE_ORDER == __LITTLE_ENDIAN,
	       "level/optname share sqe->addr as two u32s: the packing below assumes little endian");

/* bind(fd, addr, len): io_bind_prep reads the address pointer from sqe->addr and its length
 * from sqe->addr2 (the union with off); len, buf_index, rw_flags and splice_fd_in must be zero.
 * The address is copied into the kernel at prep (submit) time.
 */
static inline void hbl_prep_bind(struct io_uring_sqe *sqe, int fd, const struct sockaddr *addr,
				 socklen_t addrlen)
{
	io_uring_prep_rw(HBL_IORING_OP_BIND, sqe, fd, addr, 0, addrlen);
}

/* setsockopt(fd, level, optname, optval, optlen) as IORING_OP_URING_CMD: cmd_op (low half of
 * sqe->off) selects SETSOCKOPT; level and optname are the two u32 halves of sqe->addr; optlen
 * sits where splice_fd_in is; optval is sqe->addr3. optval is read at issue time, not at
 * submit: it must stay valid until the CQE (callers pass static storage).
 */
static inline void hbl_prep_setsockopt(struct io_uring_sqe *sqe, int fd, int level, int optname,
				       const void *optval, int optlen)
{
	io_uring_prep_rw(HBL_IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
	sqe->off = HBL_SOCKET_URING_OP_SETSOCKOPT; /* cmd_op; __pad1 stays zero */
	sqe->addr = ((__u64)(__u32)optname << 32) | (__u32)level;
	sqe->splice_fd_in = optlen;
	sqe->addr3 = (__u64)(uintptr_t)optval;
}

#endif
