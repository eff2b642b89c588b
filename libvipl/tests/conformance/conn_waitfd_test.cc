// VipGetConnWaitFd: a descriptor that shows a pending connection request, so
// that a server waits for requests with its other descriptors, without a
// thread of its own.  Requests come from other processes.
#include "support.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

enum class Waiter { poll, select, epoll };

const char *name_of(Waiter w) {
    return w == Waiter::poll ? "poll" : w == Waiter::select ? "select" : "epoll";
}

// Whether fd is readable within timeout_ms (0: now), asked the way `how` asks.
bool readable(int fd, int timeout_ms, Waiter how = Waiter::poll) {
    for (;;) {
        int r;
        if (how == Waiter::poll) {
            pollfd p{fd, POLLIN, 0};
            r = poll(&p, 1, timeout_ms);
            if (r > 0) return (p.revents & POLLIN) != 0;
        } else if (how == Waiter::select) {
            REQUIRE(fd < FD_SETSIZE);
            fd_set set;
            FD_ZERO(&set);
            FD_SET(fd, &set);
            timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
            r = select(fd + 1, &set, nullptr, nullptr, &tv);
            if (r > 0) return FD_ISSET(fd, &set);
        } else {
            int ep = epoll_create1(EPOLL_CLOEXEC);
            REQUIRE(ep >= 0);
            epoll_event ev{};
            ev.events = EPOLLIN;
            REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
            epoll_event got{};
            r = epoll_wait(ep, &got, 1, timeout_ms);
            close(ep);
            if (r > 0) return (got.events & EPOLLIN) != 0;
        }
        if (r == 0) return false;
        REQUIRE(errno == EINTR);
    }
}

// A child process that connects one VI to disc and keeps it until the parent
// writes to `go` (or the pipe ends); exit code 0 when it was connected.
int spawn_client(const std::string &device, const std::string &disc, vt::Pipe &go) {
    return vt::spawn_child([&] {
        VIP_NIC_HANDLE nic;
        if (VipOpenNic(device.c_str(), &nic) != VIP_SUCCESS) return 1;
        VIP_NIC_ATTRIBUTES na;
        VIP_PROTECTION_HANDLE ptag;
        if (VipQueryNic(nic, &na) != VIP_SUCCESS || VipCreatePtag(nic, &ptag) != VIP_SUCCESS)
            return 2;
        VIP_VI_ATTRIBUTES va{};
        va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        va.MaxTransferSize = 4096;
        va.Ptag = ptag;
        VIP_VI_HANDLE vi;
        if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS) return 3;
        vt::Address local(nic, vt::unique_disc("-c")), target(nic, disc);
        VIP_VI_ATTRIBUTES ra;
        if (vt::connect_request(vi, local.get(), target.get(), 4 * vt::kWaitMs, &ra) != VIP_SUCCESS)
            return 4;
        char c;
        go.get(&c, 4 * vt::kWaitMs);
        return 0;
    });
}

// Waits on the fd as a server loop does and accepts the request it announces
// on a new VI.  A wake-up may come before the whole request has (the
// connection is made, its request is on its way): then the zero-timeout
// VipConnectWait finds nothing and the loop waits again.
VIP_VI_HANDLE accept_one(const vt::Nic &n, vt::Address &local, int fd, Waiter how = Waiter::poll) {
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    VIP_RETURN rc = VIP_TIMEOUT;
    for (int round = 0; round < 100 && rc == VIP_TIMEOUT; ++round) {
        REQUIRE(readable(fd, 4 * vt::kWaitMs, how));
        rc = VipConnectWait(n.nic, local.get(), 0, remote.get(), &ra, &conn);
    }
    REQUIRE(rc == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n, VIP_SERVICE_RELIABLE_DELIVERY, ra.MaxTransferSize);
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
    REQUIRE(VipConnectAccept(conn, vi) == VIP_SUCCESS);
    return vi;
}

VIP_RETURN take_none(const vt::Nic &n, vt::Address &local) {
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    return VipConnectWait(n.nic, local.get(), 0, remote.get(), &ra, &conn);
}

bool fd_open(int fd) {
    return fcntl(fd, F_GETFD) >= 0;
}

} // namespace

