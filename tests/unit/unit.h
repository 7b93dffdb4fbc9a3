/* unit.h - a minimal unit-test harness: CHECK records a failure with its
 * line and goes on; UNIT_MAIN runs the listed tests and prints the plain
 * "N passed, N failed" line. Exit status is non-zero on any failure. */
#ifndef SLUICE_UNIT_H
#define SLUICE_UNIT_H

#include <stdio.h>
#include <string.h>

static int unit_failed_checks;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            unit_failed_checks++;                                            \
        }                                                                    \
    } while (0)

#define CHECK_STR(a, b)                                                      \
    do {                                                                     \
        const char *a_ = (a), *b_ = (b);                                     \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {               \
            fprintf(stderr, "%s:%d: CHECK_STR failed: \"%s\" != \"%s\"\n",   \
                    __FILE__, __LINE__, a_ ? a_ : "(null)",                  \
                    b_ ? b_ : "(null)");                                     \
            unit_failed_checks++;                                            \
        }                                                                    \
    } while (0)

struct unit_test {
    const char *name;
    void (*fn)(void);
};

static inline int unit_run(const char *suite, const struct unit_test *tests)
{
    int passed = 0, failed = 0;
    for (const struct unit_test *t = tests; t->name != NULL; t++) {
        int before = unit_failed_checks;
        t->fn();
        if (unit_failed_checks == before) {
            passed++;
        } else {
            failed++;
            fprintf(stderr, "%s: FAILED %s\n", suite, t->name);
        }
    }
    printf("%s: %d passed, %d failed\n", suite, passed, failed);
    return failed == 0 ? 0 : 1;
}

#define UNIT_MAIN(suite, ...)                                                \
    int main(void)                                                           \
    {                                                                        \
        static const struct unit_test tests[] = {__VA_ARGS__, {NULL, NULL}}; \
        return unit_run(suite, tests);                                       \
    }

#endif
