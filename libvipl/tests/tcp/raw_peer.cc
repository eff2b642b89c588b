#include "raw_peer.h"

#include <vipl_ext.h>

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace vt {
namespace {

using namespace vipl::tcp;
using Clock = std::chrono::steady_clock;

// A VIP_NET_ADDRESS with room for a host address and a discriminator.
struct NetAddress {
    alignas(VIP_NET_ADDRESS) uint8_t bytes[sizeof(VIP_NET_ADDRESS) + 128] = {};
    VIP_NET_ADDRESS *get() { return reinterpret_cast<VIP_NET_ADDRESS *>(bytes); }
    // This NIC's own address (no host part) with a port as discriminator.
    static NetAddress port(uint16_t p) {
        NetAddress a;
        a.get()->HostAddressLen = 0;
        a.get()->DiscriminatorLen = 2;
        a.get()->HostAddress[0] = static_cast<uint8_t>(p >> 8);
        a.get()->HostAddress[1] = static_cast<uint8_t>(p);
        return a;
    }
};

// The IPv4 address the NIC listens on (the name service maps this host to it).
bool nic_address(VIP_NIC_HANDLE nic, in_addr *out) {
    NetAddress a;
    char host[] = "localhost";
    if (VipNSGetHostByName(nic, host, a.get(), 0) != VIP_SUCCESS || a.get()->HostAddressLen != 4)
        return false;
    memcpy(out, a.get()->HostAddress, 4);
    return true;
}

int ms_left(Clock::time_point end) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for fd to become readable (or writable); false on timeout.
bool wait_for(int fd, short events, Clock::time_point end) {
    for (;;) {
        pollfd p{fd, events, 0};
        int n = poll(&p, 1, ms_left(end));
        if (n > 0) return true;
        if (n == 0 || errno != EINTR) return false;
    }
}

// Makes sure the NIC listens on port and has no request queued there
// (one left by an earlier connection that failed half-way is rejected).
bool quiet_listener(VIP_NIC_HANDLE nic, uint16_t port) {
    NetAddress local = NetAddress::port(port), remote;
    for (int i = 0; i < 16; ++i) {
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        VIP_RETURN rc = VipConnectWait(nic, local.get(), 0, remote.get(), &ra, &conn);
        if (rc == VIP_TIMEOUT) return true;
        if (rc == VIP_INTERRUPTED) continue; // a signal handler ran: look again
        if (rc != VIP_SUCCESS) return false;
        VipConnectReject(conn);
    }
    return false;
}

} // namespace

uint16_t raw_listen(VIP_NIC_HANDLE nic) {
    in_addr host;
    if (!nic_address(nic, &host)) return 0;
    for (int attempt = 0; attempt < 32; ++attempt) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return 0;
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr = host;
        socklen_t len = sizeof a;
        bool ok = bind(s, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
                  getsockname(s, reinterpret_cast<sockaddr *>(&a), &len) == 0;
        ::close(s);
        if (ok && quiet_listener(nic, ntohs(a.sin_port))) return ntohs(a.sin_port);
    }
    return 0;
}

RawPeer::~RawPeer() {
    close();
}

std::string RawPeer::connect(VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, uint16_t port, int timeout_ms,
                             uint32_t window) {
    static uint32_t serial = 0;
    auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    close();
    VIP_VI_STATE state;
    VIP_VI_ATTRIBUTES attrs;
    if (VipQueryVi(vi, &state, &attrs, nullptr, nullptr) != VIP_SUCCESS) return "bad VI handle";
    if (state != VIP_STATE_IDLE) return "the VI is not Idle";
    in_addr host;
    if (!nic_address(nic, &host)) return "not an IPv4 tcp NIC";
    if (!quiet_listener(nic, port)) return "the NIC does not listen on the port";

    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return std::string("socket: ") + strerror(errno);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr = host;
    to.sin_port = htons(port);
    if (::connect(fd_, reinterpret_cast<sockaddr *>(&to), sizeof to) < 0) {
        // A signal (libFuzzer's timer, a test's alarm) ends the wait, not the
        // connection, which goes on: wait for it to be made, then ask how it went.
        if (errno != EINTR) return std::string("connect: ") + strerror(errno);
        if (!wait_for(fd_, POLLOUT, end)) return "connect: no answer in time";
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
        if (err) return std::string("connect: ") + strerror(err);
    }

    // Our own discriminator tells our request from any other on the port.
    uint32_t id = ++serial;
    uint8_t disc[6] = {'r',
                       'p',
                       static_cast<uint8_t>(id >> 24),
                       static_cast<uint8_t>(id >> 16),
                       static_cast<uint8_t>(id >> 8),
                       static_cast<uint8_t>(id)};
    Hello h{};
    h.type = kHelloRequest;
    h.reliability = attrs.ReliabilityLevel;
    h.mtu = attrs.MaxTransferSize;
    h.rdma = 3;
    h.host_len = 4;
    memcpy(h.host, &host, 4);
    h.disc_len = sizeof disc;
    memcpy(h.disc, disc, sizeof disc);
    h.want_len = 2;
    h.want[0] = static_cast<uint8_t>(port >> 8);
    h.want[1] = static_cast<uint8_t>(port);
    h.window = window;
    // The Ack goes with the request: the VI reads it once it has answered,
    // so one thread can play both sides.
    uint8_t out[2 * kHelloWire];
    encode_hello(h, out);
    h.type = kHelloAck;
    encode_hello(h, out + kHelloWire);
    if (!send_all(out, sizeof out, ms_left(end))) return "the handshake could not be sent";

    NetAddress local = NetAddress::port(port), remote;
    for (;;) {
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        VIP_RETURN rc = VipConnectWait(nic, local.get(), ms_left(end), remote.get(), &ra, &conn);
        if (rc == VIP_INTERRUPTED && ms_left(end) > 0) continue; // a signal handler ran
        if (rc != VIP_SUCCESS) return std::string("VipConnectWait: ") + VipReturnString(rc);
        const VIP_NET_ADDRESS *r = remote.get();
        if (r->DiscriminatorLen != sizeof disc ||
            memcmp(r->HostAddress + r->HostAddressLen, disc, sizeof disc) != 0) {
            VipConnectReject(conn);
            continue;
        }
        rc = VipConnectAccept(conn, vi);
        if (rc != VIP_SUCCESS) return std::string("VipConnectAccept: ") + VipReturnString(rc);
        break;
    }

    uint8_t in[kHelloWire];
    size_t got = 0;
    while (got < sizeof in) {
        if (!wait_for(fd_, POLLIN, end)) return "no Accept from the VI";
        ssize_t n = recv(fd_, in + got, sizeof in - got, 0);
        if (n <= 0 && !(n < 0 && errno == EINTR)) return "the VI closed during the handshake";
        if (n > 0) got += static_cast<size_t>(n);
    }
    Hello accept{};
    if (!decode_hello(in, &accept) || accept.type != kHelloAccept)
        return "the VI's answer is not an Accept";
    fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    mtu_ = attrs.MaxTransferSize;
    return "";
}

bool RawPeer::send_some(const void *p, size_t n, size_t *sent) {
    *sent = 0;
    for (;;) {
        ssize_t w = send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w >= 0) {
            *sent = static_cast<size_t>(w);
            return true;
        }
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
    }
}

