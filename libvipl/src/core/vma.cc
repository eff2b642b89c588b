// Mappings of a memory range (vma.h): PROCMAP_QUERY first, the text of /proc/self/maps
// where the kernel has no such ioctl.
#include "core/vma.h"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

namespace vipl {

namespace {

// struct procmap_query of include/uapi/linux/fs.h (Linux 6.11), declared here: the
// headers of older distributions lack it.  size says which version the caller speaks.
struct ProcmapQuery {
    uint64_t size;
    uint64_t query_flags;
    uint64_t query_addr;
    uint64_t vma_start;
    uint64_t vma_end;
    uint64_t vma_flags;
    uint64_t vma_page_size;
    uint64_t vma_offset;
    uint64_t inode;
    uint32_t dev_major;
    uint32_t dev_minor;
    uint32_t vma_name_size;
    uint32_t build_id_size;
    uint64_t vma_name_addr;
    uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr uint64_t kVmaShared = 0x08; // PROCMAP_QUERY_VMA_SHARED

} // namespace

std::optional<bool> vma_shared_query(uint64_t addr, uint64_t len) noexcept {
    int saved = errno;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return std::nullopt;
    }
    enum { yes, no, unknown } answer = yes;
    const uint64_t end = addr + len;
    // One query per mapping the range crosses: the one covering `at`, or ENOENT for a hole.
    for (uint64_t at = addr; at < end;) {
        ProcmapQuery q{};
        q.size = sizeof q;
        q.query_addr = at;
        if (ioctl(fd, kProcmapQuery, &q) != 0) {
            // ENOTTY, EINVAL: a kernel without the query; the caller reads the text.
            answer = errno == ENOENT ? no : unknown;
            break;
        }
        if (!(q.vma_flags & kVmaShared) || q.vma_end <= at) {
            answer = no;
            break;
        }
        at = q.vma_end;
    }
    close(fd);
    errno = saved;
    if (answer == unknown) return std::nullopt;
    return answer == yes;
}

bool vma_shared_text(uint64_t addr, uint64_t len) noexcept {
    int saved = errno;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) {
        errno = saved;
        return false;
    }
    uint64_t at = addr, end = addr + len;
    char line[512];
    // Lines come in address order: each must pick up where the last one ended.
    while (at < end && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (hi <= at || lo > at) continue;
        if (perms[3] != 's') break;
        at = hi;
    }
    fclose(f);
    errno = saved;
    return at >= end;
}

bool vma_shared(uint64_t addr, uint64_t len) noexcept {
    if (std::optional<bool> q = vma_shared_query(addr, len)) return *q;
    return vma_shared_text(addr, len);
}

} // namespace vipl
