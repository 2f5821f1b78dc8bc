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

#include <cstdio>
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

constexpr uint8_t kNeighborSolicit = 135; // ICMPv6 type (RFC 4861 4.3)

// One rule's rte_flow arguments, kept alive while they are used.
struct Built {
    rte_flow_attr attr{};
    rte_flow_item items[4]{};
    rte_flow_action actions[2]{};
    rte_flow_item_eth eth_spec{}, eth_mask{};
    rte_flow_item_ipv4 ip_spec{}, ip_mask{};
    rte_flow_item_ipv6 ip6_spec{}, ip6_mask{};
    rte_flow_item_icmp6 icmp6_spec{}, icmp6_mask{};
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
        } else if (is_ipv6(r.pattern.match)) {
            n++;
            std::memcpy(ip6_spec.hdr.dst_addr, r.pattern.ipv6.b, 16);
            std::memset(ip6_mask.hdr.dst_addr, 0xff, 16);
            ip6_mask.hdr.proto = 0xff;
            ip6_spec.hdr.proto = r.pattern.match == Match::kIpv6Tcp   ? uint8_t(IPPROTO_TCP)
                                 : r.pattern.match == Match::kIpv6Udp ? uint8_t(IPPROTO_UDP)
                                                                      : uint8_t(IPPROTO_ICMPV6);
            items[n].type = RTE_FLOW_ITEM_TYPE_IPV6;
            items[n].spec = &ip6_spec;
            items[n].mask = &ip6_mask;
            n++;
            if (r.pattern.match == Match::kIpv6Tcp) items[n++].type = RTE_FLOW_ITEM_TYPE_TCP;
            if (r.pattern.match == Match::kIpv6Udp) items[n++].type = RTE_FLOW_ITEM_TYPE_UDP;
            if (r.pattern.match == Match::kIpv6NdSolicit) {
                icmp6_spec.type = kNeighborSolicit;
                icmp6_mask.type = 0xff;
                items[n].type = RTE_FLOW_ITEM_TYPE_ICMP6;
                items[n].spec = &icmp6_spec;
                items[n].mask = &icmp6_mask;
                n++;
            }
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
            // Over IPv6 the same key hashes the 36-byte 4-tuple:
            // dti_flow_owner6's choice (40 key bytes cover it exactly).
            rss.types = is_ipv6(r.pattern.match) ? RTE_ETH_RSS_NONFRAG_IPV6_TCP : RTE_ETH_RSS_NONFRAG_IPV4_TCP;
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

std::string hex(const uint8_t *b, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; i++) {
        s += digits[b[i] >> 4];
        s += digits[b[i] & 15];
    }
    return s;
}

bool all_ones(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0xff) return false;
    return true;
}

// One matched field in testpmd's words: "dst is X" for an exact match,
// spec and mask otherwise (none of ours, but the text must not hide one).
std::string field(const char *name, const std::string &spec, const std::string &mask, bool exact)
{
    const std::string n = std::string(" ") + name;
    return exact ? n + " is " + spec : n + " spec " + spec + n + " mask " + mask;
}

std::string ipv4_text(rte_be32_t be)
{
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &be, buf, sizeof buf);
    return buf;
}

std::string ipv6_text(const uint8_t *a)
{
    char buf[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, a, buf, sizeof buf);
    return buf;
}

std::string item_text(const rte_flow_item &it)
{
    switch (it.type) {
    case RTE_FLOW_ITEM_TYPE_ETH: {
        if (!it.spec) return "eth";
        const auto *s = static_cast<const rte_flow_item_eth *>(it.spec);
        const auto *m = static_cast<const rte_flow_item_eth *>(it.mask);
        char t[8], tm[8];
        std::snprintf(t, sizeof t, "0x%04x", unsigned(rte_be_to_cpu_16(s->type)));
        std::snprintf(tm, sizeof tm, "0x%04x", unsigned(rte_be_to_cpu_16(m->type)));
        return "eth" + field("type", t, tm, m->type == RTE_BE16(0xffff));
    }
    case RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4: {
        const auto *s = static_cast<const rte_flow_item_arp_eth_ipv4 *>(it.spec);
        const auto *m = static_cast<const rte_flow_item_arp_eth_ipv4 *>(it.mask);
        return "arp_eth_ipv4" + field("tpa", ipv4_text(s->tpa), ipv4_text(m->tpa), m->tpa == RTE_BE32(0xffffffff));
    }
    case RTE_FLOW_ITEM_TYPE_IPV4: {
        const auto *s = static_cast<const rte_flow_item_ipv4 *>(it.spec);
        const auto *m = static_cast<const rte_flow_item_ipv4 *>(it.mask);
        return "ipv4" +
               field("dst", ipv4_text(s->hdr.dst_addr), ipv4_text(m->hdr.dst_addr),
                     m->hdr.dst_addr == RTE_BE32(0xffffffff)) +
               field("proto", std::to_string(s->hdr.next_proto_id), std::to_string(m->hdr.next_proto_id),
                     m->hdr.next_proto_id == 0xff);
    }
    case RTE_FLOW_ITEM_TYPE_IPV6: {
        const auto *s = static_cast<const rte_flow_item_ipv6 *>(it.spec);
        const auto *m = static_cast<const rte_flow_item_ipv6 *>(it.mask);
        return "ipv6" +
               field("dst", ipv6_text(s->hdr.dst_addr), ipv6_text(m->hdr.dst_addr), all_ones(m->hdr.dst_addr, 16)) +
               field("proto", std::to_string(s->hdr.proto), std::to_string(m->hdr.proto), m->hdr.proto == 0xff);
    }
    case RTE_FLOW_ITEM_TYPE_ICMP6: {
        const auto *s = static_cast<const rte_flow_item_icmp6 *>(it.spec);
        const auto *m = static_cast<const rte_flow_item_icmp6 *>(it.mask);
        return "icmp6" + field("type", std::to_string(s->type), std::to_string(m->type), m->type == 0xff);
    }
    case RTE_FLOW_ITEM_TYPE_TCP: return "tcp";
    case RTE_FLOW_ITEM_TYPE_UDP: return "udp";
    default: return "item" + std::to_string(int(it.type));
    }
}

std::string rss_types_text(uint64_t types)
{
    if (types == RTE_ETH_RSS_NONFRAG_IPV4_TCP) return "ipv4-tcp";
    if (types == RTE_ETH_RSS_NONFRAG_IPV6_TCP) return "ipv6-tcp";
    return "0x" + hex(reinterpret_cast<const uint8_t *>(&types), sizeof types);
}

} // namespace

std::string flow_command(uint16_t port, const Rule &r)
{
    const Built b(r);
    std::string s = "flow create " + std::to_string(port) + " ingress pattern";
    for (const rte_flow_item *it = b.items; it->type != RTE_FLOW_ITEM_TYPE_END; it++) s += " " + item_text(*it) + " /";
    s += " end actions ";
    if (b.actions[0].type == RTE_FLOW_ACTION_TYPE_QUEUE) {
        s += "queue index " + std::to_string(b.queue.index);
    } else {
        s += std::string("rss func ") + (b.rss.func == RTE_ETH_HASH_FUNCTION_TOEPLITZ ? "toeplitz" : "other") +
             " level " + std::to_string(b.rss.level) + " types " + rss_types_text(b.rss.types) + " end queues";
        for (uint32_t i = 0; i < b.rss.queue_num; i++) s += " " + std::to_string(b.rss.queue[i]);
        s += " end key " + hex(b.rss.key, b.rss.key_len) + " key_len " + std::to_string(b.rss.key_len);
    }
    return s + " / end";
}

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
