// Scenario poll: poll, ppoll, select and pselect over a socket and a pipe together (the
// waits libpq and the postmaster make): nothing ready, one ready, both, POLLOUT, timeouts,
// a signal mask, a closed descriptor (POLLNVAL; EBADF from select), a negative one
// (ignored), the end of the stream seen as readable.
#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <unistd.h>

#include <cerrno>

namespace sockdiff {

namespace {

const char *const kNames[] = {"socket", "pipe"};

std::string poll_text(const pollfd *f, int n, Res r) {
    if (r.v < 0) return "= " + text(r);
    std::string s = "= " + std::to_string(r.v) + ":";
    for (int i = 0; i < n; ++i)
        s += std::string(i ? ", " : " ") + kNames[i] + " " + events_text(f[i].revents);
    return s;
}

std::string select_text(int c, int p, fd_set *r, fd_set *w, Res res_) {
    if (res_.v < 0) return "= " + text(res_);
    auto bits = [&](int fd) {
        std::string s;
        s += r && FD_ISSET(fd, r) ? "r" : "-";
        s += w && FD_ISSET(fd, w) ? "w" : "-";
        return s;
    };
    return "= " + std::to_string(res_.v) + ": socket " + bits(c) + ", pipe " + bits(p);
}

void sets(int c, int p, fd_set *r, fd_set *w) {
    FD_ZERO(r);
    FD_SET(c, r);
    FD_SET(p, r);
    if (w) {
        FD_ZERO(w);
        FD_SET(c, w);
    }
}

void drain(int c, int p) {
    uint8_t buf[64];
    recv_exact(c, buf, 10);
    char x;
    if (read(p, &x, 1) != 1) check(false, "pipe read");
}

} // namespace

void poll_scenario() {
    Served one = serve_one();
    Peer *srv = one.srv;
    int c = one.fd;
    int pp[2];
    if (pipe2(pp, O_CLOEXEC) != 0) fatal("pipe");
    char x = 'x';

    pollfd f[2] = {{c, POLLIN, 0}, {pp[0], POLLIN, 0}};
    say("poll, nothing ready %s", poll_text(f, 2, res(poll(f, 2, kQuietMs))).c_str());
    srv->ask("send 10 1");
    say("poll, the server sent 10 B %s", poll_text(f, 2, res(poll(f, 2, kWaitMs))).c_str());
    write(pp[1], &x, 1);
    say("poll, the pipe written too %s", poll_text(f, 2, res(poll(f, 2, kWaitMs))).c_str());
    drain(c, pp[0]);
    say("poll, both read %s", poll_text(f, 2, res(poll(f, 2, kQuietMs))).c_str());
    f[0].events = POLLIN | POLLOUT;
    say("poll for POLLIN|POLLOUT %s", poll_text(f, 2, res(poll(f, 2, kWaitMs))).c_str());
    f[0].events = POLLIN;

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    timespec quiet{0, kQuietMs * 1000000L}, wait{kWaitMs / 1000, 0};
    say("ppoll with a mask, nothing ready %s",
        poll_text(f, 2, res(ppoll(f, 2, &quiet, &mask))).c_str());
    srv->ask("send 10 1");
    write(pp[1], &x, 1);
    say("ppoll, both ready %s", poll_text(f, 2, res(ppoll(f, 2, &wait, &mask))).c_str());
    drain(c, pp[0]);
    write(pp[1], &x, 1);
    say("ppoll without a timeout, the pipe ready %s",
        poll_text(f, 2, res(ppoll(f, 2, nullptr, nullptr))).c_str());
    read(pp[0], &x, 1);

    fd_set r, w;
    int nfds = std::max(c, pp[0]) + 1;
    sets(c, pp[0], &r, &w);
    timeval tv{0, kQuietMs * 1000};
    Res s = res(select(nfds, &r, &w, nullptr, &tv));
    say("select, nothing readable %s", select_text(c, pp[0], &r, &w, s).c_str());
    srv->ask("send 10 1");
    write(pp[1], &x, 1);
    sets(c, pp[0], &r, &w);
    tv = {kWaitMs / 1000, 0};
    s = res(select(nfds, &r, &w, nullptr, &tv));
    say("select, both readable %s", select_text(c, pp[0], &r, &w, s).c_str());
    drain(c, pp[0]);
    sets(c, pp[0], &r, nullptr);
    tv = {0, 0};
    s = res(select(nfds, &r, nullptr, nullptr, &tv));
    say("select with a zero timeout %s", select_text(c, pp[0], &r, nullptr, s).c_str());
    srv->ask("send 10 1");
    sets(c, pp[0], &r, nullptr);
    s = res(pselect(nfds, &r, nullptr, nullptr, &wait, &mask));
    say("pselect with a mask, the socket readable %s",
        select_text(c, pp[0], &r, nullptr, s).c_str());
    uint8_t buf[64];
    recv_exact(c, buf, 10);
    sets(c, pp[0], &r, nullptr);
    s = res(pselect(nfds, &r, nullptr, nullptr, &quiet, &mask));
    say("pselect, nothing readable %s", select_text(c, pp[0], &r, nullptr, s).c_str());

    // A closed descriptor beside the socket; a negative one.
    int dead = dup(pp[0]);
    close(dead);
    pollfd g[2] = {{c, POLLOUT, 0}, {dead, POLLIN, 0}};
    Res pr = res(poll(g, 2, kWaitMs));
    say("poll with a closed descriptor = %s: socket %s, closed %s", text(pr).c_str(),
        events_text(g[0].revents).c_str(), events_text(g[1].revents).c_str());
    g[1].fd = -1;
    pr = res(poll(g, 2, kWaitMs));
    say("poll with a negative descriptor = %s: socket %s, negative %s", text(pr).c_str(),
        events_text(g[0].revents).c_str(), events_text(g[1].revents).c_str());
    FD_ZERO(&r);
    FD_SET(c, &r);
    FD_SET(dead, &r);
    tv = {0, kQuietMs * 1000};
    say("select with a closed descriptor = %s",
        text(res(select(std::max(c, dead) + 1, &r, nullptr, nullptr, &tv))).c_str());

    // The end of the stream is readable.
    say("the server shuts down writing: %s", srv->ask("shutdown wr").c_str());
    pollfd e{c, POLLIN | POLLRDHUP, 0};
    pr = res(poll(&e, 1, kWaitMs));
    say("poll = %s: %s", text(pr).c_str(), events_text(e.revents).c_str());
    FD_ZERO(&r);
    FD_SET(c, &r);
    tv = {kWaitMs / 1000, 0};
    s = res(select(c + 1, &r, nullptr, nullptr, &tv));
    say("select = %s, the socket %s", text(s).c_str(),
        FD_ISSET(c, &r) ? "readable" : "not readable");
    say("recv = %s", text(res(recv(c, buf, sizeof buf, 0))).c_str());
    close(c);
    say("the server sees: %s", srv->ask("recvall 0").c_str());
    srv->ask("exit");
    join_ok(srv);
}

} // namespace sockdiff
