/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Listening sockets: one SO_REUSEPORT TCP listener and one UDP socket per worker. */
#ifndef HBD_SOCKETS_H
#define HBD_SOCKETS_H

#include <stddef.h>
#include <stdint.h>

/* Opens n TCP listeners and n UDP sockets on bind:port (bind NULL = "::" dual-stack; port 0 =
 * one ephemeral port free for both). On success fills tcp[], udp[], *port and *family; on
 * failure closes what it opened and says why in why. Returns 0 or -errno.
 */
int hbd_sockets_open(const char *bind, uint16_t want_port, unsigned n, int *tcp, int *udp,
		     uint16_t *port, int *family, char *why, size_t whylen);
void hbd_sockets_close(unsigned n, int *tcp, int *udp);
/* n TCP listeners alone on bind:port (the MQTT port), into tcp[]: 0 or -errno (why says). */
int hbd_sockets_open_tcp(const char *bind, uint16_t port, unsigned n, int *tcp, char *why,
			 size_t whylen);

#endif
