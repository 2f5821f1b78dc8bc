// A test application that speaks the DTI control protocol itself and
// writes its region directly (no libdti): what a hostile program can do.
// Also the raw control messages the pass, rejoin, exec and fork tests send
// beside libdti (send_ctl_with_fd), and a claim by another user
// (claim_as_nobody).
#pragma once

#include "dti_abi.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <grp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

namespace dti::test {

// What the raw application is doing (for a watchdog's message).
inline volatile const char *raw_app_phase = "";

// Reports on stderr a step that took over 5 s (a slow engine shows).
struct SlowStep {
    const char *what;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~SlowStep()
    {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
        if (ms > 5000)
            std::fprintf(stderr, "raw app: %s took %lld ms\n", what, (long long)ms);
    }
};

struct RawApp {
    int ctl = -1, doorbell = -1;
    uint8_t *base = nullptr;
    uint64_t size = 0;
    dti_region_header hdr{};
    std::vector<uint32_t> qps;        // queue pair indices it opened
    std::vector<uint32_t> cmd_next;   // next command index it publishes, per qp
    std::vector<uint32_t> ev_next;    // next event index it reads, per qp
    bool honest = true;               // no garbage written yet: its queues still follow the rules

    ~RawApp() { drop(); }
    void drop()
    {
        if (base)
            munmap(base, size);
        if (ctl >= 0)
            close(ctl);
        if (doorbell >= 0)
            close(doorbell);
        base = nullptr;
        ctl = doorbell = -1;
        qps.clear();
        cmd_next.clear();
        ev_next.clear();
        honest = true;
    }

