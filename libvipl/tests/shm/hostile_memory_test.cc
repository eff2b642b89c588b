// The memory of a connection between two processes of one user is theirs alone: a
// process of another user can neither open it (nor the region table beside it)
// through /proc, read it with cross-memory attach, nor reach the abstract sockets the
// connection was made over; what a peer is handed is sealed.
#include "procs.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

namespace {

// connect() to an abstract socket name ("@..."): 0 or the errno.
int connect_abstract(const std::string &name) {
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, name.data() + 1, name.size() - 1);
    socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    int err = connect(s, reinterpret_cast<sockaddr *>(&sa), len) == 0 ? 0 : errno;
    close(s);
    return err;
}

std::string p2p_name(const std::string &disc) {
    std::string s = vt::listener_socket(disc); // "@vipl-shm-cs:<hex>"
    return "@vipl-shm-p2p:" + s.substr(s.find(':') + 1);
}

// Connects ep peer to peer (local disc `me`, remote `other`).
bool peer_connect(vt::Ep &ep, const std::string &me, const std::string &other) {
    auto local = vt::address(ep.nic, me), remote = vt::address(ep.nic, other);
    if (!ep.check(VipConnectPeerRequest(ep.vi, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()),
                                        reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), 10000),
                  "VipConnectPeerRequest"))
        return false;
    VIP_VI_ATTRIBUTES ra;
    return ep.check(VipConnectPeerWait(ep.vi, &ra), "VipConnectPeerWait");
}

// "N -> target": the descriptor number.
int fd_number(const std::string &entry) {
    return std::stoi(entry.substr(0, entry.find(' ')));
}

} // namespace

TEST_CASE("another user can open, read or reach nothing of a connection between two processes "
          "of one user",
          "[shm][users]") {
    if (geteuid() != 0) {
        WARN("not root: no other user to try with; this case was NOT run");
        return;
    }
    std::string d1 = vt::unique_disc("a"), d2 = vt::unique_disc("b");
    // The other user's process exists before the connection, so it inherits nothing.
    vt::Channel nb;
    pid_t nobody = vt::spawn_checked([&] {
        nb.in_child();
        REQUIRE(setgroups(0, nullptr) == 0);
        REQUIRE(setgid(65534) == 0);
        REQUIRE(setuid(65534) == 0);
        uint64_t parent, peer, start, end, regions_fd;
        REQUIRE(nb.recv(&parent, 20000));
        REQUIRE(nb.recv(&peer, 5000));
        REQUIRE(nb.recv(&start, 5000));
        REQUIRE(nb.recv(&end, 5000));
        REQUIRE(nb.recv(&regions_fd, 5000));
        std::string map =
            vt::fmt("/proc/%d/map_files/%llx-%llx", static_cast<int>(parent),
                    static_cast<unsigned long long>(start), static_cast<unsigned long long>(end));
        for (std::string path :
             {map,
              vt::fmt("/proc/%d/fd/%d", static_cast<int>(parent), static_cast<int>(regions_fd)),
              vt::fmt("/proc/%d/mem", static_cast<int>(parent)),
              vt::fmt("/proc/%d/mem", static_cast<int>(peer))}) {
            errno = 0;
            int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
            INFO(path << ": " << strerror(errno));
            CHECK(fd < 0);
            CHECK((errno == EACCES || errno == EPERM));
            if (fd >= 0) close(fd);
        }
        uint8_t buf[64];
        iovec l{buf, sizeof buf}, r{reinterpret_cast<void *>(start), sizeof buf};
        for (uint64_t pid : {parent, peer}) {
            errno = 0;
            CHECK(process_vm_readv(static_cast<pid_t>(pid), &l, 1, &r, 1, 0) < 0);
            CHECK(errno == EPERM);
        }
        // Nobody listens on the names the two ends met on any more.
        CHECK(connect_abstract(p2p_name(d1)) == ECONNREFUSED);
        CHECK(connect_abstract(p2p_name(d2)) == ECONNREFUSED);
        nb.send(1);
        return 0;
    });
    nb.in_parent();
    vt::Child nobody_child(nobody);

    vt::Channel pc;
    pid_t peer = vt::spawn_checked([&] {
        pc.in_child();
        vt::Ep ep;
        EP_REQUIRE(ep, ep.open(1 << 16));
        EP_REQUIRE(ep, peer_connect(ep, d2, d1));
        pc.send(1); // connected here too: its listening socket, if it had one, is gone
        uint64_t done;
        REQUIRE(pc.recv(&done, 30000));
        return 0;
    });
    pc.in_parent();
    vt::Child peer_child(peer);
    vt::Ep ep;
    EP_REQUIRE(ep, ep.open(1 << 16));
    EP_REQUIRE(ep, peer_connect(ep, d1, d2));
    uint64_t peer_up = 0;
    REQUIRE(pc.recv(&peer_up, 20000));

    auto maps = vt::maps_with("vipl-conn");
    auto fds = vt::fds_with("vipl-regions");
    INFO(vt::join(maps) << " / " << vt::join(fds));
    REQUIRE(maps.size() == 1);
    REQUIRE(!fds.empty());
    unsigned long long start = 0, end = 0;
    REQUIRE(sscanf(maps[0].c_str(), "%llx-%llx", &start, &end) == 2);
    // What the other user tries does open for this one: the paths are the right ones.
    std::string map = vt::fmt("/proc/self/map_files/%llx-%llx", start, end);
    int own = open(map.c_str(), O_RDONLY | O_CLOEXEC);
    CHECK(own >= 0);
    if (own >= 0) close(own);

    nb.send(static_cast<uint64_t>(getpid()));
    nb.send(static_cast<uint64_t>(peer));
    nb.send(start);
    nb.send(end);
    nb.send(static_cast<uint64_t>(fd_number(fds[0])));
    uint64_t checked = 0;
    CHECK(nb.recv(&checked, 20000));
    int status = nobody_child.wait(20);
    INFO("other user's process: " << vt::status_text(status));
    CHECK(status == 0);

    // The connection itself was never disturbed.
    CHECK(ep.state() == VIP_STATE_CONNECTED);
    pc.send(1);
    status = peer_child.wait(20);
    INFO("peer process: " << vt::status_text(status));
    CHECK(status == 0);
}

