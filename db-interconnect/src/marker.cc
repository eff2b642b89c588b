#include "marker.h"

#include "real.h"
#include "thread_state.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace vipl::db {

namespace {

constexpr char kPrefix[] = "vipl-db/";

std::string ip_text(int family, const void *addr) {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(family, addr, buf, sizeof buf);
    return family == AF_INET6 ? "[" + std::string(buf) + "]" : std::string(buf);
}

socklen_t abstract_address(const std::string &name, sockaddr_un *sa) {
    std::memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    size_t n = std::min(name.size(), sizeof sa->sun_path - 1);
    std::memcpy(sa->sun_path + 1, name.data(), n);
    return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

// The unix socket file's identity: the same file reached by any path gives one name.
std::string unix_name(const sockaddr *sa, socklen_t len) {
    auto *un = reinterpret_cast<const sockaddr_un *>(sa);
    if (len <= offsetof(sockaddr_un, sun_path)) return "";
    size_t n = len - offsetof(sockaddr_un, sun_path);
    if (un->sun_path[0] == '\0') {
        if (n <= 1) return "";
        return std::string(kPrefix) + "unix@" + std::string(un->sun_path + 1, n - 1);
    }
    std::string path(un->sun_path, strnlen(un->sun_path, n));
    struct stat st;
    if (path.empty() || stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return "";
    return std::string(kPrefix) + "unix/" + std::to_string(st.st_dev) + ":" +
           std::to_string(st.st_ino);
}

// Address text and whether it is the wildcard address.
bool tcp_parts(const sockaddr *sa, socklen_t len, std::string *addr, int *port, bool *any) {
    if (sa->sa_family == AF_INET && len >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
        auto *in = reinterpret_cast<const sockaddr_in *>(sa);
        *port = ntohs(in->sin_port);
        *any = in->sin_addr.s_addr == htonl(INADDR_ANY);
        *addr = ip_text(AF_INET, &in->sin_addr);
        return true;
    }
    if (sa->sa_family == AF_INET6 && len >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
        auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
        *port = ntohs(in6->sin6_port);
        *any = IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
            *addr = ip_text(AF_INET, in6->sin6_addr.s6_addr + 12);
        else
            *addr = ip_text(AF_INET6, &in6->sin6_addr);
        return true;
    }
    return false;
}

} // namespace

std::string marker_name(const sockaddr *sa, socklen_t len) {
    if (!sa || len < static_cast<socklen_t>(sizeof(sa_family_t))) return "";
    if (sa->sa_family == AF_UNIX) return unix_name(sa, len);
    std::string addr;
    int port;
    bool any;
    if (!tcp_parts(sa, len, &addr, &port, &any) || port == 0) return "";
    return std::string(kPrefix) + "tcp/" + (any ? std::string("*") : addr) + ":" +
           std::to_string(port);
}

std::string marker_probe_names(const sockaddr *peer, socklen_t len, std::string *wildcard) {
    wildcard->clear();
    if (!peer || len < static_cast<socklen_t>(sizeof(sa_family_t))) return "";
    if (peer->sa_family == AF_UNIX) return unix_name(peer, len);
    std::string addr;
    int port;
    bool any;
    if (!tcp_parts(peer, len, &addr, &port, &any) || port == 0) return "";
    *wildcard = std::string(kPrefix) + "tcp/*:" + std::to_string(port);
    return std::string(kPrefix) + "tcp/" + addr + ":" + std::to_string(port);
}

int marker_publish(const std::string &name) {
    Inside in;
    int fd = real().socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    sockaddr_un sa;
    socklen_t len = abstract_address(name, &sa);
    if (real().bind(fd, reinterpret_cast<sockaddr *>(&sa), len) != 0) {
        int saved = errno;
        real().close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

bool marker_exists(const std::string &name) {
    if (name.empty()) return false;
    Inside in;
    int saved = errno;
    int fd = real().socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        errno = saved;
        return false;
    }
    sockaddr_un sa;
    socklen_t len = abstract_address(name, &sa);
    bool ok = real().connect(fd, reinterpret_cast<sockaddr *>(&sa), len) == 0;
    real().close(fd);
    errno = saved;
    return ok;
}

} // namespace vipl::db
