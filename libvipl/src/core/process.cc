// Process-wide state: the object tables and the fork epoch.
#include "core/fds.h"
#include "core/handles.h"
#include "core/notify.h"
#include "core/objects.h"

#include <atomic>
#include <pthread.h>
#include <unistd.h>

namespace vipl {
namespace {

std::atomic<uint32_t> g_epoch{1};
std::atomic<int> g_pid{0};

void after_fork_in_child() {
    g_epoch.fetch_add(1, std::memory_order_relaxed);
    g_pid.store(getpid(), std::memory_order_relaxed);
    // The child inherits none of the parent's resources: not even descriptors
    // (its copy of a connection's socket would hide the parent's death).
    fd_close_all_inherited();
    notifier_forget_after_fork();
}

struct ForkHook {
    ForkHook() { pthread_atfork(nullptr, nullptr, after_fork_in_child); }
};
ForkHook g_fork_hook;

} // namespace

int self_pid() {
    int pid = g_pid.load(std::memory_order_relaxed);
    if (!pid) {
        pid = getpid();
        g_pid.store(pid, std::memory_order_relaxed);
    }
    return pid;
}

uint32_t process_epoch() {
    return g_epoch.load(std::memory_order_relaxed);
}

} // namespace vipl
