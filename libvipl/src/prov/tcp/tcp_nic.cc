// The tcp provider's NIC: which interface, its address, the name service,
// and where a discriminator listens.
#include "core/config.h"
#include "core/log.h"
#include "prov/enosys.h"
#include "prov/tcp/tcp.h"
#include "prov/tcp/tcp_config.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

namespace vipl::tcp {
namespace {

bool matches(const char *device) {
    return !strcmp(device, "tcp0") || !strncmp(device, "tcp:", 4);
}

bool usable(const ifaddrs *i, int family) {
    return i->ifa_addr && i->ifa_addr->sa_family == family && (i->ifa_flags & IFF_UP) &&
           !(family == AF_INET6 &&
             IN6_IS_ADDR_LINKLOCAL(
                 &reinterpret_cast<const sockaddr_in6 *>(i->ifa_addr)->sin6_addr));
}

// Picks the address: "tcp0" is the first interface that is up and not
// loopback (IPv4 preferred), else loopback; "tcp:NAME" an interface by name,
// "tcp:ADDRESS" one of this host's addresses.
bool choose(const char *device, TcpNic *t) {
    ifaddrs *list = nullptr;
    if (getifaddrs(&list) != 0) return false;
    const char *want = device[3] == ':' ? device + 4 : nullptr;
    in6_addr want6{};
    in_addr want4{};
    bool is4 = want && inet_pton(AF_INET, want, &want4) == 1;
    bool is6 = want && !is4 && inet_pton(AF_INET6, want, &want6) == 1;
    const ifaddrs *pick = nullptr;
    for (int family : {AF_INET, AF_INET6})
        for (int pass = 0; pass < 2 && !pick; ++pass)
            for (const ifaddrs *i = list; i && !pick; i = i->ifa_next) {
                if (!usable(i, family)) continue;
                bool loop = i->ifa_flags & IFF_LOOPBACK;
                if (!want) {
                    if ((pass == 0 && !loop) || (pass == 1 && loop)) pick = i;
                } else if (is4 && family == AF_INET) {
                    if (!memcmp(&reinterpret_cast<const sockaddr_in *>(i->ifa_addr)->sin_addr,
                                &want4, 4))
                        pick = i;
                } else if (is6 && family == AF_INET6) {
                    if (!memcmp(&reinterpret_cast<const sockaddr_in6 *>(i->ifa_addr)->sin6_addr,
                                &want6, 16))
                        pick = i;
                } else if (!is4 && !is6 && !strcmp(i->ifa_name, want)) {
                    pick = i;
                }
            }
    if (pick) {
        t->family = pick->ifa_addr->sa_family;
        t->local_len = t->family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
        memcpy(&t->local, pick->ifa_addr, t->local_len);
        if (t->family == AF_INET)
            reinterpret_cast<sockaddr_in *>(&t->local)->sin_port = 0;
        else
            reinterpret_cast<sockaddr_in6 *>(&t->local)->sin6_port = 0;
        t->ifname = pick->ifa_name;
    }
    freeifaddrs(list);
    return pick != nullptr;
}

// "tcp0", then every usable interface by name and by address.
const char *devices() {
    static std::once_flag once;
    static std::string list;
    std::call_once(once, [] {
        list = "tcp0";
        ifaddrs *ifs = nullptr;
        if (getifaddrs(&ifs) != 0) return;
        std::vector<std::string> names, addrs;
        for (const ifaddrs *i = ifs; i; i = i->ifa_next)
            for (int family : {AF_INET, AF_INET6}) {
                if (!usable(i, family)) continue;
                if (std::find(names.begin(), names.end(), i->ifa_name) == names.end())
                    names.push_back(i->ifa_name);
                char text[INET6_ADDRSTRLEN];
                const void *a =
                    family == AF_INET
                        ? static_cast<const void *>(
                              &reinterpret_cast<const sockaddr_in *>(i->ifa_addr)->sin_addr)
                        : static_cast<const void *>(
                              &reinterpret_cast<const sockaddr_in6 *>(i->ifa_addr)->sin6_addr);
                if (inet_ntop(family, a, text, sizeof text)) addrs.push_back(text);
            }
        freeifaddrs(ifs);
        for (auto &n : names) list += " tcp:" + n;
        for (auto &a : addrs) list += " tcp:" + a;
    });
    return list.c_str();
}

const uint8_t *host_bytes(const TcpNic *t) {
    if (t->family == AF_INET)
        return reinterpret_cast<const uint8_t *>(
            &reinterpret_cast<const sockaddr_in *>(&t->local)->sin_addr);
    return reinterpret_cast<const uint8_t *>(
        &reinterpret_cast<const sockaddr_in6 *>(&t->local)->sin6_addr);
}

const NicOps kNicOps = {
    .size = sizeof(NicOps),
    .open = nic_open,
    .close = nic_close,
    .ns_by_name = ns_by_name,
    .ns_by_addr = ns_by_addr,
    .autodiscovery = autodiscovery,
    .connect_wait = connect_wait,
    .connect_wait_fd = connect_wait_fd,
    .connect_accept = connect_accept,
    .connect_reject = connect_reject,
    .conn_free = conn_free,
};

const ViOps kViOps = {
    .size = sizeof(ViOps),
    .create = vi_create,
    .destroy = vi_destroy,
    .connect_request = connect_request,
    .peer_request = peer_request,
    .peer_progress = peer_progress,
    .endpoints = endpoints,
    .disconnect = disconnect,
    .leave = leave,
    .abandon = abandon,
    .post_send = post_send,
    .post_recv = post_recv,
    .inline_max = nullptr, // a send is a socket write from registered memory already
    .post_inline = nullptr,
    .progress = progress,
    .pending = pending,
    .held = held,
    .arm = enosys::arm,
    .disarm = enosys::disarm,
    .armed = enosys::armed,
    .wait_fds = wait_fds,
    .sleep_fds = sleep_fds,
    .check_peer = check_peer,
    .exchange_cpu = enosys::exchange_cpu,
    .peer_busy = peer_busy,
    .idle = idle,
    .drop_aux = enosys::drop_aux,
    .direct_begin = direct_begin,
    .direct_end = direct_end,
    // A non-blocking look at the socket is cheap next to a sleep; readiness is level-triggered.
    .wait_caps = kCapSpin | kCapSpinByProgress,
};

} // namespace

VIP_RETURN nic_open(Nic *nic, const char *device) {
    auto *t = new (std::nothrow) TcpNic;
    if (!t) return VIP_ERROR_RESOURCE;
    if (!choose(device, t)) {
        VIPL_INFO("VipOpenNic: no interface or address matches \"%s\"", device);
        delete t;
        return VIP_INVALID_PARAMETER;
    }
    nic->prov = t;
    VIP_NIC_ATTRIBUTES &a = nic->attrs;
    snprintf(a.Name, sizeof a.Name, "%s", device);
    a.HardwareVersion = 1;
    a.ProviderVersion = kWireVersion;
    a.NicAddressLen = t->family == AF_INET ? 4 : 16;
    memcpy(nic->address, host_bytes(t), a.NicAddressLen);
    a.MaxDiscriminatorLen = kMaxDisc;
    a.NativeMTU = 1460;
    a.ReliabilityLevelSupport =
        VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION;
    a.RDMAReadSupport = VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION;
    if (a.MaxTransferSize > 0xFFFFFFFFul)
        a.MaxTransferSize = 0xFFFFFFFFul; // frame lengths are 32 bits
    return VIP_SUCCESS;
}

void nic_close(Nic *nic) {
    TcpNic *t = tcp_nic(nic);
    if (!t) return;
    listeners_close(t);
    delete t;
    nic->prov = nullptr;
}

uint16_t port_of(const uint8_t *d, uint16_t len) {
    // Two bytes name a port outright (network order); anything else hashes
    // into the configured range.
    if (len == 2 && (d[0] || d[1])) return static_cast<uint16_t>(d[0] << 8 | d[1]);
    uint32_t h = 2166136261u;
    for (int i = 0; i < len; ++i) h = (h ^ d[i]) * 16777619u;
    const TcpConfig &c = config();
    return static_cast<uint16_t>(c.port_base + h % c.port_range);
}

void size_receive_buffer(int fd) {
    // Privileged processes get the whole size; others what net.core.rmem_max allows.
    int want = static_cast<int>(std::min<uint64_t>(4ull * config().window, 1u << 30));
    int saved = errno;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof want) != 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
    errno = saved;
}

