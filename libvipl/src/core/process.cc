// Process-wide state: the fork handlers and the holder sets of shareable objects.
#include "core/arena.h"
#include "core/fds.h"
#include "core/handles.h"
#include "core/notify.h"
#include "core/objects.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

namespace vipl {
namespace {

std::atomic<int> g_pid{0};
uint64_t g_token_before_fork = 0;

void before_fork() {
    g_token_before_fork = self_token();
    nics().lock_for_fork();
    ptags().lock_for_fork();
    vis().lock_for_fork();
    cqs().lock_for_fork();
    conns().lock_for_fork();
    notifier_lock_for_fork();
}

void unlock_all() {
    notifier_unlock_after_fork();
    conns().unlock_after_fork();
    cqs().unlock_after_fork();
    vis().unlock_after_fork();
    ptags().unlock_after_fork();
    nics().unlock_after_fork();
}

void after_fork_in_parent() {
    unlock_all();
}

void after_fork_in_child() {
    uint64_t parent = g_token_before_fork;
    renew_self_token();
    g_pid.store(getpid(), std::memory_order_relaxed);
    unlock_all();
    // The child inherits none of the parent's private resources, not even
    // descriptors (its copy of a connection's socket would hide the parent's
    // death); shareable objects' descriptors were never on that list.
    fd_close_all_inherited();
    notifier_forget_after_fork();
    // What the parent shared, the child holds too.
    uint64_t me = self_token();
    int pid = self_pid();
    vis().for_each_in_child([&](Vi *vi) {
        vis().local(vi).watched = false;
        if (vi->shareable && vi->holders->has(parent)) vi->holders->add(me, pid);
    });
    cqs().for_each_in_child([&](Cq *cq) {
        if (cq->shareable && cq->holders->has(parent)) cq->holders->add(me, pid);
    });
}

struct ForkHook {
    ForkHook() { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); }
};
ForkHook g_fork_hook;

// A process counts as gone once it is a zombie: it holds nothing any more.
bool process_alive(int32_t pid) {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno != EPERM) return false;
    char path[64], buf[256];
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

} // namespace

int self_pid() {
    int pid = g_pid.load(std::memory_order_relaxed);
    if (!pid) {
        pid = getpid();
        g_pid.store(pid, std::memory_order_relaxed);
    }
    return pid;
}

bool Holders::has(uint64_t t) const {
    for (const auto &k : token)
        if (k.load(std::memory_order_acquire) == t) return true;
    return false;
}

bool Holders::add(uint64_t t, int32_t p) {
    if (has(t)) return true;
    for (int i = 0; i < kMax; ++i) {
        uint64_t free = 0;
        if (token[i].compare_exchange_strong(free, t, std::memory_order_acq_rel)) {
            pid[i].store(p, std::memory_order_release);
            return true;
        }
    }
    return false;
}

void Holders::remove(uint64_t t) {
    for (auto &k : token) {
        uint64_t want = t;
        k.compare_exchange_strong(want, 0, std::memory_order_acq_rel);
    }
}

void Holders::reset(uint64_t t, int32_t p) {
    for (int i = 1; i < kMax; ++i) token[i].store(0, std::memory_order_relaxed);
    pid[0].store(p, std::memory_order_relaxed);
    token[0].store(t, std::memory_order_release);
    epoch.fetch_add(1, std::memory_order_acq_rel);
}

bool Holders::others_alive(uint64_t t) {
    bool any = false;
    for (int i = 0; i < kMax; ++i) {
        uint64_t k = token[i].load(std::memory_order_acquire);
        if (!k || k == t) continue;
        if (process_alive(pid[i].load(std::memory_order_acquire)))
            any = true;
        else
            token[i].compare_exchange_strong(k, 0, std::memory_order_acq_rel);
    }
    return any;
}

} // namespace vipl