TEST_CASE("the memory a peer is handed is sealed: the region table cannot be mapped writable "
          "nor resized, the connection memory cannot be resized",
          "[shm][bad]") {
    vt::Channel pc;
    std::string d1 = vt::unique_disc("s"), d2 = vt::unique_disc("t");
    pid_t peer = vt::spawn_checked([&] {
        pc.in_child();
        vt::Ep ep;
        EP_REQUIRE(ep, ep.open(1 << 16));
        EP_REQUIRE(ep, peer_connect(ep, d2, d1));
        uint64_t done;
        REQUIRE(pc.recv(&done, 30000));
        return 0;
    });
    pc.in_parent();
    vt::Child peer_child(peer);
    vt::Ep ep;
    EP_REQUIRE(ep, ep.open(1 << 16));
    EP_REQUIRE(ep, peer_connect(ep, d1, d2));

    // The region table: what a peer gets is this descriptor (open for writing).
    auto fds = vt::fds_with("vipl-regions");
    INFO(vt::join(fds));
    REQUIRE(!fds.empty());
    int rfd = fd_number(fds[0]);
    int seals = fcntl(rfd, F_GET_SEALS);
    CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    errno = 0;
    void *w = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
    CHECK(w == MAP_FAILED);
    CHECK(errno == EPERM);
    if (w != MAP_FAILED) munmap(w, 4096);
    void *r = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, rfd, 0);
    REQUIRE(r != MAP_FAILED);
    errno = 0;
    CHECK(mprotect(r, 4096, PROT_READ | PROT_WRITE) != 0); // nor made writable later
    munmap(r, 4096);
    CHECK(ftruncate(rfd, 0) != 0);

    // The connection memory, reopened as a peer holding it could.
    auto maps = vt::maps_with("vipl-conn");
    REQUIRE(maps.size() == 1);
    unsigned long long start = 0, end = 0;
    REQUIRE(sscanf(maps[0].c_str(), "%llx-%llx", &start, &end) == 2);
    int cfd = open(vt::fmt("/proc/self/map_files/%llx-%llx", start, end).c_str(), O_RDWR);
    REQUIRE(cfd >= 0);
    CHECK((fcntl(cfd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW)) ==
          (F_SEAL_SHRINK | F_SEAL_GROW));
    errno = 0;
    CHECK(ftruncate(cfd, 0) != 0);
    CHECK(errno == EPERM);
    close(cfd);
    CHECK(ep.state() == VIP_STATE_CONNECTED);
    pc.send(1);
    int status = peer_child.wait(20);
    INFO("peer process: " << vt::status_text(status));
    CHECK(status == 0);
}
