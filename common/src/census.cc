#include "census.h"

#include "random_seed.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

namespace vipl::detail {

namespace {

std::atomic<uint64_t> g_token{0};
uint64_t g_child_token = 0;

uint64_t make_token() {
    static std::atomic<uint32_t> seq{0};
    uint32_t r = random_seed() ^ (seq.fetch_add(1, std::memory_order_relaxed) << 16);
    return (static_cast<uint64_t>(static_cast<uint32_t>(getpid())) << 32) | r;
}

// The registry.  A plain mutex: the fork handlers take it around fork(), so the child
// finds it free and the list exactly as it was.
std::mutex &registry_lock() {
    static std::mutex m;
    return m;
}
std::vector<Census *> &registry() {
    static std::vector<Census *> v;
    return v;
}

void before_fork() {
    registry_lock().lock();
    if (registry().empty()) return;
    g_child_token = make_token();
    for (Census *c : registry()) c->add(g_child_token);
}

void after_fork_parent() {
    registry_lock().unlock();
}

void after_fork_child() {
    // The token made before fork carries the parent's pid: the child makes its own and
    // puts it in place of that one, adding before removing so that the count never
    // drops to the parent alone.
    if (!registry().empty()) {
        uint64_t mine = make_token();
        for (Census *c : registry()) {
            c->add(mine);
            c->remove(g_child_token);
        }
        g_token.store(mine, std::memory_order_relaxed);
    } else {
        g_token.store(0, std::memory_order_relaxed);
    }
    registry_lock().unlock();
}

struct ForkHook {
    ForkHook() { pthread_atfork(before_fork, after_fork_parent, after_fork_child); }
} g_hook;

} // namespace

uint64_t holder_token() {
    uint64_t t = g_token.load(std::memory_order_relaxed);
    if (t) return t;
    uint64_t want = make_token();
    return g_token.compare_exchange_strong(t, want, std::memory_order_relaxed) ? want : t;
}

bool holder_alive(uint64_t token) {
    auto pid = static_cast<int>(token >> 32);
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno != EPERM) return false;
    return task_alive(pid, 0);
}

bool task_alive(int pid, int tid) {
    char path[64], buf[256];
    if (tid > 0)
        snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, tid);
    else
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    const char *paren = strrchr(buf, ')');
    return !(paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'));
}

void Census::change(uint64_t t, int d) {
    uint64_t w = word.load(std::memory_order_acquire);
    for (;;) {
        uint64_t n = w >> 56;
        if (n == kMany) return;
        n = n + static_cast<uint64_t>(static_cast<int64_t>(d));
        if (n > kMany) n = kMany;
        uint64_t next = (n << 56) | ((w ^ t) & kTokenBits);
        if (word.compare_exchange_weak(w, next, std::memory_order_acq_rel)) return;
    }
}

void census_watch(Census *c) {
    std::lock_guard<std::mutex> g(registry_lock());
    registry().push_back(c);
}

void census_forget(Census *c) {
    std::lock_guard<std::mutex> g(registry_lock());
    auto &v = registry();
    v.erase(std::remove(v.begin(), v.end(), c), v.end());
}

} // namespace vipl::detail
