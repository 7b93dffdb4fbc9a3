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
