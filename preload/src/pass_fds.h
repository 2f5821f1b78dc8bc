/* Sockets passed to another process over SCM_RIGHTS (pass_fds.c). */
#ifndef ETA_PRELOAD_PASS_FDS_H
#define ETA_PRELOAD_PASS_FDS_H

#include <stdbool.h>
#include <sys/socket.h>

/* Before sendmsg: registers with the PPE each accelerated socket msg passes
 * (SCM_RIGHTS). True when one cannot be passed: then nothing is registered,
 * errno is EOPNOTSUPP (counted, one warning) and nothing must be sent. */
bool eta_passes_accelerated(const struct msghdr *msg);
/* The sendmsg after eta_passes_accelerated() failed: nothing is in flight. */
void eta_pass_withdraw(const struct msghdr *msg);
/* After a recvmsg of the kernel's with control data: every received
 * descriptor that is an accelerated socket another process passed becomes
 * one here (claimed from the PPE), or is refused loudly. */
void eta_claim_passed(struct msghdr *msg);

#endif
