/* The sendfile family: sendfile() and sendfile64() onto an accelerated
 * socket send from the file through the send ring; an accelerated socket as
 * the source is refused loudly (the kernel cannot read a PPE socket). */
#include <sys/types.h>

#include "bypass.h"
#include "io.h"
#include "real.h"

static ssize_t sendfile_impl(int out_fd, int in_fd, off_t *offset, size_t count)
{
    struct eta_sock *s = io_accel(out_fd);
    if (ETA_LIKELY(!s)) {
        struct eta_sock *in = io_accel(in_fd);
        if (in) { /* the kernel cannot read a PPE socket */
            eta_obj_put(&in->obj);
            return eta_bypass_refused("sendfile", in_fd, 2);
        }
        return real_sendfile(out_fd, in_fd, offset, count);
    }
    off_t off; /* the program's offset, read and written back through the recoverable copy (ucopy.h) */
    if (offset && (uptr_bad(offset, sizeof *offset) || eta_ucopy(&off, offset, sizeof off) != 0)) {
        eta_obj_put(&s->obj);
        errno = EFAULT; /* the kernel's answer for an offset it cannot read; nothing sent */
        return -1;
    }
    ssize_t r = eta_sock_send(s, NULL, 0, 0, in_fd, offset ? &off : NULL, count);
    if (offset && eta_ucopy(offset, &off, sizeof off) != 0 && r >= 0) {
        errno = EFAULT; /* as the kernel's put_user after the bytes went */
        r = -1;
    }
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t eta_sendfile_export(int out_fd, int in_fd, off_t *offset, size_t count) __asm__("sendfile");
ETA_EXPORT ssize_t eta_sendfile_export(int out_fd, int in_fd, off_t *offset, size_t count)
{
    return sendfile_impl(out_fd, in_fd, offset, count);
}

ETA_EXPORT ssize_t eta_sendfile64_export(int out_fd, int in_fd, off_t *offset, size_t count) __asm__("sendfile64");
ETA_EXPORT ssize_t eta_sendfile64_export(int out_fd, int in_fd, off_t *offset, size_t count)
{
    return sendfile_impl(out_fd, in_fd, offset, count);
}
