// The process model: fork, exec, signal handlers, and the library's start and end.
#include "api.h"

#include "config.h"
#include "handover.h"
#include "log.h"
#include "real.h"
#include "signals.h"
#include "stats.h"
#include "thread_state.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <vipl_ext.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char **environ;

using namespace vipl::db;

namespace {

// What an exec'd program must find in its environment to stay interposed, saved when
// the library loaded: LD_PRELOAD and the VIPL_* settings.
std::vector<std::string> &inherited_env() {
    static std::vector<std::string> v;
    return v;
}

void save_env() {
    for (char **e = environ; e && *e; ++e)
        if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0 || std::strncmp(*e, "VIPL_", 5) == 0)
            inherited_env().push_back(*e);
}

// envp with whatever of inherited_env() it lacks (by name).
char *const *exec_env(char *const envp[], std::vector<char *> &out, std::string &handover) {
    out.clear();
    for (char *const *e = envp; e && *e; ++e)
        if (std::strncmp(*e, "VIPL_HANDOVER=", 14) != 0) out.push_back(*e);
    if (!handover.empty()) {
        handover = std::string(kHandoverVar) + "=" + handover;
        out.push_back(handover.data());
    }
    size_t given = out.size();
    for (std::string &kv : inherited_env()) {
        size_t eq = kv.find('=');
        bool have = false;
        for (size_t i = 0; i < given && !have; ++i)
            have = std::strncmp(out[i], kv.c_str(), eq + 1) == 0;
        if (!have) out.push_back(kv.data());
    }
    out.push_back(nullptr);
    return out.data();
}

struct Held {
    int fd;
    Sock *sock;
};

void collect(int fd, File *f, void *arg) {
    auto *v = static_cast<std::vector<Held> *>(arg);
    if (Sock *s = as_sock(f); s && file_try_acquire(s)) v->push_back({fd, s});
}

// Connections that ride vipl and stay open go back to their kernel sockets first (the
// stream's state lives in this image); the new image learns what is due first.
std::string before_exec() {
    if (passthrough() || !config().enable) return "";
    return handover_before_exec();
}

void child_after_fork() {
    ThreadState &t = t_state;
    // A child forked inside a handler (the postmaster starts some children so) runs on
    // as a process of its own: it is not in a handler of its own.
    t.handlers = 0;
    t.depth = 0;
}

struct Reopen {
    Sock *sock;
    int fd;
    bool server;
    uint8_t transport;
};

void note_stats(int fd, File *f, void *arg) {
    Sock *s = as_sock(f);
    if (!s) return;
    sock_after_fork_child(s);
    if (!s->stat) return;
    static_cast<std::vector<Reopen> *>(arg)->push_back(
        {s, fd, s->stat->server != 0, s->stat->transport});
    s->stat = nullptr;
}

// What every child of a process would otherwise bind and load for itself, done once in
// the process before its first fork (a postmaster forks a backend per connection):
// - glibc binds lazily what its __cxa_thread_atexit_impl calls in the dynamic linker: the
//   first thread_local with a destructor in a process (ours hold scratch vectors) searched
//   every library of the process for it, about 60 us in a postmaster's child (thirty
//   libraries);
// - libvipl reads its configuration once per process (a child keeps its parent's): ~20 us.
thread_local std::vector<char> t_before_fork VIPL_DB_TLS;
std::atomic<bool> g_ready_for_children{false};

void ready_for_children() {
    if (g_ready_for_children.load(std::memory_order_relaxed)) return;
    t_before_fork.clear(); // the first use registers the vector's destructor
    VIP_CONFIG_INFO info;
    for (VIP_ULONG i = 0, n = VipConfigCount(); i < n; ++i) VipConfigInfo(i, &info);
    g_ready_for_children.store(true, std::memory_order_relaxed);
}

// The child's connections go into a table of its own (the parent's stays the parent's).
void reopen_stats() {
    std::vector<Reopen> v;
    fd_for_each(note_stats, &v);
    stat_after_fork_child();
    for (Reopen &r : v) {
        r.sock->stat = stat_open(r.fd, r.server, r.fd);
        if (r.sock->stat) r.sock->stat->transport = r.transport;
    }
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) pid_t fork(void) {
    ready_for_children();
    if (passthrough() || !config().enable) {
        pid_t p = real().fork();
        if (p == 0) {
            child_after_fork();
            reopen_stats();
            linger_after_fork_child();
        }
        return p;
    }
    std::vector<Held> held;
    fd_for_each(collect, &held);
    {
        Inside in;
        for (Held &h : held) {
            SockState st = h.sock->state.load();
            if (st == SockState::hello_sent || st == SockState::connecting ||
                st == SockState::accepting)
                sock_before_fork(h.sock, h.fd);
        }
    }
    // Every lock of ours is taken around the fork, so the child finds none held by a
    // thread it does not have (each socket's once: dups share one).
    std::vector<Sock *> socks;
    for (Held &h : held) socks.push_back(h.sock);
    std::sort(socks.begin(), socks.end());
    socks.erase(std::unique(socks.begin(), socks.end()), socks.end());
    for (Sock *s : socks) s->mu.lock();
    std::mutex &pools = sock_pool_lock(), &stats = stat_lock(), &ep = epoll_lock();
    pools.lock();
    stats.lock();
    ep.lock();
    pid_t pid;
    {
        Inside in;
        pid = real().fork();
    }
    int saved = errno;
    ep.unlock();
    stats.unlock();
    pools.unlock();
    for (Sock *s : socks) s->mu.unlock();
    if (pid == 0) {
        child_after_fork();
        reopen_stats();
        linger_after_fork_child();
    }
    for (Held &h : held) file_release(h.sock);
    errno = saved;
    return pid;
}

