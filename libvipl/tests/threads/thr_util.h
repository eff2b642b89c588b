// Helpers of the thread and signal tests: failure notes that worker threads
// and signal handlers can record (Catch2 assertions belong to the main
// thread), what the kernel says a thread is doing, signal handler scopes,
// and the library's signal-visible state of a process.
#pragma once

#include "procs.h"

#include "support.h"

#include <atomic>
#include <csignal>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <vector>

namespace vt {

// Time, text and environment helpers: vt::now_ms, vt::sleep_ms, vt::fmt, vt::env_long
// (procs.h).

pid_t tid();
// Pins the calling thread to one CPU.
void pin_cpu(int cpu);

// Problems found off the main thread, checked by the main thread afterwards.
class Notes {
public:
    void add(const std::string &s);
    std::vector<std::string> all();
    size_t size();
    // Up to max notes, one per line (for INFO).
    std::string text(size_t max = 20);

private:
    std::mutex m_;
    std::vector<std::string> v_;
};

// The system call a thread of this process is blocked in
// (/proc/self/task/<tid>/syscall): its number, -1 while the thread runs in
// user space, -2 when it cannot be told.
long blocked_syscall(pid_t thread);
// Whether that system call is one a VIPL wait sleeps in (ppoll, poll,
// epoll_wait, epoll_pwait, epoll_pwait2).
bool is_sleep_syscall(long nr);
// Waits until the thread sleeps in such a call; false after timeout_ms.
bool wait_asleep(pid_t thread, int timeout_ms);

// Whether the context a handler received shows that the signal interrupted
// one of the system calls a wait sleeps in (ppoll, epoll_wait...), which now
// returns EINTR: the thread was asleep in the kernel, not running.  Known on
// x86-64 with a C library whose wrappers have sizes; elsewhere
// interrupted_syscall_known() is false.
bool interrupted_syscall(const void *ucontext);
bool interrupted_syscall_known();

// Installs an SA_SIGINFO handler for sig (with or without SA_RESTART) and
// restores the previous action when the scope ends.
class ScopedHandler {
public:
    ScopedHandler(int sig, void (*handler)(int, siginfo_t *, void *), bool restart);
    ~ScopedHandler();
    ScopedHandler(const ScopedHandler &) = delete;
    ScopedHandler &operator=(const ScopedHandler &) = delete;

private:
    int sig_;
    struct sigaction old_ {};
};

// A VIPL call made on a thread of its own, so that the test can watch it
// sleep and signal it.
class Call {
public:
    explicit Call(std::function<VIP_RETURN()> fn);
    ~Call(); // joins
    Call(const Call &) = delete;
    Call &operator=(const Call &) = delete;
    pid_t thread_id(); // waits until the thread runs
    // Waits until the call sleeps in the kernel (see wait_asleep).
    bool asleep(int timeout_ms = 3000) { return wait_asleep(thread_id(), timeout_ms); }
    void signal(int sig);
    // Waits up to timeout_ms for the call to return.
    bool finished(int timeout_ms);
    VIP_RETURN join();
    double ms() const { return ms_; } // how long the call took
    bool done() const { return done_; }

private:
    std::atomic<pid_t> tid_{0};
    std::atomic<bool> done_{false};
    VIP_RETURN rc_ = VIP_NOT_DONE;
    double ms_ = 0;
    std::thread thread_;
};

// Signal dispositions of this process, as sigaction reports them.
struct Disposition {
    int sig;
    void *handler; // sa_handler / sa_sigaction
    int flags;
    sigset_t mask;
};
std::vector<Disposition> dispositions();
// Differences between two snapshots, one line each.
std::vector<std::string> compare(const std::vector<Disposition> &before,
                                 const std::vector<Disposition> &after);

// A field of /proc/self/task/<tid>/status ("SigBlk", ...) or of
// /proc/self/status when thread is 0; "" when absent.
std::string status_field(pid_t thread, const char *field);
// The signal mask the kernel shows for a thread, as a 64-bit set (bit n-1 = signal n).
uint64_t kernel_mask(pid_t thread);
// The calling thread's mask as pthread_sigmask reports it, in the same form.
uint64_t own_mask();
std::string mask_text(uint64_t m);

// Messages that carry who sent them and their sequence number, with a
// payload derived from both (len >= kMsgHeader).
constexpr uint32_t kMsgHeader = 16;
void fill_msg(uint8_t *p, uint32_t len, uint32_t sender, uint32_t seq);
// False when the header or the payload is not what fill_msg wrote.
bool check_msg(const uint8_t *p, uint32_t len, uint32_t *sender, uint32_t *seq);

// Threads of this process named `name` (/proc/self/task/*/comm).
std::vector<pid_t> threads_named(const char *name);

} // namespace vt
