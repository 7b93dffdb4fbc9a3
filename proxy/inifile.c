/* inifile.c - owns line counting around inih: inih hands its handler no line
 * number, so we feed it lines ourselves and count them. */
#include "inifile.h"

#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <string.h>

struct inifile_state {
    FILE *file;
    const char *path;
    int line;
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

    st.file = fopen(path, "r");
    if (st.file == NULL) {
        errlist_add(errs, path, 0, "cannot open: %s", strerror(errno));
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
