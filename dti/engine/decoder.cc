// The command decoder (decoder.h): its reasons and the option table.
// decode_command() itself is inline in decoder.h: it runs for every command
// and belongs inlined into the engine's command loop.
#include "decoder.h"

#include <cerrno>

namespace dti::engine {

const char *reject_text(Reject r)
{
    switch (r) {
    case Reject::kNone: return "ok";
    case Reject::kBadTag: return "tag is not a command queue index";
    case Reject::kBadSocket: return "handle names no slot of the region";
    case Reject::kUnknownOp: return "unknown opcode";
    case Reject::kBadPort: return "port out of range";
    case Reject::kBadShutdown: return "shutdown direction is none of RD, WR, RDWR";
    case Reject::kUnknownOption: return "unknown socket option";
    case Reject::kNoAcceptCount: return "accept of no connections";
    case Reject::kZeroLength: return "length is 0";
    case Reject::kBadPoolRange: return "offset + length is not inside the buffer pool";
    case Reject::kBadDigestFlags: return "digest flags other than TX, CHECK, CHAIN";
    case Reject::kBadAddress: return "posted address is 0 or address + length wraps";
    case Reject::kBadMcast: return "multicast request is neither join (0) nor leave (1), or its IPv6 group is not one";
    case Reject::kBadAddress6: return "IPv6 flags unknown, or (to connect to) a multicast or unspecified address";
    }
    return "unknown reason";
}

int32_t reject_result(Reject r)
{
    switch (r) {
    case Reject::kNone:
    case Reject::kBadTag: return 0;
    case Reject::kBadSocket: return -DTI_E_BAD_HANDLE;
    case Reject::kUnknownOp: return -EOPNOTSUPP;
    case Reject::kUnknownOption: return -ENOPROTOOPT;
    case Reject::kBadPort:
    case Reject::kBadShutdown:
    case Reject::kNoAcceptCount:
    case Reject::kZeroLength:
    case Reject::kBadPoolRange:
    case Reject::kBadDigestFlags:
    case Reject::kBadMcast:
    case Reject::kBadAddress6: return -EINVAL;
    case Reject::kBadAddress: return -EFAULT;
    }
    return -EINVAL;
}

} // namespace dti::engine
