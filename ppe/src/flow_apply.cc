// ppe/src/flow_apply.cc: rte_flow calls for flow_rules.h's rules.
#include "flow_apply.h"

#include "steer.h"

#include <rte_byteorder.h>
#include <rte_errno.h>
#include <rte_ether.h>
#include <rte_ethdev.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstring>

namespace ppe::flow {

namespace {

// What to do when the NIC cannot: the two ways of sharing a server that
// need nothing from its NIC.
const char *kInstead = "flow_isolate needs a NIC that takes rte_flow rules in isolated mode with its kernel driver "
                       "attached (mlx5); without one use kernel = \"shared\" (eta-ppe makes an interface for the "
                       "kernel) or give eta a NIC of its own (two NICs, kernel = \"none\")";

std::string flow_message(int rc, const rte_flow_error &e)
{
    const std::string code = rte_strerror(rc < 0 ? -rc : rc);
    if (!e.message || code == e.message) return code;
    return std::string(e.message) + " (" + code + ")";
}

// One rule's rte_flow arguments, kept alive while they are used.
struct Built {
    rte_flow_attr attr{};
    rte_flow_item items[4]{};
    rte_flow_action actions[2]{};
    rte_flow_item_eth eth_spec{}, eth_mask{};
    rte_flow_item_ipv4 ip_spec{}, ip_mask{};
    rte_flow_item_arp_eth_ipv4 arp_spec{}, arp_mask{};
    rte_flow_action_queue queue{};
    rte_flow_action_rss rss{};
    uint8_t key[40];
    std::vector<uint16_t> queues;

    explicit Built(const Rule &r)
    {
        attr.ingress = 1;
        int n = 0;
        items[n].type = RTE_FLOW_ITEM_TYPE_ETH;
        if (r.pattern.match == Match::kArpTarget) {
            eth_spec.type = RTE_BE16(RTE_ETHER_TYPE_ARP);
            eth_mask.type = RTE_BE16(0xffff);
            items[n].spec = &eth_spec;
            items[n].mask = &eth_mask;
            n++;
            arp_spec.tpa = rte_cpu_to_be_32(r.pattern.ipv4);
            arp_mask.tpa = RTE_BE32(0xffffffff);
            items[n].type = RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4;
            items[n].spec = &arp_spec;
            items[n].mask = &arp_mask;
            n++;
        } else {
            n++;
            ip_spec.hdr.dst_addr = rte_cpu_to_be_32(r.pattern.ipv4);
            ip_mask.hdr.dst_addr = RTE_BE32(0xffffffff);
            ip_mask.hdr.next_proto_id = 0xff;
            ip_spec.hdr.next_proto_id = r.pattern.match == Match::kIpv4Tcp   ? IPPROTO_TCP
                                        : r.pattern.match == Match::kIpv4Udp ? IPPROTO_UDP
                                                                             : IPPROTO_ICMP;
            items[n].type = RTE_FLOW_ITEM_TYPE_IPV4;
            items[n].spec = &ip_spec;
            items[n].mask = &ip_mask;
            n++;
            if (r.pattern.match == Match::kIpv4Tcp) items[n++].type = RTE_FLOW_ITEM_TYPE_TCP;
            if (r.pattern.match == Match::kIpv4Udp) items[n++].type = RTE_FLOW_ITEM_TYPE_UDP;
        }
        items[n].type = RTE_FLOW_ITEM_TYPE_END;
        if (r.action.kind == Action::kQueue) {
            queue.index = r.action.queue;
            actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
            actions[0].conf = &queue;
        } else {
            // The key steer.h programs through the port's RSS settings, so
            // the NIC's choice is dti_flow_owner's (40 bytes: mlx5's size).
            rss_fill_key(key, sizeof key);
            queues = r.action.queues;
            rss.func = RTE_ETH_HASH_FUNCTION_TOEPLITZ;
            rss.level = 0;
            rss.types = RTE_ETH_RSS_NONFRAG_IPV4_TCP;
            rss.key_len = sizeof key;
            rss.key = key;
            rss.queue_num = uint32_t(queues.size());
            rss.queue = queues.data();
            actions[0].type = RTE_FLOW_ACTION_TYPE_RSS;
            actions[0].conf = &rss;
        }
        actions[1].type = RTE_FLOW_ACTION_TYPE_END;
    }
};

} // namespace

bool enter_isolated_mode(uint16_t port, const std::string &what, std::string *error)
{
    rte_flow_error e{};
    const int rc = rte_flow_isolate(port, 1, &e);
    if (rc == 0) return true;
    *error = what + ": flow_isolate = true, but the device cannot enter rte_flow isolated mode: " +
             flow_message(rc, e) + "; " + kInstead;
    return false;
}

bool apply_rules(uint16_t port, const std::vector<Rule> &rules, const std::string &what,
                 std::vector<rte_flow *> *made, std::string *error)
{
    for (const Rule &r : rules) {
        Built b(r);
        rte_flow_error e{};
        int rc = rte_flow_validate(port, &b.attr, b.items, b.actions, &e);
        rte_flow *f = nullptr;
        if (rc == 0) {
            e = rte_flow_error{};
            f = rte_flow_create(port, &b.attr, b.items, b.actions, &e);
            if (!f) rc = -rte_errno;
        }
        if (!f) {
            *error = what + ": flow_isolate = true, but the NIC refused rule \"" + describe(r) + "\" (" + r.purpose +
                     "): " + flow_message(rc, e) + "; " + kInstead;
            remove_rules(port, made);
            return false;
        }
        made->push_back(f);
    }
    return true;
}

void remove_rules(uint16_t port, std::vector<rte_flow *> *made)
{
    for (rte_flow *f : *made) {
        rte_flow_error e{};
        rte_flow_destroy(port, f, &e);
    }
    made->clear();
}

std::string kernel_holder(uint32_t ipv4)
{
    ifaddrs *all = nullptr;
    if (getifaddrs(&all) != 0) return "";
    std::string name;
    for (ifaddrs *a = all; a && name.empty(); a = a->ifa_next)
        if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET &&
            ntohl(reinterpret_cast<const sockaddr_in *>(a->ifa_addr)->sin_addr.s_addr) == ipv4)
            name = a->ifa_name;
    freeifaddrs(all);
    return name;
}

} // namespace ppe::flow