uint32_t own_window(int fd) {
    int have = 0;
    socklen_t len = sizeof have;
    int saved = errno;
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &have, &len);
    errno = saved;
    // The kernel reports twice what it keeps for data; a quarter of the
    // report leaves room for its per-packet overhead with small frames.
    uint64_t w =
        std::min<uint64_t>(static_cast<uint64_t>(have > 0 ? have : 0) / 4, config().window);
    return static_cast<uint32_t>(std::max<uint64_t>(w, kMinWindow));
}

std::string address_text(const sockaddr_storage &ss) {
    char host[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (ss.ss_family == AF_INET) {
        auto *s = reinterpret_cast<const sockaddr_in *>(&ss);
        inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
        port = ntohs(s->sin_port);
        return std::string(host) + ":" + std::to_string(port);
    }
    auto *s = reinterpret_cast<const sockaddr_in6 *>(&ss);
    inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
    port = ntohs(s->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
}

namespace {

bool is_loopback(const sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(reinterpret_cast<const sockaddr_in *>(sa)->sin_addr.s_addr) >> 24) == 127;
    return sa->sa_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr);
}

const uint8_t *addr_bytes(const sockaddr *sa, size_t *len) {
    if (sa->sa_family == AF_INET) {
        *len = 4;
        return reinterpret_cast<const uint8_t *>(
            &reinterpret_cast<const sockaddr_in *>(sa)->sin_addr);
    }
    *len = 16;
    return reinterpret_cast<const uint8_t *>(
        &reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr);
}

// Is sa one of this host's own addresses?
bool is_local(const sockaddr *sa) {
    if (is_loopback(sa)) return true;
    ifaddrs *ifs = nullptr;
    if (getifaddrs(&ifs) != 0) return false;
    size_t len;
    const uint8_t *b = addr_bytes(sa, &len);
    bool found = false;
    for (const ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != sa->sa_family) continue;
        size_t l2;
        const uint8_t *b2 = addr_bytes(i->ifa_addr, &l2);
        found = l2 == len && !memcmp(b, b2, len);
    }
    freeifaddrs(ifs);
    return found;
}

