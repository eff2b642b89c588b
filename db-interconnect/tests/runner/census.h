// What a process holds, counted from /proc: the tests' evidence that connections leave
// nothing behind (descriptors, mappings, memfds, threads).
//
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include <string>
#include <vector>

namespace dbt {

struct Census {
    int fds = 0;        // entries of /proc/<pid>/fd
    int maps = 0;       // lines of /proc/<pid>/maps
    int memfd_fds = 0;  // descriptors of memfds
    int memfd_maps = 0; // mappings of memfds
    int threads = 0;
    std::string fd_list; // "fd -> target" lines, for failure messages
    bool operator==(const Census &o) const {
        return fds == o.fds && maps == o.maps && memfd_fds == o.memfd_fds &&
               memfd_maps == o.memfd_maps && threads == o.threads;
    }
};

// Fails the test when the process cannot be read.
Census census(int pid);
std::string describe(const Census &c);

// The names in /dev/shm that contain `part` (libvipl itself makes none there: its shared
// memory is memfds, which go with their last holder; this catches any that would stay).
std::vector<std::string> dev_shm(const std::string &part);

} // namespace dbt
