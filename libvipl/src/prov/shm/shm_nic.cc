// The shm provider's NIC: its ops tables, host address, name service and listeners.
#include "core/config.h"
#include "core/fds.h"
#include "core/log.h"
#include "core/random.h"
#include "prov/enosys.h"
#include "prov/shm/shm.h"
#include "prov/shm/shm_config.h"
#include "prov/util/unix_socket.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace vipl::shm {
namespace {

// This host, as seen by same-host peers: the boot id, mixed with the network
// namespace (abstract sockets do not cross namespaces).
void host_address(uint8_t out[kHostAddressLen]) {
    memset(out, 0, kHostAddressLen);
    char text[64] = {};
    if (FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re")) {
        if (!fgets(text, sizeof text, f)) text[0] = 0;
        fclose(f);
    }
    int n = 0;
    for (const char *p = text; *p && n < 2 * kHostAddressLen; ++p) {
        int v = (*p >= '0' && *p <= '9') ? *p - '0' : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10 : -1;
        if (v < 0) continue;
        out[n / 2] |= static_cast<uint8_t>(n % 2 ? v : v << 4);
        ++n;
    }
    struct stat st;
    if (stat("/proc/self/ns/net", &st) == 0) {
        uint64_t ino = st.st_ino;
        for (int i = 0; i < 8; ++i) out[8 + i] ^= static_cast<uint8_t>(ino >> (8 * i));
    }
}

bool matches(const char *device) {
    return !strcmp(device, "shm") || !strcmp(device, "shm0");
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
    .inline_max = inline_max,
    .post_inline = post_inline,
    .progress = progress,
    .pending = pending,
    .held = pending, // the doorbell shows nothing by itself; the look is at memory
    .arm = arm,
    .disarm = disarm,
    .armed = armed,
    .wait_fds = wait_fds,
    .sleep_fds = wait_fds,
    .check_peer = check_peer,
    .exchange_cpu = exchange_cpu,
    .peer_busy = peer_busy,
    .idle = enosys::idle,
    .drop_aux = drop_peer_regions,
    .direct_begin = nullptr, // a sleeper always waits on the doorbell
    .direct_end = nullptr,
    .wait_caps = kCapSpin | kCapEdge,
};

} // namespace

VIP_RETURN nic_open(Nic *nic, const char *device) {
    auto *s = new (std::nothrow) ShmNic;
    if (!s) return VIP_ERROR_RESOURCE;
    s->id = random_u64() ^ (static_cast<uint64_t>(getpid()) << 16);
    nic->prov = s;
    VIP_NIC_ATTRIBUTES &a = nic->attrs;
    snprintf(a.Name, sizeof a.Name, "%s", device);
    a.HardwareVersion = 1;
    a.ProviderVersion = kVersion;
    a.NicAddressLen = kHostAddressLen;
    host_address(nic->address);
    a.MaxDiscriminatorLen = kMaxDiscriminator;
    a.NativeMTU = config().ring_size / 2;
    a.ReliabilityLevelSupport =
        VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION;
    a.RDMAReadSupport = VIP_SERVICE_RELIABLE_DELIVERY | VIP_SERVICE_RELIABLE_RECEPTION;
    return VIP_SUCCESS;
}

void nic_close(Nic *nic) {
    ShmNic *s = shm_nic(nic);
    if (!s) return;
    for (auto &l : s->listeners) {
        fd_close(l.fd);
        for (auto &e : l.early) fd_close(e.sock);
        if (l.wait_ep >= 0) fd_close(l.wait_ep);
    }
    delete s;
    nic->prov = nullptr;
}

bool is_this_host(const Nic *nic, const VIP_NET_ADDRESS *addr) {
    return addr->HostAddressLen == 0 ||
           (addr->HostAddressLen == kHostAddressLen &&
            memcmp(addr->HostAddress, nic->address, kHostAddressLen) == 0);
}

