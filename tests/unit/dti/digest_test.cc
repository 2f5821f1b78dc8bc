// Payload digests (DTI_OP_DIGEST) through libdti against the fixture engine:
// every digest the engine reports equals ISA-L's CRC32C over the same bytes
// as the application read (or wrote) them, across ring wrap-around, ranges
// that span many deliveries, ranges asked for before their bytes arrived
// (and longer than the ring), peeks, chained (running) digests, checks and
// the ways a range ends without data.
#include "test_util.h"

#include <isa-l/crc.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace dti::test {
namespace {

// The standard CRC32C as applications compute it themselves with ISA-L.
uint32_t isal_crc32c(const uint8_t *p, size_t n, uint32_t raw = 0xffffffffu)
{
    return ~crc32_iscsi(const_cast<uint8_t *>(p), int(n), raw);
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed)
{
    std::vector<uint8_t> v(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto &b : v) {
        x = x * 1103515245u + 12345u;
        b = uint8_t(x >> 16);
    }
    return v;
}

class Digest : public Attached {
  protected:
    void SetUp() override
    {
        Attached::SetUp();
        pair(&client_, &server_);
    }
    // Reads exactly n bytes from s (blocking), appending to *out.
    void read_n(dti_sock_t s, size_t n, std::vector<uint8_t> *out)
    {
        size_t have = 0;
        std::vector<uint8_t> buf(n);
        while (have < n) {
            ssize_t r = dti_recv_wait(c_, s, buf.data() + have, n - have, 5000);
            ASSERT_GT(r, 0) << dti_strerror(int(r));
            have += size_t(r);
        }
        out->insert(out->end(), buf.begin(), buf.end());
    }
    // Waits for the completion of user_data ud.
    dti_cqe wait(uint64_t ud)
    {
        dti_cqe e{};
        EXPECT_EQ(dti_wait_cqe(c_, ud, &e, 5000), 1) << "no completion for " << ud;
        return e;
    }
    dti_sock_t client_ = 0, server_ = 0;
};

TEST_F(Digest, KnownVectorOfTheStandard)
{
    ASSERT_EQ(dti_send_all(c_, client_, "123456789", 9, 5000), 9);
    uint32_t crc = 0;
    ASSERT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX, 0, 9, 0, &crc, 5000), 0);
    EXPECT_EQ(crc, 0xe3069283u);
    EXPECT_EQ(isal_crc32c(reinterpret_cast<const uint8_t *>("123456789"), 9), 0xe3069283u);
}

// Frames of 5,000 bytes through a 16 KiB ring whose positions start at an
// odd offset: each range is asked for before its bytes were sent, spans
// several deliveries of 7,001-byte sends, and many wrap around the ring.
TEST_F(Digest, RangesAskedAheadMatchIsalAcrossRingWrap)
{
    constexpr size_t kFrame = 5000, kFrames = 40;
    const auto data = pattern(kFrame * kFrames, 1);
    std::vector<uint8_t> got;
    size_t sent = 0;
    for (size_t f = 0; f < kFrames; f++) {
        ASSERT_EQ(dti_prep_digest(c_, server_, DTI_DIGEST_RX, 0, kFrame, 0, 1000 + f), 0);
        dti_submit(c_);
        // Send what fits up to the end of this frame plus a bit of the next.
        const size_t want = std::min(data.size(), (f + 1) * kFrame + 3000);
        while (sent < want) {
            const size_t n = std::min<size_t>(7001, want - sent);
            ASSERT_EQ(dti_send_all(c_, client_, data.data() + sent, n, 5000), ssize_t(n));
            sent += n;
        }
        read_n(server_, kFrame, &got);
        const dti_cqe e = wait(1000 + f);
        ASSERT_EQ(e.res, 0) << dti_strerror(e.res);
        EXPECT_EQ(uint32_t(e.value), isal_crc32c(got.data() + f * kFrame, kFrame)) << "frame " << f;
    }
    ASSERT_EQ(got, data);
    const engine::Stats st = ppe_->stats();
    EXPECT_EQ(st.digest_ranges, kFrames);
    EXPECT_EQ(st.digest_rx_bytes, kFrame * kFrames) << "each byte digested once";
}

