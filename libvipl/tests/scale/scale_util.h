// Helpers of the scale tests: what the kernel shows of memory, descriptors
// and mappings, control pipes between a coordinator and its worker
// processes, and descriptor limits.  Nothing here throws or uses Catch2, so
// it runs in forked workers too.
#pragma once

#include "kit.h"

#include <vipl.h>
#include <vipl_ext.h>

#include <cstdint>
#include <string>
#include <sys/resource.h>
#include <sys/types.h>
#include <vector>

namespace vt {

double now_s();

// /proc/meminfo, in KiB, and from /proc/slabinfo (root) what the kernel
// holds for /proc/PID/... entries that something instantiated: a program
// that lists /proc/PID/fd of every process (monitors do) makes an inode, a
// dentry and an LSM blob, about 0.9 KiB, for every open descriptor.
//
// Slab in /proc/meminfo counts slab pages: a few hundred new objects land in
// pages that are partly free already and do not show.  slab_objects_kib
// sums the objects in use instead (/proc/slabinfo, root; -1 elsewhere).
struct MemInfo {
    long long mem_free = 0, mem_available = 0, shmem = 0, slab = 0, page_tables = 0,
              kernel_stack = 0;
    long long proc_inodes_kib = 0, slab_objects_kib = -1;
};
MemInfo meminfo();
// KiB of slab objects made between a and b, those of /proc entries left out
// (libvipl makes none); from slab pages when the objects cannot be read.
double slab_growth(const MemInfo &a, const MemInfo &b);
// Waits (up to max_s) until Slab and Shmem stop moving: what processes that
// just ended held is freed by the kernel a little later, which would
// otherwise count against the next measurement.
void settle(double max_s = 2);

// /proc/PID/smaps_rollup, in KiB.  PSS divides each shared page between the
// processes that map it, so the sum over processes counts it once.
struct ProcMem {
    long long rss = 0, pss = 0, pss_anon = 0, pss_shmem = 0;
};
ProcMem proc_mem(pid_t pid);

// Of this process: open descriptors, mappings, mappings whose line contains needle.
int fd_count();
int map_count();
// The same of another process (-1 if it is gone).
int fd_count(pid_t pid);
int map_count(pid_t pid);
int maps_with(const char *needle);
// Lines of /proc/net/unix containing needle.
int unix_socket_count(const std::string &needle);

// Opens a NIC, makes a VI and closes everything again: what the library
// keeps for the life of the process (its handle tables) exists afterwards,
// so that counts taken then show only what later objects hold.
bool warm_up_library();

// Raises RLIMIT_NOFILE's soft limit to `want` descriptors; the hard limit
// too when it is lower and the process may (root).  Returns "" or why not.
std::string raise_nofile(rlim_t want);
// The number of descriptors a process of this tree may open at most.
rlim_t nofile_reachable();

// Two pipes made before fork: fixed-size messages both ways.
struct Link {
    int down[2] = {-1, -1}; // coordinator -> worker
    int up[2] = {-1, -1};   // worker -> coordinator
    Link();
    ~Link();
    Link(const Link &) = delete;
    Link &operator=(const Link &) = delete;
    void in_child();
    void in_parent();
    // Writes n bytes (n <= PIPE_BUF: atomic).
    bool put(const void *p, size_t n);
    // Reads n bytes within timeout_ms; false on timeout or when the other side is gone.
    bool get(void *p, size_t n, int timeout_ms);
    bool is_child = false;
};

// Forked workers, killed and reaped when the set goes out of scope (a test
// that failed half-way leaves nothing running).
struct Workers {
    std::vector<pid_t> pids;
    ~Workers();
    // Waits for every worker until deadline (now_s() clock); statuses as from
    // waitpid, -1 for a worker killed at the deadline.
    std::vector<int> wait_all(double deadline);
};

// Pattern of a message between two VIs: the same (seed, n) gives the same bytes.
void fill(uint8_t *p, size_t n, uint64_t seed);
bool check(const uint8_t *p, size_t n, uint64_t seed);

} // namespace vt
