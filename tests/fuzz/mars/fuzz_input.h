// tests/fuzz/mars/fuzz_input.h: the fuzz entry for the mars input path, shared
// by the libFuzzer target, the plain corpus replayer and the seed generator.
//
// Each input drives a stack in its initial state (fixed secret, virtual time;
// the stack of the previous input, reset: Stack::reset, see discard_worlds;
// the world it runs in is fuzz_world.h's FuzzWorld) that has a
// listener on port 80 (small SYN queue, so SYN cookies come into play), one
// established connection (peer port 40000 -> 80, every option negotiated)
// one connection in SYN-SENT (to peer port 9000) and a UDP socket on port
// 53 that joined 239.1.1.1 (fuzz_world.h); and the same three TCP sockets
// over IPv6 (issue 31) between the stack's 2001:2::1 (StackConfig::addr6)
// and the peer's 2001:2::2: a listener on [2001:2::1]:80, a connection
// from [2001:2::2]:40000 with every option, one in SYN-SENT to
// [2001:2::2]:9000, and one from [2001:2::2]:40001 in TIME-WAIT (the stack
// closed first; 2 s, so an input's final timers end it). The input is a
// list of records:
//
//   u8 ctl | u16 len (little endian) | len bytes of frame (cut at the input's end)
//
// ctl bits (they let the fuzzer reach deep states instead of dying on checksums):
//   0x01 recompute the IPv4 header checksum     0x02 recompute the TCP/ICMP/UDP checksum
//   0x04 mark the frame kRxIpCsumGood|kRxL4CsumGood (as a NIC with rx offload)
//   0x08 aim at the established connection: addresses and ports rewritten,
//        seq/ack taken as offsets from the connection's current rcv.nxt/snd.nxt
//   0x10 aim at the SYN-SENT connection (ack offset from its ISS + 1)
//   0x20 aim at the listener (addresses and destination port rewritten)
//   0x40 advance virtual time by 250 ms before the frame (fires timers)
//   0x80 after the frame, act as the application: accept, read all, send 3000 bytes
//        (and on the UDP socket: read its datagrams, send one)
//
// IPv6 (issue 31): on a frame whose EtherType is 0x86dd the aim bits pick
// the IPv6 socket of the same kind instead: the rewrite puts the peer's and
// the stack's IPv6 addresses into the IPv6 header (source at 22, destination
// at 38) and the ports and seq/ack into a TCP header taken to follow it
// directly (at 54, as the IPv4 rewrite takes it at 14 + IHL; the listener's
// source port is read there too); 0x02 recomputes the TCP checksum over the
// IPv6 pseudo-header (sim::fix_l4_checksum, TCP only), and 0x01, with an aim
// bit, sets the payload length to the frame's bytes after the header (IPv6
// has no header checksum). Without an aim bit an IPv6 frame is left as it
// was before (0x01 then writes IPv4's checksum field, as always). Inputs
// made before this (every record aimed at IPv4: no checked-in input had an
// aim bit on an IPv6 frame) mean what they meant.
//
// Odd-length inputs run the strand pipeline with frames in bursts (where
// coalescing runs), even ones run each frame to completion (run_input).
//
// Invariants checked after each input (abort() on violation, so libFuzzer
// reports it): every frame and every ring is returned once the stack is
// reset (as when it is destroyed: the same release path), the anonymous pool
// never exceeds its size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mars::fuzz {

enum Ctl : uint8_t {
    kFixIpCsum = 0x01, kFixL4Csum = 0x02, kMarkCsumGood = 0x04, kAimEstablished = 0x08, kAimSynSent = 0x10,
    kAimListener = 0x20, kAdvanceTime = 0x40, kAppActs = 0x80,
};

// One input (libFuzzer's entry): no digest is computed.
int run_one(const uint8_t *data, size_t size);

// run_one, returning a digest of what the input made the stack do (every
// byte it transmitted, and its counters at the end). One input gives one
// digest whether it runs first or after any others: the world is reused
// across inputs (see below) and must start each one in the same state.
uint64_t run_one_digest(const uint8_t *data, size_t size);

class FuzzWorld;
// run_one, then look(world) once the input ran (its final timers too),
// before the stack is reset: for tests of what inputs make of the world's
// sockets (reach6_test.cc).
void run_one_then(const uint8_t *data, size_t size, const std::function<void(FuzzWorld &)> &look);

// The worlds (one per receive path) are built on first use and reset, not
// rebuilt, for every later input. This drops them: the next input builds
// a fresh one (the replayer uses it to check determinism).
void discard_worlds();

// Appends one record to an input.
void add_record(std::vector<uint8_t> *input, uint8_t ctl, const std::vector<uint8_t> &frame);

// The seed corpus: named inputs covering every frame class the stack handles
// (IPv6: ip6-*, to the stack's link-local address; ip6-tcp-est-*,
// ip6-tcp-listener-*, ip6-tcp-synsent-*: TCP over IPv6 to the world's IPv6
// sockets, aimed as above; ip6-tcp-timewait-*: listener-aimed from port
// 40001 with the TIME-WAIT connection's numbers; checked by reach6_test.cc) and every malformed
// class (see tests/fuzz/mars/corpus/).
std::vector<std::pair<std::string, std::vector<uint8_t>>> seed_inputs();

} // namespace mars::fuzz
