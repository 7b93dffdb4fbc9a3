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

/* Parse PATH. Returns 0 when the file was read (its errors, if any, are in
 * ERRS), -1 when it could not be opened (also recorded in ERRS). */
int inifile_parse(const char *path, inifile_handler *handler, void *ctx, struct errlist *errs);

#endif
