// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A device in under 100 lines on the hbeat device library: it connects, heartbeats, reports a
 * reading as DATA every few seconds, prints the downlink messages it gets, and reconnects by
 * itself. Build: make (build/examples/device). Run: device --id 42 --secret HEX [--udp]
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "auth.h" /* hb_hex_decode */
#include "hbdev.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", 1, NULL, 's' },   { "port", 1, NULL, 'p' },
		{ "id", 1, NULL, 'i' },	      { "secret", 1, NULL, 'k' },
		{ "udp", 0, NULL, 'u' },      { "every", 1, NULL, 'e' },
		{ "duration", 1, NULL, 'd' }, { 0 },
	};
	struct hbdev_config cfg = { .host = "127.0.0.1", .port = HB_DEFAULT_PORT };
	uint8_t secret[HB_SECRET_MAX];
	double every = 5, duration = 0;
	time_t start = time(NULL), next_report;
	struct hbdev *dev;
	struct hbdev_ev ev;
	unsigned reading = 0;
	int o, len = -1;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			cfg.host = optarg;
			break;
		case 'p':
			cfg.port = (uint16_t)atoi(optarg);
			break;
		case 'i':
			cfg.device_id = strtoull(optarg, NULL, 10);
			break;
		case 'k':
			len = hb_hex_decode(optarg, secret, sizeof(secret));
			break;
		case 'u':
			cfg.transport = HB_UDP;
			break;
		case 'e':
			every = atof(optarg);
			break;
		case 'd':
			duration = atof(optarg);
			break;
		default:
			return 2;
		}
	}
	cfg.secret = secret;
	cfg.secret_len = len > 0 ? (size_t)len : 0;
	if (hbdev_open(&dev, &cfg)) {
		fprintf(stderr,
			"usage: device --id ID --secret HEX [--server HOST] [--port N] [--udp]"
			" [--every SEC] [--duration SEC]\n");
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	setvbuf(stdout, NULL, _IOLBF, 0);
	next_report = start + (time_t)every;
	while (!stop && (!duration || time(NULL) < start + (time_t)duration)) {
		if (hbdev_connected(dev) && every > 0 && time(NULL) >= next_report) {
			char msg[64];
			int n;

			reading++;
			n = snprintf(msg, sizeof(msg), "reading=%u temp=%.1f", reading,
				     20 + (reading % 10) / 2.0);

			printf(hbdev_send(dev, msg, (uint16_t)n, 5000) ? "data %u lost\n"
								       : "data %u acked\n",
			       reading);
			next_report = time(NULL) + (time_t)every;
		}
		if (hbdev_poll(dev, 200, &ev) <= 0)
			continue;
		switch (ev.type) {
		case HBDEV_EV_CONNECTED: /* keepalive: the kernels keep it alive, no PINGs */
			printf("connected%s\n", hbdev_keepalive(dev) ? " (keepalive)" : "");
			break;
		case HBDEV_EV_DISCONNECTED:
			printf("disconnected %u\n", ev.code);
			break;
		case HBDEV_EV_AUTH_FAILED:
			printf("auth failed\n");
			break;
		case HBDEV_EV_DOWNLINK:
			printf("downlink %.*s\n", ev.len, ev.payload);
			break;
		default:
			break;
		}
	}
	hbdev_close(dev);
	return 0;
}
