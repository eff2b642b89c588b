// VipQueryViEndpoints: the two ends of a connection as the kernel knows them
// (tcp: the socket's addresses; shm: the peer process's credentials).
#include "support.h"

#include <arpa/inet.h>
#include <cstring>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

uint16_t port_of(const sockaddr_storage &ss) {
    if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in &>(ss).sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(reinterpret_cast<const sockaddr_in6 &>(ss).sin6_port);
    return 0;
}

bool same_sockaddr(const sockaddr_storage &a, const sockaddr_storage &b) {
    if (a.ss_family != b.ss_family) return false;
    if (a.ss_family == AF_INET) {
        auto &x = reinterpret_cast<const sockaddr_in &>(a);
        auto &y = reinterpret_cast<const sockaddr_in &>(b);
        return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
    }
    auto &x = reinterpret_cast<const sockaddr_in6 &>(a);
    auto &y = reinterpret_cast<const sockaddr_in6 &>(b);
    return x.sin6_port == y.sin6_port && memcmp(&x.sin6_addr, &y.sin6_addr, 16) == 0;
}

bool is_loopback(const sockaddr_storage &ss) {
    if (ss.ss_family == AF_INET)
        return ntohl(reinterpret_cast<const sockaddr_in &>(ss).sin_addr.s_addr) >> 24 == 127;
    return ss.ss_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6 &>(ss).sin6_addr);
}

bool same_ends(const VIP_VI_ENDPOINTS &a, const VIP_VI_ENDPOINTS &b) {
    if (a.Kind != b.Kind || a.PeerPid != b.PeerPid || a.PeerUid != b.PeerUid ||
        a.PeerGid != b.PeerGid || a.HostAddressLen != b.HostAddressLen ||
        memcmp(a.HostAddress, b.HostAddress, a.HostAddressLen) != 0)
        return false;
    return a.Kind != VIP_ENDPOINTS_SOCKET || (same_sockaddr(a.LocalSocket, b.LocalSocket) &&
                                              same_sockaddr(a.RemoteSocket, b.RemoteSocket));
}

// What a process says of its end, through a pipe: its pid and its socket's port.
struct Report {
    int32_t pid;
    uint16_t local_port;
    uint16_t remote_port;
};

} // namespace