bool RawPeer::send_all(const void *p, size_t n, int timeout_ms) {
    auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    auto *b = static_cast<const uint8_t *>(p);
    while (n) {
        size_t sent;
        if (!send_some(b, n, &sent)) return false;
        b += sent;
        n -= sent;
        if (n && !sent && !wait_for(fd_, POLLOUT, end)) return false;
    }
    return true;
}

bool RawPeer::drain(std::vector<uint8_t> *out) {
    uint8_t buf[65536];
    // Bounded: a VI driven by another thread could keep the socket busy.
    for (int i = 0; i < 1024; ++i) {
        ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            if (out) out->insert(out->end(), buf, buf + n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return true;
}

bool RawPeer::wait_closed(int timeout_ms, std::vector<uint8_t> *out) {
    auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        if (!drain(out)) return true;
        if (!wait_for(fd_, POLLIN, end)) return !drain(out);
    }
}

void RawPeer::finish() {
    if (fd_ >= 0) shutdown(fd_, SHUT_WR);
}

void RawPeer::close() {
    if (fd_ < 0) return;
    linger lg{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    ::close(fd_);
    fd_ = -1;
}

std::vector<uint8_t> header(const Frame &f) {
    std::vector<uint8_t> h(kFrameHeader);
    encode_frame(f, h.data());
    return h;
}

std::vector<uint8_t> frame(const Frame &f, const void *payload, uint8_t fill) {
    std::vector<uint8_t> b = header(f);
    b.resize(kFrameHeader + f.length, fill);
    if (payload && f.length) memcpy(b.data() + kFrameHeader, payload, f.length);
    return b;
}

bool split_frames(const std::vector<uint8_t> &bytes, uint64_t mtu, std::vector<Received> *out,
                  size_t *used) {
    size_t at = 0;
    bool ok = true;
    while (bytes.size() - at >= kFrameHeader) {
        Frame f;
        if (decode_frame(bytes.data() + at, mtu, &f) != Decode::ok) {
            ok = false;
            break;
        }
        if (bytes.size() - at - kFrameHeader < f.length) break;
        const uint8_t *p = bytes.data() + at + kFrameHeader;
        out->push_back(Received{f, std::vector<uint8_t>(p, p + f.length)});
        at += kFrameHeader + f.length;
    }
    if (used) *used = at;
    return ok;
}

} // namespace vt
