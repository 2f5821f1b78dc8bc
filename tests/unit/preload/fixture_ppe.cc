// TEST FIXTURE, not product code: runs dti's in-process loopback engine
// (tests/unit/dti/fixture) behind a control socket, so programs under the
// shim can attach and run accelerated sockets without a PPE, a NIC or root.
// Connections go to listeners inside the fixture by port.
//
//   preload_fixture_ppe SOCKET_PATH [--busy-poll] [--engines N]
// --busy-poll: the engine never sleeps (as the PPE on a dedicated core under
// load); by default it sleeps when idle, as the PPE's adaptive policy does.
// --engines N: N engines, each owning the flows dti_flow_owner() gives it
// (as eta-ppe with N `[engine] cores`).
// SIGUSR2 toggles lost wakeups: while on, the engine posts events but never
// wakes a sleeping program (a lost wakeup, every time; the shim's watchdog
// must recover). Off at start; <SOCKET_PATH>.lose-wakeups exists while on.
// SIGRTMIN toggles lost POLLOUTs: while on, the engine is never told that
// send space came (only a new watch finds it). Off at start;
// <SOCKET_PATH>.lose-writable exists while on.
// Prints "READY" when it serves. SIGTERM/SIGINT: graceful stop and exit 0.
// SIGUSR1: abrupt stop (as a PPE crash), then wait for SIGTERM.
#include "loopback.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char **argv)
{
    bool busy_poll = false, usage = argc < 2;
    uint32_t engines = 1;
    for (int i = 2; i < argc && !usage; i++) {
        std::string a = argv[i];
        if (a == "--busy-poll")
            busy_poll = true;
        else if (a == "--engines" && i + 1 < argc && std::atoi(argv[i + 1]) >= 1 && std::atoi(argv[i + 1]) <= 8)
            engines = uint32_t(std::atoi(argv[++i]));
        else
            usage = true;
    }
    if (usage) {
        std::fprintf(stderr, "usage: %s SOCKET_PATH [--busy-poll] [--engines N (1..8)]\n", argv[0]);
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, SIGRTMIN);
    pthread_sigmask(SIG_BLOCK, &set, nullptr); // the engine thread inherits it
    dti::fixture::TestPpe::Options opt;
    opt.limits.max_sockets = 4096;
    opt.busy_poll = busy_poll;
    opt.engines = engines;
    dti::fixture::TestPpe ppe(argv[1], opt);
    std::string why;
    if (!ppe.start(&why)) {
        std::fprintf(stderr, "fixture PPE: %s\n", why.c_str());
        return 1;
    }
    std::printf("READY\n");
    std::fflush(stdout);
    bool lose = false, lose_writable = false;
    for (;;) {
        int sig = 0;
        sigwait(&set, &sig);
        if (sig == SIGUSR1) {
            ppe.crash();
            continue;
        }
        if (sig == SIGRTMIN) {
            // <SOCKET_PATH>.lose-writable: as .lose-wakeups below.
            lose_writable = !lose_writable;
            ppe.set_lose_writable(lose_writable);
            const std::string marker = std::string(argv[1]) + ".lose-writable";
            if (lose_writable)
                std::fclose(std::fopen(marker.c_str(), "w"));
            else
                std::remove(marker.c_str());
            continue;
        }
        if (sig == SIGUSR2) {
            // <SOCKET_PATH>.lose-wakeups exists while they are lost: made
            // after the switch is on, removed after it is off.
            lose = !lose;
            ppe.set_lose_wakeups(lose);
            const std::string marker = std::string(argv[1]) + ".lose-wakeups";
            if (lose)
                std::fclose(std::fopen(marker.c_str(), "w"));
            else
                std::remove(marker.c_str());
            continue;
        }
        ppe.stop();
        return 0;
    }
}
