/* log.c - owns the log destination and the line formats: Redis's text
 * line ("pid:role DD Mon YYYY HH:MM:SS.mmm <mark> message"), the same
 * without time and pid behind journald's "<N>" priority when stderr is the
 * journal, or one JSON object per line; and the folding of a warning
 * repeated within a second into one "(repeated N times in T s)" line.
 * Never exits or allocates per line. */
#include "log.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* A message longer than this is cut (and ends in "..."). */
#define LOG_MSG_MAX 16384
/* A JSON line: each byte of the message escaped to at most 6 ("\u00XX"),
 * plus time, pid, level and event; and its fields, each key and value
 * escaped likewise, with quotes and separators. */
#define LOG_FIELD_ROOM ((64 + LOG_FIELD_VALUE_MAX) * 6 + 32)
#define LOG_LINE_MAX (LOG_MSG_MAX * 6 + 256 + 64 * 6 + LOG_FIELDS_MAX * LOG_FIELD_ROOM)

enum log_level log_current_level = LOG_NOTICE;
static FILE *log_stream;
static enum log_format log_format_used = LOG_FORMAT_TEXT;
static int log_startup_copy;   /* log_set_startup */
static FILE *log_report;       /* log_set_report: the sluice that started this one */
static int log_journal = -1;   /* stderr is journald's: -1 not checked yet */

/* By level: the name log_level reads (and JSON writes), Redis's mark, and
 * the syslog priority journald reads from a "<N>" prefix. */
static const char *const log_level_names[] = {"debug", "info", "notice", "warning", "error"};
static const char log_level_marks[] = ".-*##";
static const char log_level_priorities[] = "76543";
static const char *const log_format_names[] = {"text", "json"};

static char log_line[LOG_LINE_MAX];

/* The event and fields of the line being written (log_event), for the
 * JSON format; none for a plain log_write. */
struct log_ctx {
    const char *event;
    const struct log_field *fields;
    int n;
};
static struct log_ctx log_ctx;

/* A warning written again within LOG_REPEAT_MS of its first line is not
 * written: it is counted, and the count is written as one line once the
 * window has passed ("MSG (repeated N times in T s)"). During an outage
 * the same warning can come every few milliseconds; an operator reading
 * the log needs one line and a count. Warnings are told apart by their
 * text (the first LOG_REPEAT_TEXT bytes and the length). */
#define LOG_REPEAT_MS 1000
#define LOG_REPEAT_SLOTS 32
#define LOG_REPEAT_TEXT 1024

struct log_repeat {
    uint64_t hash;
    size_t len;              /* of the whole message */
    uint64_t first_ms;       /* when the window began (the line written) */
    uint64_t last_ms;        /* the last one counted */
    unsigned long count;     /* not written since first_ms */
    enum log_level level;
    const char *event;       /* log_event's, a literal; NULL: none */
    char text[LOG_REPEAT_TEXT];
};

static struct log_repeat log_repeats[LOG_REPEAT_SLOTS];
static int log_repeats_pending;   /* slots with count > 0 */

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

static void log_repeats_drain(int force);

/* Counts not yet written go to the destination being let go (at exit, or
 * a new log file): never lost. */
void log_close(void)
{
    log_repeats_drain(1);
    if (log_stream != NULL)
        fclose(log_stream);
    log_stream = NULL;
}

int log_level_parse(const char *name)
{
    for (size_t i = 0; i < LOG_ERROR; i++) {
        if (strcasecmp(name, log_level_names[i]) == 0)
            return (int)i;
    }
    return -1;
}

const char *log_level_name(int level)
{
    return level >= LOG_DEBUG && level <= LOG_ERROR ? log_level_names[level] : "?";
}

const char *log_format_name(int format)
{
    return format == LOG_FORMAT_JSON ? log_format_names[1] : log_format_names[0];
}

int log_format_parse(const char *name)
{
    for (size_t i = 0; i < sizeof(log_format_names) / sizeof(log_format_names[0]); i++) {
        if (strcasecmp(name, log_format_names[i]) == 0)
            return (int)i;
    }
    return -1;
}

void log_set_format(enum log_format format)
{
    log_format_used = format;
}

void log_set_startup(int on)
{
    log_startup_copy = on;
    if (!on && log_report != NULL) {
        fclose(log_report);   /* running: the old sluice hears nothing more */
        log_report = NULL;
    }
}