__attribute__((visibility("default"))) int execve(const char *path, char *const argv[],
                                                  char *const envp[]) {
    std::string handover = before_exec();
    std::vector<char *> env;
    return real().execve(path, argv, exec_env(envp, env, handover));
}

__attribute__((visibility("default"))) int execveat(int dirfd, const char *path, char *const argv[],
                                                    char *const envp[], int flags) {
    std::string handover = before_exec();
    std::vector<char *> env;
    return real().execveat(dirfd, path, argv, exec_env(envp, env, handover), flags);
}

__attribute__((visibility("default"))) int fexecve(int fd, char *const argv[], char *const envp[]) {
    std::string handover = before_exec();
    std::vector<char *> env;
    return real().fexecve(fd, argv, exec_env(envp, env, handover));
}

__attribute__((visibility("default"))) int execv(const char *path, char *const argv[]) {
    std::string handover = before_exec();
    std::vector<char *> env;
    return real().execve(path, argv, exec_env(environ, env, handover));
}

__attribute__((visibility("default"))) int execvpe(const char *file, char *const argv[],
                                                   char *const envp[]) {
    std::string handover = before_exec();
    std::vector<char *> env;
    return real().execvpe(file, argv, exec_env(envp, env, handover));
}

__attribute__((visibility("default"))) int execvp(const char *file, char *const argv[]) {
    std::string handover = before_exec();
    std::vector<char *> env;
    return real().execvpe(file, argv, exec_env(environ, env, handover));
}

static std::vector<char *> va_argv(const char *arg0, va_list ap, char *const **envp) {
    std::vector<char *> argv{const_cast<char *>(arg0)};
    for (;;) {
        char *a = va_arg(ap, char *);
        argv.push_back(a);
        if (!a) break;
    }
    if (envp) *envp = va_arg(ap, char *const *);
    return argv;
}

__attribute__((visibility("default"))) int execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    std::vector<char *> argv = va_argv(arg, ap, nullptr);
    va_end(ap);
    return execv(path, argv.data());
}

__attribute__((visibility("default"))) int execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    std::vector<char *> argv = va_argv(arg, ap, nullptr);
    va_end(ap);
    return execvp(file, argv.data());
}

__attribute__((visibility("default"))) int execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    char *const *envp = nullptr;
    std::vector<char *> argv = va_argv(arg, ap, &envp);
    va_end(ap);
    return execve(path, argv.data(), envp);
}

__attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction *act,
                                                     struct sigaction *old) {
    return install_action(sig, act, old);
}

static sighandler_t set_handler(int sig, sighandler_t h, int flags, bool mask_self) {
    struct sigaction sa {
    }, old{};
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    if (mask_self && sig > 0 && sig < _NSIG) sigaddset(&sa.sa_mask, sig);
    sa.sa_flags = flags;
    if (install_action(sig, &sa, &old) != 0) return SIG_ERR;
    return old.sa_handler;
}

// BSD semantics, glibc's signal(): restarting, the signal blocked while its handler runs.
__attribute__((visibility("default"))) sighandler_t signal(int sig, sighandler_t h) {
    return set_handler(sig, h, SA_RESTART, true);
}

__attribute__((visibility("default"))) sighandler_t bsd_signal(int sig, sighandler_t h) {
    return set_handler(sig, h, SA_RESTART, true);
}

// System V semantics: one shot, not blocked, not restarting.
__attribute__((visibility("default"))) sighandler_t sysv_signal(int sig, sighandler_t h) {
    return set_handler(sig, h, SA_RESETHAND | SA_NODEFER, false);
}

__attribute__((visibility("default"))) sighandler_t __sysv_signal(int sig, sighandler_t h) {
    return sysv_signal(sig, h);
}

__attribute__((visibility("default"))) int siginterrupt(int sig, int flag) {
    struct sigaction sa;
    if (install_action(sig, nullptr, &sa) != 0) return -1;
    if (flag)
        sa.sa_flags &= ~SA_RESTART;
    else
        sa.sa_flags |= SA_RESTART;
    return install_action(sig, &sa, nullptr);
}

} // extern "C"

namespace {

// At exit, the kernel would deliver what the program wrote and then end its connections:
// every stream still open finishes (others holding it keep it), then all are waited for
// together (linger.cc).
void close_at_exit(int fd, File *f, void *) {
    Sock *s = as_sock(f);
    if (!s || s->state.load() != SockState::vipl || !file_try_acquire(s)) return;
    {
        std::lock_guard<std::mutex> g(s->mu);
        if (s->stream.is_open()) linger_stream(std::move(s->stream));
    }
    file_release(s);
}

__attribute__((constructor)) void vipl_db_init() {
    real();
    // Connections a program image before us handed over at exec (handover.h).
    handover_adopt();
    // A stream's bytes in flight (DB_RECV_BUFFERS x DB_BUFFER_SIZE) must fit the shm
    // ring, so that a writer's posts are in the ring when its send returns and the
    // reader needs nothing more of it; libvipl's default ring (512 KiB) holds less than
    // a database's defaults put in flight (16 buffers of 32 KiB, and their headers).
    if (!getenv("VIPL_SHM_RING_SIZE")) setenv("VIPL_SHM_RING_SIZE", "1048576", 0);
    config();
    for (const std::string &p : config_problems()) VIPL_DB_ERROR("%s", p.c_str());
    save_env();
}

__attribute__((destructor)) void vipl_db_fini() {
    if (!config().enable) return;
    fd_for_each(close_at_exit, nullptr);
    linger_at_exit();
}

} // namespace
