// arp_probe: opens one DPDK port (in-memory, no hugepages) and waits, bounded
// in time, for an ARP request asking for a given IPv4 address. Prints READY
// once the port is started (so the caller can begin sending) and exits 0 when
// the request is seen, 1 on timeout, 2 on setup errors.
//
//   arp_probe --vdev net_af_packet0,iface=eta0a --ip 198.18.0.1 [--timeout 10] [--prefix P]
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_cycles.h>

#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

struct Args {
    std::string vdev;
    uint32_t ip_be = 0;
    double timeout_s = 10;
    std::string prefix; // DPDK runtime file prefix; unique per run
};

bool parse(int argc, char **argv, Args *a)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--vdev") {
            a->vdev = v;
        } else if (k == "--ip") {
            in_addr addr;
            if (inet_pton(AF_INET, v.c_str(), &addr) != 1) return false;
            a->ip_be = addr.s_addr;
        } else if (k == "--prefix") {
            a->prefix = v;
        } else if (k == "--timeout") {
            a->timeout_s = std::atof(v.c_str());
        } else {
            return false;
        }
    }
    return !a->vdev.empty() && a->ip_be != 0 && a->timeout_s > 0;
}

// True when the frame is an Ethernet ARP request for ip_be.
bool is_arp_request_for(const uint8_t *f, uint32_t len, uint32_t ip_be)
{
    if (len < 14 + 28) return false;
    if (f[12] != 0x08 || f[13] != 0x06) return false; // ethertype ARP
    const uint8_t *arp = f + 14;
    if (arp[6] != 0 || arp[7] != 1) return false; // opcode request
    uint32_t target;
    std::memcpy(&target, arp + 24, 4);
    return target == ip_be;
}

} // namespace

int main(int argc, char **argv)
{
    Args args;
    if (!parse(argc, argv, &args)) {
        std::fprintf(stderr, "usage: arp_probe --vdev DEVARGS --ip A.B.C.D [--timeout SECONDS] [--prefix P]\n");
        return 2;
    }
    std::string prefix = args.prefix.empty() ? "eta-arp-probe-" + std::to_string(getpid()) : args.prefix;
    std::vector<std::string> eal = {"arp_probe", "-l", "0", "--no-huge", "-m", "64", "--no-shconf", "--no-telemetry",
                                    "--no-pci", "--file-prefix", prefix, "--vdev", args.vdev,
                                    "--log-level", "*:warning"};
    std::vector<char *> eal_argv;
    for (auto &s : eal) eal_argv.push_back(s.data());
    if (rte_eal_init(static_cast<int>(eal_argv.size()), eal_argv.data()) < 0) {
        std::fprintf(stderr, "arp_probe: EAL init failed: %s\n", rte_strerror(rte_errno));
        return 2;
    }
    int rc = 2;
    uint16_t port = 0;
    rte_mempool *pool = rte_pktmbuf_pool_create("probe", 1023, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    rte_eth_conf conf{};
    if (rte_eth_dev_count_avail() != 1 || pool == nullptr) {
        std::fprintf(stderr, "arp_probe: expected one port (got %u) and a mempool\n", rte_eth_dev_count_avail());
    } else if (rte_eth_dev_configure(port, 1, 1, &conf) < 0 ||
               rte_eth_rx_queue_setup(port, 0, 256, SOCKET_ID_ANY, nullptr, pool) < 0 ||
               rte_eth_tx_queue_setup(port, 0, 256, SOCKET_ID_ANY, nullptr) < 0 ||
               rte_eth_dev_start(port) < 0) {
        std::fprintf(stderr, "arp_probe: could not start port %s\n", args.vdev.c_str());
    } else {
        std::printf("READY\n");
        std::fflush(stdout);
        rc = 1;
        const uint64_t deadline = rte_get_tsc_cycles() + uint64_t(args.timeout_s * double(rte_get_tsc_hz()));
        uint64_t frames = 0;
        while (rc == 1 && rte_get_tsc_cycles() < deadline) {
            rte_mbuf *burst[32];
            uint16_t n = rte_eth_rx_burst(port, 0, burst, 32);
            for (uint16_t i = 0; i < n; i++) {
                frames++;
                if (is_arp_request_for(rte_pktmbuf_mtod(burst[i], const uint8_t *),
                                       rte_pktmbuf_data_len(burst[i]), args.ip_be))
                    rc = 0;
                rte_pktmbuf_free(burst[i]);
            }
            if (n == 0) usleep(1000); // idle: this test must not starve the peer on 2 cores
        }
        std::printf(rc == 0 ? "ARP request seen after %llu frames\n"
                            : "no ARP request within the timeout (%llu frames seen)\n",
                    static_cast<unsigned long long>(frames));
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
    }
    rte_eal_cleanup();
    return rc;
}
