// One application cannot touch another's sockets, whatever it writes into
// its own region (issue 12, "users stay apart"). Application A (this
// process, libdti) holds a listener and a connection through the fixture
// engine; application B (a forked child, uid 65534 when we are root) speaks
// the control protocol itself, maps its region and, round after round,
// writes hostile commands and random bytes into every part of it it can
// write: command rings (stamps included), queue pair words (producer and
// consumer indices, the wake word, the engine's own words), the socket
// table, the header, the data rings and the pool, with handles that name
// A's sockets, other generations, other engines and garbage.
//
// After each round: A's sockets are intact (states, no error, data
// byte-exact both ways through A's connection, the listener accepts), the
// engine is alive, and B got only errors for what it never owned. Every few
// rounds the engine must be idle again (not spinning on B's garbage).
// The seed is fixed (DTI_FUZZ_SEED overrides it) and printed on failure.
#include "test_util.h"

#include "dti_abi.h"
#include "raw_app.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <csignal>

namespace dti::test {
namespace {

constexpr uint32_t kRounds = 150;
constexpr uint32_t kIdleCheckEvery = 25;

// Where B is, for the watchdog's message when a round takes too long.
volatile const char *b_phase = "start";
int b_answer_fd = -1;

uint64_t fuzz_seed()
{
    const char *s = getenv("DTI_FUZZ_SEED");
    return s ? strtoull(s, nullptr, 0) : 0x5eed12u;
}

// Phase 1 of a round (fresh attachment, honest queues): every operation on
// handles B never owned must be refused (all pairs every tenth round, a
// sample otherwise); B's own listener may not take A's
// port. Returns "" or what went wrong.
std::string hostile_handles(RawApp &b, const std::vector<uint32_t> &a_handles, uint16_t a_port,
                            std::mt19937_64 &rng, bool every_pair)
{
    std::vector<uint32_t> handles = a_handles;
    for (uint32_t h : a_handles) {
        uint32_t slot = h & DTI_SLOT_MASK, gen = (h >> DTI_SLOT_BITS) & DTI_GEN_MAX;
        handles.push_back((((gen + 1) & DTI_GEN_MAX) << DTI_SLOT_BITS) | slot); // another generation
        handles.push_back(slot);                                                // generation 0
        handles.push_back(h | (1u << DTI_ENGINE_SHIFT));                        // another engine's part
    }
    for (uint32_t h : {0u, 1u << DTI_SLOT_BITS, (1u << DTI_SLOT_BITS) | DTI_SLOT_MASK, 0xffffffffu,
                       (1u << DTI_SLOT_BITS) | b.hdr.max_sockets, uint32_t(rng())})
        handles.push_back(h);
    static const uint16_t ops[] = {DTI_OP_CLOSE,      DTI_OP_ABORT,      DTI_OP_SHUTDOWN, DTI_OP_SETSOCKOPT,
                                   DTI_OP_GETSOCKOPT, DTI_OP_WATCH,      DTI_OP_ACCEPT,   DTI_OP_CONNECT,
                                   DTI_OP_BIND,       DTI_OP_LISTEN,     DTI_OP_DIGEST,   DTI_OP_RECV_INTO,
                                   DTI_OP_SEND_FROM,  DTI_OP_RECV_POST};
    const uint32_t k = uint32_t(rng() % b.qps.size());
    for (uint32_t h : handles) {
        // Unsignaled data-path commands first: they must change nothing.
        dti_cmd s = command(DTI_OP_SEND, h, 1 + uint32_t(rng() % 4096));
        b.publish(k, s);
        dti_cmd r = command(DTI_OP_RECV_RELEASE, h, 1 + uint32_t(rng() % 4096));
        b.publish(k, r);
        b.publish(k, command(DTI_OP_RECV_CANCEL, h, 0));
        for (uint16_t op : ops) {
            if (!every_pair && rng() % 8 != 0)
                continue; // most rounds: a sample of the (handle, op) pairs
            dti_cmd c = command(op, h, uint32_t(rng() % 4), op == DTI_OP_CONNECT || op == DTI_OP_BIND ? a_port : 1);
            if (op == DTI_OP_RECV_INTO || op == DTI_OP_SEND_FROM) {
                c.arg0 = 64;
                c.offset = b.hdr.pool_offset;
            }
            if (op == DTI_OP_DIGEST)
                c.arg1 = 16;
            if (op == DTI_OP_RECV_POST) { // A's bytes must never be written into B's memory
                c.arg0 = 64;
                c.offset = uint64_t(uintptr_t(&c));
            }
            int32_t res = b.call(k, c);
            if (res != -DTI_E_BAD_HANDLE)
                return "op " + std::to_string(op) + " on handle " + std::to_string(h) + " B never owned answered " +
                       std::to_string(res) + " (expected -DTI_E_BAD_HANDLE; qp " + std::to_string(b.qps[k]) +
                       " cmd_cons " + std::to_string(b.qp(b.qps[k])->cmd_cons) + " of " +
                       std::to_string(b.cmd_next[k]) + ", ev_prod " + std::to_string(b.qp(b.qps[k])->ev_prod) + ")";
        }
    }
    // B's own socket may not bind A's port (A's listener has no SO_REUSEPORT),
    // even with SO_REUSEADDR and SO_REUSEPORT set.
    int32_t mine = b.call(k, command(DTI_OP_SOCKET, 0));
    if (mine < 0)
        return "SOCKET failed: " + std::to_string(mine);
    for (uint32_t opt : {uint32_t(DTI_SO_REUSEADDR), uint32_t(DTI_SO_REUSEPORT)}) {
        dti_cmd so = command(DTI_OP_SETSOCKOPT, uint32_t(mine), opt);
        so.value = 1;
        if (int32_t r = b.call(k, so); r != 0)
            return "SETSOCKOPT " + std::to_string(opt) + " on B's own socket: " + std::to_string(r);
    }
    if (int32_t r = b.call(k, command(DTI_OP_BIND, uint32_t(mine), 0, a_port)); r != -EADDRINUSE)
        return "B bound A's listening port " + std::to_string(a_port) + ": " + std::to_string(r);
    if (int32_t r = b.call(k, command(DTI_OP_CLOSE, uint32_t(mine))); r != 0)
        return "CLOSE of B's own socket: " + std::to_string(r);
    return "";
}

// Phase 2: random bytes and random commands everywhere B can write.
void scribble(RawApp &b, const std::vector<uint32_t> &a_handles, std::mt19937_64 &rng)
{
    b.honest = false;
    auto pick_handle = [&]() -> uint32_t {
        switch (rng() % 4) {
        case 0: return a_handles[rng() % a_handles.size()];
        case 1: return uint32_t(rng() % 8) << DTI_SLOT_BITS | uint32_t(rng() % (b.hdr.max_sockets + 2));
        case 2: return uint32_t(rng());
        default: return (1u << DTI_SLOT_BITS) | uint32_t(rng() % 4);
        }
    };
    auto random_bytes = [&](uint8_t *p, uint64_t n) {
        for (uint64_t i = 0; i < n; i++)
            __atomic_store_n(p + i, uint8_t(rng()), __ATOMIC_RELAXED);
    };
    for (int step = 0; step < 200; step++) {
        const uint32_t k = uint32_t(rng() % b.qps.size());
        dti_qp_header *q = b.qp(b.qps[k]);
        switch (rng() % 10) {
        case 0: case 1: case 2: { // a well-stamped random command
            dti_cmd c{};
            random_bytes(reinterpret_cast<uint8_t *>(&c), sizeof c);
            c.op = uint16_t(rng() % 20);
            c.sock = pick_handle();
            if (rng() % 2)
                c.tag = uint32_t(rng() % b.hdr.cmdq_entries);
            if (rng() % 2)
                c.offset = b.hdr.pool_offset + rng() % (b.hdr.pool_size + 4096);
            b.publish(k, c);
            break;
        }
        case 3: { // a command slot overwritten, stamp included
            uint32_t i = uint32_t(rng() % b.hdr.cmdq_entries);
            random_bytes(reinterpret_cast<uint8_t *>(&b.cmds(b.qps[k])[i]), sizeof(dti_cmd));
            break;
        }
        case 4: { // the queue pair's words, the engine's as well as B's own
            uint32_t *words[] = {&q->cmd_prod, &q->cmd_cons, &q->ev_prod, &q->ev_cons, &q->armed, &q->ev_overflow};
            uint32_t v = rng() % 3 == 0 ? uint32_t(rng()) : *words[rng() % 6] + uint32_t(rng() % 5) - 2;
            __atomic_store_n(words[rng() % 6], v, __ATOMIC_RELEASE);
            break;
        }
        case 5: { // the socket table (engine-written)
            uint64_t n = uint64_t(b.hdr.max_sockets) * sizeof(dti_sock_shared);
            uint64_t off = rng() % n;
            random_bytes(b.base + b.hdr.sock_offset + off, std::min<uint64_t>(n - off, 1 + rng() % 256));
            break;
        }
        case 6: { // the header's live words and geometry
            random_bytes(b.base + rng() % sizeof(dti_region_header), 1 + rng() % 8);
            break;
        }
        case 7: { // the data rings
            uint64_t n = b.hdr.pool_offset - b.hdr.data_offset;
            uint64_t off = rng() % n;
            random_bytes(b.base + b.hdr.data_offset + off, std::min<uint64_t>(n - off, 1 + rng() % 4096));
            break;
        }
        case 8: { // the pool and the event ring
            uint64_t off = rng() % b.hdr.pool_size;
            random_bytes(b.base + b.hdr.pool_offset + off, std::min<uint64_t>(b.hdr.pool_size - off, 1 + rng() % 4096));
            uint32_t i = uint32_t(rng() % b.hdr.evq_entries);
            random_bytes(reinterpret_cast<uint8_t *>(&b.evs(b.qps[k])[i]), 1 + rng() % sizeof(dti_ev));
            break;
        }
        default: { // control messages: contexts it does not have, forks without a socket
            uint32_t type = uint32_t(rng() % 10);
            b_phase = "scribble: control message";
            b.send_msg(type, uint32_t(rng() % 70), uint32_t(rng() % 3));
            b_phase = "scribble";
            break;
        }
        }
        if (rng() % 8 == 0)
            b.ring();
    }
    b.ring();
}

void b_watchdog(int)
{
    const char *p = const_cast<const char *>(b_phase);
    static const char head[] = "B stuck for 20 s in: ";
    const char *q = const_cast<const char *>(raw_app_phase);
    if (write(b_answer_fd, head, sizeof head - 1) < 0 || write(b_answer_fd, p, std::strlen(p)) < 0 ||
        write(b_answer_fd, " / ", 3) < 0 || write(b_answer_fd, q, std::strlen(q)) < 0 ||
        write(b_answer_fd, "\n", 1) < 0)
        _exit(113);
    _exit(114);
}

std::string read_line(int fd, int timeout_ms);

// B's process, forked before the test has any thread (a child of a
// threaded process may find an allocator lock held forever, ASan's
// notably). First line on `go`: "PATH PORT ENGINES HANDLE..." (what A made);
// then one round per byte ('q' ends), one answer line per round on `answer`
// ("ok" or what went wrong). Exit code 0 unless set-up failed.
[[noreturn]] void run_b(int go, int answer, uint64_t seed)
{
    if (getuid() == 0 && (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                          setresuid(65534, 65534, 65534) != 0))
        _exit(110);
    std::string setup = read_line(go, 120000);
    char path_buf[256] = "";
    unsigned port = 0, engines = 0, h[3] = {};
    if (std::sscanf(setup.c_str(), "%255s %u %u %u %u %u", path_buf, &port, &engines, &h[0], &h[1], &h[2]) != 6)
        _exit(setup.empty() ? 0 : 111); // empty: the test ended before it needed B
    const std::string path = path_buf;
    const uint16_t a_port = uint16_t(port);
    const std::vector<uint32_t> a_handles = {h[0], h[1], h[2]};
    std::mt19937_64 rng(seed ^ 0xb);
    RawApp b;
    b_answer_fd = answer;
    signal(SIGALRM, b_watchdog);
    for (uint32_t round = 0;; round++) {
        char cmd = 0;
        b_phase = "waiting for the test";
        if (read(go, &cmd, 1) != 1 || cmd == 'q')
            _exit(0);
        alarm(20);
        std::string result;
        // A broken or hung-up attachment, or now and then a healthy one, is
        // replaced by a new one (on an engine of the round's choosing).
        pollfd p{b.ctl, POLLIN, 0};
        bool gone = b.ctl < 0 || (::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)));
        if (gone || !b.honest || rng() % 4 == 0) {
            b_phase = "drop";
            b.drop();
            b_phase = "attach";
            if (!b.attach(path, round % engines, 2))
                result = "B could not attach (round " + std::to_string(round) + ")";
        }
        b_phase = "hostile handles";
        if (result.empty() && b.honest)
            result = hostile_handles(b, a_handles, a_port, rng, round % 10 == 0);
        b_phase = "scribble";
        if (result.empty())
            scribble(b, a_handles, rng);
        alarm(0);
        if (result.empty())
            result = "ok";
        result += "\n";
        if (write(answer, result.data(), result.size()) != ssize_t(result.size()))
            _exit(112);
    }
}

// A line from B within the deadline ("" when none came).
std::string read_line(int fd, int timeout_ms)
{
    std::string line;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
        int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count());
        pollfd p{fd, POLLIN, 0};
        if (left <= 0 || ::poll(&p, 1, left) != 1)
            return "";
        char ch = 0;
        if (read(fd, &ch, 1) != 1)
            return "";
        if (ch == '\n')
            return line;
        line += ch;
    }
}

class DtiIsolation : public Attached {
  protected:
    // B first, while this process has no thread; then the engine and A.
    void SetUp() override
    {
        ASSERT_EQ(pipe2(go_, O_CLOEXEC), 0);
        ASSERT_EQ(pipe2(answer_, O_CLOEXEC), 0);
        pid_ = fork();
        ASSERT_GE(pid_, 0);
        if (pid_ == 0) {
            close(go_[1]);
            close(answer_[0]);
            run_b(go_[0], answer_[1], fuzz_seed());
        }
        close(go_[0]);
        close(answer_[1]);
        Attached::SetUp();
    }
    // B ends with the test, also when an assertion failed.
    void TearDown() override
    {
        close(go_[1]);
        close(answer_[0]);
        int status = 0;
        if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, &status, 0);
        }
        Attached::TearDown();
    }
    int go_[2] = {-1, -1}, answer_[2] = {-1, -1};
    pid_t pid_ = -1;
};

TEST_F(DtiIsolation, AnotherUsersRegionCannotReachOurSockets)
{
    const uint64_t seed = fuzz_seed();
    SCOPED_TRACE("DTI_FUZZ_SEED=" + std::to_string(seed));
    std::mt19937_64 rng(seed);
    ASSERT_EQ(chmod(path_.c_str(), 0666), 0); // B (uid 65534) must reach the socket
    const int go = go_[1], answer = answer_[0];

    // A: a listener (kept) and a connection through it.
    uint16_t port = 0;
    dti_sock_t l = DTI_SOCK_INVALID, client = DTI_SOCK_INVALID, server = DTI_SOCK_INVALID;
    ASSERT_NO_FATAL_FAILURE(pair_on_listener(&l, &port, &client, &server));
    const dti_addr to{0x7f000001, port}; // A's own further connections
    const std::vector<uint32_t> a_handles = {uint32_t(l), uint32_t(client), uint32_t(server)};

    std::string setup = path_ + " " + std::to_string(port) + " " + std::to_string(test_engines());
    for (uint32_t h : a_handles)
        setup += " " + std::to_string(h);
    setup += "\n";
    ASSERT_EQ(write(go, setup.data(), setup.size()), ssize_t(setup.size()));

    std::vector<uint8_t> out(8192), back(8192);
    for (uint32_t round = 0; round < kRounds; round++) {
        SCOPED_TRACE("round " + std::to_string(round));
        ASSERT_EQ(write(go, "r", 1), 1);
        std::string said;
        {
            SlowStep slow{"B's round"};
            said = read_line(answer, 60000);
        }
        SlowStep slow_checks{"A's checks"};
        ASSERT_EQ(said, "ok") << "B: " << (said.empty() ? "no answer (B died or hung)" : said);

        // A's sockets: still what they were.
        ASSERT_EQ(dti_engine_alive(d_), 1) << "the engine died";
        dti_sock_info li{}, ci{}, si{};
        ASSERT_EQ(dti_sock_status(c_, l, &li), 0);
        ASSERT_EQ(dti_sock_status(c_, client, &ci), 0);
        ASSERT_EQ(dti_sock_status(c_, server, &si), 0);
        EXPECT_TRUE(li.state & DTI_STATE_LISTENING) << li.state;
        for (const dti_sock_info *i : {&ci, &si}) {
            EXPECT_EQ(i->state & (DTI_STATE_CONNECTED | DTI_STATE_RESET | DTI_STATE_FAILED | DTI_STATE_RD_CLOSED |
                                  DTI_STATE_WR_CLOSED),
                      DTI_STATE_CONNECTED);
            EXPECT_EQ(i->error, 0);
        }
        ASSERT_EQ(li.accept_ready, 0u) << "a connection appeared on A's listener";

        // Data through A's connection, byte-exact both ways.
        size_t n = 1 + rng() % out.size();
        for (size_t i = 0; i < n; i++)
            out[i] = uint8_t(rng());
        ASSERT_EQ(dti_send_all(c_, client, out.data(), n, 5000), ssize_t(n));
        for (size_t got = 0; got < n;) {
            ssize_t r = dti_recv_wait(c_, server, back.data() + got, n - got, 5000);
            ASSERT_GT(r, 0) << dti_strerror(int(r));
            got += size_t(r);
        }
        ASSERT_EQ(std::memcmp(out.data(), back.data(), n), 0) << "client -> server bytes differ";
        ASSERT_EQ(dti_send_all(c_, server, back.data(), n, 5000), ssize_t(n));
        for (size_t got = 0; got < n;) {
            ssize_t r = dti_recv_wait(c_, client, back.data() + got, n - got, 5000);
            ASSERT_GT(r, 0) << dti_strerror(int(r));
            got += size_t(r);
        }
        ASSERT_EQ(std::memcmp(out.data(), back.data(), n), 0) << "server -> client bytes differ";

        if (round % kIdleCheckEvery == kIdleCheckEvery - 1) {
            // The listener still accepts A's own connections.
            int c2 = dti_socket(c_);
            ASSERT_GE(c2, 0);
            ASSERT_EQ(dti_connect(c_, dti_sock_t(c2), &to, 5000), 0);
            int s2 = dti_accept(c_, l, nullptr, 5000);
            ASSERT_GE(s2, 0) << dti_strerror(s2);
            EXPECT_EQ(dti_close(c_, dti_sock_t(s2)), 0);
            EXPECT_EQ(dti_close(c_, dti_sock_t(c2)), 0);
            // Idle with B's garbage in place: the engine naps. A spinning
            // engine makes hundreds of thousands of passes in this window;
            // one that naps makes a few hundred per wakeup.
            uint64_t before = ppe_->stats().polls;
            std::this_thread::sleep_for(std::chrono::milliseconds(300)); // a measurement window
            uint64_t passes = ppe_->stats().polls - before;
            EXPECT_LT(passes, 20000u) << "the engine spins on B's region";
        }
    }
    EXPECT_EQ(dti_close(c_, client), 0);
    EXPECT_EQ(dti_close(c_, server), 0);
    EXPECT_EQ(dti_close(c_, l), 0);
    ASSERT_EQ(write(go, "q", 1), 1);
    int status = 0;
    ASSERT_EQ(waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "B's exit status " << status;
}

} // namespace
} // namespace dti::test