// A loopback NIC reaches this host only.
bool reachable(const TcpNic *t, const sockaddr_storage *to) {
    return !is_loopback(reinterpret_cast<const sockaddr *>(&t->local)) ||
           is_loopback(reinterpret_cast<const sockaddr *>(to));
}

} // namespace

bool to_sockaddr(const Nic *nic, const VIP_NET_ADDRESS *addr, sockaddr_storage *out,
                 socklen_t *len) {
    const TcpNic *t = static_cast<const TcpNic *>(nic->prov);
    memset(out, 0, sizeof *out);
    uint16_t port =
        htons(port_of(addr->HostAddress + addr->HostAddressLen, addr->DiscriminatorLen));
    if (addr->HostAddressLen == 4) {
        auto *s = reinterpret_cast<sockaddr_in *>(out);
        s->sin_family = AF_INET;
        memcpy(&s->sin_addr, addr->HostAddress, 4);
        s->sin_port = port;
        *len = sizeof *s;
        return t->family == AF_INET && reachable(t, out);
    }
    if (addr->HostAddressLen == 16) {
        auto *s = reinterpret_cast<sockaddr_in6 *>(out);
        s->sin6_family = AF_INET6;
        memcpy(&s->sin6_addr, addr->HostAddress, 16);
        s->sin6_port = port;
        *len = sizeof *s;
        return t->family == AF_INET6 && reachable(t, out);
    }
    if (addr->HostAddressLen == 0) { // this NIC's own address
        memcpy(out, &t->local, t->local_len);
        *len = t->local_len;
        if (t->family == AF_INET)
            reinterpret_cast<sockaddr_in *>(out)->sin_port = port;
        else
            reinterpret_cast<sockaddr_in6 *>(out)->sin6_port = port;
        return true;
    }
    return false;
}

