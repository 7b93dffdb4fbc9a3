/* respscan.h - find the end of one RESP2 value of any nesting depth, for
 * the replies hiredis 0.14's reader refuses (deeper than 7 levels, such as
 * COMMAND and COMMAND DOCS). */
#ifndef SLUICE_RESPSCAN_H
#define SLUICE_RESPSCAN_H

#include <stddef.h>
#include <sys/types.h>

/* Length of the complete RESP2 value at the start of BUF; 0 when more bytes
 * are needed; -1 when BUF is not RESP2. */
ssize_t respscan_value(const char *buf, size_t len);

#endif
