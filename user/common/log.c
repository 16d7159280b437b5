// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Leveled logging: one line per call, written with a single write so threads don't interleave. */
#include "log.h"

#include <bpf/libbpf.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "hbeat";
static enum hb_log_level log_level = HB_LOG_INFO;
static const char *const level_names[] = { "error", "warn", "info", "debug" };

void hb_log_init(const char *prog, enum hb_log_level level)
{
	log_prog = prog;
	log_level = level;
}

void hb_log_set_level(enum hb_log_level level)
{
	log_level = level;
}

enum hb_log_level hb_log_get_level(void)
{
	return log_level;
}

int hb_log_parse_level(const char *s)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
		if (!strcmp(s, level_names[i]))
			return (int)i;
	return -1;
}

void hb_vlog(enum hb_log_level level, const char *fmt, va_list ap)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	int n;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s %s: ", tm.tm_hour, tm.tm_min,
		     tm.tm_sec, ts.tv_nsec / 1000000, log_prog, level_names[level]);
	n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (n >= (int)sizeof(line) - 1)
		n = sizeof(line) - 2;
	/* libbpf messages end in a newline already; ours don't */
	if (line[n - 1] != '\n')
		line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* nowhere left to report it */
	}
}

void hb_log(enum hb_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	hb_vlog(level, fmt, ap);
	va_end(ap);
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	enum hb_log_level l = level == LIBBPF_WARN   ? HB_LOG_WARN
			      : level == LIBBPF_INFO ? HB_LOG_INFO
						     : HB_LOG_DEBUG;

	/* libbpf's INFO chatter is only interesting when debugging */
	if (l == HB_LOG_INFO)
		l = HB_LOG_DEBUG;
	hb_vlog(l, fmt, ap);
	return 0;
}

void hb_log_route_libbpf(void)
{
	libbpf_set_print(libbpf_print);
}
