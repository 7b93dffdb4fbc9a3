/* redact.h - which arguments of a request are secrets (passwords, lock
 * owner tokens), as Redis's own SLOWLOG redacts them: one table read by
 * everything that keeps or shows a client's arguments. */
#ifndef SLUICE_REDACT_H
#define SLUICE_REDACT_H

#include <stdint.h>

#include "sv.h"

/* What a secret argument is shown as (Redis's shared.redacted). */
#define REDACT_TEXT "(redacted)"
/* Arguments beyond this position are never shown (the slow log keeps 31). */
#define REDACT_MAX_ARGS 32

/* The secrets among the first KEPT (at most REDACT_MAX_ARGS) of the ARGC
 * arguments ARGV (argv[0] the command), as bits by position; 0 for all
 * but a few commands, found without a string compare. An argument sluice
 * did not read (NULL view) is never taken for a keyword. */
uint32_t redact_args(const struct sv *argv, int argc, int kept);

#endif
