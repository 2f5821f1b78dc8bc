// The "starting" mark: <socket>.starting holds the pid of an eta-ppe that is
// starting (configuration read, EAL and ports coming up) and does not serve
// its control socket yet. eta-run waits for such a PPE instead of refusing a
// --require program (tools/eta-run, ppe/README.md "Starting").
#pragma once

#include <string>
#include <sys/types.h>

namespace ppe {

class StartingMark {
  public:
    StartingMark() = default;
    StartingMark(const StartingMark &) = delete;
    StartingMark &operator=(const StartingMark &) = delete;
    ~StartingMark() { remove(); }

    // Writes "<pid>\n" to <socket>.starting (atomically: a temporary file
    // renamed over it), replacing a mark left by a dead or other PPE. Called
    // again after daemonizing, with the daemon's pid. false: could not write
    // it (the error names the file); starting goes on without it.
    bool write(const std::string &socket, pid_t pid, std::string *error);
    // Removes the mark if it is still this process's (another eta-ppe that
    // started meanwhile may have replaced it). Safe to call more than once.
    void remove();

  private:
    std::string path_;
    pid_t pid_ = 0;
};

} // namespace ppe
