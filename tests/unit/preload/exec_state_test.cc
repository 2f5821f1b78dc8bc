// The exec handover (preload/src/exec_state.c): what a new image accepts
// from ETA_EXEC_STATE. A stale or forged handover is refused with a reason,
// never used.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

extern "C" {
#include "exec_state.h"
}

namespace {

constexpr int kMaxFd = 1 << 20;

struct Handover {
    eta_exec_head head{};
    std::vector<eta_exec_entry> entries;
    std::vector<eta_mcast_rec> mcast; // version 3: after the entries

    Handover()
    {
        head.magic = ETA_EXEC_MAGIC;
        head.version = ETA_EXEC_VERSION;
        head.entry_size = sizeof(eta_exec_entry);
        head.pid = int32_t(getpid());
        head.ctl_fd = 100;
        head.region_fd = 101;
        head.priv_fd = 102;
        head.doorbell_fd = 103;
        entries.push_back(socket_entry(5, 0x00100001, ETA_EXEC_LISTENING | ETA_EXEC_NONBLOCK));
        entries.push_back(socket_entry(6, 0x00100002, 0));
        eta_exec_entry st{};
        st.fd = -1;
        st.handle = 0x00100003;
        st.kind = ETA_EXEC_STASHED;
        st.listener_fd = 5;
        entries.push_back(st);
    }
    static eta_exec_entry socket_entry(int fd, uint32_t h, uint32_t flags)
    {
        eta_exec_entry e{};
        e.fd = fd;
        e.handle = h;
        e.kind = ETA_EXEC_SOCKET;
        e.listener_fd = -1;
        e.flags = flags;
        e.rcvtimeo_ms = e.sndtimeo_ms = -1;
        return e;
    }
    // The handover in a memfd; `trim` bytes cut off its end. esize: the
    // bytes of each entry written (version 1's are a prefix of version 2's).
    int write(size_t trim = 0, size_t esize = sizeof(eta_exec_entry))
    {
        head.n = uint32_t(entries.size());
        std::string bytes(reinterpret_cast<const char *>(&head), sizeof head);
        for (const eta_exec_entry &e : entries)
            bytes.append(reinterpret_cast<const char *>(&e), esize);
        for (const eta_mcast_rec &m : mcast)
            bytes.append(reinterpret_cast<const char *>(&m), sizeof m);
        bytes.resize(bytes.size() - trim);
        int fd = memfd_create(ETA_EXEC_MEMFD, MFD_CLOEXEC);
        EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
        return fd;
    }
    // Reads it back; the reason when refused ("" when accepted).
    std::string read(size_t trim = 0)
    {
        int fd = write(trim);
        eta_exec_head h{};
        eta_exec_entry *v = nullptr;
        eta_mcast_rec *m = nullptr;
        char why[200] = "";
        int rc = eta_exec_state_read(fd, getpid(), kMaxFd, &h, &v, &m, why, sizeof why);
        close(fd);
        if (rc == 0) {
            EXPECT_NE(v, nullptr);
            EXPECT_EQ(h.n, entries.size());
            EXPECT_EQ(std::memcmp(v, entries.data(), entries.size() * sizeof *v), 0);
            EXPECT_EQ(m != nullptr, !mcast.empty());
            if (m) {
                EXPECT_EQ(std::memcmp(m, mcast.data(), mcast.size() * sizeof *m), 0);
            }
            std::free(v);
            std::free(m);
            return "";
        }
        EXPECT_EQ(v, nullptr);
        EXPECT_EQ(m, nullptr);
        EXPECT_NE(why[0], 0) << "a refusal says why";
        return why;
    }
};

TEST(ExecState, AcceptsWhatTheShimWrites) { EXPECT_EQ(Handover().read(), ""); }

TEST(ExecState, RefusesStaleHandoverOfAnotherProcess)
{
    Handover h;
    h.head.pid = int32_t(getpid()) + 1;
    EXPECT_NE(h.read().find("stale"), std::string::npos);
}

TEST(ExecState, RefusesForeignOrDamagedFiles)
{
    {
        Handover h;
        h.head.magic ^= 1;
        EXPECT_NE(h.read(), "");
    }
    {
        Handover h;
        h.head.version = ETA_EXEC_VERSION + 1;
        EXPECT_NE(h.read(), "");
    }
    {
        Handover h;
        h.head.entry_size = sizeof(eta_exec_entry) + 4;
        EXPECT_NE(h.read(), "");
    }
    EXPECT_NE(Handover().read(1), "") << "truncated";
    EXPECT_NE(Handover().read(sizeof(eta_exec_entry) * 3), "") << "entries missing";
    {
        Handover h;
        h.entries.clear();
        EXPECT_NE(h.read(), "") << "no entries";
    }
    // Not a regular file at all.
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    eta_exec_head hd{};
    eta_exec_entry *v = nullptr;
    char why[200] = "";
    EXPECT_EQ(eta_exec_state_read(p[0], getpid(), kMaxFd, &hd, &v, nullptr, why, sizeof why), -1);
    EXPECT_EQ(eta_exec_state_read(-1, getpid(), kMaxFd, &hd, &v, nullptr, why, sizeof why), -1);
    close(p[0]);
    close(p[1]);
}

TEST(ExecState, RefusesBadDescriptorNumbers)
{
    {
        Handover h;
        h.head.ctl_fd = -1;
        EXPECT_NE(h.read(), "");
    }
    {
        Handover h;
        h.head.region_fd = kMaxFd;
        EXPECT_NE(h.read(), "");
    }
    {
        Handover h;
        h.head.priv_fd = h.head.region_fd;
        EXPECT_NE(h.read(), "") << "libdti's descriptors named twice";
    }
    {
        Handover h;
        h.entries[1].fd = 5;
        EXPECT_NE(h.read(), "") << "two sockets on one descriptor";
    }
    {
        Handover h;
        h.entries[1].fd = h.head.ctl_fd;
        EXPECT_NE(h.read(), "") << "a socket on libdti's descriptor";
    }
    {
        Handover h;
        h.entries[0].fd = -3;
        EXPECT_NE(h.read(), "");
    }
}

TEST(ExecState, RefusesBadEntries)
{
    {
        Handover h;
        h.entries[0].kind = 7;
        EXPECT_NE(h.read(), "");
    }
    {
        Handover h;
        h.entries[2].listener_fd = 6; // a connection, not a listener
        EXPECT_NE(h.read(), "") << "stash of a non-listener";
    }
    {
        Handover h;
        h.entries[2].listener_fd = 42; // nothing there
        EXPECT_NE(h.read(), "");
    }
    {
        Handover h;
        h.entries[1].pending_error = -5;
        EXPECT_NE(h.read(), "");
    }
    {
        Handover h;
        h.entries[1].rcvtimeo_ms = -2;
        EXPECT_NE(h.read(), "");
    }
    {
        Handover h;
        h.head.n = ETA_EXEC_MAX_ENTRIES + 1; // more than allowed (and than the file holds)
        int fd = memfd_create(ETA_EXEC_MEMFD, MFD_CLOEXEC);
        ASSERT_EQ(::write(fd, &h.head, sizeof h.head), ssize_t(sizeof h.head));
        eta_exec_head hd{};
        eta_exec_entry *v = nullptr;
        char why[200] = "";
        EXPECT_EQ(eta_exec_state_read(fd, getpid(), kMaxFd, &hd, &v, nullptr, why, sizeof why), -1);
        close(fd);
    }
}

// Version 2 (issue 31): an IPv6 listener's IPV6_V6ONLY and the PPE address
// it is bound to come through as written.
TEST(ExecState, CarriesIPv6ListenersV6OnlyAndAddress)
{
    Handover h;
    h.entries[0].flags |= ETA_EXEC_V6 | ETA_EXEC_V6ONLY | ETA_EXEC_LOCAL6;
    const uint8_t ip[16] = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    std::memcpy(h.entries[0].local6_ip, ip, sizeof ip);
    EXPECT_EQ(h.read(), ""); // read() compares every byte of every entry
    h.entries[0].flags &= ~ETA_EXEC_LOCAL6; // [::] IPv6 only: no address
    std::memset(h.entries[0].local6_ip, 0, sizeof ip);
    EXPECT_EQ(h.read(), "");
}

// A client whose connect's hold made its placeholder IPv6-only while the
// program had IPV6_V6ONLY 0: getsockopt's 0 comes through exec.
TEST(ExecState, CarriesTheV6OnlyTheProgramHad)
{
    Handover h;
    h.entries[1].flags |= ETA_EXEC_V6 | ETA_EXEC_V6ONLY | ETA_EXEC_LOCAL6 | ETA_EXEC_V6ONLY_READ0;
    h.entries[1].local6_ip[0] = 0x20;
    EXPECT_EQ(h.read(), "");
}

TEST(ExecState, RefusesIPv6FieldsOnAnIPv4Socket)
{
    for (uint32_t flag :
         {uint32_t(ETA_EXEC_V6ONLY), uint32_t(ETA_EXEC_LOCAL6), uint32_t(ETA_EXEC_V6ONLY_READ0), 0u}) {
        Handover h;
        h.entries[1].flags |= flag;
        if (!flag)
            h.entries[1].local6_ip[15] = 1; // an address without the flags
        EXPECT_NE(h.read().find("IPv6 fields on an IPv4 socket"), std::string::npos) << flag;
    }
}

// Version 3: a UDP socket's engine memberships (IPv4 any-source and
// source-specific, IPv6) and an IP_MULTICAST_IF the kernel did not take
// come through as written, after the entries, each after its entry's.
static eta_mcast_rec group4(uint32_t g, uint32_t src = 0)
{
    eta_mcast_rec m{};
    m.group4 = g;
    m.source4 = src;
    m.has_source = src != 0;
    m.if_addr4 = 0xc6120201; // 198.18.2.1
    return m;
}
static eta_mcast_rec group6()
{
    eta_mcast_rec m{};
    m.v6 = 1;
    m.group6[0] = 0xff;
    m.group6[1] = 0x0e;
    m.group6[15] = 7;
    m.ifindex = 3;
    return m;
}
static Handover with_memberships()
{
    Handover h;
    h.entries[1].flags |= ETA_EXEC_DGRAM | ETA_EXEC_V6 | ETA_EXEC_HYBRID | ETA_EXEC_MC_IF4_OURS;
    h.entries[1].mc_if4 = 0xc6120201;
    h.entries[1].n_mcast = 3;
    h.mcast = {group4(0xef120707), group4(0xe8010101, 0xc6120202), group6()};
    return h;
}

TEST(ExecState, CarriesMembershipsAndMulticastIf)
{
    EXPECT_EQ(with_memberships().read(), "");
    Handover two = with_memberships(); // and a second UDP socket's after the first's
    two.entries.push_back(Handover::socket_entry(7, 0x00100004, ETA_EXEC_DGRAM));
    two.entries.back().n_mcast = 1;
    two.mcast.push_back(group4(0xef000001));
    EXPECT_EQ(two.read(), "");
}

TEST(ExecState, RefusesMembershipsTheShimDoesNotMake)
{
    const std::vector<std::pair<const char *, void (*)(Handover &)>> cases = {
        {"multicast fields on a TCP socket", [](Handover &h) { h.entries[1].flags &= ~ETA_EXEC_DGRAM; }},
        {"multicast fields on a TCP socket", [](Handover &h) { h.entries[0].mc_if4 = 1; }},
        {"IP_MULTICAST_IF without an address", [](Handover &h) { h.entries[1].mc_if4 = 0; }},
        {"memberships (at most 40)",
         [](Handover &h) {
             h.entries[1].n_mcast = 41;
             h.mcast.resize(41, group4(0xef000001));
         }},
        {"do not fit its size", [](Handover &h) { h.mcast.pop_back(); }},
        {"do not fit its size", [](Handover &h) { h.mcast.push_back(group4(0xef000001)); }},
        {"not one the shim makes", [](Handover &h) { h.mcast[0].group4 = 0x0a000001; }}, // not a group
        {"not one the shim makes", [](Handover &h) { h.mcast[0].has_source = 2; }},
        {"not one the shim makes", [](Handover &h) { h.mcast[0].zero = 1; }},
        {"not one the shim makes", [](Handover &h) { h.mcast[0].source4 = 1; }}, // a source, not flagged
        {"not one the shim makes", [](Handover &h) { h.mcast[0].group6[3] = 1; }}, // the other family's
        {"not one the shim makes", [](Handover &h) { h.mcast[2].group6[0] = 0xfe; }},
        {"not one the shim makes", [](Handover &h) { h.mcast[2].ifindex = -1; }},
        {"not one the shim makes", [](Handover &h) { h.entries[1].flags &= ~ETA_EXEC_V6; }}, // IPv6 group, IPv4 socket
    };
    for (const auto &[want, spoil] : cases) {
        Handover h = with_memberships();
        spoil(h);
        std::string why = h.read();
        EXPECT_NE(why.find(want), std::string::npos) << "want '" << want << "', got '" << why << "'";
    }
}

// A UDP socket passed over SCM_RIGHTS: the sender's record of its
// memberships (eta_pass_mcast_read). What the shim writes is read back; a
// corrupt or forged one is refused with its reason.
struct PassRecord {
    eta_pass_mcast_head head{ETA_PASS_MCAST_MAGIC, ETA_PASS_MCAST_VERSION, sizeof(eta_mcast_rec),
                             ETA_PASS_MCAST_V6 | ETA_PASS_MCAST_IF4_OURS, 0xc6120201, 0};
    std::vector<eta_mcast_rec> recs{group4(0xef120709), group6()};
    std::string extra; // bytes appended
    std::string read(bool v6_socket = true)
    {
        head.n = head.n ? head.n : uint32_t(recs.size());
        std::string bytes(reinterpret_cast<const char *>(&head), sizeof head);
        for (const eta_mcast_rec &m : recs)
            bytes.append(reinterpret_cast<const char *>(&m), sizeof m);
        bytes += extra;
        int fd = memfd_create("pass-mcast", MFD_CLOEXEC);
        EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
        eta_pass_mcast_head h{};
        eta_mcast_rec out[ETA_EXEC_MCAST_MAX];
        char why[200] = "";
        int rc = eta_pass_mcast_read(fd, v6_socket, &h, out, why, sizeof why);
        close(fd);
        if (rc == 0) {
            EXPECT_EQ(std::memcmp(&h, &head, sizeof h), 0);
            EXPECT_EQ(std::memcmp(out, recs.data(), recs.size() * sizeof out[0]), 0);
            return "";
        }
        EXPECT_NE(why[0], 0);
        return why;
    }
};

TEST(PassMcast, ReadsWhatTheSenderWrites)
{
    EXPECT_EQ(PassRecord().read(), "");
    PassRecord none; // IP_MULTICAST_IF alone, an IPv4 socket
    none.recs.clear();
    none.head.flags = ETA_PASS_MCAST_IF4_OURS;
    EXPECT_EQ(none.read(false), "");
}

TEST(PassMcast, RefusesCorruptRecords)
{
    const std::vector<std::pair<const char *, void (*)(PassRecord &)>> cases = {
        {"not a record of this shim", [](PassRecord &p) { p.head.magic ^= 1; }},
        {"not a record of this shim", [](PassRecord &p) { p.head.version = 2; }},
        {"not a record of this shim", [](PassRecord &p) { p.head.rec_size = 44; }},
        {"do not fit its size", [](PassRecord &p) { p.extra = "x"; }},
        {"do not fit its size", [](PassRecord &p) { p.head.n = 3; }},
        {"do not fit its size", [](PassRecord &p) { p.recs.resize(41, group4(0xef000001)); }},
        {"do not fit the socket", [](PassRecord &p) { p.head.flags |= 4; }},
        {"do not fit the socket", [](PassRecord &p) { p.head.flags &= ~ETA_PASS_MCAST_V6; }},
        {"do not fit the socket", [](PassRecord &p) { p.head.mc_if4 = 0; }},
        {"not one the shim makes", [](PassRecord &p) { p.recs[1].group6[0] = 0x20; }},
        {"not one the shim makes", [](PassRecord &p) { p.recs[0].has_source = 7; }},
    };
    for (const auto &[want, spoil] : cases) {
        PassRecord p;
        spoil(p);
        std::string why = p.read();
        EXPECT_NE(why.find(want), std::string::npos) << "want '" << want << "', got '" << why << "'";
    }
    PassRecord v4; // an IPv6 group on an AF_INET socket
    v4.head.flags &= ~ETA_PASS_MCAST_V6;
    EXPECT_NE(v4.read(false).find("not one the shim makes"), std::string::npos);
    int fd = memfd_create("short", MFD_CLOEXEC); // empty
    eta_pass_mcast_head h{};
    eta_mcast_rec out[ETA_EXEC_MCAST_MAX];
    char why[200] = "";
    EXPECT_EQ(eta_pass_mcast_read(fd, 1, &h, out, why, sizeof why), -1);
    EXPECT_NE(std::string(why).find("too short"), std::string::npos) << why;
    close(fd);
}

// A version 2 handover (60-byte entries, no multicast fields) is read as
// before; version 3's flag in it is refused.
TEST(ExecState, ReadsVersion2)
{
    Handover h;
    h.head.version = 2;
    h.head.entry_size = ETA_EXEC_ENTRY_V2_SIZE;
    h.entries[1].flags |= ETA_EXEC_DGRAM | ETA_EXEC_V6 | ETA_EXEC_V6ONLY;
    int fd = h.write(0, ETA_EXEC_ENTRY_V2_SIZE);
    eta_exec_head hd{};
    eta_exec_entry *v = nullptr;
    char why[200] = "";
    ASSERT_EQ(eta_exec_state_read(fd, getpid(), kMaxFd, &hd, &v, nullptr, why, sizeof why), 0) << why;
    close(fd);
    ASSERT_EQ(hd.n, h.entries.size());
    for (size_t i = 0; i < h.entries.size(); i++)
        EXPECT_EQ(std::memcmp(&v[i], &h.entries[i], sizeof v[i]), 0) << "entry " << i;
    std::free(v);
    h.entries[1].flags |= ETA_EXEC_MC_IF4_OURS;
    fd = h.write(0, ETA_EXEC_ENTRY_V2_SIZE);
    v = nullptr;
    EXPECT_EQ(eta_exec_state_read(fd, getpid(), kMaxFd, &hd, &v, nullptr, why, sizeof why), -1);
    close(fd);
    EXPECT_NE(std::string(why).find("version 3 flags"), std::string::npos) << why;
}

// A handover an older shim wrote (version 1: 44-byte entries, no IPv6
// fields) is still adopted, its sockets as before (IPv6 fields zero).
TEST(ExecState, ReadsVersion1)
{
    Handover h;
    h.head.version = 1;
    h.head.entry_size = ETA_EXEC_ENTRY_V1_SIZE;
    h.entries[0].flags |= ETA_EXEC_V6;
    h.entries[0].backlog = 77;
    h.entries[1].local_ip = 0x0a090001;
    h.entries[1].local_port = 8080;
    h.entries[1].kernel_port = 8081;
    h.entries[1].rcvtimeo_ms = 250;
    int fd = h.write(0, ETA_EXEC_ENTRY_V1_SIZE);
    eta_exec_head hd{};
    eta_exec_entry *v = nullptr;
    char why[200] = "";
    ASSERT_EQ(eta_exec_state_read(fd, getpid(), kMaxFd, &hd, &v, nullptr, why, sizeof why), 0) << why;
    close(fd);
    EXPECT_EQ(hd.version, 1u);
    ASSERT_EQ(hd.n, h.entries.size());
    for (size_t i = 0; i < h.entries.size(); i++)
        EXPECT_EQ(std::memcmp(&v[i], &h.entries[i], sizeof v[i]), 0) << "entry " << i;
    std::free(v);
    // Version 1 with version 2's entry size, or version 2's flags: refused.
    h.head.entry_size = sizeof(eta_exec_entry);
    EXPECT_NE(h.read(0), "");
    Handover f;
    f.head.version = 1;
    f.head.entry_size = ETA_EXEC_ENTRY_V1_SIZE;
    f.entries[0].flags |= ETA_EXEC_V6 | ETA_EXEC_V6ONLY;
    fd = f.write(0, ETA_EXEC_ENTRY_V1_SIZE);
    v = nullptr;
    EXPECT_EQ(eta_exec_state_read(fd, getpid(), kMaxFd, &hd, &v, nullptr, why, sizeof why), -1);
    close(fd);
    EXPECT_NE(std::string(why).find("version 2 flags"), std::string::npos) << why;
    // Version 2's entry size must be version 2's.
    Handover g;
    g.head.entry_size = ETA_EXEC_ENTRY_V1_SIZE;
    EXPECT_NE(g.read().find("entries of 44 bytes"), std::string::npos);
}

// A newer shim's handover is refused with the versions this one reads.
TEST(ExecState, NamesTheVersionsItReads)
{
    Handover h;
    h.head.version = ETA_EXEC_VERSION + 1;
    EXPECT_NE(h.read().find("reads 1 to 3"), std::string::npos) << h.read();
}

} // namespace
