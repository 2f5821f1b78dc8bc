// control.h: the control plane. Control runs each member's control
// connection and the life of groups and members:
//   control.cc  the control protocol over the SEQPACKET socket (HELLO,
//               WELCOME, OPEN/CLOSE_CTX, FORK, EXEC, SCM_RIGHTS,
//               credentials and the privileged-port rule)
//   groups.cc   process groups, their members and holds, leaving, breaking
//   pass.cc     sockets passed between processes (PASS, CLAIM)
// None of it runs per command except take_hold/drop_hold (SOCKET, ACCEPT,
// CLOSE) and may_bind_privileged (BIND below the unprivileged ports).
#pragma once

#include "state.h"
#include "table.h"

#include <string>
#include <utility>
#include <vector>

namespace dti::engine::detail {

class Commands;
class Publisher;

// The privileged-port rule (control.cc).
bool may_bind_service(const ucred &cred);
uint64_t process_start_time(uint32_t pid);
int bind_service_now(uint32_t pid, uint64_t start);
uint32_t unprivileged_port_start();

// Control messages (control.cc).
namespace ctl {
bool send_msg(int fd, const dti_ctl_msg &m, const int *fds, int nfds);
void refuse(int fd, int code, const std::string &why);
int recv_msg(int fd, dti_ctl_msg *m, int *passed = nullptr, ucred *cred = nullptr, int flags = 0,
             int *more = nullptr, int n_more = 0);
} // namespace ctl

class Control {
  public:
    Control(Transport &t, const Limits &l, Stats &s, Table &table, Publisher &pub, Commands &cmds)
        : tr_(t), lim_(l), stats_(s), table_(table), pub_(pub), cmds_(cmds)
    {
    }

    // Server's control calls (control.cc, groups.cc).
    int attach(int fd, std::string *why);
    int attach_memory(void *region, uint64_t size, uint32_t contexts);
    void control(int id);
    void detach(int id);
    void shutdown();
    std::vector<AttachmentInfo> attachments() const;
    std::vector<int> take_joined() { return std::exchange(joined_, {}); }

    // Holds (groups.cc): a socket stays open while any member holds it.
    void take_hold(Group &group, Member &m, uint32_t si);
    void drop_hold(Group &group, Member &m, uint32_t si, bool abortive);
    // BIND below ip_unprivileged_port_start: may member m? (control.cc)
    bool may_bind_privileged(Member &m);
    // The application broke the protocol: every socket aborted, the region
    // marked broken, sleepers woken (groups.cc).
    void break_region(Group &group, int reason);
    // A dying group goes once the transport returned every ring (groups.cc).
    void maybe_finish(Group &group);
    void finalize(Group &group);

  private:
    void release_member(Member &m);
    void leave(Member &m);
    void close_ctx(Group &group, uint16_t ci);
    void drain_member(Group &group, const Member &m);
    void drain_ctx(Group &group, uint16_t ci, bool answer);
    void abort_all(Group &group, bool keep_closing);
    void last_hold_gone(Group &group, uint32_t si, bool abortive);
    // FORK and EXEC (control.cc).
    void fork_member(Member &parent, int child_fd);
    Member *member_like(Member &parent, int child_fd);
    void learn_pid(Member &m, const ucred &cred);
    void exec_member(Member &parent, int child_fd, const dti_ctl_msg &m);
    void exec_hold(Member &parent, const dti_ctl_msg &m);
    uint32_t grant_holds(Member &parent, Member &child, const dti_ctl_msg &m);
    void answer_exec(Member &parent, const Member &child, uint32_t granted);
    // Passing sockets between processes (pass.cc).
    void pass_socket(Member &sender, const int fds[3], const dti_ctl_msg &m);
    void claim_socket(Member &claimant, int fd, int join_fd);
    void drop_pass(Group &group, size_t i);
    void drop_passes(Group &group);
    void drop_offers(Group &group, uint32_t si);

    Transport &tr_;
    const Limits &lim_;
    Stats &stats_;
    Table &table_;
    Publisher &pub_;
    Commands &cmds_; // drains a context before it closes, a member before fork
    std::vector<int> joined_; // members made by FORK, EXEC or CLAIM, not yet taken
};

} // namespace dti::engine::detail