// A range longer than the ring and than anything sent so far: it completes
// once the application has read (and so made room for) all of it.
TEST_F(Digest, RangeLongerThanTheRingCompletesWhenTheDataHasArrived)
{
    constexpr size_t kLen = 100000; // > 16 KiB ring
    const auto data = pattern(kLen + 100, 2);
    ASSERT_EQ(dti_prep_digest(c_, server_, DTI_DIGEST_RX, 0, kLen, 0, 7), 0);
    dti_submit(c_);
    dti_cqe none[4];
    EXPECT_EQ(dti_reap(c_, none, 4), 0u) << "completed with no data";
    std::vector<uint8_t> got;
    size_t sent = 0;
    while (got.size() < data.size()) {
        if (sent < data.size()) {
            ssize_t n = dti_send(c_, client_, data.data() + sent, std::min<size_t>(3001, data.size() - sent), 0);
            if (n > 0)
                sent += size_t(n);
        }
        uint8_t buf[4096];
        ssize_t r = dti_recv_wait(c_, server_, buf, sizeof buf, 5000);
        ASSERT_GT(r, 0) << dti_strerror(int(r));
        got.insert(got.end(), buf, buf + r);
    }
    const dti_cqe e = wait(7);
    ASSERT_EQ(e.res, 0);
    EXPECT_EQ(uint32_t(e.value), isal_crc32c(data.data(), kLen));
}

// Borrowing (a peek: nothing released) does not move the position ranges
// are named from; a range after a header is named with `skip`.
TEST_F(Digest, PeekDoesNotDisturbAndSkipNamesThePayload)
{
    const auto body = pattern(3000, 3);
    const uint32_t len = uint32_t(body.size());
    ASSERT_EQ(dti_send_all(c_, client_, &len, 4, 5000), 4);
    ASSERT_EQ(dti_send_all(c_, client_, body.data(), body.size(), 5000), ssize_t(body.size()));
    ASSERT_EQ(dti_prep_watch(c_, server_, DTI_POLLIN, 9), 0); // wakes the waits below as bytes arrive
    dti_submit(c_);
    dti_iov iov[2];
    ssize_t have = 0;
    for (int i = 0; i < 1000 && have < ssize_t(4 + body.size()); i++) {
        have = dti_recv_borrow(c_, server_, iov);
        if (have < ssize_t(4 + body.size())) {
            ASSERT_GE(dti_wait(c_, 100), 0);
        }
    }
    ASSERT_EQ(have, ssize_t(4 + body.size()));
    uint32_t whole = 0, payload = 0;
    ASSERT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX, 0, 4 + len, 0, &whole, 5000), 0);
    ASSERT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX, 4, len, 0, &payload, 5000), 0);
    EXPECT_EQ(payload, isal_crc32c(body.data(), body.size()));
    std::vector<uint8_t> all(4);
    std::memcpy(all.data(), &len, 4);
    all.insert(all.end(), body.begin(), body.end());
    EXPECT_EQ(whole, isal_crc32c(all.data(), all.size()));
    // Still nothing consumed: reading gives the same bytes, and a range
    // named after the read starts after them.
    std::vector<uint8_t> got;
    read_n(server_, 4, &got);
    ASSERT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX, 0, len, 0, &payload, 5000), 0);
    EXPECT_EQ(payload, isal_crc32c(body.data(), body.size()));
}

TEST_F(Digest, CheckReportsMismatchesAndCountsThem)
{
    const auto data = pattern(2048, 4);
    ASSERT_EQ(dti_send_all(c_, client_, data.data(), data.size(), 5000), 2048);
    const uint32_t right = isal_crc32c(data.data(), 1024);
    uint32_t crc = 0;
    EXPECT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX | DTI_DIGEST_CHECK, 0, 1024, right, &crc, 5000), 0);
    EXPECT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX | DTI_DIGEST_CHECK, 0, 1024, right ^ 1, &crc, 5000),
              -EBADMSG);
    EXPECT_EQ(crc, right) << "the digest comes with the mismatch";
    EXPECT_EQ(ppe_->stats().digest_mismatches, 1u);
}

