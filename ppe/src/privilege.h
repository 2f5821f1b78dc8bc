// Who eta-ppe runs as (issue 34): not root unless told to, and with the
// capabilities its ports need, each missing one named before DPDK starts.
#pragma once

#include <cstdint>
#include <string>

#include "config.h"

namespace ppe {

// False with *error when eta-ppe runs as root (effective uid 0) and neither
// --allow-root (`allow_root`) nor ETA_PPE_ALLOW_ROOT=1 allows it.
bool refuse_root(bool allow_root, std::string *error);

// Capabilities (bit numbers of linux/capability.h) and what needs them.
struct CapNeed {
    int cap;
    const char *name;
    std::string why;
};

// The effective capability set (CapEff of /proc/self/status).
uint64_t effective_capabilities();

// What the configuration's ports need beyond an ordinary user (measured:
// privilege.cc), with `n_engines` engines (queue pairs per port): each
// missing capability named with what needs it, and a locked-memory limit
// too small for the af_packet rings. Root with a full set passes. *warning:
// something that may fail later (af_xdp's UMEM under a finite limit).
bool check_capabilities(const Config &c, uint32_t n_engines, std::string *error, std::string *warning);

// Gives the control socket and the files beside it (.stats, .cores, .net) to
// [control] group, so its members may attach. Nothing to do when the group is
// eta-ppe's own.
bool apply_socket_group(const Config &c, std::string *error);

// Whether user `uid` can connect to a socket file of `mode` owned by
// `owner`:`group` (write permission, as the kernel checks connect()); root
// always can. When not, *why says who can.
bool user_reaches_socket(uint32_t uid, uint32_t mode, uint32_t owner, uint32_t group, std::string *why);

} // namespace ppe
