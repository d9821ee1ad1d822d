/* stress.h — the kit of the concurrency stress programs (tests/stress/).
 *
 * Each program is a plain main() (no Criterion: its runner cannot start under
 * ThreadSanitizer, Criterion issue #274) that hammers one thread-shared part
 * of the core from many threads and checks what must hold afterwards. They
 * need no Docker. Built in every build; `scripts/test.sh --tsan` builds them
 * with -fsanitize=thread and runs them (ctest -L stress), where any data race
 * or lock-order inversion fails the run, and `--asan` runs them under
 * ASan+UBSan, where a use after free or a leak does.
 *
 * STRESS_CHECK may be called from any thread: failures are counted
 * atomically and each is printed with its place. */
#ifndef SANDBOXD_STRESS_H
#define SANDBOXD_STRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "sandboxd/common.h"

#define STRESS_CHECK(cond, ...)                                                                                        \
        do {                                                                                                           \
                if (!(cond))                                                                                           \
                        stress_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                           \
        } while (0)

void stress_fail(const char *file, int line, const char *cond, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* Run fn(i, ud) on n threads at once (released together) and join them. */
void stress_threads(int n, void (*fn)(int i, void *ud), void *ud);

/* A fresh private directory under $TMPDIR (or /tmp); stress_done removes it. */
const char *stress_tmpdir(void);

/* Iterations scaled by $SANDBOXD_STRESS_SCALE (a percentage, default 100). */
int stress_n(int base);

/* Prints the verdict, removes the temp dir; the exit code for main. */
int stress_done(const char *name);

#endif
