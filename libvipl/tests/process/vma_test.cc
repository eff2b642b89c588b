// core/vma.h: which ranges lie in shared mappings, asked both ways the kernel answers
// (PROCMAP_QUERY since Linux 6.11, the text of /proc/self/maps before), which must agree.
// VipRegisterMem's own cases (shareable_rules_test.cc) run whichever way this kernel has.
#include "core/vma.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

namespace {

const long kPage = sysconf(_SC_PAGESIZE);

uint64_t at(void *p, long pages = 0) {
    return reinterpret_cast<uint64_t>(p) + static_cast<uint64_t>(pages * kPage);
}

void *map(int flags, long pages = 1, void *where = nullptr) {
    void *p = mmap(where, static_cast<size_t>(pages * kPage), PROT_READ | PROT_WRITE,
                   flags | MAP_ANONYMOUS | (where ? MAP_FIXED : 0), -1, 0);
    REQUIRE(p != MAP_FAILED);
    return p;
}

// Both ways give `want` (the query where this kernel has it).
void expect(uint64_t addr, uint64_t len, bool want) {
    CHECK(vipl::vma_shared_text(addr, len) == want);
    std::optional<bool> q = vipl::vma_shared_query(addr, len);
    if (q) CHECK(*q == want);
    CHECK(vipl::vma_shared(addr, len) == want);
}

bool kernel_has_query() {
    utsname u{};
    int major = 0, minor = 0;
    REQUIRE(uname(&u) == 0);
    REQUIRE(std::sscanf(u.release, "%d.%d", &major, &minor) == 2);
    return major > 6 || (major == 6 && minor >= 11);
}

} // namespace

TEST_CASE("mappings: vma_shared, the kernel's query and the text agree", "[process][shm-only]") {
    // Three pages: shared, shared (a second mapping), private; then a hole.
    uint8_t *base = static_cast<uint8_t *>(map(MAP_SHARED, 4));
    map(MAP_SHARED, 1, base + kPage); // its own mapping: the range crosses two
    map(MAP_PRIVATE, 1, base + 2 * kPage);
    REQUIRE(munmap(base + 3 * kPage, static_cast<size_t>(kPage)) == 0);

    expect(at(base), kPage, true);
    expect(at(base), 2 * kPage, true);     // two shared mappings end to end
    expect(at(base, 1) + 100, 10, true);   // inside one
    expect(at(base), 3 * kPage, false);    // its last page private
    expect(at(base, 2), kPage, false);     // private alone
    expect(at(base, 3), kPage, false);     // a hole
    expect(at(base, 1), 3 * kPage, false); // shared, private, hole
    static uint8_t data[8192];
    expect(reinterpret_cast<uint64_t>(data), sizeof data, false);

    // Which way answered: the query on a kernel that has it, the text otherwise.
    CHECK(vipl::vma_shared_query(at(base), kPage).has_value() == kernel_has_query());
    munmap(base, static_cast<size_t>(3 * kPage));
}
