// tests/fuzz/mars/fuzz_input.h: the fuzz entry for the mars input path, shared
// by the libFuzzer target, the plain corpus replayer and the seed generator.
//
// Each input drives a stack in its initial state (fixed secret, virtual time;
// the stack of the previous input, reset: Stack::reset, see discard_worlds;
// the world it runs in is fuzz_world.h's FuzzWorld) that has a
// listener on port 80 (small SYN queue, so SYN cookies come into play), one
// established connection (peer port 40000 -> 80, every option negotiated)
// one connection in SYN-SENT (to peer port 9000) and a UDP socket on port
// 53 that joined 239.1.1.1 (fuzz_world.h). The input is a list of
// records:
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
// Invariants checked after each input (abort() on violation, so libFuzzer
// reports it): every frame and every ring is returned once the stack is
// reset (as when it is destroyed: the same release path), the anonymous pool
// never exceeds its size.
#pragma once

#include <cstddef>
#include <cstdint>
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

// The worlds (one per receive path) are built on first use and reset, not
// rebuilt, for every later input. This drops them: the next input builds
// a fresh one (the replayer uses it to check determinism).
void discard_worlds();

// Appends one record to an input.
void add_record(std::vector<uint8_t> *input, uint8_t ctl, const std::vector<uint8_t> &frame);

// The seed corpus: named inputs covering every frame class the stack handles
// (IPv6: ip6-*, to the stack's link-local address, tentative there: no DAD
// runs in the fuzz world) and every malformed class (see tests/fuzz/mars/corpus/).
std::vector<std::pair<std::string, std::vector<uint8_t>>> seed_inputs();

} // namespace mars::fuzz