static bool local_name(const char *name) {
    static const char *const fixed[] = {
        "localhost", "localhost.localdomain", "127.0.0.1", "::1", "ip6-localhost", "shm", "shm0"};
    for (const char *f : fixed)
        if (!strcasecmp(name, f)) return true;
    if (!strncmp(name, "127.", 4)) return true;
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) {
        if (!strcasecmp(name, host)) return true;
        // "host.domain" for a short hostname "host" (no DNS lookup: it could block).
        size_t n = strlen(host);
        if (!strncasecmp(name, host, n) && name[n] == '.') return true;
    }
    return false;
}

VIP_RETURN ns_by_name(Nic *nic, const char *name, VIP_NET_ADDRESS *out, VIP_ULONG index) {
    if (!*name || index > 0 || !local_name(name)) return VIP_ERROR_NAMESERVICE;
    out->HostAddressLen = kHostAddressLen;
    out->DiscriminatorLen = 0;
    memcpy(out->HostAddress, nic->address, kHostAddressLen);
    return VIP_SUCCESS;
}

VIP_RETURN ns_by_addr(Nic *nic, const VIP_NET_ADDRESS *addr, char *name, VIP_ULONG *len) {
    if (addr->HostAddressLen != kHostAddressLen || !is_this_host(nic, addr))
        return VIP_ERROR_NAMESERVICE;
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    VIP_ULONG need = strlen(host) + 1;
    VIP_ULONG have = *len;
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
    a->HostAddressLen = kHostAddressLen;
    a->DiscriminatorLen = 0;
    memcpy(a->HostAddress, nic->address, kHostAddressLen);
    list->NumAdAddrs = 1;
    list->NumberOfHops = 0;
    return VIP_SUCCESS;
}

std::string socket_name(const char *kind, const VIP_NET_ADDRESS *addr) {
    static const char hex[] = "0123456789abcdef";
    std::string s = std::string("vipl-shm-") + kind + ":";
    const uint8_t *d = addr->HostAddress + addr->HostAddressLen;
    for (int i = 0; i < addr->DiscriminatorLen; ++i) {
        s += hex[d[i] >> 4];
        s += hex[d[i] & 15];
    }
    return s;
}

// Listening socket for an abstract name, created on first use and kept until
// the NIC closes, so requests that arrive between two waits are queued.
int listener_for(Nic *nic, const std::string &name, VIP_RETURN *rc) {
    ShmNic *s = shm_nic(nic);
    std::lock_guard<Mutex> g(s->lock);
    for (auto &l : s->listeners)
        if (l.disc == name) return l.fd;
    int fd = util::seqpacket_socket();
    if (fd < 0) {
        VIPL_ERROR("listening socket: %s", strerror(errno));
        *rc = VIP_ERROR_RESOURCE;
        return -1;
    }
    sockaddr_un sa;
    socklen_t len = util::abstract_address(name, &sa);
    if (len == 0 || bind(fd, reinterpret_cast<sockaddr *>(&sa), len) < 0 || listen(fd, 512) < 0) {
        int err = len == 0 ? ENAMETOOLONG : errno;
        fd_close(fd);
        if (err == EADDRINUSE)
            VIPL_WARN("discriminator %s is already served by another process", name.c_str());
        else
            VIPL_ERROR("cannot listen on %s: %s", name.c_str(), strerror(err));
        *rc = VIP_ERROR_RESOURCE;
        return -1;
    }
    s->listeners.push_back({name, fd});
    return fd;
}

} // namespace vipl::shm

namespace vipl {

extern const ProviderOps shm_provider = {
    sizeof(ProviderOps),
    "shm",
    [] { return "shm0"; },
    "same host: shared-memory rings, COPY-SEND-COPY below SHM_COPY_THRESHOLD, SEND-GET above "
    "(process_vm_readv), doorbell only when the peer sleeps",
    shm::matches,
    &shm::kNicOps,
    &shm::kViOps,
    shm::config_table,
};

} // namespace vipl
