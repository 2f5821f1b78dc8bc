/* TEST FIXTURE helper for the programs the preload tests run under the shim:
 * CHECK(cond) prints where and why a check failed (with errno) and exits 1,
 * so the runner sees a failed scenario instead of an OK line. */
#ifndef ETA_PRELOAD_TEST_CHECK_H
#define ETA_PRELOAD_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("FAIL %s:%d: %s (errno %d: %s)\n", __FILE__, __LINE__, #cond, errno,  \
                   strerror(errno));                                                       \
            fflush(stdout);                                                                \
            _exit(1);                                                                      \
        }                                                                                  \
    } while (0)

#endif
