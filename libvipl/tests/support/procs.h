// Helpers of the tests that fork: endpoints built with plain VIPL calls (usable on any
// thread and in children, where Catch2 assertions cannot be used), parent/child control
// pipes, children checked for failed assertions, and views of what the kernel shows of
// a process; time and text helpers every test program shares.
#pragma once

#include "kit.h"
#include "support.h"

#include <csignal>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <sys/types.h>
#include <vector>

// REQUIRE on an Ep method, showing the endpoint's error when it fails.
#define EP_REQUIRE(ep, expr)                                                                       \
    do {                                                                                           \
        bool ok_ = (expr);                                                                         \
        INFO((ep).err);                                                                            \
        REQUIRE(ok_);                                                                              \
    } while (0)

namespace vt {

// Assertions that failed in this process so far (counted by a Catch2 listener).
int failed_assertions();
// vt::spawn_child and vt::run_child, where a failed CHECK in the child also
// makes it exit non-zero (98): only a failed REQUIRE would otherwise show in
// its status.
int spawn_checked(const std::function<int()> &fn);
int run_checked(const std::function<int()> &fn, int timeout_s = 60);

// Reads an integer parameter a parent passed to a fresh process.

// Two pipes created before fork: small values in either direction.
struct Channel {
    int down[2] = {-1, -1}; // parent -> child
    int up[2] = {-1, -1};   // child -> parent
    bool child = false;
    Channel();
    ~Channel();
    Channel(const Channel &) = delete;
    Channel &operator=(const Channel &) = delete;
    void in_child();  // call first thing in the child
    void in_parent(); // call after fork in the parent
    bool send(uint64_t v);
    // false on timeout or when the other side is gone.
    bool recv(uint64_t *v, int timeout_ms);
};

// A forked child killed and reaped when the scope ends unless waited for.
struct Child {
    pid_t pid = -1;
    explicit Child(pid_t p) : pid(p) {}
    ~Child();
    Child(const Child &) = delete;
    Child &operator=(const Child &) = delete;
    int wait(int timeout_s = 60); // status as from waitpid, -1 on timeout
    void kill_now(int sig = SIGKILL);
};

struct Opts {
    VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY;
    bool rdma_write = false;
    bool rdma_read = false;
    VIP_ULONG mtu = 0; // 0: the NIC's
    bool send_cq = false;
    bool recv_cq = false;
    std::string device = "shm0"; // the NIC Ep::open opens (tests of the process model: any)
};

// What the endpoint helpers (Ep here, the process tests' ShVi) share: the first
// failure in words, and connection set-up by discriminator.  Methods return false
// and set `err` on failure; nothing throws.
struct FirstError {
    std::string err;

    bool fail(const std::string &what);
    bool check(VIP_RETURN rc, const char *what, VIP_RETURN want = VIP_SUCCESS);
    // Waits on nic for the client of disc and accepts it with vi.
    bool accept_on(VIP_NIC_HANDLE nic, VIP_VI_HANDLE vi, const std::string &disc, int timeout_ms);
    // Connects vi as disc + "c" to the server of disc, names looked up through ns,
    // retrying while nobody waits yet.
    bool connect_through(VIP_NIC_HANDLE ns, VIP_VI_HANDLE vi, const std::string &disc,
                         int timeout_ms);
};

// One VI on its own NIC with one registered region.
struct Ep : FirstError {
    VIP_NIC_HANDLE nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr;
    VIP_NIC_ATTRIBUTES na{};
    VIP_VI_HANDLE vi = nullptr;
    VIP_CQ_HANDLE scq = nullptr, rcq = nullptr;
    uint8_t *mem = nullptr;
    size_t size = 0;
    VIP_MEM_HANDLE mh = 0;

    Ep() = default;
    ~Ep() { close(); }
    Ep(const Ep &) = delete;
    Ep &operator=(const Ep &) = delete;

    bool open(size_t bytes, const Opts &o = Opts());
    // Server side: waits for the client of disc and accepts it.
    bool accept(const std::string &disc, int timeout_ms = 10000);
    // Client side: retries while nobody listens yet.
    bool connect(const std::string &disc, int timeout_ms = 10000);
    void close();

    VIP_DESCRIPTOR *desc(size_t i) { return reinterpret_cast<VIP_DESCRIPTOR *>(mem) + i; }
    bool post_send(VIP_DESCRIPTOR *d);
    bool post_recv(VIP_DESCRIPTOR *d);
    // Waits for the next completion and checks it is `want` without error bits.
    bool wait_send(VIP_DESCRIPTOR *want, int timeout_ms = 10000);
    bool wait_recv(VIP_DESCRIPTOR *want, int timeout_ms = 10000);
    VIP_VI_STATE state();
    VIP_VI_COUNTERS counters();
};

// Lines of /proc/self/maps, names /proc/self/fd/* point at, lines of
// /proc/net/unix, entries of a directory: those containing `needle`.
std::vector<std::string> maps_with(const std::string &needle);
std::vector<std::string> fds_with(const std::string &needle);
std::vector<std::string> unix_sockets_with(const std::string &needle);
std::set<std::string> dir_entries(const char *dir);
// Shared mappings and regular-file descriptors (other than 0-2) of this
// process that are reachable through a directory (link count > 0): what
// another process could open by name.
std::vector<std::string> linked_shared_objects();

std::string join(const std::vector<std::string> &v);

// Wait status of a child in words ("exit 0", "signal 9", "timeout (killed)").

} // namespace vt
