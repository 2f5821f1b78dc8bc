/* A connect's outcome, and what the next connect() on the socket does after
 * a failure, as Linux does it (net/ipv4/af_inet.c, __inet_stream_connect):
 *   - a blocking connect() that failed returned the error; the socket is back
 *     in CLOSE and the next connect() is a new attempt;
 *   - a non-blocking one that failed: the next connect() reports the error
 *     (ECONNABORTED when getsockopt(SO_ERROR) took it already) and puts the
 *     socket back in CLOSE; the one after is a new attempt;
 *   - a socket that was connected answers EISCONN, also once reset.
 * preload/README.md "Connect". */
#include <errno.h>

#include "attach.h"
#include "shim.h"
#include "sock.h"
#include "sockobj.h"

/* The engine updates the shared state after it takes the command, so
 * "not connecting yet" is not an outcome: only connected, failed, reset or
 * an error are. */
static bool connect_settled(const struct dti_sock_info *ss)
{
    return (ss->state & (DTI_STATE_CONNECTED | DTI_STATE_FAILED | DTI_STATE_RESET)) || ss->error;
}

bool eta_connect_done(void *arg)
{
    struct eta_sock *s = arg;
    dti_ctx_t *c = eta_ctx();
    struct dti_sock_info ss;
    if (!c || dti_sock_status(c, s->h, &ss) != 0)
        return true;
    return connect_settled(&ss);
}

int eta_connect_result(dti_ctx_t *c, struct eta_sock *s)
{
    struct dti_sock_info ss;
    int rc = dti_sock_status(c, s->h, &ss);
    if (rc < 0)
        return eta_errno_from_dti(rc);
    if (!connect_settled(&ss))
        return dti_engine_alive(dti_ctx_owner(c)) ? EINPROGRESS : ECONNREFUSED;
    if ((ss.state & DTI_STATE_CONNECTED) && !ss.error)
        return 0;
    int e = dti_sock_take_error(c, s->h);
    return e < 0 ? -e : e > 0 ? e : ECONNREFUSED;
}

int eta_connect_again(dti_ctx_t *c, struct eta_sock *s)
{
    /* Connected once (reset since or not): EISCONN, as Linux answers a
     * socket that was connected, whatever became of the connection. */
    struct dti_sock_info ss;
    if (dti_sock_status(c, s->h, &ss) == 0 && (ss.state & DTI_STATE_CONNECTED))
        return EISCONN;
    const int res = eta_connect_result(c, s);
    if (res == EINPROGRESS)
        return EALREADY;
    if (res == 0)
        return EISCONN;
    if (!s->connect_reported || !s->connect_closed) {
        int e = s->connect_reported ? ECONNABORTED : res;
        s->connect_reported = s->connect_closed = true;
        return e;
    }
    return 0;
}