// Chained ranges: a running digest over pieces the application chooses,
// the last one equal to ISA-L's over everything; a gap is refused.
TEST_F(Digest, ChainedRangesAreARunningDigest)
{
    const auto data = pattern(30000, 5);
    const uint32_t pieces[] = {1, 4095, 10000, 13904};
    uint32_t skip = 0;
    for (size_t i = 0; i < 4; i++) {
        ASSERT_EQ(dti_prep_digest(c_, server_, DTI_DIGEST_RX | DTI_DIGEST_CHAIN, skip, pieces[i], 0, 50 + i), 0);
        skip += pieces[i];
    }
    dti_submit(c_);
    std::vector<uint8_t> got;
    size_t sent = 0;
    while (sent < 30000) {
        ssize_t n = dti_send(c_, client_, data.data() + sent, std::min<size_t>(5000, 30000 - sent), 0);
        if (n > 0)
            sent += size_t(n);
        uint8_t buf[8192];
        ssize_t r = dti_recv_wait(c_, server_, buf, sizeof buf, 5000);
        ASSERT_GT(r, 0);
        got.insert(got.end(), buf, buf + r);
    }
    while (got.size() < 30000)
        read_n(server_, 30000 - got.size(), &got);
    size_t end = 0;
    for (size_t i = 0; i < 4; i++) {
        end += pieces[i];
        const dti_cqe e = wait(50 + i);
        ASSERT_EQ(e.res, 0);
        EXPECT_EQ(uint32_t(e.value), isal_crc32c(got.data(), end)) << "through piece " << i;
    }
    // The chain continues at 30000 (skip 0 now); elsewhere is a gap.
    uint32_t crc;
    EXPECT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX | DTI_DIGEST_CHAIN, 5, 10, 0, &crc, 5000), -EINVAL);
}

// The send direction: ranges named ahead of the bytes the application will
// commit complete when committed; what arrives is what was digested.
TEST_F(Digest, SendRangesMatchWhatWasCommitted)
{
    const auto data = pattern(50000, 6);
    ASSERT_EQ(dti_prep_digest(c_, client_, DTI_DIGEST_TX, 0, 20000, 0, 60), 0);
    ASSERT_EQ(dti_prep_digest(c_, client_, DTI_DIGEST_TX, 20000, 30000, 0, 61), 0);
    dti_submit(c_);
    std::vector<uint8_t> got;
    size_t sent = 0;
    while (got.size() < data.size()) {
        if (sent < data.size()) {
            ssize_t n = dti_send(c_, client_, data.data() + sent, std::min<size_t>(6007, data.size() - sent), 0);
            if (n > 0)
                sent += size_t(n);
        }
        uint8_t buf[8192];
        ssize_t r = dti_recv_wait(c_, server_, buf, sizeof buf, 5000);
        ASSERT_GT(r, 0);
        got.insert(got.end(), buf, buf + r);
    }
    ASSERT_EQ(got, data);
    dti_cqe e = wait(60);
    ASSERT_EQ(e.res, 0);
    EXPECT_EQ(uint32_t(e.value), isal_crc32c(data.data(), 20000));
    e = wait(61);
    ASSERT_EQ(e.res, 0);
    EXPECT_EQ(uint32_t(e.value), isal_crc32c(data.data() + 20000, 30000));
    EXPECT_EQ(ppe_->stats().digest_tx_bytes, 50000u);
}

