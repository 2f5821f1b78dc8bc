/* preload/src/port_ifindex.h: the kernel interface that names the PPE's port
 * (on a port shared with the kernel, the tap interface eta-ppe makes for it,
 * holding the port's MAC and addresses: what a program sees in `ip link`).
 * Looked up once per process (getifaddrs), never on the data path: UDP's
 * IP_PKTINFO/IPV6_PKTINFO and a link-local sender's scope (udp.c), multicast
 * interfaces (udp_mcast.c), and link-local destinations (issue 31: a
 * connect or send to fe80::/10 with this scope id is the engine's). */
#ifndef ETA_PRELOAD_PORT_IFINDEX_H
#define ETA_PRELOAD_PORT_IFINDEX_H

#include <stdbool.h>
#include <stdint.h>

/* Looks the interfaces up, once (later calls return at once). */
void eta_ifindex_lookup(void);
/* The interface holding the PPE's IPv4 address ip (host order), else 0;
 * 0 also before eta_ifindex_lookup ran (no lookup here: data path). */
int eta_ifindex_of(uint32_t ip);
/* The interface holding the PPE's IPv6 address ip (network order), and for
 * a link-local ip the PPE port's interface (the first port6 address's),
 * else 0; as eta_ifindex_of, no lookup. */
int eta_ifindex6_of(const uint8_t ip[16]);
/* The PPE port's interface for link-local addresses (the one holding its
 * first port6 address: a shared port's tap), looked up on first use; 0 where
 * no kernel interface holds it (a port not shared). When link6 is not NULL,
 * the link-local address that interface holds goes there (the kernel makes
 * it from the MAC, as MARS does: the PPE's link-local source); false when
 * there is none. */
int eta_port_ifindex6(uint8_t link6[16], bool *has_link6);

struct eta_net;
/* At attach, on a shared port with IPv6 addresses only (one getifaddrs per
 * process): n's link6_ifindex and link6 (decide.h), from the lookup above,
 * which reads the global eta_net: n is it, or a new description copied
 * into it (the interface a process looked up stays its). */
void eta_net_fill_link6(struct eta_net *n);

#endif
