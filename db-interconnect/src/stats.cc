#include "stats.h"

#include "real.h"
#include "thread_state.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string_view>

namespace vipl::db {

namespace {

std::mutex g_mu;
StatHeader *g_table = nullptr;
StatSlot *g_slots = nullptr;
int g_fd = -1;

constexpr size_t kSize = sizeof(StatHeader) + sizeof(StatSlot) * kStatSlots;

// Called with g_mu held.
bool make_table() {
    if (g_table) return true;
    Inside in;
    int fd = memfd_create(kStatName, MFD_CLOEXEC);
    if (fd < 0) return false;
    if (ftruncate(fd, static_cast<off_t>(kSize)) != 0) {
        real().close(fd);
        return false;
    }
    void *p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        real().close(fd);
        return false;
    }
    g_table = static_cast<StatHeader *>(p);
    std::memcpy(g_table->magic, kStatMagic, sizeof kStatMagic);
    g_table->slots = kStatSlots;
    g_table->pid = getpid();
    g_slots = reinterpret_cast<StatSlot *>(g_table + 1);
    g_fd = fd;
    return true;
}

// Appends the pieces to out (len bytes, always terminated, cut short if need be).
// Not snprintf: a program that never formats with glibc (PostgreSQL has its own) would
// fault its formatting code in, in every process, for this one line.
void put(char *out, size_t len, std::initializer_list<std::string_view> pieces) {
    size_t n = 0;
    for (std::string_view p : pieces) {
        size_t k = std::min(p.size(), len - 1 - n);
        std::memcpy(out + n, p.data(), k);
        n += k;
    }
    out[n] = '\0';
}

std::string_view port_text(uint16_t port, char (&buf)[8]) {
    return {buf, static_cast<size_t>(std::to_chars(buf, buf + sizeof buf, port).ptr - buf)};
}

void peer_text(int fd, char *out, size_t len) {
    sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    out[0] = '\0';
    if (getpeername(fd, reinterpret_cast<sockaddr *>(&ss), &sl) != 0) return;
    char ip[INET6_ADDRSTRLEN] = {};
    char port[8];
    if (ss.ss_family == AF_INET) {
        auto *in = reinterpret_cast<sockaddr_in *>(&ss);
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        put(out, len, {ip, ":", port_text(ntohs(in->sin_port), port)});
    } else if (ss.ss_family == AF_INET6) {
        auto *in6 = reinterpret_cast<sockaddr_in6 *>(&ss);
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
        put(out, len, {"[", ip, "]:", port_text(ntohs(in6->sin6_port), port)});
    } else if (ss.ss_family == AF_UNIX) {
        // The client end of a unix connection is usually unnamed: show the server's path.
        auto *un = reinterpret_cast<sockaddr_un *>(&ss);
        auto path = [&] {
            return std::string_view(un->sun_path,
                                    strnlen(un->sun_path, sl - offsetof(sockaddr_un, sun_path)));
        };
        if (sl > offsetof(sockaddr_un, sun_path) && un->sun_path[0]) {
            put(out, len, {"unix:", path()});
        } else {
            sl = sizeof ss;
            if (getsockname(fd, reinterpret_cast<sockaddr *>(&ss), &sl) == 0 &&
                sl > offsetof(sockaddr_un, sun_path) && un->sun_path[0])
                put(out, len, {"unix:", path()});
            else
                put(out, len, {"unix"});
        }
    }
}

} // namespace

std::mutex &stat_lock() {
    return g_mu;
}

StatSlot *stat_open(int fd, bool server, int kernel_fd) noexcept {
    std::lock_guard<std::mutex> g(g_mu);
    if (!make_table()) return nullptr;
    for (uint32_t i = 0; i < kStatSlots; ++i) {
        StatSlot &s = g_slots[i];
        if (s.in_use.load(std::memory_order_relaxed)) continue;
        s.fd = fd;
        s.transport = static_cast<uint8_t>(StatTransport::kernel);
        s.server = server ? 1 : 0;
        peer_text(kernel_fd, s.peer, sizeof s.peer);
        for (auto *c : {&s.bytes_in, &s.bytes_out, &s.calls_in, &s.calls_out, &s.messages_in,
                        &s.messages_out, &s.spins, &s.sleeps})
            c->store(0, std::memory_order_relaxed);
        s.in_use.store(1, std::memory_order_release);
        return &s;
    }
    return nullptr;
}

void stat_close(StatSlot *s) noexcept {
    if (s) s->in_use.store(0, std::memory_order_release);
}

void stat_after_fork_child() noexcept {
    // The parent's table stays the parent's: drop our mapping and descriptor of it.
    if (g_table) munmap(g_table, kSize);
    if (g_fd >= 0) real().close(g_fd);
    g_table = nullptr;
    g_slots = nullptr;
    g_fd = -1;
    new (&g_mu) std::mutex();
}

} // namespace vipl::db
