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
    int anon_maps = 0;  // of which anonymous (no file, no [name])
    int memfd_fds = 0;  // descriptors of memfds
    int memfd_maps = 0; // mappings of memfds
    int threads = 0;
    std::string fd_list;            // "fd -> target" lines, for failure messages
    std::vector<std::string> files; // what each mapping maps ("[heap]", a path, "" anonymous)
};

// A few anonymous mappings either way that two censuses of one process may differ by:
// the program's own allocator maps and unmaps anonymous memory as its use varies
// (python3's object arenas are 1 MiB mappings of their own, glibc's large blocks too).
// A leak per connection shows as hundreds after a thousand connections.
constexpr int kAnonSlack = 4;

// Whether b holds what a held: the same descriptors, memfds (descriptors and mappings),
// file mappings and threads, and anonymous mappings within kAnonSlack.
bool same_holdings(const Census &a, const Census &b);

// Fails the test when the process cannot be read.
Census census(int pid);
std::string describe(const Census &c);
// The mappings b has more or fewer of than a, by what they map ("+2 /usr/lib/x.so").
std::string mapping_changes(const Census &a, const Census &b);

// The names in /dev/shm that contain `part` (libvipl itself makes none there: its shared
// memory is memfds, which go with their last holder; this catches any that would stay).
std::vector<std::string> dev_shm(const std::string &part);

} // namespace dbt
