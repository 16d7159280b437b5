/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The control socket: a local UNIX stream socket where applications send downlinks, subscribe
 * to presence events and ask for a key reload. Served by the control thread (poll).
 *
 * Protocol (docs/CONTROL.md): one request per line, one JSON object per line back.
 *   send DEVICE BASE64 [TIMEOUT_MS]   -> {"req":N,"ok":true,"status":"delivered",...} once the
 *                                        device ACKed it (or "ok":false with the status)
 *   subscribe                         -> {"req":N,"ok":true}, then {"event":"online",...} lines
 *   reload                            -> {"req":N,"ok":true,"devices":..,"revoked_sessions":..,
 *                                        "rekeyed_sessions":..}
 *   stats                             -> {"req":N,"ok":true,"stats":{...},"subscribers":K}
 *   ping                              -> {"req":N,"ok":true}
 * N counts the requests on the connection from 1; replies to send may come out of order.
 */
#ifndef HBD_API_H
#define HBD_API_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hbd_daemon;
struct hbd_event;
struct hbd_api;

#define HBD_API_MAX_CLIENTS 64

/* Listens on path (mode 0660). A stale socket file nobody listens on is replaced; a live one
 * is an error (another hbd). Returns 0 or -errno, with why.
 */
int hbd_api_open(struct hbd_api **out, struct hbd_daemon *d, const char *path, char *why,
		 size_t whylen);
void hbd_api_close(struct hbd_api *a);

/* The fds to poll (listener and clients) into pfd; returns how many (at most max). */
int hbd_api_pollfds(struct hbd_api *a, struct pollfd *pfd, int max);
/* Handles what poll reported for the fds hbd_api_pollfds filled, and requests left waiting by
 * the last pass, within one pass's budget (api.c). */
void hbd_api_handle(struct hbd_api *a, const struct pollfd *pfd, int n);
/* Requests wait that the last pass had no budget for: poll without sleeping, then handle. */
bool hbd_api_busy(const struct hbd_api *a);
/* An event from the workers: presence to subscribers, downlink outcomes to their requester. */
void hbd_api_event(struct hbd_api *a, const struct hbd_event *ev);
/* Tells subscribers that n events were lost. */
void hbd_api_lost(struct hbd_api *a, uint64_t n);

#endif
