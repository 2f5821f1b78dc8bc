// ppe/src/system.h: what the config asks of the machine — engine cores
// (hwloc), devices, permissions, hugepages — checked before anything starts.
#pragma once

#include "config.h"

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ppe {

// One engine core as resolved on this machine.
struct EngineCore {
    int pu = -1;            // OS index of the processing unit the engine thread runs on
    std::vector<int> core_pus; // OS indexes of every PU of that core (all kept from applications)
    int numa_node = -1;     // OS index of its NUMA node, -1 when unknown
    std::string spec;       // the config entry it came from
};

// Machine facts the checks depend on; tests fill them by hand.
struct Machine {
    struct Core {
        std::vector<int> pus; // OS indexes
        int numa_node = -1;
    };
    std::vector<Core> cores;  // in hwloc logical order
    std::vector<int> pus;     // every allowed PU, OS indexes, in hwloc logical order
    int boot_pu = 0;          // the PU the OS boots on (its core is avoided by auto)

    static Machine detect();  // through hwloc
    // The same from a topology hwloc exported as XML (`lstopo t.xml`): tests
    // give synthetic machines (SMT siblings) this way. false + *error when
    // hwloc cannot load it.
    static bool from_xml(const std::string &xml, Machine *out, std::string *error);
};

// Resolves engine.cores. `nic_numa` is the NUMA node of the first port's
// device (-1: unknown). Fails on nonexistent or overlapping cores, on two
// engines on hardware threads of one core (unless engine.allow_smt), or when
// the engines would leave no PU for the control thread and applications.
// auto:N takes N distinct cores, those on the NIC's node first; with
// allow_smt, once every core has an engine, their sibling PUs next.
bool resolve_cores(const Config &c, const Machine &m, int nic_numa, std::vector<EngineCore> *out,
                   std::string *error);

// The NUMA node of a port's device, -1 when it has none (virtual devices).
int device_numa_node(const std::string &device);

// Checks devices, permissions, the control socket's directory and
// hugepages. Creates the socket's directory when missing. `use_huge` gets
// the memory decision for memory = "auto".
bool check_environment(const Config &c, bool *use_huge, std::string *error);

// ---- who holds a control socket -------------------------------------------
// A PPE killed with SIGKILL keeps its control socket listening while the
// kernel tears down its (large) mappings, and a listener can outlive its
// process a little longer (io_uring's deferred teardown). eta-ppe starting
// then must tell that dying holder from a live one.

enum class HolderState {
    kFree,    // nobody listens on the path (no file, or a stale one)
    kServing, // a live process listens: refuse at once
    kStopped, // the listener is stopped (SIGSTOP, a debugger): alive, refuse at once
    kExiting, // the listener is a zombie, exiting, has SIGKILL pending, or is gone: wait for it
    kUnknown, // someone listens, but not from this PID namespace (no pid): refuse
};

struct SocketHolder {
    HolderState state = HolderState::kFree;
    pid_t pid = 0;    // the process that called listen() (SO_PEERCRED), 0 when unknown
    std::string name; // its /proc/PID/comm ("eta-ppe"), empty when it is gone
};

// The state of process `pid` as /proc says (proc_root: "/proc"; tests give a
// directory of hand-made PID/stat and PID/status files): kExiting when its
// entry is gone, it is a zombie (Z, X), its flags carry PF_EXITING or
// SIGKILL is pending for it; kStopped for T or t; kServing otherwise.
HolderState process_state(pid_t pid, const std::string &proc_root = "/proc");

// Connects to the AF_UNIX SOCK_SEQPACKET socket at `path` (what eta-ppe
// listens with) and, when someone answers, finds the listener through
// SO_PEERCRED and classifies it with process_state.
SocketHolder probe_socket_holder(const std::string &path, const std::string &proc_root = "/proc");

// true when `path` is free for a new eta-ppe. A holder that is exiting is
// waited for, at most `max_wait` (note() is told once, with a sentence
// naming it and its pid, when the wait begins); a live, stopped or unknown
// holder is refused at once. false + *error (naming the holder's pid, what
// to do) otherwise.
bool wait_for_socket_free(const std::string &path, std::chrono::milliseconds max_wait,
                          const std::function<void(const std::string &)> &note, std::string *error,
                          const std::string &proc_root = "/proc");

// Free hugepage memory in MiB (all sizes), from /proc/meminfo and sysfs.
uint64_t free_hugepage_mb();

// Pins the calling thread to one PU and binds its memory to the PU's node.
bool pin_thread(int pu, std::string *error);

// One line for --check: where the engines are (cores, SMT, NUMA node vs the NIC's).
std::string describe_placement(const Config &c, const Machine &m, int nic_numa, const std::vector<EngineCore> &engines);

// "1,3-4" style list of OS PU indexes.
std::string format_cpu_list(std::vector<int> cpus);

} // namespace ppe
