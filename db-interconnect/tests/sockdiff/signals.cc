// Scenario signals: SIGALRM (setitimer) during a blocking recv and a blocking send.  With
// SA_RESTART the call goes on and completes when the data comes (or the buffers drain);
// without it, it fails with EINTR; a handler installed with signal() restarts (glibc gives
// BSD semantics); a SA_SIGINFO handler gets its siginfo; an ignored signal interrupts
// nothing.  poll, select and epoll_wait end with EINTR whatever SA_RESTART says.  The
// old-action query of sigaction returns what the program installed.
#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>

namespace sockdiff {

namespace {

volatile sig_atomic_t g_hits = 0, g_signo = 0;

void on_alarm(int) {
    g_hits = g_hits + 1;
}

void on_alarm_too(int) {
    g_hits = g_hits + 1;
}

void on_alarm_info(int, siginfo_t *si, void *) {
    g_hits = g_hits + 1;
    g_signo = si->si_signo;
}

void arm(int ms) {
    g_hits = 0;
    itimerval it{{0, 0}, {0, ms * 1000}};
    setitimer(ITIMER_REAL, &it, nullptr);
}

void disarm() {
    itimerval it{};
    setitimer(ITIMER_REAL, &it, nullptr);
}

std::string handler_text(const struct sigaction &sa) {
    if (sa.sa_flags & SA_SIGINFO)
        return sa.sa_sigaction == on_alarm_info ? "on_alarm_info" : "another function";
    if (sa.sa_handler == SIG_DFL) return "SIG_DFL";
    if (sa.sa_handler == SIG_IGN) return "SIG_IGN";
    if (sa.sa_handler == on_alarm) return "on_alarm";
    if (sa.sa_handler == on_alarm_too) return "on_alarm_too";
    return "another function";
}

// What a sigaction says, in the terms the program uses (SA_RESTORER, glibc's own, is not).
std::string action_text(const struct sigaction &sa) {
    std::string s = handler_text(sa);
    s += sa.sa_flags & SA_RESTART ? ", SA_RESTART" : ", no SA_RESTART";
    if (sa.sa_flags & SA_SIGINFO) s += ", SA_SIGINFO";
    if (sa.sa_flags & SA_RESETHAND) s += ", SA_RESETHAND";
    if (sa.sa_flags & SA_NODEFER) s += ", SA_NODEFER";
    s += sigismember(&sa.sa_mask, SIGUSR1) ? ", mask has SIGUSR1" : "";
    s += sigismember(&sa.sa_mask, SIGALRM) ? ", mask has SIGALRM" : "";
    return s;
}

std::string query() {
    struct sigaction sa {};
    if (sigaction(SIGALRM, nullptr, &sa) != 0) return "query failed";
    return action_text(sa);
}

// Installs h with flags (and SIGUSR1 in the mask); the old action as text.
std::string install(void (*h)(int), int flags) {
    struct sigaction sa {
    }, old{};
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR1);
    if (sigaction(SIGALRM, &sa, &old) != 0) return "sigaction failed";
    return action_text(old);
}

// Fills the connection's buffers with non-blocking sends of pattern seed (the server does
// not read); the bytes taken.
uint64_t fill_up(int c, uint32_t seed) {
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    std::vector<uint8_t> chunk(65536);
    uint64_t total = 0;
    Res r{0, 0};
    for (int i = 0; i < 8192; ++i) {
        fill(chunk.data(), chunk.size(), total, seed);
        r = res(send(c, chunk.data(), chunk.size(), 0));
        if (r.v < 0) break;
        total += static_cast<uint64_t>(r.v);
    }
    check(r.v < 0 && r.err == EAGAIN, "filling: %s", text(r).c_str());
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) & ~O_NONBLOCK);
    return total;
}

// A blocking recv while SIGALRM comes at 50 ms; the server sends 10 B at 200 ms unless
// !data.  The result as text.
std::string blocked_recv(int c, Peer *srv, bool data, uint32_t seed) {
    if (data) check(srv->ask("send-after 200 10 " + std::to_string(seed)) == "ok", "send-after");
    uint8_t buf[100];
    arm(50);
    Res r = res(recv(c, buf, sizeof buf, 0));
    disarm();
    std::string s = "= " + text(r) + ", the handler ran " + std::to_string(g_hits) + " time(s)";
    if (data) check(srv->answer() == "done 10", "send-after done");
    return s;
}

} // namespace

