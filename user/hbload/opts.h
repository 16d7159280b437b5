/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* hbload command line: options, defaults, and the address lists they name. */
#ifndef HBL_OPTS_H
#define HBL_OPTS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "proto.h"

#define HBL_MAX_SOURCES 65536
#define HBL_MAX_PAYLOAD 200 /* DATA/ECHO payload hbload sends (the protocol allows 1024) */
#define HBL_MAX_STEPS_OPT 32 /* --steps entries (window.h: HBL_MAX_STEPS) */
#define HBL_PROTO_MQTT 2 /* --proto mqtt: parsed into proto = HB_TCP and mqtt = true */

struct hbl_opts {
	const char *server; /* --server: IPv4/IPv6 literal or host name */
	uint16_t port; /* --port */
	uint32_t clients; /* --clients */
	enum hb_transport proto; /* --proto tcp|udp (mqtt: TCP, with mqtt set) */
	bool mqtt; /* --proto mqtt: MQTT 3.1.1 devices, PINGREQ as the heartbeat */
	const char *mqtt_realm; /* --mqtt-realm: the server's realm in the derived password */
	uint32_t mqtt_days; /* --mqtt-days: the password's validity from today */
	double interval_s; /* --interval: heartbeat period */
	double duration_s; /* --duration: heartbeating time after setup */
	bool json; /* --json: one-line JSON summary on stdout */
	const char *keys; /* --keys: key store file (same format as hbd's) */
	uint64_t first_device; /* --first-device: id of client 0 */
	const char *source; /* --source: comma list of addresses and ranges A-B */
	uint32_t threads; /* --threads: rings (one thread each); raised for TCP to fit --clients */
	double jitter; /* --jitter: fraction of the interval */
	double connect_rate; /* --connect-rate: new connections per second, 0 = unlimited */
	uint32_t inflight; /* --inflight: connects + HELLOs in flight, whole process */
	uint32_t data_every; /* --data-every: a DATA frame every N heartbeats (0 = never) */
	uint32_t echo_every; /* --echo-every: an ECHO frame every N heartbeats (0 = never) */
	uint32_t payload; /* --payload: DATA/ECHO payload bytes */
	uint32_t silent; /* --silent: the first N clients never heartbeat */
	bool force_pings; /* --force-pings: PINGs even when the WELCOME asks for keepalive mode */
	bool beat; /* --beat: TCP heartbeats are BEATs (TCP's ACK answers; no RTT samples) */
	double drain_s; /* --drain: wait for outstanding replies at the end */
	double warmup_s; /* --warmup: RTTs of heartbeats scheduled before setup end + S are not
			  * recorded (<0: record all) */
	double storm_at_s; /* --storm-at: TCP clients all drop at this time after setup (<0 off) */
	double storm_window_s; /* --storm-window: reconnects spread over this many seconds */
	double setup_timeout_s; /* --setup-timeout: stop waiting for all clients to authenticate */
	double connect_timeout_s; /* --connect-timeout: TCP connect */
	double hello_timeout_s; /* --hello-timeout: HELLO -> WELCOME */
	uint32_t udp_sockets; /* --udp-sockets: UDP sockets per ring */
	uint32_t udp_version; /* --udp-version: 2 (frames under a session key) or 1 */
	uint32_t udp_rehello_after; /* --udp-rehello-after: a UDP session whose last N PINGs went
				     * unanswered is dropped for a new HELLO (0: never) */
	double steady_s; /* --steady: length of the steady window after the warmup (<0: until
			  * --duration ends) */
	double steps
		[HBL_MAX_STEPS_OPT]; /* --steps: heartbeat rates (per second) of a ramp, in order */
	uint32_t nsteps;
	double steps_at_s; /* --steps-at: the ramp starts this long after setup (<0: --duration) */
	double step_s; /* --step-s: length of each step */
	double step_settle_s; /* --step-settle: start of a step left out of its window */
	double step_stop_ms; /* --step-stop-p99: a step whose p99 exceeds this ends the ramp (0:
			      * never) */
	const char *events; /* --events: phase and window events, one line each, as they happen */
	const char *hist; /* --hist: RTT histograms of the windows, written at the end */
	bool progress; /* progress line on stderr every second (--no-progress clears) */
	bool verbose; /* -v: debug logging */
};

/* Parses argv. Returns 0, 1 if --help was printed, or -EINVAL after printing what was wrong. */
int hbl_parse_args(int argc, char **argv, struct hbl_opts *o);
void hbl_usage(FILE *f);

/* Resolves --server/--port into a socket address. */
int hbl_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss, socklen_t *len);

/* Expands a --source list into addresses of the given family (port 0). On success returns the
 * count and sets *out (malloc'd); on error returns -EINVAL with a message in err.
 */
int hbl_parse_sources(const char *list, int family, struct sockaddr_storage **out, char *err,
		      size_t errlen);

#endif
