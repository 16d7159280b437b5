/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Leveled logging to stderr for every hbeat program; libbpf's own messages are routed here. */
#ifndef HB_LOG_H
#define HB_LOG_H

#include <stdarg.h>

enum hb_log_level { HB_LOG_ERROR = 0, HB_LOG_WARN, HB_LOG_INFO, HB_LOG_DEBUG };

/* Program name prefixed to each line, and the most verbose level printed (default INFO). */
void hb_log_init(const char *prog, enum hb_log_level level);
void hb_log_set_level(enum hb_log_level level);
enum hb_log_level hb_log_get_level(void);
/* Parses "error|warn|info|debug"; returns -1 if unknown. */
int hb_log_parse_level(const char *s);
/* Sends libbpf's messages through hb_log (its debug output only at HB_LOG_DEBUG). */
void hb_log_route_libbpf(void);

void hb_log(enum hb_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hb_vlog(enum hb_log_level level, const char *fmt, va_list ap);

#define hb_err(...) hb_log(HB_LOG_ERROR, __VA_ARGS__)
#define hb_warn(...) hb_log(HB_LOG_WARN, __VA_ARGS__)
#define hb_info(...) hb_log(HB_LOG_INFO, __VA_ARGS__)
#define hb_dbg(...) hb_log(HB_LOG_DEBUG, __VA_ARGS__)

#endif
