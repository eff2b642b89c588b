// The connection wait fd on shm follows both places a request can be: the
// listening socket's backlog, and a connection already taken from it whose
// request is still on its way (an "early" one, kept for the next wait).
#include "procs.h"

#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace {

VIP_RETURN take(const vt::Nic &n, vt::Address &local) {
    vt::AddressBuffer remote;
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    VIP_RETURN rc = VipConnectWait(n.nic, local.get(), 0, remote.get(), &ra, &conn);
    if (rc == VIP_SUCCESS) VipConnectReject(conn);
    return rc;
}

// A raw connection to the discriminator's listening socket, sending nothing yet.
int raw_connect(const std::string &disc) {
    std::string name = vt::listener_socket(disc).substr(1); // without the '@'
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    REQUIRE(s >= 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, name.data(), name.size());
    auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    REQUIRE(connect(s, reinterpret_cast<sockaddr *>(&sa), len) == 0);
    return s;
}

} // namespace

TEST_CASE("An early connection wakes the connection wait fd when its message or end comes",
          "[shm][waitfd]") {
    vt::Nic n("shm0");
    std::string disc = vt::unique_disc("-early");
    vt::Address local(n.nic, disc);
    int fd = -1;
    REQUIRE(VipGetConnWaitFd(n.nic, local.get(), &fd) == VIP_SUCCESS);
    CHECK_FALSE(vt::readable(fd, 0));

    // Connected, nothing sent: the backlog wakes the fd; the wait takes the
    // connection as an early one and finds no request; the fd is quiet.
    int a = raw_connect(disc), b = raw_connect(disc);
    REQUIRE(vt::readable(fd, vt::kWaitMs));
    CHECK(take(n, local) == VIP_TIMEOUT);
    CHECK_FALSE(vt::readable(fd, 0));

    // A message on one (not a request: it is dropped) wakes it again.
    const char junk[] = "not a request";
    REQUIRE(send(a, junk, sizeof junk, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof junk));
    REQUIRE(vt::readable(fd, vt::kWaitMs));
    CHECK(take(n, local) == VIP_TIMEOUT);
    CHECK_FALSE(vt::readable(fd, 0));
    char c;
    CHECK(recv(a, &c, 1, MSG_DONTWAIT) == 0); // dropped: the library hung up

    // The other one's end wakes it too, and is forgotten once looked at.
    close(b);
    REQUIRE(vt::readable(fd, vt::kWaitMs));
    CHECK(take(n, local) == VIP_TIMEOUT);
    CHECK_FALSE(vt::readable(fd, 0));
    close(a);
}