TEST_CASE("VipQueryViEndpoints checks its arguments and wants a connection",
          "[ext][endpoints][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    VIP_VI_ENDPOINTS e;
    memset(&e, 0x5a, sizeof e);
    CHECK(VipQueryViEndpoints(vi, &e) == VIP_INVALID_STATE);
    CHECK(e.Kind == 0x5a5a5a5au); // untouched
    CHECK(VipQueryViEndpoints(vi, nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryViEndpoints(nullptr, &e) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipQueryViEndpoints(h, &e) == VIP_INVALID_PARAMETER);
    CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    CHECK(VipQueryViEndpoints(vi, &e) == VIP_INVALID_PARAMETER);
}

TEST_CASE("VipQueryViEndpoints gives the kernel's view of both ends", "[ext][endpoints]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    VIP_VI_ENDPOINTS ea, eb;
    REQUIRE(VipQueryViEndpoints(p.a, &ea) == VIP_SUCCESS);
    REQUIRE(VipQueryViEndpoints(p.b, &eb) == VIP_SUCCESS);
    CHECK(ea.Kind == eb.Kind);
    CHECK(ea.HostAddressLen == na.attrs.NicAddressLen);
    CHECK(memcmp(ea.HostAddress, na.attrs.LocalNicAddress, ea.HostAddressLen) == 0);
    if (ea.Kind == VIP_ENDPOINTS_LOCAL) {
        // Both ends are this process.
        CHECK(ea.PeerPid == getpid());
        CHECK(ea.PeerUid == geteuid());
        CHECK(ea.PeerGid == getegid());
        CHECK(eb.PeerPid == getpid());
        // One process may always read its own memory (cross-memory attach).
        CHECK(ea.PeerReadsAlone == VIP_TRUE);
        CHECK(eb.PeerReadsAlone == VIP_TRUE);
    } else {
        REQUIRE(ea.Kind == VIP_ENDPOINTS_SOCKET);
        CHECK(same_sockaddr(ea.LocalSocket, eb.RemoteSocket));
        CHECK(same_sockaddr(ea.RemoteSocket, eb.LocalSocket));
        CHECK(is_loopback(ea.LocalSocket));
        CHECK(port_of(ea.LocalSocket) != 0);
        CHECK(port_of(eb.LocalSocket) != 0);
        CHECK(ea.PeerPid == -1);
        CHECK(ea.PeerReadsAlone == VIP_FALSE); // this side's progress serves them
    }
    // Once disconnected there is nothing to tell.
    REQUIRE(VipDisconnect(p.b) == VIP_SUCCESS);
    CHECK(VipQueryViEndpoints(p.b, &eb) == VIP_INVALID_STATE);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("VipQueryViEndpoints names the process at the other end", "[ext][endpoints][process]") {
    std::string device = VT_DEVICE();
    std::string disc = vt::unique_disc("-ends");
    vt::Nic n(device);
    vt::Address local(n.nic, disc);
    vt::Pipe up, down;
    // The child connects and reports what it sees of its own end and the peer.
    int pid = vt::spawn_child([&]() -> int {
        VIP_NIC_HANDLE nic;
        VIP_PROTECTION_HANDLE ptag;
        if (VipOpenNic(device.c_str(), &nic) != VIP_SUCCESS ||
            VipCreatePtag(nic, &ptag) != VIP_SUCCESS)
            return 1;
        VIP_VI_ATTRIBUTES va{};
        va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        va.MaxTransferSize = 4096;
        va.Ptag = ptag;
        VIP_VI_HANDLE vi;
        if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS) return 2;
        vt::Address mine(nic, vt::unique_disc("-c")), target(nic, disc);
        VIP_VI_ATTRIBUTES ra;
        if (vt::connect_request(vi, mine.get(), target.get(), 4 * vt::kWaitMs, &ra) != VIP_SUCCESS)
            return 3;
        VIP_VI_ENDPOINTS e;
        if (VipQueryViEndpoints(vi, &e) != VIP_SUCCESS) return 4;
        Report r{e.Kind == VIP_ENDPOINTS_LOCAL ? e.PeerPid : -1, port_of(e.LocalSocket),
                 port_of(e.RemoteSocket)};
        const char *b = reinterpret_cast<const char *>(&r);
        for (size_t i = 0; i < sizeof r; ++i) up.put(b[i]);
        char c;
        down.get(&c, 4 * vt::kWaitMs);
        return 0;
    });
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    REQUIRE(VipConnectWait(n.nic, local.get(), 4 * vt::kWaitMs, remote.get(), &ra, &conn) ==
            VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, VIP_SERVICE_RELIABLE_DELIVERY, ra.MaxTransferSize);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    REQUIRE(VipConnectAccept(conn, vi) == VIP_SUCCESS);
    Report r{};
    char *b = reinterpret_cast<char *>(&r);
    for (size_t i = 0; i < sizeof r; ++i) REQUIRE(up.get(&b[i], 4 * vt::kWaitMs));
    VIP_VI_ENDPOINTS e;
    REQUIRE(VipQueryViEndpoints(vi, &e) == VIP_SUCCESS);
    if (e.Kind == VIP_ENDPOINTS_LOCAL) {
        CHECK(e.PeerPid == pid);
        CHECK(e.PeerUid == geteuid());
        CHECK(e.PeerGid == getegid());
        CHECK(r.pid == getpid()); // the process that served the discriminator
    } else {
        REQUIRE(e.Kind == VIP_ENDPOINTS_SOCKET);
        CHECK(port_of(e.RemoteSocket) == r.local_port); // the child's real TCP port
        CHECK(port_of(e.LocalSocket) == r.remote_port);
    }
    down.put('q');
    int status = vt::wait_child(pid, 20);
    INFO(vt::status_text(status));
    CHECK(status == 0);
    vt::destroy_vi(vi);
}

TEST_CASE("A shareable VI's fork child sees the same ends", "[ext][endpoints][process]") {
    std::string device = VT_DEVICE();
    vt::Nic na(device), nb(device);
    VIP_VI_ATTRIBUTES aa = vt::vi_attrs(na);
    aa.Shareable = VIP_TRUE;
    vt::Pair p = vt::connect_pair(na, nb, aa, vt::vi_attrs(nb));
    VIP_VI_ENDPOINTS e;
    REQUIRE(VipQueryViEndpoints(p.a, &e) == VIP_SUCCESS);
    int status = vt::run_child([&] {
        VIP_VI_ENDPOINTS c;
        if (VipQueryViEndpoints(p.a, &c) != VIP_SUCCESS) return 1;
        return same_ends(c, e) ? 0 : 2;
    });
    INFO(vt::status_text(status));
    CHECK(status == 0);
    vt::destroy_vi(p.b);
    vt::destroy_vi(p.a);
}