TEST_CASE("VipGetConnWaitFd checks its arguments and gives one descriptor per discriminator",
          "[connect][waitfd][errors]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device), other(device);
    std::string disc = vt::unique_disc("-cwfd");
    vt::Address local(n.nic, disc);
    int fd = -7;
    CHECK(VipGetConnWaitFd(n.nic, local.get(), nullptr) == VIP_INVALID_PARAMETER);
    CHECK(VipGetConnWaitFd(n.nic, nullptr, &fd) == VIP_INVALID_PARAMETER);
    CHECK(VipGetConnWaitFd(nullptr, local.get(), &fd) == VIP_INVALID_PARAMETER);
    for (VIP_PVOID h : vt::garbage_handles(50))
        CHECK(VipGetConnWaitFd(h, local.get(), &fd) == VIP_INVALID_PARAMETER);
    CHECK(fd == -7);

    // A discriminator longer than the NIC takes, and a host that is not this NIC's.
    vt::Address too_long(n.nic, std::string(n.attrs.MaxDiscriminatorLen + 1, 'x'));
    CHECK(VipGetConnWaitFd(n.nic, too_long.get(), &fd) == VIP_INVALID_PARAMETER);
    vt::Address foreign(n.nic, disc + "f");
    REQUIRE(foreign.get()->HostAddressLen > 0);
    foreign.get()->HostAddress[0] ^= 0x5a;
    CHECK(VipGetConnWaitFd(n.nic, foreign.get(), &fd) == VIP_INVALID_PARAMETER);
    CHECK(fd == -7);

    REQUIRE(VipGetConnWaitFd(n.nic, local.get(), &fd) == VIP_SUCCESS);
    CHECK(fd >= 0);
    CHECK(fd_open(fd));
    CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    int again = -1;
    CHECK(VipGetConnWaitFd(n.nic, local.get(), &again) == VIP_SUCCESS);
    CHECK(again == fd);
    vt::Address second(n.nic, disc + "2");
    int fd2 = -1;
    CHECK(VipGetConnWaitFd(n.nic, second.get(), &fd2) == VIP_SUCCESS);
    CHECK(fd2 >= 0);
    CHECK(fd2 != fd);

    // Asking serves the discriminator: another NIC cannot serve it now.
    vt::Address on_other(other.nic, disc);
    int fd3 = -1;
    CHECK(VipGetConnWaitFd(other.nic, on_other.get(), &fd3) == VIP_ERROR_RESOURCE);
    CHECK(take_none(other, on_other) == VIP_ERROR_RESOURCE);
    CHECK(take_none(n, local) == VIP_TIMEOUT);
    CHECK_FALSE(readable(fd, 0));

    // A fork child holds none of it; the NIC closes it.
    int status = vt::run_child([&] { return fd_open(fd) || fd_open(fd2) ? 1 : 0; });
    CHECK(status == 0);
    n.close();
    CHECK_FALSE(fd_open(fd));
    CHECK_FALSE(fd_open(fd2));
}

TEST_CASE("The connection wait fd is quiet until another process asks, readable until taken",
          "[connect][waitfd][process]") {
    std::string device = VT_DEVICE();
    vt::Nic n(device);
    std::string disc = vt::unique_disc("-cw");
    vt::Address local(n.nic, disc);
    int fd = -1;
    REQUIRE(VipGetConnWaitFd(n.nic, local.get(), &fd) == VIP_SUCCESS);
    CHECK_FALSE(readable(fd, 0));
    CHECK_FALSE(readable(fd, 50));

    // Two clients, each its own process: each request wakes the fd, and the
    // fd stays quiet once they are taken.
    vt::Pipe go;
    int a = spawn_client(device, disc, go);
    int b = spawn_client(device, disc, go);
    std::vector<VIP_VI_HANDLE> vis;
    for (int k = 0; k < 2; ++k) {
        INFO("request " << k);
        vis.push_back(accept_one(n, local, fd));
    }
    CHECK(take_none(n, local) == VIP_TIMEOUT);
    CHECK_FALSE(readable(fd, 0));
    for (VIP_VI_HANDLE vi : vis) CHECK(vt::vi_state(vi) == VIP_STATE_CONNECTED);
    go.put('q');
    go.put('q');
    int sa = vt::wait_child(a, 20), sb = vt::wait_child(b, 20);
    INFO(vt::status_text(sa) << ", " << vt::status_text(sb));
    CHECK(sa == 0);
    CHECK(sb == 0);
    for (VIP_VI_HANDLE vi : vis) vt::destroy_vi(vi);
    // Clients that went leave nothing behind that wakes the fd.
    CHECK(take_none(n, local) == VIP_TIMEOUT);
    CHECK_FALSE(readable(fd, 0));
}

TEST_CASE("select, poll and epoll each see a request on the connection wait fd",
          "[connect][waitfd][process]") {
    std::string device = VT_DEVICE();
    Waiter how = GENERATE(Waiter::poll, Waiter::select, Waiter::epoll);
    INFO(name_of(how));
    vt::Nic n(device);
    std::string disc = vt::unique_disc("-sel");
    vt::Address local(n.nic, disc);
    int fd = -1;
    REQUIRE(VipGetConnWaitFd(n.nic, local.get(), &fd) == VIP_SUCCESS);
    CHECK_FALSE(readable(fd, 20, how));
    vt::Pipe go;
    int pid = spawn_client(device, disc, go);
    VIP_VI_HANDLE vi = accept_one(n, local, fd, how);
    CHECK(take_none(n, local) == VIP_TIMEOUT);
    CHECK_FALSE(readable(fd, 0, how));
    go.put('q');
    CHECK(vt::wait_child(pid, 20) == 0);
    vt::destroy_vi(vi);
}

