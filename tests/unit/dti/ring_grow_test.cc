// Receive rings that grow in place (Engine::grow_rx, asked for by the
// transport's autotuning while a ring holds no unread byte): the
// application reads byte-exact across every grow, through dti_recv() and
// through the receive view the shim caches (dti_recv_view()), and a grow
// that would pass the memory limit is refused while the stream goes on.
#include "test_util.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dti::test {
namespace {

constexpr uint32_t kStart = 4096;  // each ring's starting size
constexpr uint32_t kMax = 65536;   // what each slot reserves

engine::Limits growing_limits()
{
    engine::Limits l = small_limits();
    l.rx_ring_size = kStart;
    l.rx_ring_max = kMax;
    return l;
}

uint8_t byte_at(uint64_t pos) { return uint8_t(pos * 131 + (pos >> 9) + 7); }

class DtiRingGrow : public Attached {
  protected:
    void SetUp() override {} // each test starts the fixture with its limits
    void start_growing(const engine::Limits &l)
    {
        grow_rx_to_ = kMax;
        start(l);
    }
    int64_t ring_size(dti_sock_t s)
    {
        int64_t v = 0;
        EXPECT_EQ(dti_getsockopt(c_, s, DTI_SO_RCVBUF, &v), 0);
        return v;
    }
    // One phase of a stream from cl to sv: `bytes` more sent in pieces of
    // varied sizes, read in reads of varied sizes (up to 64 through the
    // view taken when the socket was new, larger through dti_recv()), then
    // every byte released so the ring is empty (where the transport may grow
    // it). Returns the receive ring's size after the phase; *bad is the
    // first byte that differed from the pattern (UINT64_MAX: none).
    int64_t phase(dti_sock_t cl, dti_sock_t sv, const struct dti_rx_view &v, uint64_t bytes, uint64_t *bad)
    {
        const uint64_t target = sent_ + bytes;
        uint8_t out[3000], in[2000];
        for (uint32_t round = 0; got_ < target; round++) {
            if (sent_ < target) {
                uint32_t len = uint32_t(std::min<uint64_t>(1 + (round * 37) % sizeof out, target - sent_));
                for (uint32_t i = 0; i < len; i++)
                    out[i] = byte_at(sent_ + i);
                ssize_t n = dti_send(c_, cl, out, len, 0);
                EXPECT_TRUE(n > 0 || n == -EAGAIN) << n;
                if (n > 0)
                    sent_ += uint64_t(n);
            }
            uint32_t rd = round % 3 ? 1 + round % 64 : 1 + (round * 13) % sizeof in;
            int flush = 0;
            ssize_t n = rd <= 64 ? dti_recv_view(&v, in, rd, &flush) : 0;
            if (n > 0 && flush) {
                EXPECT_EQ(dti_recv_flush(c_, sv), 0);
            }
            if (n == 0)
                n = dti_recv(c_, sv, in, rd);
            if (n == -EAGAIN) {
                if (got_ == sent_)
                    continue; // nothing in flight: send more
                dti_prep_watch(c_, sv, DTI_POLLIN, 0);
                dti_submit(c_);
                if (dti_wait(c_, 5000) < 1) {
                    ADD_FAILURE() << "nothing to read after " << got_ << " of " << sent_ << " bytes";
                    return -1;
                }
                continue;
            }
            if (n <= 0) {
                ADD_FAILURE() << "recv: " << n;
                return -1;
            }
            for (ssize_t i = 0; i < n && *bad == UINT64_MAX; i++)
                if (in[i] != byte_at(got_ + uint64_t(i)))
                    *bad = got_ + uint64_t(i);
            got_ += uint64_t(n);
        }
        EXPECT_EQ(dti_recv_flush(c_, sv), 0);
        return ring_size(sv); // answered after the release (one queue, in order)
    }
    // Phases until the ring is `want` bytes or `phases` ran; the sizes seen.
    std::vector<int64_t> stream(dti_sock_t cl, dti_sock_t sv, int phases, uint64_t *bad)
    {
        struct dti_rx_view v{};
        EXPECT_EQ(dti_rx_view(c_, sv, &v), 0); // cached once, as the shim does
        std::vector<int64_t> sizes;
        for (int i = 0; i < phases && !HasFailure(); i++)
            sizes.push_back(phase(cl, sv, v, 3 * kStart + 1000 * uint64_t(i) + 17, bad));
        return sizes;
    }
    uint64_t sent_ = 0, got_ = 0;
};

// The ring doubles at each empty release, 4K to 64K, while one stream runs:
// positions start at odd offsets in the fixture, so the ring's base moves
// at each grow, and every byte still reads back in order.
TEST_F(DtiRingGrow, RingGrowsMidStreamAndReadsStayByteExact)
{
    start_growing(growing_limits());
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    EXPECT_EQ(ring_size(sv), int64_t(kStart));
    uint64_t bad = UINT64_MAX;
    std::vector<int64_t> sizes = stream(cl, sv, 8, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    ASSERT_FALSE(sizes.empty());
    for (size_t i = 1; i < sizes.size(); i++)
        EXPECT_GE(sizes[i], sizes[i - 1]);
    EXPECT_EQ(sizes.back(), int64_t(kMax));
    EXPECT_EQ(ppe_->stats().rx_ring_grows, 4u); // 4K -> 8K -> 16K -> 32K -> 64K
    EXPECT_EQ(ppe_->stats().rx_grow_refusals, 0u);
    dti_limits lim{};
    dti_get_limits(d_, &lim);
    EXPECT_EQ(lim.rx_ring_size, kMax) << "libdti bounds every ring by the slot's reserve";
}

// A memory limit that leaves room for one grow (4K more): the second grow
// is refused, the ring stays at 8K and the stream goes on byte-exact. Once
// the grown socket is gone its growth is given back: the next one grows too.
TEST_F(DtiRingGrow, GrowPastTheMemoryLimitIsRefused)
{
    engine::Limits l = growing_limits();
    engine::Limits at_start = l;
    at_start.rx_ring_max = 0;
    l.max_region_bytes = engine::region_bytes(at_start) + kStart;
    ASSERT_GT(engine::region_bytes(l), l.max_region_bytes) << "the region reserves more than the limit";
    start_growing(l);
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    uint64_t bad = UINT64_MAX;
    std::vector<int64_t> sizes = stream(cl, sv, 6, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    ASSERT_FALSE(sizes.empty());
    EXPECT_EQ(sizes.back(), int64_t(2 * kStart));
    EXPECT_EQ(ppe_->stats().rx_ring_grows, 1u);
    EXPECT_GE(ppe_->stats().rx_grow_refusals, 1u);

    ASSERT_EQ(dti_close(c_, cl), 0);
    ASSERT_EQ(dti_close(c_, sv), 0);
    sent_ = got_ = 0;
    pair(&cl, &sv);
    sizes = stream(cl, sv, 6, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    ASSERT_FALSE(sizes.empty());
    EXPECT_EQ(sizes.back(), int64_t(2 * kStart)) << "the closed socket's growth was not given back";
}

} // namespace
} // namespace dti::test
