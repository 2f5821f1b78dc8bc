// ppe/src/flow_apply.h: flow_rules.h's rules made rte_flow calls (issue 29).
//
// Thin on purpose: which rules is flow_rules.h's; this file only builds the
// rte_flow items and actions of each rule, and says clearly what failed.
#pragma once

#include "flow_rules.h"

#include <rte_flow.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ppe::flow {

// Puts the port in rte_flow isolated mode. DPDK's rte_flow.h asks for it
// "as soon as possible after device initialization, ideally before the
// first call to rte_eth_dev_configure()" (a PMD may otherwise fail on
// settings made before it, and in isolated mode global RSS settings,
// promiscuous mode and MAC filters have no effect): dpdk.cc calls it
// before rte_eth_dev_configure. `what` names the port for messages.
bool enter_isolated_mode(uint16_t port, const std::string &what, std::string *error);

// Validates, then creates each rule (after rte_eth_dev_start). On a
// failure, destroys the rules it made, and *error names the rule, its
// pattern, rte_flow's message and what to do. `made` gets the handles.
bool apply_rules(uint16_t port, const std::vector<Rule> &rules, const std::string &what,
                 std::vector<rte_flow *> *made, std::string *error);

// Destroys the rules apply_rules made (before rte_eth_dev_stop).
void remove_rules(uint16_t port, std::vector<rte_flow *> *made);

// The rule as apply_rules builds it, in testpmd's flow syntax ("flow create
// 0 ingress pattern eth / ipv6 dst is 2001:2::1 proto is 6 / tcp / end
// actions rss ... / end"), read back from the rte_flow items and actions
// themselves: tests check the builder with it, and an operator can try a
// rule on a NIC by hand (testpmd's `flow validate`) before trusting
// flow_isolate on it.
std::string flow_command(uint16_t port, const Rule &r);

// The kernel interface holding `ipv4` (host byte order), "" if none: with
// flow_isolate the address is eta's, so the kernel should not hold it.
std::string kernel_holder(uint32_t ipv4);

} // namespace ppe::flow
