// Address: text for logs, and the ends of streams and listeners from libvipl's reports.
#include "ends.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstring>

namespace vipl {

std::string Address::to_string() const {
    if (empty()) return "";
    std::string s = provider == Transport::shm ? "shm " : "tcp ";
    s += host.find(':') != std::string::npos ? "[" + host + "]" : host;
    if (!service.empty())
        s += "/" + service;
    else if (port)
        s += ":" + std::to_string(port);
    if (provider == Transport::shm)
        s += " pid " + std::to_string(pid) + " uid " + std::to_string(uid) + " gid " +
             std::to_string(gid);
    return s;
}

namespace detail {
namespace {

std::string this_host() {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) return "localhost";
    return name;
}

// A socket address as numeric host and port; false for another family.
bool from_sockaddr(const sockaddr_storage &ss, Address *a) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
        auto &in = reinterpret_cast<const sockaddr_in &>(ss);
        inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
        a->port = ntohs(in.sin_port);
    } else if (ss.ss_family == AF_INET6) {
        auto &in6 = reinterpret_cast<const sockaddr_in6 &>(ss);
        inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
        a->port = ntohs(in6.sin6_port);
    } else {
        return false;
    }
    a->provider = Transport::tcp;
    a->host = text;
    return true;
}

// This process on this host, as the shm end it is.
Address this_process() {
    Address a;
    a.provider = Transport::shm;
    a.host = this_host();
    a.pid = getpid();
    a.uid = geteuid();
    a.gid = getegid();
    return a;
}

} // namespace

bool vi_ends(VIP_VI_HANDLE vi, const Uri &listener, bool listening_end, Address *local,
             Address *peer) {
    *local = *peer = Address{};
    VIP_VI_ENDPOINTS e;
    if (VipQueryViEndpoints(vi, &e) != VIP_SUCCESS) return false;
    Address mine, theirs;
    if (e.Kind == VIP_ENDPOINTS_SOCKET) {
        if (!from_sockaddr(e.LocalSocket, &mine) || !from_sockaddr(e.RemoteSocket, &theirs))
            return false;
    } else if (e.Kind == VIP_ENDPOINTS_LOCAL) {
        mine = this_process();
        theirs = mine;
        theirs.pid = e.PeerPid;
        theirs.uid = e.PeerUid;
        theirs.gid = e.PeerGid;
        // Only the listening end has a port; the sockets' own are tcp's.
        (listening_end ? mine : theirs).port = listener.service.empty() ? listener.port : 0;
    } else {
        return false;
    }
    (listening_end ? mine : theirs).service = listener.service;
    *local = std::move(mine);
    *peer = std::move(theirs);
    return true;
}

Address listen_address(const Nic &nic, const Uri &uri) {
    const VIP_NIC_ATTRIBUTES &na = nic.attrs();
    Address a;
    if (strncmp(na.Name, "shm", 3) == 0) {
        a = this_process();
    } else {
        a.provider = Transport::tcp;
        char text[INET6_ADDRSTRLEN] = {};
        int family = na.NicAddressLen == 4 ? AF_INET : AF_INET6;
        if (na.LocalNicAddress && (na.NicAddressLen == 4 || na.NicAddressLen == 16))
            inet_ntop(family, na.LocalNicAddress, text, sizeof text);
        a.host = text;
    }
    a.port = uri.service.empty() ? uri.port : 0;
    a.service = uri.service;
    return a;
}

} // namespace detail
} // namespace vipl