    // Receives one message and up to one passed fd.
    static bool recv_with_fds(int fd, dti_ctl_msg *m, int *fds, int nfds)
    {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 5000) != 1)
            return false;
        char cbuf[CMSG_SPACE(sizeof(int) * 2)] = {};
        iovec iov{m, sizeof *m};
        msghdr mh{};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        if (recvmsg(fd, &mh, MSG_CMSG_CLOEXEC) != ssize_t(sizeof *m))
            return false;
        int got = 0;
        for (cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int n = int((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                for (int i = 0; i < n; i++) {
                    int f = -1;
                    std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
                    if (got < nfds)
                        fds[got++] = f;
                    else
                        close(f);
                }
            }
        return got == nfds;
    }

    bool send_msg(uint32_t type, uint32_t index, uint32_t engine)
    {
        dti_ctl_msg m{};
        m.magic = DTI_CTL_MAGIC;
        m.type = type;
        m.abi_version = DTI_ABI_VERSION;
        m.index = index;
        m.pid = 1; // a lie: SO_PEERCRED is what counts
        m.engine = engine;
        std::snprintf(m.text, sizeof m.text, "fuzzer");
        return ::send(ctl, &m, sizeof m, MSG_NOSIGNAL) == ssize_t(sizeof m);
    }

    bool attach(const std::string &path, uint32_t engine, uint32_t contexts)
    {
        raw_app_phase = "attach: connect";
        SlowStep slow{"attach"};
        ctl = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path.c_str());
        if (ctl < 0 || connect(ctl, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0 ||
            !send_msg(DTI_CTL_HELLO, 0, engine))
            return false;
        raw_app_phase = "attach: WELCOME";
        dti_ctl_msg w{};
        int fds[2] = {-1, -1};
        if (!recv_with_fds(ctl, &w, fds, 2) || w.type != DTI_CTL_WELCOME)
            return false;
        doorbell = fds[1];
        size = w.region_size;
        void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
        close(fds[0]);
        if (p == MAP_FAILED)
            return false;
        base = static_cast<uint8_t *>(p);
        std::memcpy(&hdr, base, sizeof hdr);
        raw_app_phase = "attach: OPEN_CTX";
        for (uint32_t i = 0; i < contexts; i++) {
            dti_ctl_msg o{};
            int wake = -1;
            if (!send_msg(DTI_CTL_OPEN_CTX, 0, engine) || !recv_with_fds(ctl, &o, &wake, 1) ||
                o.type != DTI_CTL_CTX_OPENED)
                return false;
            close(wake); // B polls its event ring with a deadline instead of sleeping
            qps.push_back(o.index);
            cmd_next.push_back(0);
            ev_next.push_back(0);
        }
        return true;
    }

    dti_qp_header *qp(uint32_t i) const
    {
        return reinterpret_cast<dti_qp_header *>(base + hdr.ctx_offset + hdr.ctx_stride * i);
    }
    dti_cmd *cmds(uint32_t i) const { return reinterpret_cast<dti_cmd *>(qp(i) + 1); }
    dti_ev *evs(uint32_t i) const { return reinterpret_cast<dti_ev *>(cmds(i) + hdr.cmdq_entries); }

    void ring()
    {
        uint64_t one = 1;
        if (::write(doorbell, &one, sizeof one) < 0) {
            // a full counter or a closed doorbell: the engine polls anyway
        }
    }

    // Publishes a command on queue pair k (its slot, then the stamp).
    void publish(uint32_t k, dti_cmd c)
    {
        uint32_t idx = cmd_next[k]++;
        dti_cmd *slot = &cmds(qps[k])[idx & (hdr.cmdq_entries - 1)];
        c.stamp = 0;
        std::memcpy(slot, &c, offsetof(dti_cmd, stamp));
        __atomic_store_n(&slot->stamp, idx + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&qp(qps[k])->cmd_prod, idx + 1, __ATOMIC_RELEASE);
    }

    // The next event of queue pair k within the deadline; false if none came.
    bool next_event(uint32_t k, dti_ev *out, int timeout_ms)
    {
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        uint32_t idx = ev_next[k];
        const dti_ev *slot = &evs(qps[k])[idx & (hdr.evq_entries - 1)];
        while (__atomic_load_n(&slot->stamp, __ATOMIC_ACQUIRE) != uint16_t(idx + 1)) {
            if (std::chrono::steady_clock::now() > until)
                return false;
            ring();
            std::this_thread::yield();
        }
        std::memcpy(out, slot, sizeof *out);
        ev_next[k] = idx + 1;
        __atomic_store_n(&qp(qps[k])->ev_cons, idx + 1, __ATOMIC_RELEASE);
        return true;
    }

    // A signaled command and its completion's result (INT32_MIN: none came).
    int32_t call(uint32_t k, dti_cmd c, int64_t *value = nullptr)
    {
        // The engine answers with the command's tag (libdti's in-flight slot).
        c.tag = cmd_next[k] & (hdr.cmdq_entries - 1);
        publish(k, c);
        SlowStep slow{"a call"};
        raw_app_phase = "call: ring";
        ring();
        raw_app_phase = "call: completion";
        dti_ev e{};
        while (next_event(k, &e, 3000)) {
            if (e.kind == DTI_CQE_COMPLETION && e.events == c.tag) {
                if (value)
                    *value = e.value;
                raw_app_phase = "";
                return e.res;
            }
        }
        return INT32_MIN;
    }
};

inline dti_cmd command(uint16_t op, uint32_t sock, uint32_t arg0 = 0, uint32_t arg1 = 0)
{
    dti_cmd c{};
    c.op = op;
    c.sock = sock;
    c.arg0 = arg0;
    c.arg1 = arg1;
    return c;
}

// Sends m on control socket ctl with one descriptor (SCM_RIGHTS); true when
// the whole message went.
inline bool send_ctl_with_fd(int ctl, const dti_ctl_msg &m, int fd)
{
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
    iovec iov{const_cast<dti_ctl_msg *>(&m), sizeof m};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    return sendmsg(ctl, &mh, MSG_NOSIGNAL) == ssize_t(sizeof m);
}

// What claim_as_nobody's exit statuses other than 0 mean.
inline constexpr const char *kClaimAsNobodyCodes =
    "90: could not drop to 65534, 91: attach, 92/93: the exchange, 94: not refused with EPERM";

// A child process that drops to uid and gid 65534 still holding fd (the
// very file, inherited, as a worker that changed user would), attaches to
// the engine at `path` as a RawApp and CLAIMs with fd. *status: its exit
// status, 0 when the engine refused it with EPERM (kClaimAsNobodyCodes for
// the rest). Needs root, and `path` reachable by 65534.
inline void claim_as_nobody(const std::string &path, int fd, int *status)
{
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
            setresuid(65534, 65534, 65534) != 0)
            _exit(90);
        RawApp b;
        if (!b.attach(path, 0, 1))
            _exit(91);
        dti_ctl_msg m{};
        m.magic = DTI_CTL_MAGIC;
        m.type = DTI_CTL_CLAIM;
        m.abi_version = DTI_ABI_VERSION;
        if (!send_ctl_with_fd(b.ctl, m, fd))
            _exit(92);
        dti_ctl_msg r{};
        if (!RawApp::recv_with_fds(b.ctl, &r, nullptr, 0))
            _exit(93);
        _exit(r.type == DTI_CTL_REFUSED && r.status == EPERM ? 0 : 94);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st));
    *status = WEXITSTATUS(st);
}

} // namespace dti::test
