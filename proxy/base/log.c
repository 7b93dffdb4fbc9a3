/* log.c - owns the log destination and the line format
 * ("pid:role DD Mon YYYY HH:MM:SS.mmm <mark> message", as Redis writes it).
 * Never exits or allocates per line. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum log_level log_current_level = LOG_NOTICE;
static FILE *log_stream;

static const char *const log_level_names[] = {"debug", "info", "notice", "warning"};
static const char log_level_marks[] = ".-*#";

int log_open(const char *path)
{
    FILE *f;

    if (path == NULL || path[0] == '\0') {
        log_stream = NULL;
        return 0;
    }
    f = fopen(path, "a");
    if (f == NULL)
        return -1;
    setvbuf(f, NULL, _IOLBF, 0);
    log_close();
    log_stream = f;
    return 0;
}

int log_reopen(const char *path)
{
    if (path == NULL || path[0] == '\0') {
        log_close();   /* back to stderr */
        return 0;
    }
    /* log_open opens the new file before it lets go of the old one. */
    return log_open(path);
}

void log_close(void)
{
    if (log_stream != NULL)
        fclose(log_stream);
    log_stream = NULL;
}

int log_level_parse(const char *name)
{
    for (size_t i = 0; i < sizeof(log_level_names) / sizeof(log_level_names[0]); i++) {
        if (strcasecmp(name, log_level_names[i]) == 0)
            return (int)i;
    }
    return -1;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    FILE *out = log_stream != NULL ? log_stream : stderr;
    char stamp[64];
    struct timeval tv;
    struct tm tm;
    va_list ap;

    if (level < log_current_level)
        return;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%d %b %Y %H:%M:%S", &tm);
    fprintf(out, "%d:S %s.%03d %c ", (int)getpid(), stamp, (int)(tv.tv_usec / 1000),
            log_level_marks[level]);
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
}