void log_set_report(int fd)
{
    log_report = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (log_report != NULL)
        setvbuf(log_report, NULL, _IOLBF, 0);
}

void log_report_text(const char *text)
{
    if (log_report != NULL) {
        fputs(text, log_report);
        fflush(log_report);
    }
}

/* Whether stderr is a journald stream: JOURNAL_STREAM holds its
 * "device:inode" (sd_journal_stream_fd(3), systemd.exec(5)), which a shell
 * redirect in between would change. Checked once. */
static int log_stderr_is_journal(void)
{
    const char *env = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;

    if (log_journal >= 0)
        return log_journal;
    log_journal = env != NULL && sscanf(env, "%llu:%llu", &dev, &ino) == 2 &&
                  fstat(STDERR_FILENO, &st) == 0 && (unsigned long long)st.st_dev == dev &&
                  (unsigned long long)st.st_ino == ino;
    return log_journal;
}

/* Length of the valid UTF-8 sequence at S (N bytes left), 0 if invalid:
 * no overlong forms, surrogates or code points past U+10FFFF. */
static size_t log_utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;   /* allowed range of the second byte */

    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4;
    else
        return 0;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    }
    return len;
}

/* Append MSG to OUT (at *AT) as the inside of a JSON string: quotes,
 * backslashes and control characters escaped, each byte that is not valid
 * UTF-8 replaced by U+FFFD. OUT has room for 6 bytes per byte of MSG. */
static void log_json_escape_n(char *out, size_t *at, const char *msg, size_t n)
{
    const unsigned char *s = (const unsigned char *)msg;
    size_t len;

    for (size_t i = 0; i < n; i += len) {
        len = 1;
        if (s[i] == '"' || s[i] == '\\') {
            out[(*at)++] = '\\';
            out[(*at)++] = (char)s[i];
        } else if (s[i] == '\n' || s[i] == '\t' || s[i] == '\r') {
            out[(*at)++] = '\\';
            out[(*at)++] = s[i] == '\n' ? 'n' : s[i] == '\t' ? 't' : 'r';
        } else if (s[i] < 0x20 || s[i] == 0x7F) {
            *at += (size_t)sprintf(out + *at, "\\u%04x", s[i]);
        } else if (s[i] < 0x80) {
            out[(*at)++] = (char)s[i];
        } else if ((len = log_utf8_len(s + i, n - i)) > 0) {
            memcpy(out + *at, s + i, len);
            *at += len;
        } else {
            len = 1;
            memcpy(out + *at, "\\ufffd", 6);
            *at += 6;
        }
    }
}

static void log_json_escape(char *out, size_t *at, const char *msg)
{
    log_json_escape_n(out, at, msg, strlen(msg));
}

/* F as `"key":value,` into OUT at *AT (LOG_FIELD_ROOM bytes free). */
static void log_json_field(char *out, size_t *at, const struct log_field *f)
{
    size_t len;

    out[(*at)++] = '"';
    log_json_escape_n(out, at, f->key, strnlen(f->key, 64));
    memcpy(out + *at, "\":", 2);
    *at += 2;
    switch (f->kind) {
    case LOG_FIELD_STR:
        if (f->str == NULL) {
            *at += (size_t)sprintf(out + *at, "null");
            break;
        }
        len = strnlen(f->str, LOG_FIELD_VALUE_MAX);
        out[(*at)++] = '"';
        log_json_escape_n(out, at, f->str, len);
        out[(*at)++] = '"';
        break;
    case LOG_FIELD_NUM:
        *at += (size_t)sprintf(out + *at, "%lld", f->num);
        break;
    case LOG_FIELD_BOOL:
        *at += (size_t)sprintf(out + *at, "%s", f->num ? "true" : "false");
        break;
    case LOG_FIELD_MS:
        *at += (size_t)sprintf(out + *at, "%s%lld.%03lld", f->num < 0 ? "-" : "",
                               llabs(f->num) / 1000, llabs(f->num) % 1000);
        break;
    }
    out[(*at)++] = ',';
}

/* The event and fields of log_ctx (none: nothing) into log_line at *AT,
 * each followed by a comma. */
static void log_json_fields(size_t *at)
{
    if (log_ctx.event == NULL)
        return;
    memcpy(log_line + *at, "\"event\":\"", 9);
    *at += 9;
    log_json_escape_n(log_line, at, log_ctx.event, strnlen(log_ctx.event, 64));
    memcpy(log_line + *at, "\",", 2);
    *at += 2;
    for (int i = 0; i < log_ctx.n && i < LOG_FIELDS_MAX; i++)
        log_json_field(log_line, at, &log_ctx.fields[i]);
}

