// ppe/src/net_file.h: the text of `<socket>.net`, the network applications
// reach through the PPE, which the shim reads (preload/src/decide.h parses
// it; ppe/README.md's table of published files says what each line means).
#pragma once

#include "config.h"

#include <string>

namespace ppe {

// The first port's addresses and routes (application sockets live on its
// stack): "port A.B.C.D/P", "route D/P via G" (its gateway as
// 0.0.0.0/0), "port6 ADDR/P", "route6 D/P via G" (gateway6 as ::/0; issue
// 31), then the "self ..." lines.
std::string net_file_text(const Config &c);

} // namespace ppe