VIP_RETURN ns_by_name(Nic *nic, const char *name, VIP_NET_ADDRESS *out, VIP_ULONG index) {
    TcpNic *t = tcp_nic(nic);
    if (!*name) return VIP_ERROR_NAMESERVICE;
    std::vector<sockaddr_storage> found;
    VIP_RETURN rc = resolve_name(name, AF_UNSPEC, &found);
    if (rc == VIP_ERROR_NAMESERVICE) {
        // The host's own name, known to neither /etc/hosts nor DNS.
        char self[256] = {};
        if (gethostname(self, sizeof self - 1) == 0 && !strcasecmp(self, name)) {
            uint8_t lo[4] = {127, 0, 0, 1};
            sockaddr_storage ss{};
            ss.ss_family = AF_INET;
            memcpy(&reinterpret_cast<sockaddr_in *>(&ss)->sin_addr, lo, 4);
            found.push_back(ss);
            rc = VIP_SUCCESS;
        }
    }
    if (rc != VIP_SUCCESS) return rc;
    // This host, by whatever name or address, is reached through this NIC at
    // the NIC's own address; other hosts by their addresses of the NIC's family.
    std::vector<std::vector<uint8_t>> seen;
    size_t own_len = t->family == AF_INET ? 4 : 16;
    for (const sockaddr_storage &r : found) {
        const sockaddr *sa = reinterpret_cast<const sockaddr *>(&r);
        std::vector<uint8_t> v;
        if (is_local(sa)) {
            v.assign(nic->address, nic->address + own_len);
        } else if (r.ss_family == t->family) {
            size_t len;
            const uint8_t *b = addr_bytes(sa, &len);
            v.assign(b, b + len);
        } else {
            continue;
        }
        if (std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(v);
    }
    if (index >= seen.size()) return VIP_ERROR_NAMESERVICE;
    out->HostAddressLen = static_cast<VIP_UINT16>(seen[index].size());
    out->DiscriminatorLen = 0;
    memcpy(out->HostAddress, seen[index].data(), seen[index].size());
    return VIP_SUCCESS;
}

VIP_RETURN ns_by_addr(Nic *nic, const VIP_NET_ADDRESS *addr, char *name, VIP_ULONG *len) {
    if (addr->HostAddressLen != nic->attrs.NicAddressLen) return VIP_ERROR_NAMESERVICE;
    char host[NI_MAXHOST] = {};
    if (!memcmp(addr->HostAddress, nic->address, addr->HostAddressLen)) {
        // This NIC: the host's own name, which resolves back to it.
        if (gethostname(host, sizeof host - 1) != 0) return VIP_ERROR_NAMESERVICE;
    } else {
        // Any host, reachable from this NIC or not: names are not routes.
        sockaddr_storage ss{};
        if (addr->HostAddressLen == 4) {
            ss.ss_family = AF_INET;
            memcpy(&reinterpret_cast<sockaddr_in *>(&ss)->sin_addr, addr->HostAddress, 4);
        } else {
            ss.ss_family = AF_INET6;
            memcpy(&reinterpret_cast<sockaddr_in6 *>(&ss)->sin6_addr, addr->HostAddress, 16);
        }
        std::string found;
        VIP_RETURN rc = resolve_addr(ss, &found);
        if (rc != VIP_SUCCESS) return rc;
        snprintf(host, sizeof host, "%s", found.c_str());
    }
    VIP_ULONG need = strlen(host) + 1, have = *len;
    *len = need;
    if (have < need) return VIP_ERROR_RESOURCE;
    memcpy(name, host, need);
    return VIP_SUCCESS;
}

VIP_RETURN autodiscovery(Nic *nic, VIP_AUTODISCOVERY_LIST *list) {
    if (list->NumAdAddrs < 1 || !list->ADAddrArray || !list->ADAddrArray[0]) {
        list->NumAdAddrs = 1;
        return VIP_ERROR_RESOURCE;
    }
    VIP_NET_ADDRESS *a = list->ADAddrArray[0];
    a->HostAddressLen = nic->attrs.NicAddressLen;
    a->DiscriminatorLen = 0;
    memcpy(a->HostAddress, nic->address, nic->attrs.NicAddressLen);
    list->NumAdAddrs = 1;
    list->NumberOfHops = 0;
    return VIP_SUCCESS;
}

} // namespace vipl::tcp

namespace vipl {

extern const ProviderOps tcp_provider = {
    sizeof(ProviderOps),
    "tcp",
    tcp::devices,
    "across hosts: one TCP connection per VI, frames in network byte order, RDMA checked "
    "on the target, dead links found by keepalive; connection management with Boost.Asio",
    tcp::matches,
    &tcp::kNicOps,
    &tcp::kViOps,
    tcp::config_table,
};

} // namespace vipl
