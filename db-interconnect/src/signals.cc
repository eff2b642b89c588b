#include "signals.h"

#include "real.h"
#include "thread_state.h"

#include <atomic>
#include <cerrno>
#include <cstring>

namespace vipl::db {

constinit thread_local ThreadState t_state VIPL_DB_TLS;

namespace {

struct AppAction {
    std::atomic<bool> ours{false}; // the kernel has our trampoline for this signal
    std::atomic<uintptr_t> handler{0};
    std::atomic<int> flags{0};
    struct sigaction act; // as the program gave it, for sigaction()'s old value
};

AppAction g_actions[_NSIG];

// Handler frames deeper than this below a recorded one are taken for another stack.
constexpr uintptr_t kStackSpan = uintptr_t{64} << 20;

void trampoline(int sig, siginfo_t *info, void *uc) {
    ThreadState &t = t_state;
    if (t.handlers < 8) t.handler_sp[t.handlers] = stack_here();
    ++t.handlers;
    AppAction &a = g_actions[sig];
    int flags = a.flags.load(std::memory_order_relaxed);
    uintptr_t h = a.handler.load(std::memory_order_relaxed);
    ++t.interrupts;
    if (!(flags & SA_RESTART)) ++t.interrupts_no_restart;
    // The kernel reset the disposition already; the program's view follows.
    if (flags & SA_RESETHAND) {
        a.handler.store(reinterpret_cast<uintptr_t>(SIG_DFL), std::memory_order_relaxed);
        a.ours.store(false, std::memory_order_relaxed);
    }
    if (flags & SA_SIGINFO)
        reinterpret_cast<void (*)(int, siginfo_t *, void *)>(h)(sig, info, uc);
    else if (h != reinterpret_cast<uintptr_t>(SIG_DFL) && h != reinterpret_cast<uintptr_t>(SIG_IGN))
        reinterpret_cast<void (*)(int)>(h)(sig);
    if (t.handlers > 0) --t.handlers;
}

} // namespace

bool in_signal_handler() noexcept {
    ThreadState &t = t_state;
    uintptr_t sp = stack_here();
    while (t.handlers > 0) {
        int top = (t.handlers < 8 ? t.handlers : 8) - 1;
        uintptr_t h = t.handler_sp[top];
        if (sp < h && h - sp < kStackSpan) return true;
        // That handler was left with siglongjmp: the thread runs above its frame now.
        --t.handlers;
    }
    return false;
}

int install_action(int sig, const struct sigaction *act, struct sigaction *old) noexcept {
    if (sig <= 0 || sig >= _NSIG || sig == SIGKILL || sig == SIGSTOP)
        return real().sigaction(sig, act, old);
    AppAction &a = g_actions[sig];
    struct sigaction prev_app = a.act;
    bool was_ours = a.ours.load();
    struct sigaction kernel_old;
    int r;
    if (!act) {
        r = real().sigaction(sig, nullptr, &kernel_old);
    } else {
        uintptr_t h = (act->sa_flags & SA_SIGINFO) ? reinterpret_cast<uintptr_t>(act->sa_sigaction)
                                                   : reinterpret_cast<uintptr_t>(act->sa_handler);
        bool plain = !(act->sa_flags & SA_SIGINFO) &&
                     (act->sa_handler == SIG_DFL || act->sa_handler == SIG_IGN);
        if (plain) {
            r = real().sigaction(sig, act, &kernel_old);
            if (r == 0) {
                a.ours.store(false);
                a.act = *act;
            }
        } else {
            // The record first: a signal that comes as soon as the trampoline is in
            // place finds the program's handler.
            a.handler.store(h);
            a.flags.store(act->sa_flags);
            struct sigaction mine = *act;
            mine.sa_flags = act->sa_flags | SA_SIGINFO;
            mine.sa_sigaction = trampoline;
            r = real().sigaction(sig, &mine, &kernel_old);
            if (r == 0) {
                a.act = *act;
                a.ours.store(true);
            }
        }
    }
    if (r == 0 && old) {
        bool kernel_has_ours =
            (kernel_old.sa_flags & SA_SIGINFO) && kernel_old.sa_sigaction == trampoline;
        *old = kernel_has_ours && was_ours ? prev_app : kernel_old;
    }
    return r;
}

} // namespace vipl::db