TEST_F(Digest, RangesEndWhenTheStreamDoes)
{
    // Past the end of stream: -ENODATA once the FIN is in.
    ASSERT_EQ(dti_prep_digest(c_, server_, DTI_DIGEST_RX, 0, 1000, 0, 70), 0);
    dti_submit(c_);
    ASSERT_EQ(dti_send_all(c_, client_, "0123456789", 10, 5000), 10);
    ASSERT_EQ(dti_shutdown(c_, client_, DTI_SHUT_WR), 0);
    EXPECT_EQ(wait(70).res, -ENODATA);
    // A send range after shutdown(WR) can never fill.
    dti_sock_t c2, s2;
    pair(&c2, &s2);
    ASSERT_EQ(dti_prep_digest(c_, c2, DTI_DIGEST_TX, 0, 100, 0, 71), 0);
    dti_submit(c_);
    ASSERT_EQ(dti_shutdown(c_, c2, DTI_SHUT_WR), 0);
    EXPECT_EQ(wait(71).res, -EPIPE);
    // Closing the socket cancels what waits on it. A pair of its own: s2's
    // stream may already have ended (c2's FIN), which answers -ENODATA
    // instead, depending on when the FIN arrives (seen with two engines under load).
    dti_sock_t c3, s3;
    pair(&c3, &s3);
    ASSERT_EQ(dti_prep_digest(c_, s3, DTI_DIGEST_RX, 0, 100, 0, 72), 0);
    dti_submit(c_);
    ASSERT_EQ(dti_close(c_, s3), 0);
    EXPECT_EQ(wait(72).res, -ECANCELED);
}

// A context closed with a range waiting takes it along: a new context that
// gets the same queue pair (and the same tags) sees only its own answer.
TEST_F(Digest, ClosedContextsRangesNeverReachItsSuccessor)
{
    dti_ctx_t *old_ctx = nullptr;
    ASSERT_EQ(dti_ctx_create(d_, &old_ctx), 0);
    ASSERT_EQ(dti_prep_digest(old_ctx, server_, DTI_DIGEST_RX, 0, 5, 0, 1), 0);
    dti_submit(old_ctx);
    // Commands of a context run in order: once the NOP is answered the range waits in the engine.
    ASSERT_EQ(dti_prep_nop(old_ctx, 3), 0);
    dti_submit(old_ctx);
    dti_cqe nop{};
    ASSERT_EQ(dti_wait_cqe(old_ctx, 3, &nop, 5000), 1);
    dti_ctx_destroy(old_ctx);
    dti_ctx_t *next = nullptr;
    ASSERT_EQ(dti_ctx_create(d_, &next), 0);
    ASSERT_EQ(dti_prep_digest(next, server_, DTI_DIGEST_RX, 0, 10, 0, 2), 0);
    dti_submit(next);
    ASSERT_EQ(dti_send_all(c_, client_, "0123456789", 10, 5000), 10);
    dti_cqe e{};
    ASSERT_EQ(dti_wait_cqe(next, 2, &e, 5000), 1);
    EXPECT_EQ(e.res, 0);
    EXPECT_EQ(uint32_t(e.value), isal_crc32c(reinterpret_cast<const uint8_t *>("0123456789"), 10))
        << "the closed context's 5-byte range answered in its place";
    dti_ctx_destroy(next);
}

TEST_F(Digest, BadRequestsAreRefused)
{
    uint32_t crc;
    EXPECT_EQ(dti_digest(c_, server_, 0x80, 0, 10, 0, &crc, 5000), -EINVAL) << "unknown flag";
    EXPECT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX, 0, 0, 0, &crc, 5000), -EINVAL) << "empty";
    EXPECT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX, 0, 0x80000001u, 0, &crc, 5000), -EINVAL) << "too long";
    EXPECT_EQ(dti_digest(c_, 0x7fffffff, DTI_DIGEST_RX, 0, 10, 0, &crc, 5000), -DTI_E_BAD_HANDLE);
    // Eight ranges wait per direction; the ninth is -EBUSY.
    for (uint64_t i = 0; i < 8; i++)
        ASSERT_EQ(dti_prep_digest(c_, server_, DTI_DIGEST_RX, 0, 10, 0, 80 + i), 0);
    dti_submit(c_);
    EXPECT_EQ(dti_digest(c_, server_, DTI_DIGEST_RX, 0, 10, 0, &crc, 5000), -EBUSY);
    ASSERT_EQ(dti_send_all(c_, client_, "0123456789", 10, 5000), 10);
    const uint32_t want = isal_crc32c(reinterpret_cast<const uint8_t *>("0123456789"), 10);
    for (uint64_t i = 0; i < 8; i++) {
        const dti_cqe e = wait(80 + i);
        EXPECT_EQ(e.res, 0);
        EXPECT_EQ(uint32_t(e.value), want);
    }
}

} // namespace
} // namespace dti::test
