// The command path (commands.h): posted receive into the process's own memory (DTI_OP_RECV_POST).
//
// The application posts (address, length) for a socket's next read and
// waits; the engine writes received bytes straight into that memory with
// process_vm_writev(2) — on the engine's core, from the receive ring, in the
// same pass that refreshed the socket — consumes them from the ring (the
// window opens at once) and completes the post once `least` bytes landed,
// or with what landed when the stream ends, fails or the application cancels.
// The program's core then does no copy at all for that read.
//
// Why process_vm_writev: it is one copy from the ring into the target's
// pages (the kernel pins them), one system call per socket per engine pass
// for everything readable (two ring pieces into one remote range); the PPE
// runs as root and knows each member's pid from its control socket
// (SO_PEERCRED, or a fork child's SCM_CREDENTIALS). It is the one system call
// the engine makes on the receive path, and only for posts; it is paid once
// per pass for up to a ring of bytes.
//
// Hostile input: the address is the application's; the kernel checks it
// against the process's mappings (-EFAULT, partial writes are counted as
// landed, never more); nothing here dereferences it. A process the engine
// may not write into (another pid namespace: pid 0; ptrace refused: EPERM)
// gets -EOPNOTSUPP before any byte moved, and libdti copies from the ring.
#include "commands.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

namespace dti::engine::detail {

void Commands::cmd_post(Group &group, uint16_t ci, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    const uint32_t h = table_.handle(group, si);
    if (s.post.used || s.recv_into.used) {
        pub_.complete(group, ci, c.tag, -EBUSY, h); // one post per socket; the first one stays
        return;
    }
    if (!(s.state & (DTI_STATE_CONNECTED | DTI_STATE_RESET | DTI_STATE_FAILED)) && !s.error) {
        pub_.complete(group, ci, c.tag, -ENOTCONN, h);
        return;
    }
    const uint32_t pid = table_.owner(group, ci).cred_pid;
    if (pid == 0 || !lim_.posted_receive) {
        stats_.post_fallbacks++;
        pub_.complete(group, ci, c.tag, -EOPNOTSUPP, h);
        return;
    }
    stats_.posts++;
    s.post = Pending{true, ci, c.tag, c.length, c.offset, c.least, 0, pid};
    try_post(group, si);
}

// Ends the post at once with what landed (finish_pending: -ECANCELED when
// nothing did). A post that already completed is not there: nothing to do.
void Commands::cmd_cancel_post(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    if (!s.post.used)
        return;
    try_post(group, si); // bytes already readable still land: the answer says so
    if (s.post.used)
        end_post(group, si, -ECANCELED);
}

void Commands::end_post(Group &group, uint32_t si, int32_t res)
{
    pub_.finish_pending(group, group.slots[si].post, res, table_.handle(group, si));
    table_.mark(group, si);
}

// Writes what is readable into the process and completes the post when
// enough landed or nothing more will come.
void Commands::try_post(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    Pending &p = s.post;
    if (!p.used)
        return;
    uint32_t readable = s.rx_tail - s.rx_consumed;
    if (s.has_sid) {
        RingSpan v;
        if (tr_.rx_view(s.sid, &v) == 0 && v.total() <= s.rx_size) {
            s.rx_tail = s.rx_consumed + v.total();
            readable = v.total();
        }
    }
    if (s.dg.rx.pending())
        digest_rx(group, si); // before the write releases the bytes
    const uint32_t n = std::min(readable, p.arg - p.landed);
    if (n > 0) {
        table_.settle_rx(group, si);
        const uint32_t mask = s.rx_size - 1;
        const uint32_t off = (s.rx_base + s.rx_consumed) & mask;
        const uint32_t first = std::min(n, s.rx_size - off);
        iovec local[2] = {{group.rx_ring(si) + off, first}, {group.rx_ring(si), n - first}};
        iovec remote{reinterpret_cast<void *>(p.offset + p.landed), n};
        stats_.posted_writes++;
        ssize_t w = process_vm_writev(pid_t(p.pid), local, n > first ? 2 : 1, &remote, 1, 0);
        const int err = w < 0 ? errno : 0;
        if (w > 0) {
            const uint32_t got = uint32_t(std::min<ssize_t>(w, n));
            table_.consume_rx(group, si, got);
            p.landed += got;
            stats_.posted_bytes += got;
            table_.mark(group, si);
        }
        if (w < 0 || uint32_t(w) < n) {
            // The rest of the range cannot be written (a hole in the mapping,
            // the process gone, ptrace refused): answer with what landed.
            int32_t res = err == EPERM || err == ENOSYS ? -EOPNOTSUPP : err == ESRCH ? -ESRCH : -EFAULT;
            if (res == -EOPNOTSUPP && p.landed == 0)
                stats_.post_fallbacks++;
            else if (p.landed == 0)
                stats_.post_faults++;
            end_post(group, si, res);
            return;
        }
    }
    if (p.landed >= p.least || p.landed >= p.arg) {
        end_post(group, si, int32_t(p.landed));
    } else if (s.rx_tail == s.rx_consumed) {
        // Nothing more is readable: has the stream ended? (as dti_recv)
        if (s.error)
            end_post(group, si, s.error);
        else if (s.state & (DTI_STATE_RD_CLOSED | DTI_STATE_RESET | DTI_STATE_FAILED))
            end_post(group, si, 0);
    }
}

} // namespace dti::engine::detail
