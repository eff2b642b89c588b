// Process-wide state: the fork handlers and the holder sets of shareable objects.
#include "core/arena.h"
#include "core/fds.h"
#include "core/handles.h"
#include "core/notify.h"
#include "core/objects.h"
#include "prov/util/unix_socket.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace vipl {
namespace {

std::atomic<int> g_pid{0};
uint64_t g_token_before_fork = 0;
uint64_t g_child_token = 0;
std::atomic<uint64_t> g_mark_token{0};
std::atomic<int> g_mark_fd{-1};
std::atomic<int> g_held{0}; // shareable objects this process holds

void before_fork() {
    g_token_before_fork = self_token();
    g_child_token = new_token();
    g_table_birth.lock();
    for_each_made_table([](auto &t) { t.lock_for_fork(); });
    notifier_lock_for_fork();
    // The child becomes a holder of what we share before fork() returns, so
    // that no holder (us included) can take itself for the last one
    // meanwhile.  Its pid follows from the child; a slot whose pid never
    // comes belongs to a fork that failed (others_alive clears it).
    uint64_t me = g_token_before_fork, child = g_child_token;
    if (ViTable *v = TheTable<ViTable>::made())
        v->for_each_in_child([&](Vi *vi) {
            if (vi->shareable && vi->holders->has(me)) vi->holders->add(child, 0);
        });
    if (CqTable *c = TheTable<CqTable>::made())
        c->for_each_in_child([&](Cq *cq) {
            if (cq->shareable && cq->holders->has(me)) cq->holders->add(child, 0);
        });
}

void unlock_all() {
    notifier_unlock_after_fork();
    for_each_made_table([](auto &t) { t.unlock_after_fork(); });
    g_table_birth.unlock();
}

void after_fork_in_parent() {
    unlock_all();
}

void after_fork_in_child() {
    set_self_token(g_child_token);
    g_pid.store(getpid(), std::memory_order_relaxed);
    unlock_all();
    // The child inherits none of the parent's private resources, not even
    // descriptors (its copy of a connection's socket would hide the parent's
    // death); shareable objects' descriptors were never on that list.
    fd_close_all_inherited();
    notifier_forget_after_fork();
    uint64_t me = self_token();
    int pid = self_pid();
    int held = 0;
    g_mark_fd.store(-1, std::memory_order_relaxed); // the parent's, closed above
    // The mark first: a holder that sees our pid checks it at once.
    // Tables the parent never made stay unmade here too.
    ViTable *vt = TheTable<ViTable>::made();
    CqTable *ct = TheTable<CqTable>::made();
    bool any = false;
    if (vt) vt->for_each_in_child([&](Vi *vi) { any |= vi->shareable; });
    if (ct) ct->for_each_in_child([&](Cq *cq) { any |= cq->shareable; });
    if (any) holder_mark();
    if (vt)
        vt->for_each_in_child([&](Vi *vi) {
            ViLocal &l = vt->local(vi);
            l.watched = false;
            l.wait_ep = -1; // private, closed above
            if (!vi->shareable) {
                l = ViLocal{}; // nothing of it is ours, not even copies
                return;
            }
            vi->holders->set_pid(me, pid);
            ++held; // its slot is in our table until we destroy it, held or not
        });
    if (ct)
        ct->for_each_in_child([&](Cq *cq) {
            if (!cq->shareable) return;
            cq->holders->set_pid(me, pid);
            ++held;
        });
    g_held.store(held, std::memory_order_relaxed);
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

socklen_t mark_name(uint64_t token, sockaddr_un *sa) {
    char name[40];
    int n =
        snprintf(name, sizeof name, "vipl-holder:%016llx", static_cast<unsigned long long>(token));
    return util::abstract_address(std::string_view(name, n), sa);
}

// Whether the process that holds with token t is still there and still runs
// this library: its mark exists.  Exit, a kill and exec() all close it (a pid
// alone would survive exec() and could be reused).
bool holder_alive(uint64_t t, int32_t pid) {
    int saved = errno;
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
        errno = saved;
        return process_alive(pid);
    }
    sockaddr_un sa;
    socklen_t len = mark_name(t, &sa);
    int r = connect(s, reinterpret_cast<sockaddr *>(&sa), len);
    int err = errno;
    close(s);
    errno = saved;
    if (r == 0) return true;
    if (err == ECONNREFUSED || err == ENOENT) return false;
    return process_alive(pid);
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
    for (int pass = 0; pass < 2; ++pass) {
        for (int i = 0; i < kMax; ++i) {
            uint64_t free = 0;
            // A free place has pid 0: readers take the place for a pending
            // one until the pid is stored.
            if (token[i].compare_exchange_strong(free, t, std::memory_order_acq_rel)) {
                pid[i].store(p, std::memory_order_release);
                census_change(t, 1);
                return true;
            }
        }
        // Full: the places of holders that are gone become free.
        reap(t);
    }
    return false;
}

bool Holders::set_pid(uint64_t t, int32_t p) {
    for (int i = 0; i < kMax; ++i)
        if (token[i].load(std::memory_order_acquire) == t) {
            pid[i].store(p, std::memory_order_release);
            return true;
        }
    return false;
}

void Holders::reap(uint64_t t) {
    for (int i = 0; i < kMax; ++i) {
        uint64_t k = token[i].load(std::memory_order_acquire);
        int32_t p = pid[i].load(std::memory_order_acquire);
        // A pending child (pid 0) is left alone here: others_alive waits for it.
        if (k && k != t && p > 0 && !holder_alive(k, p) &&
            token[i].compare_exchange_strong(k, 0, std::memory_order_acq_rel)) {
            pid[i].store(0, std::memory_order_release);
            census_change(k, -1);
        }
    }
}

void Holders::remove(uint64_t t) {
    for (int i = 0; i < kMax; ++i) {
        uint64_t want = t;
        if (token[i].compare_exchange_strong(want, 0, std::memory_order_acq_rel)) {
            pid[i].store(0, std::memory_order_release);
            census_change(t, -1);
        }
    }
}

void Holders::reset(uint64_t t, int32_t p) {
    holder_mark();
    for (int i = 1; i < kMax; ++i) {
        token[i].store(0, std::memory_order_relaxed);
        pid[i].store(0, std::memory_order_relaxed);
    }
    pid[0].store(p, std::memory_order_relaxed);
    token[0].store(t, std::memory_order_release);
    census.store(sole_census(t), std::memory_order_release);
    epoch.fetch_add(1, std::memory_order_acq_rel);
}

void Holders::census_change(uint64_t t, int d) {
    uint64_t c = census.load(std::memory_order_acquire);
    for (;;) {
        uint64_t n = (static_cast<uint64_t>(static_cast<int64_t>(c >> 56) + d) << 56) |
                     ((c ^ t) & kCensusTokenBits);
        if (census.compare_exchange_weak(c, n, std::memory_order_acq_rel)) return;
    }
}

bool Holders::alive(uint64_t t) const {
    int32_t p = 0;
    for (int i = 0; i < kMax; ++i)
        if (token[i].load(std::memory_order_acquire) == t)
            p = pid[i].load(std::memory_order_acquire);
    // A pending fork child (pid 0) has no sole sections yet: only its mark can answer.
    return holder_alive(t, p);
}

bool Holders::others_alive(uint64_t t) {
    return live_others(t) > 0;
}

int Holders::live_others(uint64_t t) {
    int alive = 0;
    for (int i = 0; i < kMax; ++i) {
        uint64_t k = token[i].load(std::memory_order_acquire);
        if (!k || k == t) continue;
        // A child being forked names itself at once; a fork that failed never does.
        int32_t p = pid[i].load(std::memory_order_acquire);
        for (int waited = 0; p <= 0 && waited < 200; ++waited) {
            usleep(1000);
            p = pid[i].load(std::memory_order_acquire);
        }
        if (p > 0 && holder_alive(k, p)) {
            ++alive;
        } else if (token[i].compare_exchange_strong(k, 0, std::memory_order_acq_rel)) {
            pid[i].store(0, std::memory_order_release);
            census_change(k, -1);
        }
    }
    return alive;
}

void holder_mark() {
    uint64_t t = self_token();
    if (g_mark_token.load(std::memory_order_acquire) == t) return;
    int saved = errno;
    int s = fd_track(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (s >= 0) {
        sockaddr_un sa;
        socklen_t len = mark_name(t, &sa);
        if (bind(s, reinterpret_cast<sockaddr *>(&sa), len) == 0) {
            g_mark_fd.store(s, std::memory_order_relaxed);
            g_mark_token.store(t, std::memory_order_release);
        } else {
            fd_close(s); // another thread made it, or no room: the pid check remains
        }
    }
    errno = saved;
}

void holding_changed(int delta) {
    if (g_held.fetch_add(delta, std::memory_order_acq_rel) + delta != 0) return;
    int fd = g_mark_fd.exchange(-1, std::memory_order_acq_rel);
    if (fd >= 0) {
        g_mark_token.store(0, std::memory_order_release);
        fd_close(fd);
    }
    // A fork child that holds nothing any more needs nothing of its parent's NICs.
    nics().for_each([](Nic *nic) {
        if (nic->owner != self_token()) nic->regions.drop_inherited();
    });
}

} // namespace vipl
