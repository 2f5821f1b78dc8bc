// ppe/src/system.h: what the config asks of the machine — engine cores
// (hwloc), devices, permissions, hugepages — checked before anything starts.
#pragma once

#include "config.h"

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

// Free hugepage memory in MiB (all sizes), from /proc/meminfo and sysfs.
uint64_t free_hugepage_mb();

// Pins the calling thread to one PU and binds its memory to the PU's node.
bool pin_thread(int pu, std::string *error);

// One line for --check: where the engines are (cores, SMT, NUMA node vs the NIC's).
std::string describe_placement(const Config &c, const Machine &m, int nic_numa, const std::vector<EngineCore> &engines);

// "1,3-4" style list of OS PU indexes.
std::string format_cpu_list(std::vector<int> cpus);

} // namespace ppe
