#include "starting.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace ppe {

bool StartingMark::write(const std::string &socket, pid_t pid, std::string *error)
{
    path_ = socket + ".starting";
    pid_ = pid;
    const std::string tmp = path_ + "." + std::to_string(pid) + ".tmp";
    const std::string text = std::to_string(pid) + "\n";
    ::unlink(tmp.c_str());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    if (fd >= 0 && ::close(fd) != 0) ok = false;
    if (ok && ::rename(tmp.c_str(), path_.c_str()) != 0) ok = false;
    if (!ok) {
        *error = "cannot write " + path_ + ": " + std::strerror(errno);
        ::unlink(tmp.c_str());
        path_.clear();
        return false;
    }
    return true;
}

void StartingMark::remove()
{
    if (path_.empty()) return;
    char buf[32] = {};
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = ::read(fd, buf, sizeof buf - 1);
        ::close(fd);
        if (n > 0 && std::strtol(buf, nullptr, 10) == long(pid_)) ::unlink(path_.c_str());
    }
    path_.clear();
}

} // namespace ppe
