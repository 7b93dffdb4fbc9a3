/* inifile.h - read an ini file with inih, handing each key to a callback
 * together with its line number, and turning syntax errors into
 * "FILE:LINE: message" entries. Shared by the config and the rule loader. */
#ifndef SLUICE_INIFILE_H
#define SLUICE_INIFILE_H

#include "errlist.h"

/* Called for each section header (NAME == NULL) and each key. Errors go to
 * ERRS through errlist_add with the given FILE and LINE. */
typedef void inifile_handler(void *ctx, const char *section, const char *name,
                             const char *value, const char *file, int line,
                             struct errlist *errs);

/* A "[...]" line of a file, found by inifile_scan_layout. */
struct inifile_header {
    int line;
    char *section;          /* between the brackets, blanks trimmed */
};

/* What inih does not report: it calls its handler only for keys, so a
 * section without keys would go unseen and two sections of the same name in
 * a row would merge into one; and it hands a continuation line over as the
 * same key again, which a loader must tell from a duplicate key. */
struct inifile_layout {
    struct inifile_header *headers;   /* in file order */
    int header_count;
    unsigned char *continued;         /* continued[line]: an indented line going on
                                       * with the key above (inih's multi-line values) */
    int continued_size;
};

/* Find PATH's section headers and continuation lines the way inih finds
 * them, with line numbers as inifile_parse counts them. A "[" line without
 * "]" is left to inih's syntax error. Free with inifile_layout_free. */
void inifile_scan_layout(const char *path, struct inifile_layout *out);
int inifile_is_continued(const struct inifile_layout *layout, int line);
void inifile_layout_free(struct inifile_layout *layout);

/* The NAME of a section header "KEYWORD NAME" (one word after blanks), or
 * NULL when SECTION is anything else: for "[limit NAME]", "[user NAME]". */
const char *inifile_section_name(const char *section, const char *keyword);

/* Parse PATH. Returns 0 when the file was read (its errors, if any, are in
 * ERRS), -1 when it could not be opened (also recorded in ERRS). */
int inifile_parse(const char *path, inifile_handler *handler, void *ctx, struct errlist *errs);

#endif
