// tests/unit/ppe/xdp_pool_test.cc: the packet pool eta-ppe gives net_af_xdp
// lies wholly inside the UMEM that DPDK 22.11's PMD registers for it
// (ppe/src/xdp_pool.h); a plain rte_pktmbuf_pool_create() pool does not,
// which is what starved the AF_XDP socket's fill ring under loss.
#include "xdp_pool.h"

#include <gtest/gtest.h>

#include <rte_eal.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

class EalEnv : public ::testing::Environment {
  public:
    void SetUp() override
    {
        prefix = "xdp-pool-test-" + std::to_string(getpid());
        std::vector<std::string> args = {"xdp_pool_test", "--no-huge", "--no-shconf", "--no-pci", "--no-telemetry",
                                         "-m", "128", "--iova-mode=va", "--log-level=*:error",
                                         "--file-prefix", prefix, "-l", "0"};
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        ASSERT_GE(rte_eal_init(int(argv.size()), argv.data()), 0) << "EAL could not start without hugepages";
    }
    void TearDown() override
    {
        const std::string runtime_dir = rte_eal_get_runtime_dir();
        rte_eal_cleanup();
        std::error_code ec;
        if (runtime_dir.find(prefix) != std::string::npos) std::filesystem::remove_all(runtime_dir, ec);
    }

  private:
    std::string prefix;
};

// eta-ppe's lab pool: 2,048 bytes of data + headroom per mbuf, several
// thousand of them (ppe/src/dpdk.cc).
constexpr uint16_t kDataRoom = 2048 + RTE_PKTMBUF_HEADROOM;
constexpr uint32_t kBuffers = 6000;

TEST(XdpPool, PlainPktmbufPoolReachesBeyondTheUmem)
{
    // Objects of a plain pool do not cross pages: 4 KiB pages without
    // hugepages hold one 2.4 KiB mbuf each, so the pool spans far more than
    // populated_size x object size, the UMEM the PMD registers.
    rte_mempool *p = rte_pktmbuf_pool_create("plain", kBuffers, 0, 0, kDataRoom, SOCKET_ID_ANY);
    ASSERT_NE(p, nullptr);
    std::string why;
    EXPECT_FALSE(ppe::xdp_umem_covers_pool(p, &why));
    EXPECT_NE(why.find("lie outside"), std::string::npos) << why;
    rte_mempool_free(p);
}

TEST(XdpPool, EveryBufferLiesInsideTheUmem)
{
    rte_mempool *p = ppe::create_xdp_pool("xdp", kBuffers, 256, kDataRoom, SOCKET_ID_ANY);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->populated_size, kBuffers);
    std::string why;
    EXPECT_TRUE(ppe::xdp_umem_covers_pool(p, &why)) << why;
    // They are ordinary pktmbufs: every one can be taken, has the data room
    // asked for, and goes back.
    std::vector<rte_mbuf *> all(kBuffers);
    ASSERT_EQ(rte_pktmbuf_alloc_bulk(p, all.data(), kBuffers), 0);
    for (rte_mbuf *m : all) {
        ASSERT_EQ(m->buf_len, kDataRoom);
        ASSERT_EQ(rte_pktmbuf_headroom(m), RTE_PKTMBUF_HEADROOM);
        ASSERT_EQ(m->pool, p);
    }
    EXPECT_EQ(rte_pktmbuf_alloc(p), nullptr);
    rte_pktmbuf_free_bulk(all.data(), kBuffers);
    EXPECT_EQ(rte_mempool_avail_count(p), kBuffers);
    rte_mempool_free(p);
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    ::testing::AddGlobalTestEnvironment(new EalEnv);
    return RUN_ALL_TESTS();
}
