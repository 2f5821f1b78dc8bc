/* TEST FIXTURE helper for the programs the preload tests run under the shim:
 * whether another thread of this process sleeps, read from
 * /proc/self/task/TID (a test makes something happen only once the thread
 * that must be woken by it sleeps). Needs check.h's CHECK. */
#ifndef ETA_PRELOAD_TEST_ASLEEP_H
#define ETA_PRELOAD_TEST_ASLEEP_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "check.h"

/* /proc/self/task/TID/<what> into buf (NUL-terminated). */
static inline void task_file(pid_t tid, const char *what, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, what);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    CHECK(n > 0);
    buf[n] = 0;
}

/* True while thread TID is in the kernel's interruptible sleep ('S'). */
static inline bool task_sleeping(pid_t tid)
{
    char buf[256];
    task_file(tid, "stat", buf, sizeof buf);
    const char *state = strrchr(buf, ')');
    return state && state[1] == ' ' && state[2] == 'S';
}

/* True while thread TID sleeps in a waiting system call: epoll_wait and poll
 * in the kernel, and the shim's and libdti's sleeps (ppoll on a context's
 * wait fd, epoll on an inner set). */
static inline bool task_blocked_in_wait(pid_t tid)
{
    if (!task_sleeping(tid))
        return false;
    char buf[128];
    task_file(tid, "syscall", buf, sizeof buf);
    long nr = strtol(buf, NULL, 10); /* "running" reads as 0 (read): not a wait */
    return nr == SYS_epoll_wait || nr == SYS_epoll_pwait || nr == SYS_ppoll || nr == SYS_poll;
}

#endif
