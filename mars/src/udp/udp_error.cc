// udp/udp_error.cc: ICMP and ICMPv6 errors about datagrams our UDP sockets
// sent (issue 31), as Linux's __udp4_lib_err and __udp6_lib_err handle them
// for a socket without IP_RECVERR (which the shim refuses: no error queue).
//
// The error names the datagram it is about (its quoted header: our address
// and port, the destination's); the socket is the one a reply from that
// destination would reach (match(), a connected socket only from its peer).
// A hard error (Linux's icmp_err_convert "fatal": port or protocol
// unreachable, a parameter problem, a datagram too big for the path) on a
// connected socket becomes its pending error, reported once by the reader
// (kEvError; UdpInfo::error and ::errors). Soft errors (net or host
// unreachable, time exceeded) and errors for unconnected sockets change
// nothing: Linux reports those only through IP_RECVERR's error queue.
// Nothing here sends; the frame was counted and handed on (sharing) by the
// IP layer.
#include "udp/udp.h"

#include "ip/ipv6_wire.h"

#include <cerrno>

namespace mars::udp {

namespace {

// Linux's icmp_err_convert (net/ipv4/icmp.c) for destination unreachable:
// the errno and whether it is hard, by code (RFC 792, RFC 1122 3.2.2.1,
// RFC 1812 5.2.7.1).
struct Convert {
    int err;
    bool hard;
};
constexpr Convert kUnreach4[16] = {
    {ENETUNREACH, false},  // 0 net unreachable
    {EHOSTUNREACH, false}, // 1 host unreachable
    {ENOPROTOOPT, true},   // 2 protocol unreachable
    {ECONNREFUSED, true},  // 3 port unreachable
    {EMSGSIZE, true},      // 4 fragmentation needed (IP_PMTUDISC_WANT, Linux's default for UDP: hard)
    {EOPNOTSUPP, false},   // 5 source route failed
    {ENETUNREACH, true},   // 6 destination network unknown
    {EHOSTDOWN, true},     // 7 destination host unknown
    {ENONET, true},        // 8 source host isolated
    {ENETUNREACH, true},   // 9 network administratively prohibited
    {EHOSTUNREACH, true},  // 10 host administratively prohibited
    {ENETUNREACH, false},  // 11 network unreachable for TOS
    {EHOSTUNREACH, false}, // 12 host unreachable for TOS
    {EHOSTUNREACH, true},  // 13 communication administratively prohibited
    {EHOSTUNREACH, true},  // 14 host precedence violation
    {EHOSTUNREACH, true},  // 15 precedence cutoff in effect
};

// Linux's icmpv6_err_convert (net/ipv6/icmp.c) for destination unreachable
// (RFC 4443 3.1), by code.
constexpr Convert kUnreach6[7] = {
    {ENETUNREACH, false},  // 0 no route to destination
    {EACCES, true},        // 1 administratively prohibited
    {EHOSTUNREACH, false}, // 2 beyond the scope of the source address
    {EHOSTUNREACH, false}, // 3 address unreachable
    {ECONNREFUSED, true},  // 4 port unreachable
    {EACCES, true},        // 5 source address failed ingress/egress policy
    {EACCES, true},        // 6 reject route to destination
};

} // namespace

void UdpLayer::take_error(const Tuple &t, int err, bool hard)
{
    UdpSock *s = match(t);
    if (!s || !hard || !s->remote.port) return;
    s->error = err;
    s->errors++;
    raise(*s, kEvError);
}

void UdpLayer::udp_icmp_error(const IcmpUdpError &e)
{
    Convert c{EHOSTUNREACH, false};
    if (e.type == wire::kIcmpParamProblem)
        c = {EPROTO, true};
    else if (e.type == wire::kIcmpUnreach && e.code < 16)
        c = kUnreach4[e.code];
    else
        return; // another code: Linux's default (EHOSTUNREACH) is soft
    take_error(Tuple{false, e.remote_ip, e.local_ip, nullptr, nullptr, e.remote_port, e.local_port}, c.err, c.hard);
}

void UdpLayer::udp6_icmp_error(const Icmp6Error &e)
{
    Convert c{EPROTO, false};
    switch (e.type) {
    case wire::kIcmp6Unreach:
        if (e.code >= 7) return; // Linux: EPROTO, soft
        c = kUnreach6[e.code];
        break;
    case wire::kIcmp6PacketTooBig: // the path MTU is lowered (icmp6.cc); IPV6_PMTUDISC_WANT: hard
        c = {EMSGSIZE, true};
        break;
    case wire::kIcmp6ParamProblem:
        c = {EPROTO, true};
        break;
    default: // time exceeded: EHOSTUNREACH, soft
        return;
    }
    take_error(Tuple{true, 0, 0, e.remote.b, e.local.b, e.remote_port, e.local_port}, c.err, c.hard);
}

} // namespace mars::udp
