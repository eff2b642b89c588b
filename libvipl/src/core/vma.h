// What kind of mappings hold a range of this process's memory: a Shareable registration
// must lie in shared ones (MAP_SHARED, memfd, shm), which a fork child shares instead of
// copying.
//
// The kernel tells it two ways.  Linux 6.11 answers PROCMAP_QUERY, an ioctl on
// /proc/self/maps that returns the one mapping covering an address with its flags;
// older kernels only print the whole table as text, which costs a process with
// hundreds of mappings (a PostgreSQL backend) tens of microseconds on every stream it
// sets up.  vma_shared asks the first way and falls back on the second.
//
// Thread and signal rules: thread-safe (a descriptor or a FILE of its own per call);
// not async-signal-safe (the text way uses stdio).
#pragma once

#include <cstdint>
#include <optional>

namespace vipl {

// Whether every byte of [addr, addr + len) lies in shared mappings (false for a hole).
bool vma_shared(uint64_t addr, uint64_t len) noexcept;

// The two ways, for tests: PROCMAP_QUERY (nullopt when this kernel has none or
// /proc is not there), and the text of /proc/self/maps.
std::optional<bool> vma_shared_query(uint64_t addr, uint64_t len) noexcept;
bool vma_shared_text(uint64_t addr, uint64_t len) noexcept;

} // namespace vipl