void signals_scenario() {
    Served one = serve_one();
    Peer *srv = one.srv;
    int c = one.fd;

    say("sigaction(on_alarm, SA_RESTART): the old action was %s",
        install(on_alarm, SA_RESTART).c_str());
    say("the query now says %s", query().c_str());
    say("blocking recv, SIGALRM at 50 ms, 10 B at 200 ms %s",
        blocked_recv(c, srv, true, 1).c_str());

    say("sigaction(on_alarm, 0): the old action was %s", install(on_alarm, 0).c_str());
    say("blocking recv, SIGALRM at 50 ms, no data %s", blocked_recv(c, srv, false, 0).c_str());

    sighandler_t prev = signal(SIGALRM, on_alarm_too);
    say("signal(on_alarm_too) returned %s", prev == on_alarm ? "on_alarm" : "something else");
    say("the query now says %s", query().c_str());
    say("blocking recv, SIGALRM at 50 ms, 10 B at 200 ms %s",
        blocked_recv(c, srv, true, 2).c_str());

    struct sigaction sa {
    }, old{};
    sa.sa_sigaction = on_alarm_info;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    say("sigaction(on_alarm_info, SA_SIGINFO|SA_RESTART): the old action was %s",
        action_text(old).c_str());
    say("the query now says %s", query().c_str());
    g_signo = 0;
    std::string got = blocked_recv(c, srv, true, 3);
    say("blocking recv, SIGALRM at 50 ms, 10 B at 200 ms %s; si_signo is SIGALRM: %s", got.c_str(),
        g_signo == SIGALRM ? "yes" : "no");

    say("sigaction(SIG_IGN): the old action was %s", install(SIG_IGN, 0).c_str());
    say("blocking recv, an ignored SIGALRM at 50 ms, 10 B at 200 ms %s",
        blocked_recv(c, srv, true, 4).c_str());

    // A blocking send on full buffers.
    install(on_alarm, SA_RESTART);
    uint64_t total = fill_up(c, 11);
    std::vector<uint8_t> chunk(65536);
    fill(chunk.data(), chunk.size(), total, 11);
    check(srv->ask("recv-after 200 " + std::to_string(total + chunk.size()) + " 11") == "ok",
          "recv-after");
    arm(50);
    Res r = res(send(c, chunk.data(), chunk.size(), 0));
    disarm();
    // Whether a TCP connection is still full 50 ms after a send found it full is up to
    // TCP (its buffers grow, and empty into the receiver's): on TCP only the bytes are
    // compared, on unix connections the interruption too.
    bool tcp = run().tcp();
    say("blocking send of 64 KiB on full buffers, SIGALRM at 50 ms, the server reads at 200 ms, "
        "SA_RESTART = %s, the handler ran %s time(s)",
        text(r).c_str(), tcp ? "(TCP: not compared)" : std::to_string(g_hits).c_str());
    got = srv->answer(10000);
    say("the server read every byte: %s",
        got == "done " + std::to_string(total + chunk.size()) + " match" ? "yes, in order"
                                                                         : got.c_str());

    install(on_alarm, 0);
    total = fill_up(c, 12);
    fill(chunk.data(), chunk.size(), total, 12);
    arm(50);
    r = res(send(c, chunk.data(), chunk.size(), 0));
    disarm();
    // Bytes taken before the signal would be a partial count, not EINTR: none fit here.
    say("the same without SA_RESTART = %s, the handler ran %s time(s)",
        tcp       ? "(TCP: not compared)"
        : r.v > 0 ? "a partial count"
                  : text(r).c_str(),
        tcp ? "(TCP: not compared)" : std::to_string(g_hits).c_str());
    if (r.v > 0) total += static_cast<uint64_t>(r.v);
    got = srv->ask("recv " + std::to_string(total) + " 12", 10000);
    say("the server read every byte sent: %s",
        got == "ok " + std::to_string(total) + " match" ? "yes, in order" : got.c_str());

    // Waits are never restarted.
    install(on_alarm, SA_RESTART);
    pollfd p{c, POLLIN, 0};
    arm(50);
    r = res(poll(&p, 1, kWaitMs));
    say("poll, SIGALRM at 50 ms, SA_RESTART = %s", text(r).c_str());
    int ep = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
    arm(50);
    r = res(epoll_wait(ep, &ev, 1, kWaitMs));
    say("epoll_wait, SIGALRM at 50 ms, SA_RESTART = %s", text(r).c_str());
    close(ep);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(c, &rs);
    timeval tv{kWaitMs / 1000, 0};
    arm(50);
    r = res(select(c + 1, &rs, nullptr, nullptr, &tv));
    say("select, SIGALRM at 50 ms, SA_RESTART = %s", text(r).c_str());
    disarm();
    say("sigaction(SIG_DFL): the old action was %s", install(SIG_DFL, 0).c_str());

    close(c);
    say("the server sees: %s", srv->ask("recvall 0").c_str());
    srv->ask("exit");
    join_ok(srv);
}

} // namespace sockdiff
