#include "vipl_stats.h"

#include "../../src/stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vipl::db::test {

namespace {

constexpr size_t kTableSize = sizeof(StatHeader) + sizeof(StatSlot) * kStatSlots;

Carrier carrier_from(uint8_t t) {
    switch (static_cast<StatTransport>(t)) {
    case StatTransport::shm:
        return Carrier::shm;
    case StatTransport::tcp:
        return Carrier::tcp;
    default:
        return Carrier::kernel;
    }
}

// Maps the table that process pid keeps (read-only); null when it has none.
const StatHeader *map_table(int pid, std::string *why) {
    std::string dir = pid == 0 ? "/proc/self/fd" : "/proc/" + std::to_string(pid) + "/fd";
    int self = pid == 0 ? getpid() : pid;
    DIR *d = opendir(dir.c_str());
    if (!d) {
        if (why) *why = dir + ": " + std::strerror(errno);
        return nullptr;
    }
    const StatHeader *found = nullptr;
    std::string name = std::string("/memfd:") + kStatName;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::string path = dir + "/" + e->d_name;
        char target[256];
        ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        // "/memfd:vipl-db-stats (deleted)"
        if (std::strncmp(target, name.c_str(), name.size()) != 0) continue;
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        void *p = mmap(nullptr, kTableSize, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) continue;
        auto *h = static_cast<const StatHeader *>(p);
        if (std::memcmp(h->magic, kStatMagic, sizeof kStatMagic) == 0 && h->pid == self) {
            found = h;
            break;
        }
        munmap(p, kTableSize);
    }
    closedir(d);
    if (!found && why) *why = "process " + std::to_string(self) + " has no " + kStatName + " table";
    return found;
}

} // namespace

const char *carrier_name(Carrier c) {
    switch (c) {
    case Carrier::none:
        return "none";
    case Carrier::kernel:
        return "kernel";
    case Carrier::shm:
        return "shm";
    case Carrier::tcp:
        return "tcp";
    }
    return "?";
}

bool stat_rows(int pid, std::vector<StatRow> *rows, std::string *why) {
    rows->clear();
    const StatHeader *h = map_table(pid, why);
    if (!h) return false;
    auto *slots = reinterpret_cast<const StatSlot *>(h + 1);
    for (uint32_t i = 0; i < kStatSlots && i < h->slots; ++i) {
        const StatSlot &s = slots[i];
        if (!s.in_use.load(std::memory_order_acquire)) continue;
        StatRow r;
        r.fd = s.fd;
        r.server = s.server != 0;
        r.carrier = carrier_from(s.transport);
        r.peer.assign(s.peer, strnlen(s.peer, sizeof s.peer));
        r.bytes_in = s.bytes_in.load(std::memory_order_relaxed);
        r.bytes_out = s.bytes_out.load(std::memory_order_relaxed);
        r.calls_in = s.calls_in.load(std::memory_order_relaxed);
        r.calls_out = s.calls_out.load(std::memory_order_relaxed);
        rows->push_back(std::move(r));
    }
    munmap(const_cast<StatHeader *>(h), kTableSize);
    return true;
}

Carrier carrier_of(int fd) {
    std::vector<StatRow> rows;
    if (!stat_rows(0, &rows)) return Carrier::none;
    for (const StatRow &r : rows)
        if (r.fd == fd) return r.carrier;
    return Carrier::none;
}

} // namespace vipl::db::test
