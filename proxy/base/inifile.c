/* inifile.c - owns line counting around inih: inih hands its handler no line
 * number, so we feed it lines ourselves and count them; and what inih does
 * not report at all (empty sections, continuation lines), for the loaders. */
#include "inifile.h"

#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safefile.h"

struct inifile_state {
    FILE *file;
    const char *path;
    int line;
    long long bytes;               /* read so far: at most SAFEFILE_MAX_BYTES */
    int section_line;              /* line of the last [section] header */
    char section[256];
    inifile_handler *handler;
    void *ctx;
    struct errlist *errs;
};

/* inih asks for one line at a time, then handles that line before asking
 * for the next: the count of lines read is the current line number. */
static char *inifile_read_line(char *str, int num, void *stream)
{
    struct inifile_state *st = stream;
    char *got = fgets(str, num, st->file);

    /* A file that grows while read stops at the cap as a bigger one does. */
    if (got != NULL && (st->bytes += (long long)strlen(got)) > SAFEFILE_MAX_BYTES) {
        errlist_add(st->errs, st->path, 0, "larger than %d bytes", SAFEFILE_MAX_BYTES);
        return NULL;
    }
    if (got != NULL) {
        st->line++;
        got += strspn(got, " \t");
        if (got[0] == '[')
            st->section_line = st->line;
    }
    return got == NULL ? NULL : str;
}

static int inifile_on_key(void *user, const char *section, const char *name, const char *value)
{
    struct inifile_state *st = user;

    if (strcmp(section, st->section) != 0) {
        snprintf(st->section, sizeof(st->section), "%s", section);
        st->handler(st->ctx, section, NULL, NULL, st->path, st->section_line, st->errs);
    }
    st->handler(st->ctx, section, name, value, st->path, st->line, st->errs);
    return 1;
}

int inifile_parse(const char *path, inifile_handler *handler, void *ctx, struct errlist *errs)
{
    struct inifile_state st = {.path = path, .handler = handler, .ctx = ctx, .errs = errs};
    int rc;

    char why[128];

    st.file = safefile_open(path, why, sizeof(why));
    if (st.file == NULL) {
        errlist_add(errs, path, 0, "%s", why);
        return -1;
    }
    rc = ini_parse_stream(inifile_read_line, &st, inifile_on_key, &st);
    fclose(st.file);
    /* inih reports only its first syntax error (a line that is neither a
     * section, a comment nor key = value); handler errors are ours. */
    if (rc > 0)
        errlist_add(errs, path, rc, "syntax error: expected [section] or key = value");
    return 0;
}

static void inifile_mark_continued(struct inifile_layout *l, int lineno)
{
    if (lineno >= l->continued_size) {
        int size = lineno * 2 + 16;
        unsigned char *grown = realloc(l->continued, (size_t)size);

        if (grown == NULL)
            return;
        memset(grown + l->continued_size, 0, (size_t)(size - l->continued_size));
        l->continued = grown;
        l->continued_size = size;
    }
    l->continued[lineno] = 1;
}

/* Record the header between START ('[') and END (']') on line LINENO. */
static void inifile_add_header(struct inifile_layout *l, int lineno, const char *start,
                               const char *end)
{
    struct inifile_header *grown;

    start += 1 + strspn(start + 1, " \t");
    while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    grown = realloc(l->headers, sizeof(*grown) * (size_t)(l->header_count + 1));
    if (grown == NULL)
        return;
    l->headers = grown;
    l->headers[l->header_count].line = lineno;
    l->headers[l->header_count].section = strndup(start, (size_t)(end - start));
    l->header_count++;
}

/* Lines are read in the same INI_MAX_LINE chunks as inih (and as
 * inifile_parse counts them), so line numbers agree. */
void inifile_scan_layout(const char *path, struct inifile_layout *out)
{
    char line[INI_MAX_LINE], why[128];
    FILE *f = safefile_open(path, why, sizeof(why));   /* its refusal is inifile_parse's to say */
    int lineno = 0, after_key = 0;
    long long bytes = 0;

    memset(out, 0, sizeof(*out));
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *start = line, *end;

        if ((bytes += (long long)strlen(line)) > SAFEFILE_MAX_BYTES)
            break;   /* inifile_parse says so */

        if (++lineno == 1 && strncmp(line, "\xEF\xBB\xBF", 3) == 0)
            start += 3;     /* a UTF-8 BOM, which inih skips too */
        start += strspn(start, " \t\r\n");
        if (*start == '\0' || *start == ';' || *start == '#')
            continue;
        if (after_key && start > line) {
            inifile_mark_continued(out, lineno);
            continue;
        }
        if (*start != '[') {
            after_key = 1;
            continue;
        }
        for (end = start + 1; *end != '\0' && *end != ']'; end++) {
            if (*end == ';' && (end[-1] == ' ' || end[-1] == '\t'))
                break;
        }
        if (*end != ']')
            continue;
        after_key = 0;
        inifile_add_header(out, lineno, start, end);
    }
    if (f != NULL)
        fclose(f);
}

int inifile_is_continued(const struct inifile_layout *layout, int line)
{
    return line < layout->continued_size && layout->continued[line];
}

void inifile_layout_free(struct inifile_layout *layout)
{
    for (int i = 0; i < layout->header_count; i++)
        free(layout->headers[i].section);
    free(layout->headers);
    free(layout->continued);
    memset(layout, 0, sizeof(*layout));
}

const char *inifile_section_name(const char *section, const char *keyword)
{
    size_t kw = strlen(keyword);
    const char *name;

    if (section == NULL || strncmp(section, keyword, kw) != 0 ||
        (section[kw] != ' ' && section[kw] != '\t'))
        return NULL;
    name = section + kw + strspn(section + kw, " \t");
    if (*name == '\0' || name[strcspn(name, " \t")] != '\0')
        return NULL;
    return name;
}
