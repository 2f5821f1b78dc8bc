// The command decoder (decoder.h): state-free checks of one command.
#include "decoder.h"

#include <algorithm>
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
    case Reject::kBadDigestFlags: return -EINVAL;
    }
    return -EINVAL;
}

bool transport_option_of(uint32_t opt, Option *out)
{
    switch (opt) {
    case DTI_SO_NODELAY: *out = Option::kNoDelay; return true;
    case DTI_SO_CORK: *out = Option::kCork; return true;
    case DTI_SO_KEEPALIVE: *out = Option::kKeepAlive; return true;
    case DTI_SO_KEEPIDLE: *out = Option::kKeepIdleSec; return true;
    case DTI_SO_KEEPINTVL: *out = Option::kKeepIntvlSec; return true;
    case DTI_SO_KEEPCNT: *out = Option::kKeepCnt; return true;
    case DTI_SO_MAXSEG: *out = Option::kMaxSeg; return true;
    case DTI_SO_USER_TIMEOUT: *out = Option::kUserTimeoutMs; return true;
    case DTI_SO_LINGER: *out = Option::kLingerSec; return true;
    case DTI_SO_REUSEADDR: *out = Option::kReuseAddr; return true;
    case DTI_SO_REUSEPORT: *out = Option::kReusePort; return true;
    case DTI_SO_TOS: *out = Option::kTos; return true;
    case DTI_SO_RCVLOWAT: *out = Option::kRcvLowat; return true;
    default: return false;
    }
}

namespace {

// [offset, offset + length) inside the pool, written so that no sum can wrap.
bool in_pool(const CommandBounds &b, uint64_t offset, uint32_t length)
{
    return offset >= b.pool_offset && offset - b.pool_offset <= b.pool_size &&
           length <= b.pool_size - (offset - b.pool_offset);
}

// The checks of the arguments of a command that names a socket.
Reject check_arguments(const dti_cmd &raw, const CommandBounds &b, Command *c)
{
    switch (raw.op) {
    case DTI_OP_BIND:
        if (raw.arg1 > 0xffff)
            return Reject::kBadPort;
        c->address = Endpoint{raw.arg0, uint16_t(raw.arg1)};
        return Reject::kNone;
    case DTI_OP_CONNECT:
        if (raw.arg1 > 0xffff || raw.arg1 == 0)
            return Reject::kBadPort;
        c->address = Endpoint{raw.arg0, uint16_t(raw.arg1)};
        return Reject::kNone;
    case DTI_OP_LISTEN:
        c->count = std::min<uint32_t>(raw.arg0, 65535);
        return Reject::kNone;
    case DTI_OP_ACCEPT:
        c->count = std::min<uint32_t>(raw.arg0, DTI_ACCEPT_MAX);
        c->flags = raw.arg1;
        return c->count == 0 ? Reject::kNoAcceptCount : Reject::kNone;
    case DTI_OP_SHUTDOWN:
        c->shut_rd = raw.arg0 == DTI_SHUT_RD || raw.arg0 == DTI_SHUT_RDWR;
        c->shut_wr = raw.arg0 == DTI_SHUT_WR || raw.arg0 == DTI_SHUT_RDWR;
        return c->shut_rd || c->shut_wr ? Reject::kNone : Reject::kBadShutdown;
    case DTI_OP_CLOSE:
    case DTI_OP_ABORT:
        return Reject::kNone;
    case DTI_OP_SETSOCKOPT:
    case DTI_OP_GETSOCKOPT:
        c->option = raw.arg0;
        c->value = raw.value;
        // Ring sizes are fixed per region: the engine answers those itself.
        c->ring_option = raw.arg0 == DTI_SO_RCVBUF || raw.arg0 == DTI_SO_SNDBUF;
        if (!c->ring_option && !transport_option_of(raw.arg0, &c->transport_option))
            return Reject::kUnknownOption;
        return Reject::kNone;
    case DTI_OP_WATCH:
        c->flags = raw.arg0 & (DTI_POLLIN | DTI_POLLOUT | DTI_POLLERR | DTI_POLLHUP | DTI_POLLRDHUP);
        return Reject::kNone;
    case DTI_OP_RECV_INTO:
        c->length = raw.arg0;
        c->offset = raw.offset;
        if (!in_pool(b, raw.offset, raw.arg0))
            return Reject::kBadPoolRange;
        return raw.arg0 == 0 ? Reject::kZeroLength : Reject::kNone;
    case DTI_OP_SEND_FROM:
        c->length = raw.arg0; // 0 is a send of nothing: completes with 0
        c->offset = raw.offset;
        c->flags = raw.arg1 & DTI_SEND_MORE;
        return in_pool(b, raw.offset, raw.arg0) ? Reject::kNone : Reject::kBadPoolRange;
    case DTI_OP_SEND:
    case DTI_OP_RECV_RELEASE:
        c->length = raw.arg0;
        c->flags = raw.op == DTI_OP_SEND ? raw.arg1 & DTI_SEND_MORE : 0;
        return raw.arg0 == 0 ? Reject::kZeroLength : Reject::kNone;
    case DTI_OP_DIGEST:
        if (raw.arg0 & ~uint32_t(DTI_DIGEST_TX | DTI_DIGEST_CHECK | DTI_DIGEST_CHAIN))
            return Reject::kBadDigestFlags;
        c->flags = raw.arg0;
        c->length = raw.arg1;
        c->offset = uint32_t(raw.offset);
        c->value = uint32_t(raw.value);
        return Reject::kNone;
    default:
        return Reject::kUnknownOp;
    }
}

} // namespace

Decoded decode_command(const dti_cmd &raw, const CommandBounds &bounds)
{
    Decoded d;
    Command &c = d.cmd;
    c.op = raw.op;
    c.tag = raw.tag;
    c.handle = raw.sock;
    // SEND and RECV_RELEASE are the data path's unsignaled commands: no
    // completion, so their tag means nothing.
    c.signaled = raw.op != DTI_OP_SEND && raw.op != DTI_OP_RECV_RELEASE;
    if (c.signaled && raw.tag >= bounds.cmdq_entries) {
        d.reject = Reject::kBadTag; // no valid tag to answer with: the app's own bookkeeping is corrupt
        return d;
    }
    if (raw.op == DTI_OP_NOP || raw.op == DTI_OP_SOCKET)
        return d; // they name no socket
    c.slot = raw.sock & DTI_SLOT_MASK;
    c.gen = raw.sock >> DTI_SLOT_BITS;
    if (c.slot >= bounds.max_sockets || c.gen == 0) {
        d.reject = Reject::kBadSocket;
        return d;
    }
    d.reject = check_arguments(raw, bounds, &c);
    return d;
}

} // namespace dti::engine
