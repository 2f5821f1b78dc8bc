// tests/fuzz/mars/reach6_test.cc: the fuzz world has its IPv6 TCP sockets
// (an established connection with every option, a listener, one in
// SYN-SENT, one in TIME-WAIT: fuzz_world.h), and the ip6-tcp-* seeds reach TCP over IPv6's
// paths through them: each seed, run as the fuzz target runs it, moves what
// its path moves (the connection's bytes and state, the stack's counters:
// header prediction, coalescing, out-of-order, SACK recovery, packet too big,
// resets, SYN cookies, TIME-WAIT) compared with an empty input on the same receive
// path. The seeds are seed_inputs()'s; each must also be in the checked-in
// corpus (argv[1], the directory) with the same bytes, so the corpus replay
// runs what is checked here.
#include "fuzz_input.h"
#include "fuzz_world.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>

namespace mars::fuzz {
namespace {

std::string g_corpus;

struct Seen {
    StackStats stats{};
    SockInfo est6{}, listener6{}, syn_sent6{}, est{};
};

Seen run(const std::vector<uint8_t> &input)
{
    Seen s;
    run_one_then(input.data(), input.size(), [&](FuzzWorld &w) {
        s.stats = w.stack().stats();
        EXPECT_EQ(w.stack().info(w.est6.sock, &s.est6), 0);
        EXPECT_EQ(w.stack().info(w.listener6, &s.listener6), 0);
        EXPECT_EQ(w.stack().info(w.syn_sent6.sock, &s.syn_sent6), 0);
        EXPECT_EQ(w.stack().info(w.est.sock, &s.est), 0);
    });
    return s;
}

bool same6(const Ip6Addr &a, const Ip6Addr &b) { return std::memcmp(a.b, b.b, 16) == 0; }

TEST(FuzzWorld6, HasAnIpv6ListenerConnectionAndActiveOpen)
{
    for (const size_t parity : {0, 1}) { // both receive paths' worlds
        const std::vector<uint8_t> empty(parity, 0);
        Seen s;
        Ip6Addr ours;
        run_one_then(empty.data(), empty.size(), [&](FuzzWorld &w) {
            ours = w.stack_ip6();
            ASSERT_EQ(w.stack().info(w.est6.sock, &s.est6), 0);
            ASSERT_EQ(w.stack().info(w.listener6, &s.listener6), 0);
            ASSERT_EQ(w.stack().info(w.syn_sent6.sock, &s.syn_sent6), 0);
            ASSERT_EQ(w.stack().info(w.est.sock, &s.est), 0);
        });
        EXPECT_EQ(s.est6.state, TcpState::kEstablished);
        EXPECT_TRUE(s.est6.ipv6);
        EXPECT_TRUE(same6(s.est6.local6.ip, ours));
        EXPECT_TRUE(same6(s.est6.remote6.ip, FuzzWorld::peer_ip6));
        EXPECT_EQ(s.est6.remote6.port, 40000);
        EXPECT_TRUE(s.est6.sack_ok && s.est6.ts_ok); // every option, as the IPv4 one
        EXPECT_EQ(s.est6.snd_wscale, 7);
        EXPECT_EQ(s.est6.snd_wscale, s.est.snd_wscale);
        EXPECT_EQ(s.listener6.state, TcpState::kListen);
        EXPECT_TRUE(s.listener6.ipv6);
        EXPECT_EQ(s.syn_sent6.state, TcpState::kSynSent);
        EXPECT_TRUE(s.syn_sent6.ipv6);
        EXPECT_FALSE(s.est.ipv6);
    }
}

using Check = std::function<void(const Seen &base, const Seen &s)>;
#define D(field) (s.stats.field - base.stats.field)

const std::map<std::string, Check> &checks()
{
    static const std::map<std::string, Check> m = {
        {"ip6-tcp-est-data",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(s.est6.bytes_in, 100u);
             EXPECT_GE(D(fastpath_hits), 1u); // tcp6_express: header prediction over IPv6
         }},
        {"ip6-tcp-est-data-strands", [](const Seen &, const Seen &s) { EXPECT_EQ(s.est6.bytes_in, 100u); }},
        {"ip6-tcp-est-data-csum-flagged-good", [](const Seen &, const Seen &s) { EXPECT_EQ(s.est6.bytes_in, 1400u); }},
        {"ip6-tcp-est-coalesced",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(s.est6.bytes_in, 6000u);
             EXPECT_EQ(D(rx_coalesce_segments), 6u); // input_run6
         }},
        {"ip6-tcp-est-coalesced-ts",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(s.est6.bytes_in, 6000u);
             EXPECT_EQ(D(rx_coalesce_segments), 6u);
         }},
        {"ip6-tcp-est-out-of-order-then-fill",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(D(tcp_ooo_segments), 2u);
             EXPECT_EQ(s.est6.bytes_in, 1500u);
         }},
        {"ip6-tcp-est-sack-dup-acks",
         [](const Seen &base, const Seen &s) { EXPECT_GE(D(tcp_fast_retransmits) + D(tcp_rack_lost), 1u); }},
        {"ip6-tcp-est-fin", [](const Seen &, const Seen &s) { EXPECT_EQ(s.est6.state, TcpState::kCloseWait); }},
        {"ip6-tcp-est-fin-with-data", // odd: through the strands' IPv6 stages
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(s.est6.state, TcpState::kCloseWait);
             EXPECT_EQ(s.est6.bytes_in, 500u);
             EXPECT_GE(D(strand_yields), 1u);
         }},
        {"ip6-tcp-est-rst-exact",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(s.est6.state, TcpState::kClosed);
             EXPECT_EQ(D(tcp_resets_in), 1u);
         }},
        {"ip6-tcp-est-rst-in-window",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(s.est6.state, TcpState::kEstablished);
             EXPECT_EQ(D(tcp_challenge_acks), 1u);
         }},
        {"ip6-tcp-est-syn", [](const Seen &base, const Seen &s) { EXPECT_EQ(D(tcp_challenge_acks), 1u); }},
        {"ip6-tcp-est-packet-too-big",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(D(icmp6_ptb_in), 1u);
             EXPECT_LT(s.est6.snd_mss, base.est6.snd_mss); // tcp6_error lowered it
         }},
        {"ip6-tcp-listener-syn", [](const Seen &base, const Seen &s) { EXPECT_EQ(D(tcp_passive_opens), 1u); }},
        {"ip6-tcp-listener-syn-flood-cookies",
         [](const Seen &base, const Seen &s) { EXPECT_GE(D(tcp_syncookies_sent), 1u); }},
        {"ip6-tcp-synsent-synack",
         [](const Seen &, const Seen &s) { EXPECT_EQ(s.syn_sent6.state, TcpState::kEstablished); }},
        {"ip6-tcp-timewait-fin-again",
         [](const Seen &base, const Seen &s) { // acknowledged from TIME-WAIT, not reset as for no socket
             EXPECT_GE(D(tx_frames), 1u);
             EXPECT_EQ(D(tcp_resets_out), 0u);
             EXPECT_EQ(D(drop_tcp_no_socket), 0u);
         }},
        {"ip6-tcp-timewait-syn-reopens", [](const Seen &base, const Seen &s) { EXPECT_EQ(D(tcp_passive_opens), 1u); }},
        {"ip6-tcp-timewait-rst",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(D(drop_tcp_no_socket), 0u);
             EXPECT_EQ(D(tcp_resets_in), 0u); // RFC 1337: TIME-WAIT ignores a reset
         }},
        {"ip6-tcp-synsent-rst-ack",
         [](const Seen &base, const Seen &s) {
             EXPECT_EQ(s.syn_sent6.state, TcpState::kClosed);
             EXPECT_EQ(D(tcp_resets_in), 1u);
         }},
    };
    return m;
}

TEST(FuzzWorld6, SeedsReachTheIpv6Paths)
{
    size_t found = 0;
    for (const auto &[name, input] : seed_inputs()) {
        const auto c = checks().find(name);
        if (c == checks().end()) continue;
        found++;
        SCOPED_TRACE(name);
        std::ifstream in(g_corpus + "/" + name, std::ios::binary);
        const std::vector<uint8_t> stored((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        EXPECT_EQ(stored, input) << "not in the corpus as seed_inputs() makes it (run mars_fuzz_seeds)";
        const Seen base = run(std::vector<uint8_t>(input.size() & 1, 0)), s = run(input);
        c->second(base, s);
    }
    EXPECT_EQ(found, checks().size()); // every seed checked here is still made
}

} // namespace
} // namespace mars::fuzz

int main(int argc, char **argv)
{
    testing::InitGoogleTest(&argc, argv);
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s [gtest flags] CORPUS_DIR\n", argv[0]);
        return 2;
    }
    mars::fuzz::g_corpus = argv[1];
    return RUN_ALL_TESTS();
}
