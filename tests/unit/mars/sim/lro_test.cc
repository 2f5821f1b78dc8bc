// LRO frames on the receive path (issue 30): a port's super-frame (one TCP
// segment longer than the MSS, as a GRO'd skb or a vnet port's GSO frame
// is) is delivered byte-exact and acknowledged as the MSS-sized segments it
// stands for would be (delayed ACK counted in segments: an ACK at once, not
// after the delayed-ACK timer); its checksum is verified unless the port
// vouches for it (kRxL4CsumGood), and a bad one is dropped.
#include "frame.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mars::sim {
namespace {

constexpr uint32_t kVouched = kRxIpCsumGood | kRxL4CsumGood;
constexpr uint32_t kMss = 1448;          // payload per segment with timestamps
constexpr uint32_t kLro = 45 * kMss;     // 65160: the largest the peer's kernel makes

std::vector<uint8_t> pattern(uint32_t k, size_t n)
{
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; i++) v[i] = uint8_t(k * 131 + i * 7 + (i >> 8));
    return v;
}

class Lro {
  public:
    Lro()
    {
        peer_ = std::make_unique<RawPeer>(RawPeer::Options{}); // strands / copy engine: the registration's

        const SockId l = peer_->listen(80, 16);
        std::string why;
        if (peer_->open_passive(l, 80, 41000, &c_, RawPeer::full_syn_options(0), &why) == kNoSock)
            throw std::runtime_error(why);
        peer_->take();
        peer_->take_events();
        // Two segments first: their ACK opens the window past the SYN-ACK's.
        send({seg(0, kMss), seg(1, kMss)}, kVouched);
        peer_->poll();
        peer_->take();
        drain();
    }
    RawPeer &peer() { return *peer_; }
    RawPeer::Conn &conn() { return c_; }
    std::vector<uint8_t> seg(uint32_t k, size_t n)
    {
        std::vector<uint8_t> payload = pattern(k, n);
        sent_.insert(sent_.end(), payload.begin(), payload.end());
        std::vector<uint8_t> f = build_tcp(peer_->seg(c_, kAck, payload));
        c_.peer_nxt += uint32_t(n);
        return f;
    }
    void send(const std::vector<std::vector<uint8_t>> &frames, uint32_t flags) { peer_->input_burst(frames, flags); }
    // What the application reads now.
    std::vector<uint8_t> drain()
    {
        std::vector<uint8_t> got(1 << 20);
        const int64_t n = peer_->stack().recv(c_.sock, got.data(), got.size());
        got.resize(n > 0 ? size_t(n) : 0);
        read_.insert(read_.end(), got.begin(), got.end());
        return got;
    }
    const std::vector<uint8_t> &sent() const { return sent_; }
    const std::vector<uint8_t> &read() const { return read_; }
    // ACKs the stack sent on the connection since the last call, without
    // moving time (no delayed-ACK timer can have fired).
    std::vector<uint32_t> acks()
    {
        std::vector<uint32_t> a;
        for (const Parsed &p : peer_->take_conn(c_))
            if (p.flags & kAck) a.push_back(p.ack);
        return a;
    }

  private:
    std::unique_ptr<RawPeer> peer_;
    RawPeer::Conn c_;
    std::vector<uint8_t> sent_, read_;
};

TEST(Lro, A64KiBFrameIsDeliveredByteExactAndAckedAtOnce)
{
    Lro t;
    t.send({t.seg(2, kLro)}, kVouched);
    t.peer().poll(); // the burst's end: no time passes
    const std::vector<uint32_t> acks = t.acks();
    ASSERT_FALSE(acks.empty()) << "a frame of 45 segments waited for the delayed-ACK timer";
    EXPECT_EQ(acks.back(), t.conn().peer_nxt);
    t.drain();
    EXPECT_EQ(t.read(), t.sent());
    EXPECT_EQ(t.peer().stack().stats().drop_tcp_csum, 0u);
}

TEST(Lro, OneFullSegmentStillWaitsForTheDelayedAck)
{
    // The rule counts segments: one MSS-sized frame alone is not ACKed at
    // once — once the connection has left quick-ACK mode (mars/README.md
    // "Quick ACKs": at most 16 ACKs at once at its start). Lone segments, one
    // per burst, until one is not ACKed at once; within 18 of them.
    Lro t;
    bool waited = false;
    for (uint32_t k = 2; k < 20 && !waited; k++) {
        t.peer().poll(); // a window update for what was read goes now, not with the segment
        t.acks();
        t.send({t.seg(k, kMss)}, kVouched);
        t.peer().poll();
        waited = t.acks().empty();
        if (!waited) t.drain(); // (the waiting one stays unread: no window update can ACK it)
    }
    ASSERT_TRUE(waited) << "18 lone segments were each ACKed at once: quick-ACK mode never ended";
    t.peer().advance(500'000'000); // the delayed-ACK timer
    const std::vector<uint32_t> acks = t.acks();
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back(), t.conn().peer_nxt);
}

TEST(Lro, TwoSuperFramesInOneBurstAreOneGroupAndAcked)
{
    Lro t;
    t.send({t.seg(2, 20 * kMss), t.seg(3, 20 * kMss)}, kVouched);
    t.peer().poll();
    const std::vector<uint32_t> acks = t.acks();
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back(), t.conn().peer_nxt);
    t.drain();
    EXPECT_EQ(t.read(), t.sent());
}

TEST(Lro, NotVouchedIsVerifiedAndDeliveredWhenGood)
{
    Lro t;
    t.send({t.seg(2, kLro)}, 0);
    t.peer().poll();
    EXPECT_FALSE(t.acks().empty());
    t.drain();
    EXPECT_EQ(t.read(), t.sent());
    EXPECT_EQ(t.peer().stack().stats().drop_tcp_csum, 0u);
}

TEST(Lro, NotVouchedAndBadIsDropped)
{
    Lro t;
    const size_t before = t.sent().size();
    std::vector<uint8_t> f = t.seg(2, kLro);
    f[f.size() - 1000] ^= 0x5a; // a payload byte no longer matches the checksum
    t.send({f}, 0);
    t.peer().poll();
    EXPECT_EQ(t.peer().stack().stats().drop_tcp_csum, 1u);
    EXPECT_TRUE(t.drain().empty());
    EXPECT_EQ(t.read().size(), before);
}

TEST(Lro, VouchedIsNotVerified)
{
    // The port's word is taken: the same damaged frame, vouched for, is
    // delivered as it is (what a NIC that verified it would have given).
    Lro t;
    std::vector<uint8_t> f = t.seg(2, kLro);
    f[f.size() - 1000] ^= 0x5a;
    t.send({f}, kVouched);
    t.peer().poll();
    EXPECT_EQ(t.peer().stack().stats().drop_tcp_csum, 0u);
    const std::vector<uint8_t> got = t.drain();
    ASSERT_EQ(got.size(), size_t(kLro));
    EXPECT_NE(t.read(), t.sent()); // the damaged byte, unverified
}

} // namespace
} // namespace mars::sim