TEST_CASE("A single-threaded server that accepts through the wait fd stays single-threaded",
          "[connect][waitfd][process]") {
    std::string device = VT_DEVICE();
    std::string disc = vt::unique_disc("-st");
    constexpr int kClients = 4;
    vt::Pipe ready;
    // The server: one thread, one loop over poll() of the wait fd and the
    // accepted VIs' wait fds; every accepted VI receives one message.
    int server = vt::spawn_child([&]() -> int {
        if (vt::thread_count() != 1) return 10;
        VIP_NIC_HANDLE nic;
        VIP_PROTECTION_HANDLE ptag;
        if (VipOpenNic(device.c_str(), &nic) != VIP_SUCCESS ||
            VipCreatePtag(nic, &ptag) != VIP_SUCCESS)
            return 11;
        static uint8_t mem[kClients][4096] __attribute__((aligned(4096)));
        VIP_MEM_ATTRIBUTES ma{};
        ma.Ptag = ptag;
        VIP_MEM_HANDLE mh;
        if (VipRegisterMem(nic, mem, sizeof mem, &ma, &mh) != VIP_SUCCESS) return 12;
        vt::Address local(nic, disc);
        int cfd;
        if (VipGetConnWaitFd(nic, local.get(), &cfd) != VIP_SUCCESS) return 13;
        ready.put('r');
        std::vector<VIP_VI_HANDLE> vis;
        std::vector<int> vfds;
        int received = 0;
        for (int round = 0; round < 200 && received < kClients; ++round) {
            std::vector<pollfd> fds{{cfd, POLLIN, 0}};
            for (int f : vfds) fds.push_back({f, POLLIN, 0});
            if (poll(fds.data(), fds.size(), 4 * vt::kWaitMs) <= 0) return 14;
            if (fds[0].revents) {
                vt::AddressBuffer remote;
                VIP_VI_ATTRIBUTES ra;
                VIP_CONN_HANDLE conn;
                VIP_RETURN rc = VipConnectWait(nic, local.get(), 0, remote.get(), &ra, &conn);
                if (rc == VIP_SUCCESS) {
                    if (vis.size() >= kClients) return 15;
                    VIP_VI_ATTRIBUTES va{};
                    va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
                    va.MaxTransferSize = ra.MaxTransferSize;
                    va.Ptag = ptag;
                    VIP_VI_HANDLE vi;
                    int vfd;
                    auto *d = reinterpret_cast<VIP_DESCRIPTOR *>(mem[vis.size()]);
                    vt::set_desc(d, mem[vis.size()] + 256, 1024, mh);
                    if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS ||
                        VipPostRecv(vi, d, mh) != VIP_SUCCESS ||
                        VipConnectAccept(conn, vi) != VIP_SUCCESS ||
                        VipGetViWaitFd(vi, &vfd) != VIP_SUCCESS)
                        return 16;
                    vis.push_back(vi);
                    vfds.push_back(vfd);
                } else if (rc != VIP_TIMEOUT) {
                    return 17;
                }
            }
            for (VIP_VI_HANDLE vi : vis) {
                VIP_DESCRIPTOR *d;
                if (VipRecvDone(vi, &d) == VIP_SUCCESS) ++received;
            }
            if (vt::thread_count() != 1) return 18;
        }
        if (received != kClients) return 19;
        return vt::thread_count() == 1 ? 0 : 20;
    });
    char c;
    REQUIRE(ready.get(&c, 4 * vt::kWaitMs));
    // The clients: this process, one VI each, one message each.
    vt::Nic n(device);
    vt::Memory m(n, 1 << 16);
    std::vector<VIP_VI_HANDLE> vis;
    for (int k = 0; k < kClients; ++k) {
        VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
        VIP_VI_HANDLE vi;
        REQUIRE(VipCreateVi(n.nic, &va, nullptr, nullptr, &vi) == VIP_SUCCESS);
        vt::Address mine(n.nic, vt::unique_disc("-stc")), target(n.nic, disc);
        VIP_VI_ATTRIBUTES ra;
        REQUIRE(vt::connect_request(vi, mine.get(), target.get(), 4 * vt::kWaitMs, &ra) ==
                VIP_SUCCESS);
        memcpy(m.base + 1024 * (k + 1), "hello", 6);
        vt::set_desc(m.desc(k), m.base + 1024 * (k + 1), 6, m.mh);
        REQUIRE(VipPostSend(vi, m.desc(k), m.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *d;
        REQUIRE(VipSendWait(vi, vt::kWaitMs, &d) == VIP_SUCCESS);
        vis.push_back(vi);
    }
    int status = vt::wait_child(server, 30);
    INFO(vt::status_text(status));
    CHECK(status == 0);
    for (VIP_VI_HANDLE vi : vis) vt::destroy_vi(vi);
}
