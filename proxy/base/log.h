/* log.h - leveled logging to stderr or a file: Redis-style text lines,
 * journald's priority prefixes when stderr is the journal, or JSON. */
#ifndef SLUICE_LOG_H
#define SLUICE_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_NOTICE, LOG_WARNING, LOG_ERROR };

/* log_format: one text line per message, or one JSON object per line. */
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

extern enum log_level log_current_level;

/* Send log lines to PATH (NULL: stderr). Returns 0, or -1 with errno set. */
int log_open(const char *path);
void log_close(void);
/* A reload (SIGHUP, PROXY RELOAD): send log lines to PATH (NULL: stderr)
 * from now on, opened afresh, so that a file logrotate renamed away is let
 * go and a new one starts at PATH. On failure (-1, errno set) the old
 * destination stays. */
int log_reopen(const char *path);

/* Level from its name ("debug", "info", "notice", "warning"); -1 if none.
 * LOG_ERROR is for start-up failures only: no log_level names it. */
int log_level_parse(const char *name);

/* The names log_level and log_format read, of LEVEL and FORMAT. */
const char *log_level_name(int level);
const char *log_format_name(int format);

/* Format from its name ("text", "json"); -1 if none. */
int log_format_parse(const char *name);
void log_set_format(enum log_format format);

/* While ON (from the start until sluice runs), warnings and errors that go
 * to a log file are written to stderr as well, so that a start that fails
 * says why on the terminal (or in the journal). */
void log_set_startup(int on);

/* A sluice started by a hand-over (SIGUSR2) tells the one that started it
 * why it could not start: FD (a pipe) gets every warning and error until
 * log_set_startup(0), and log_report_text's TEXT (the config's errors,
 * found before the log is open). The old sluice logs them in its own log. */
void log_set_report(int fd);
void log_report_text(const char *text);

/* Write one line at LEVEL. A warning with the same text as one written
 * less than a second ago is counted instead, and the count written later
 * as "TEXT (repeated N times in T s)" (by the next line written, or by
 * log_repeats_flush). */
void log_write(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One field of a log_event line: KEY (a literal, not one of time, pid,
 * level, event, msg) and its value by KIND: a string (NULL: null), a
 * number, a boolean, or milliseconds written as seconds ("0.018"). */
enum log_field_kind { LOG_FIELD_STR, LOG_FIELD_NUM, LOG_FIELD_BOOL, LOG_FIELD_MS };

struct log_field {
    const char *key;
    enum log_field_kind kind;
    const char *str;
    long long num;
};

#define LOG_STR(k, v) {(k), LOG_FIELD_STR, (v), 0}
#define LOG_NUM(k, v) {(k), LOG_FIELD_NUM, NULL, (long long)(v)}
#define LOG_BOOL(k, v) {(k), LOG_FIELD_BOOL, NULL, (v) != 0}
#define LOG_MS(k, v) {(k), LOG_FIELD_MS, NULL, (long long)(v)}
/* Fields of one line written at most (more are left out), and the bytes
 * of a string value kept (a longer one is cut). */
#define LOG_FIELDS_MAX 12
#define LOG_FIELD_VALUE_MAX 1024

/* log_write's line, for a line that has fields: the text formats write
 * exactly what log_write would; log_format = json adds "event":EVENT (a
 * string literal: a repeat count written later names it too) and each
 * of the N FIELDS, escaped as msg is. */
void log_event(enum log_level level, const char *event, const struct log_field *fields, int n,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Write the counts of repeated warnings whose second has passed; called
 * from sluice's periodic tick, so a count is never held back for long. */
void log_repeats_flush(void);

#define log_debug(...) \
    do { if (log_current_level <= LOG_DEBUG) log_write(LOG_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) \
    do { if (log_current_level <= LOG_INFO) log_write(LOG_INFO, __VA_ARGS__); } while (0)
#define log_notice(...) log_write(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_write(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif
