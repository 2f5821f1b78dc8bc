// Multi-threaded stress of the queues and the wake protocol. Meant to run
// under ThreadSanitizer too: tools/eta test --suite unit --sanitize tsan
#include "test_util.h"

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define DTI_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DTI_UNDER_TSAN 1
#endif
#endif
#ifndef DTI_UNDER_TSAN
#define DTI_UNDER_TSAN 0
#endif

namespace dti::test {
namespace {

constexpr unsigned kScale = DTI_UNDER_TSAN ? 10 : 1;

class DtiStress : public Attached {
  protected:
    void SetUp() override {}
    void start_engine(bool busy)
    {
        path_ = temp_socket_path();
        fixture::TestPpe::Options o;
        o.limits = small_limits();
        o.busy_poll = busy;
        ppe_ = std::make_unique<fixture::TestPpe>(path_, o);
        std::string why;
        ASSERT_TRUE(ppe_->start(&why)) << why;
        dti_attach_opts opts{path_.c_str(), "stress"};
        char msg[256] = "";
        ASSERT_EQ(dti_attach(&opts, &d_, msg, sizeof msg), 0) << msg;
        c_ = dti_ctx_get(d_, nullptr);
        ASSERT_NE(c_, nullptr);
    }
};

// Producer/consumer on both rings at full speed: every command completes
// exactly once, in order, with its own user_data; the queues wrap many times.
TEST_F(DtiStress, QueuesUnderLoadLoseNothing)
{
    start_engine(true);
    const uint64_t total = 100000 / kScale;
    uint64_t next_submit = 0, next_expect = 0;
    dti_cqe e[32];
    while (next_expect < total) {
        while (next_submit < total && dti_prep_nop(c_, next_submit) == 0)
            next_submit++;
        dti_submit(c_);
        ASSERT_EQ(dti_wait(c_, 10000), 1);
        unsigned n = dti_reap(c_, e, 32);
        for (unsigned i = 0; i < n; i++) {
            ASSERT_EQ(e[i].kind, DTI_CQE_COMPLETION);
            ASSERT_EQ(e[i].user_data, next_expect);
            next_expect++;
        }
    }
    EXPECT_EQ(dti_inflight(c_), 0u);
}

// The app sleeps (no spinning) after every command and the engine sleeps
// when idle: a lost wakeup would leave dti_wait_cqe() waiting into its
// timeout, which fails the test instead of hanging it.
TEST_F(DtiStress, NoLostWakeupsWhenBothSidesSleep)
{
    start_engine(false);
    dti_ctx_set_spin(c_, 0);
    const unsigned rounds = 3000 / kScale;
    for (unsigned i = 0; i < rounds; i++) {
        ASSERT_EQ(dti_prep_nop(c_, i), 0);
        dti_submit(c_);
        dti_cqe e;
        ASSERT_EQ(dti_wait_cqe(c_, i, &e, 10000), 1) << "lost wakeup at round " << i;
        ASSERT_EQ(e.res, 0);
    }
    engine::Stats st = ppe_->stats();
    EXPECT_GT(st.wakeups, 0u); // the app really did sleep and get woken
}

// A full command ring strands nothing. The engine takes SEND and
// RECV_RELEASE without answering them, so no wakeup tells that a ring found
// full has room again. Here the writers' SENDs fill the ring while the
// engine is held, each reader then takes its whole ring, so its release (and
// its watch) find the ring full: dti_wait() must send the owed releases once
// the engine has taken the SENDs, not sleep with the peers' windows shut
// (DtiSndGrow.AutotuningGrowsTheRingWhileTheWriterWrites stalled so). One
// connection, and 17: more than a queue pair lists (DTI_STRANDED_MAX).
class DtiFullRing : public Attached, public ::testing::WithParamInterface<unsigned> {
  protected:
    void SetUp() override { start(small_limits()); }
    uint32_t readable(dti_sock_t s)
    {
        dti_sock_info in{};
        EXPECT_EQ(dti_sock_status(c_, s, &in), 0);
        return in.readable;
    }
};

TEST_P(DtiFullRing, ReleasesTheFullCommandRingRefusedGoOutBeforeTheWaitSleeps)
{
    const unsigned pairs = GetParam();
    const uint32_t rx = small_limits().rx_ring_size;
    std::vector<dti_sock_t> cl(pairs), sv(pairs);
    std::vector<uint32_t> sent(pairs, 0), more(pairs, 0);
    for (unsigned i = 0; i < pairs; i++)
        ASSERT_NO_FATAL_FAILURE(pair(&cl[i], &sv[i]));
    const auto all_readable = [&](const std::vector<uint32_t> &want) {
        for (unsigned i = 0; i < pairs; i++)
            if (readable(sv[i]) < want[i])
                return false;
        return true;
    };
    // The peers' windows full: their whole rings unread.
    static uint8_t buf[4096];
    dti_cqe e[64];
    for (unsigned i = 0; i < pairs; i++)
        ASSERT_EQ(dti_prep_watch(c_, sv[i], DTI_POLLIN, 0), 0);
    dti_submit(c_);
    const std::vector<uint32_t> full(pairs, rx);
    while (!all_readable(full)) {
        bool wrote = false;
        for (unsigned i = 0; i < pairs; i++) {
            const ssize_t n = sent[i] < rx ? dti_send(c_, cl[i], buf, std::min<size_t>(sizeof buf, rx - sent[i]), 0) : 0;
            if (n > 0) {
                sent[i] += uint32_t(n);
                wrote = true;
            }
        }
        if (!wrote) {
            ASSERT_GE(dti_wait(c_, 5000), 1) << "the windows' bytes did not arrive";
            dti_reap(c_, e, 64);
        }
    }
    // The engines held: SENDs of one byte each (MORE: none rides on
    // another's) until the command rings are full, the send rings have room.
    ASSERT_TRUE(ppe_->hold(true));
    while (dti_reap(c_, e, 64) > 0) {
    }
    std::vector<bool> refused(pairs, false);
    for (bool wrote = true; wrote;) { // a byte to each in turn: every connection has some
        wrote = false;
        for (unsigned i = 0; i < pairs; i++) {
            if (refused[i])
                continue;
            const ssize_t n = dti_send(c_, cl[i], buf, 1, DTI_SEND_MORE);
            ASSERT_TRUE(n == 1 || n == -EAGAIN) << dti_strerror(int(n));
            refused[i] = n != 1;
            more[i] += uint32_t(n == 1);
            wrote |= n == 1;
        }
    }
    for (unsigned i = 0; i < pairs; i++) {
        ASSERT_GT(more[i], 0u) << "connection " << i;
        dti_sock_info out{};
        ASSERT_EQ(dti_sock_status(c_, cl[i], &out), 0);
        ASSERT_GT(out.writable, 0u) << "the send ring filled before the command ring";
    }
    // The readers take all; their releases find the rings full, stay owed.
    for (unsigned i = 0; i < pairs; i++) {
        for (uint32_t got = 0; got < rx;) {
            const ssize_t n = dti_recv(c_, sv[i], buf, sizeof buf);
            ASSERT_GT(n, 0) << dti_strerror(int(n)) << " after " << got;
            got += uint32_t(n);
        }
        EXPECT_EQ(dti_prep_watch(c_, sv[i], DTI_POLLIN, 0), -EAGAIN) << "the command ring had room";
    }
    ASSERT_TRUE(ppe_->hold(false));
    // Nothing else would wake this wait: the engines answer none of the
    // rings' commands and no byte can move before the releases.
    ASSERT_GE(dti_wait(c_, 5000), 1) << "slept with the releases owed: the peers' windows stay shut";
    // The releases went out with no other command (the first watches hold).
    while (!all_readable(more)) {
        ASSERT_GE(dti_wait(c_, 5000), 1) << "bytes written while the rings were full did not arrive";
        dti_reap(c_, e, 64);
    }
    for (unsigned i = 0; i < pairs; i++)
        EXPECT_EQ(readable(sv[i]), more[i]) << "connection " << i;
}

INSTANTIATE_TEST_SUITE_P(Connections, DtiFullRing, ::testing::Values(1u, 17u));

// Several threads, each with its own context, sleeping and waking at once.
TEST_F(DtiStress, ManySleepingThreads)
{
    start_engine(false);
    const unsigned threads = 4, rounds = 500 / kScale;
    std::vector<std::thread> ts;
    std::atomic<unsigned> failures{0};
    for (unsigned t = 0; t < threads; t++)
        ts.emplace_back([&, t] {
            dti_ctx_t *c = dti_ctx_get(d_, nullptr);
            if (!c) {
                failures++;
                return;
            }
            dti_ctx_set_spin(c, t % 2 ? 0 : 5000);
            for (unsigned i = 0; i < rounds; i++) {
                uint64_t ud = uint64_t(t) << 32 | i;
                dti_cqe e;
                if (dti_prep_nop(c, ud) != 0 || dti_submit(c) != 1 || dti_wait_cqe(c, ud, &e, 10000) != 1)
                    failures++;
            }
        });
    for (auto &t : ts)
        t.join();
    EXPECT_EQ(failures.load(), 0u);
}

// Connections accepted by one thread and served by others, data both ways.
TEST_F(DtiStress, AcceptHereServeThere)
{
    start_engine(false);
    uint16_t port = 0;
    dti_sock_t l = listener(&port);
    const unsigned conns = 4, msgs = 200 / kScale;
    std::vector<std::thread> servers;
    std::vector<std::thread> clients;
    std::atomic<unsigned> bad{0};
    for (unsigned i = 0; i < conns; i++) {
        clients.emplace_back([&] {
            dti_ctx_t *c = dti_ctx_get(d_, nullptr);
            int s = dti_socket(c);
            dti_addr to{0x7f000001, port};
            if (s < 0 || dti_connect(c, dti_sock_t(s), &to, 10000) != 0) {
                bad++;
                return;
            }
            for (unsigned m = 0; m < msgs; m++) {
                uint32_t v = m * 2654435761u, back = 0;
                if (dti_send_all(c, dti_sock_t(s), &v, 4, 10000) != 4) {
                    bad++;
                    return;
                }
                size_t got = 0;
                while (got < 4) {
                    ssize_t n = dti_recv_wait(c, dti_sock_t(s), reinterpret_cast<char *>(&back) + got, 4 - got, 10000);
                    if (n <= 0) {
                        bad++;
                        return;
                    }
                    got += size_t(n);
                }
                if (back != v + 1)
                    bad++;
            }
            dti_close(c, dti_sock_t(s));
        });
        int a = dti_accept(c_, l, nullptr, 10000);
        ASSERT_GE(a, 0) << dti_strerror(a);
        servers.emplace_back([&, a] {
            dti_ctx_t *c = dti_ctx_get(d_, nullptr);
            for (unsigned m = 0; m < msgs; m++) {
                uint32_t v = 0;
                size_t got = 0;
                while (got < 4) {
                    ssize_t n = dti_recv_wait(c, dti_sock_t(a), reinterpret_cast<char *>(&v) + got, 4 - got, 10000);
                    if (n <= 0) {
                        bad++;
                        return;
                    }
                    got += size_t(n);
                }
                v++;
                if (dti_send_all(c, dti_sock_t(a), &v, 4, 10000) != 4)
                    bad++;
            }
            char eof;
            if (dti_recv_wait(c, dti_sock_t(a), &eof, 1, 10000) != 0)
                bad++;
            dti_close(c, dti_sock_t(a));
        });
    }
    for (auto &t : clients)
        t.join();
    for (auto &t : servers)
        t.join();
    EXPECT_EQ(bad.load(), 0u);
}


// One SEND per burst (dti_abi.h, tx_written/tx_noted): small writes that find
// a SEND of theirs still queued only move the shared tail; the engine takes
// everything up to it. A write that loses that race (the engine took the
// SEND between its two looks) must queue its own, or its bytes stay in the
// ring unsent. Here many small writes, through dti_send() and through the
// send view in turn, race an engine that busy-polls (and one that sleeps),
// while another thread reads: every byte arrives, in order, then the FIN of
// a shutdown queued right after the last write. A stranded byte makes the
// reader's bounded wait fail.
class DtiSendBurst : public DtiStress, public ::testing::WithParamInterface<bool> {};

static uint8_t burst_byte(uint64_t pos) { return uint8_t(pos * 131u + (pos >> 9)); }

TEST_P(DtiSendBurst, SmallWritesRacingTheEngineAllArriveByteExact)
{
    start_engine(GetParam());
    dti_sock_t client = 0, server = 0, l = 0;
    uint16_t port = 0;
    ASSERT_NO_FATAL_FAILURE(pair_on_listener(&l, &port, &client, &server));
    const uint64_t total = (4u << 20) / kScale;
    std::atomic<bool> reader_ok{false};
    std::atomic<uint64_t> reader_got{0};
    std::thread reader([&] {
        dti_ctx_t *c = dti_ctx_get(d_, nullptr);
        std::vector<uint8_t> buf(8192);
        uint64_t pos = 0;
        for (;;) {
            ssize_t n = dti_recv_wait(c, server, buf.data(), buf.size(), 10000);
            if (n == 0)
                break; // the FIN: after every byte
            if (n < 0)
                return; // a timeout: bytes stranded in the ring (or an error)
            for (ssize_t i = 0; i < n; i++, pos++)
                if (buf[size_t(i)] != burst_byte(pos))
                    return;
            reader_got = pos;
        }
        reader_ok = pos == total;
    });
    struct dti_tx_view view {};
    bool have_view = false;
    uint8_t msg[64];
    uint64_t sent = 0;
    unsigned round = 0;
    std::string failed; // (no ASSERT while the reader runs: it is joined first)
    // Bounded: bytes stranded in the ring never make room again.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (sent < total) {
        if (std::chrono::steady_clock::now() > deadline) {
            failed = "the send ring stayed full: " + std::to_string(sent) + " of " + std::to_string(total) +
                     " bytes written in 60 s";
            break;
        }
        const uint32_t want = uint32_t(std::min<uint64_t>(1 + round * 7 % 64, total - sent));
        for (uint32_t i = 0; i < want; i++)
            msg[i] = burst_byte(sent + i);
        ssize_t n = 0;
        if (have_view && round % 2)
            n = dti_send_view(c_, client, &view, msg, want);
        if (n < 0) { // taken, their SEND owed (a full command queue)
            dti_cqe e[8];
            while (dti_send_note(c_, client, 0) == -EAGAIN)
                dti_reap(c_, e, 8);
            n = -n;
        }
        if (n == 0)
            n = dti_send(c_, client, msg, want, 0);
        if (n == -EAGAIN) { // the ring is full: wait for room
            dti_cqe e[8];
            dti_wait(c_, 10);
            dti_reap(c_, e, 8);
            continue;
        }
        if (n <= 0) {
            failed = std::string("a write failed: ") + dti_strerror(int(n));
            break;
        }
        sent += uint64_t(n);
        round++;
        if (!have_view)
            have_view = dti_tx_view(c_, client, &view) == 0;
    }
    if (failed.empty()) {
        EXPECT_EQ(dti_shutdown(c_, client, DTI_SHUT_WR), 0);
    }
    reader.join(); // its waits are bounded (10 s each)
    ASSERT_EQ(failed, "");
    EXPECT_TRUE(reader_ok.load()) << "the reader got " << reader_got.load() << " of " << total
                                  << " bytes in order (then no FIN within 10 s)";
    // How many writes rode on a queued SEND depends on scheduling: reported, not asserted.
    engine::Stats st = ppe_->stats();
    std::printf("%u writes, %llu commands in all\n", round, (unsigned long long)st.commands);
    dti_close(c_, client);
    dti_close(c_, server);
}

INSTANTIATE_TEST_SUITE_P(EngineBusyOrSleeping, DtiSendBurst, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool> &i) { return i.param ? "busy" : "sleeping"; });

// Bytes a writer published (tx_written) whose SEND never reached the engine:
// a lost command, which the protocol above never makes but a bug could. The
// writer then waits for room, as a program does, with a POLLOUT watch, and
// the engine takes them before that watch (commands.cc cmd_watch ->
// take_unsent): the peer receives them. Without it the ring would stay full
// for ever once such bytes filled it (issue 35's stall, preload/README.md
// "The watchdog").
TEST_F(DtiStress, PollOutWatchTakesBytesWhoseSendWasLost)
{
    start_engine(false);
    dti_sock_t client = 0, server = 0, l = 0;
    uint16_t port = 0;
    ASSERT_NO_FATAL_FAILURE(pair_on_listener(&l, &port, &client, &server));
    struct dti_tx_view view {};
    ASSERT_EQ(dti_tx_view(c_, client, &view), 0);
    const char msg[] = "published, never sent";
    const uint32_t n = uint32_t(sizeof msg - 1);
    ASSERT_EQ(dti_send_view_copy(&view, msg, n), n); // in the ring, nothing published yet
    const uint32_t tail = *view.tail + n;
    *view.tail = tail;
    __atomic_store_n(view.written, tail, __ATOMIC_SEQ_CST); // published; the SEND "lost": none queued
    uint64_t ud = 42;
    ASSERT_EQ(dti_prep_watch(c_, client, DTI_POLLOUT, ud), 0);
    dti_submit(c_);
    char got[64] = {};
    ssize_t r = dti_recv_wait(c_, server, got, sizeof got, 10000);
    ASSERT_EQ(r, ssize_t(n)) << "the bytes stayed in the sender's ring";
    EXPECT_EQ(std::string(got, size_t(r)), std::string(msg));
}

// The last bytes of a stream and its FIN reach the program in one publish
// of the engine (table.h write_shared: the tail, then the state). A reader
// that found the ring empty and then read the state saying "peer closed"
// used to take the end of stream with those bytes never read: an eta-perf
// sink under netem once ended 19,136 bytes short. Here every round ends a
// connection that way while the reader polls it, and every byte must come
// before the end.
TEST_F(DtiStress, EndOfStreamNeverHidesTheBytesThatCameWithIt)
{
    start_engine(true);
    uint16_t port = 0;
    const dti_sock_t l = listener(&port);
    const int rounds = 2000 / int(kScale);
    char msg[100];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = char('a' + i % 26);
    int short_reads = 0;
    for (int round = 0; round < rounds && !HasFailure(); round++) {
        int cs = dti_socket(c_);
        ASSERT_GE(cs, 0) << dti_strerror(cs);
        dti_addr to{0x7f000001, port};
        ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0);
        int ss = dti_accept(c_, l, nullptr, 5000);
        ASSERT_GE(ss, 0) << dti_strerror(ss);
        const dti_sock_t client = dti_sock_t(cs), server = dti_sock_t(ss);
        // The bytes published in the send ring, then SHUT_WR: the engine
        // takes them with the shutdown, and data and FIN land together.
        struct dti_tx_view view {};
        ASSERT_EQ(dti_tx_view(c_, client, &view), 0);
        struct dti_iov room[2];
        ASSERT_GE(dti_send_reserve(c_, client, room), ssize_t(sizeof msg));
        const size_t first = std::min(sizeof msg, room[0].len);
        std::memcpy(room[0].base, msg, first);
        std::memcpy(room[1].base, msg + first, sizeof msg - first);
        const uint32_t tail = *view.tail + uint32_t(sizeof msg);
        *view.tail = tail;
        __atomic_store_n(view.written, tail, __ATOMIC_SEQ_CST);
        ASSERT_EQ(dti_prep_shutdown(c_, client, DTI_SHUT_WR, 7), 0);
        dti_submit(c_);
        size_t got = 0;
        char buf[sizeof msg];
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (;;) {
            ssize_t r = dti_recv(c_, server, buf, sizeof buf);
            if (r > 0) {
                ASSERT_EQ(std::string(buf, size_t(r)), std::string(msg + got, size_t(r)));
                got += size_t(r);
                continue;
            }
            if (r == -EAGAIN) {
                ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no end of stream in 10 s, round " << round;
                continue;
            }
            ASSERT_EQ(r, 0) << dti_strerror(int(r));
            break;
        }
        if (got != sizeof msg)
            short_reads++;
        EXPECT_EQ(got, sizeof msg) << "round " << round << ": the end of stream came before the bytes sent with it";
        dti_cqe e[8];
        while (dti_reap(c_, e, 8) > 0) {
        }
        ASSERT_EQ(dti_close(c_, server), 0);
        ASSERT_EQ(dti_close(c_, client), 0);
    }
    EXPECT_EQ(short_reads, 0);
    dti_close(c_, l);
}

} // namespace
} // namespace dti::test