/* LEVEL and MSG as one JSON object and a newline, in log_line; its length.
 * PREFIX ("" or journald's "<N>") goes first. */
static size_t log_format_json(const char *prefix, enum log_level level, const char *msg,
                              const struct timeval *tv)
{
    struct tm tm;
    char stamp[32];
    size_t at;

    gmtime_r(&tv->tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    at = (size_t)snprintf(log_line, 256, "%s{\"time\":\"%s.%03dZ\",\"pid\":%d,\"level\":\"%s\",",
                          prefix, stamp, (int)(tv->tv_usec / 1000), (int)getpid(),
                          log_level_names[level]);
    log_json_fields(&at);
    memcpy(log_line + at, "\"msg\":\"", 7);
    at += 7;
    log_json_escape(log_line, &at, msg);
    memcpy(log_line + at, "\"}\n", 3);
    return at + 3;
}

/* MSG as Redis's text line(s) in log_line; its length. */
static size_t log_format_text(enum log_level level, const char *msg, const struct timeval *tv)
{
    struct tm tm;
    char stamp[64];
    int n;

    localtime_r(&tv->tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%d %b %Y %H:%M:%S", &tm);
    n = snprintf(log_line, LOG_LINE_MAX, "%d:S %s.%03d %c %s\n", (int)getpid(), stamp,
                 (int)(tv->tv_usec / 1000), log_level_marks[level], msg);
    return n < LOG_LINE_MAX ? (size_t)n : LOG_LINE_MAX - 1;
}

/* MSG for journald in log_line: each of its lines behind "<N>" (journald
 * takes each line as an entry and adds time and pid itself); its length. */
static size_t log_format_journal(enum log_level level, const char *msg)
{
    size_t at = 0;

    for (const char *line = msg; ; line++) {
        size_t n = strcspn(line, "\n");
        log_line[at++] = '<';
        log_line[at++] = log_level_priorities[level];
        log_line[at++] = '>';
        memcpy(log_line + at, line, n);
        at += n;
        log_line[at++] = '\n';
        line += n;
        if (*line == '\0' || line[1] == '\0')
            break;
    }
    return at;
}

/* Write LEVEL's MSG to OUT in the format that fits it. */
static void log_emit(FILE *out, enum log_level level, const char *msg, const struct timeval *tv)
{
    int journal = out == stderr && log_stderr_is_journal();
    char prefix[4] = "";
    size_t len;

    if (log_format_used == LOG_FORMAT_JSON) {
        if (journal)
            snprintf(prefix, sizeof(prefix), "<%c>", log_level_priorities[level]);
        len = log_format_json(prefix, level, msg, tv);
    } else if (journal) {
        len = log_format_journal(level, msg);
    } else {
        len = log_format_text(level, msg, tv);
    }
    fwrite(log_line, 1, len, out);
    fflush(out);
}

/* Write MSG at LEVEL to the log destination (and to stderr while
 * starting). */
static void log_out(enum log_level level, const char *msg, const struct timeval *tv)
{
    if (log_stream == NULL) {
        log_emit(stderr, level, msg, tv);
        if (log_report != NULL && level >= LOG_WARNING) {
            fprintf(log_report, "%s\n", msg);
            fflush(log_report);
        }
        return;
    }
    log_emit(log_stream, level, msg, tv);
    if (log_startup_copy && level >= LOG_WARNING)
        log_emit(stderr, level, msg, tv);
    if (log_report != NULL && level >= LOG_WARNING) {
        fprintf(log_report, "%s\n", msg);
        fflush(log_report);
    }
}

static uint64_t log_ms(const struct timeval *tv)
{
    return (uint64_t)tv->tv_sec * 1000 + (uint64_t)tv->tv_usec / 1000;
}

/* Write the count of R's repeats, and begin its window afresh at NOW. */
static void log_repeat_write(struct log_repeat *r, const struct timeval *tv)
{
    char line[LOG_REPEAT_TEXT + 96];
    uint64_t span = r->last_ms - r->first_ms;

    snprintf(line, sizeof(line), "%s%s (repeated %lu time%s in %llu.%llu s)", r->text,
             r->len >= LOG_REPEAT_TEXT ? "..." : "", r->count, r->count == 1 ? "" : "s",
             (unsigned long long)(span / 1000), (unsigned long long)(span % 1000 / 100));
    struct log_field count = LOG_NUM("repeated", r->count);
    struct log_ctx outer = log_ctx;   /* a log_event line may be on its way */

    r->count = 0;
    r->first_ms = log_ms(tv);
    log_repeats_pending--;
    log_ctx.event = r->event;
    log_ctx.fields = &count;
    log_ctx.n = 1;
    log_out(r->level, line, tv);
    log_ctx = outer;
}

/* Write the counts whose window has passed (every count with FORCE). */
static void log_repeats_drain(int force)
{
    struct timeval tv;
    uint64_t now;

    if (log_repeats_pending == 0)
        return;
    gettimeofday(&tv, NULL);
    now = log_ms(&tv);
    for (int i = 0; i < LOG_REPEAT_SLOTS && log_repeats_pending > 0; i++) {
        struct log_repeat *r = &log_repeats[i];
        if (r->count > 0 && (force || now - r->first_ms >= LOG_REPEAT_MS))
            log_repeat_write(r, &tv);
    }
}

void log_repeats_flush(void)
{
    log_repeats_drain(0);
}

/* FNV-1a of MSG's first LOG_REPEAT_TEXT bytes. */
static uint64_t log_hash(const char *msg, size_t len)
{
    uint64_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < len && i < LOG_REPEAT_TEXT - 1; i++)
        h = (h ^ (unsigned char)msg[i]) * 1099511628211ULL;
    return h;
}

/* Whether MSG (a warning) repeats one written less than LOG_REPEAT_MS ago:
 * then it is counted and not to be written. Otherwise its slot (the same
 * text's, or the oldest without a count) begins a window at TV. */
static int log_repeat_swallow(enum log_level level, const char *msg, const struct timeval *tv)
{
    size_t len = strlen(msg);
    uint64_t h = log_hash(msg, len), now = log_ms(tv);
    struct log_repeat *r, *victim = NULL;

    for (int i = 0; i < LOG_REPEAT_SLOTS; i++) {
        r = &log_repeats[i];
        if (r->hash == h && r->len == len && r->level == level &&
            strncmp(r->text, msg, LOG_REPEAT_TEXT - 1) == 0) {
            if (now - r->first_ms < LOG_REPEAT_MS) {
                log_repeats_pending += r->count == 0;
                r->count++;
                r->last_ms = now;
                return 1;
            }
            if (r->count > 0)
                log_repeat_write(r, tv);
            r->first_ms = now;
            return 0;
        }
        if (r->count == 0 && (victim == NULL || r->first_ms < victim->first_ms))
            victim = r;
    }
    if (victim == NULL)
        return 0;   /* every slot holds a count: write it, never lose it */
    victim->hash = h;
    victim->len = len;
    victim->level = level;
    victim->event = log_ctx.event;
    victim->first_ms = victim->last_ms = now;
    memcpy(victim->text, msg, len < LOG_REPEAT_TEXT ? len + 1 : LOG_REPEAT_TEXT - 1);
    victim->text[LOG_REPEAT_TEXT - 1] = '\0';
    return 0;
}

/* Write FMT's message at LEVEL, with log_ctx's event and fields (set by
 * the caller, cleared here). */
static void log_vwrite(enum log_level level, const char *fmt, va_list ap)
{
    char msg[LOG_MSG_MAX];
    struct timeval tv;
    int n;

    gettimeofday(&tv, NULL);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n >= (int)sizeof(msg))
        memcpy(msg + sizeof(msg) - 4, "...", 4);
    /* A message ending in newlines (an error list) makes no empty lines. */
    for (n = (int)strlen(msg); n > 0 && msg[n - 1] == '\n'; n--)
        msg[n - 1] = '\0';
    if (level != LOG_WARNING || !log_repeat_swallow(level, msg, &tv))
        log_out(level, msg, &tv);
    memset(&log_ctx, 0, sizeof(log_ctx));
    log_repeats_drain(0);
}

void log_write(enum log_level level, const char *fmt, ...)
{
    va_list ap;

    if (level < log_current_level)
        return;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}

void log_event(enum log_level level, const char *event, const struct log_field *fields, int n,
               const char *fmt, ...)
{
    va_list ap;

    if (level < log_current_level)
        return;
    log_ctx.event = event;
    log_ctx.fields = fields;
    log_ctx.n = n;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}
