// Scenarios fd-exhaustion and high-fd: the descriptor table's edges.
//
// fd-exhaustion: the server lowers RLIMIT_NOFILE to its lowest free descriptor: socket,
// pipe, epoll_create1 and accept fail with EMFILE as the kernel gives it (the pending
// connection stays in the backlog), while the server keeps serving the connections it
// has; with the limit back, it accepts the waiting one.  The client at its own limit: no
// socket; with one descriptor left: a socket, connected and carrying bytes (whether it
// rides vipl then is the interposer's choice), and no second one.
//
// high-fd: the soft limit raised to the hard limit; a connection moved by dup2 to the
// highest number (limit - 1) and a socket connected there carry bytes, poll and epoll
// see them; above 65,535 the same when setrlimit allows raising the limits that far
// here (the transcript says which).
#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

namespace sockdiff {

namespace {

int lowest_free() {
    int fd = fcntl(0, F_DUPFD, 0);
    if (fd >= 0) close(fd);
    return fd;
}

Res set_soft(rlim_t soft) {
    rlimit l;
    getrlimit(RLIMIT_NOFILE, &l);
    l.rlim_cur = soft;
    return res(setrlimit(RLIMIT_NOFILE, &l));
}

// Traffic, poll and epoll through the connection moved to number `top`, then a socket
// made at top - 1 connected and used.
void at_top(int top, int c, const Addr &addr, Peer *srv, uint32_t seed, const char *where) {
    Res r = res(dup2(c, top));
    say("dup2 of the connection to %s = %s", where, r.v == top ? "that number" : text(r).c_str());
    close(c);
    say("a round trip through it: %s", round_trip(top, srv, seed).c_str());
    pollfd p{top, POLLOUT, 0};
    Res pr = res(poll(&p, 1, kWaitMs));
    say("poll = %s: %s", text(pr).c_str(), events_text(p.revents).c_str());
    int ep = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 7;
    Res er = res(epoll_ctl(ep, EPOLL_CTL_ADD, top, &ev));
    srv->ask("send 10 " + std::to_string(seed + 2));
    ev = {};
    Res w = res(epoll_wait(ep, &ev, 1, kWaitMs));
    say("epoll_ctl = %s; the server sent 10 B: epoll_wait = %s: data %llu, %s", text(er).c_str(),
        text(w).c_str(), static_cast<unsigned long long>(ev.data.u64),
        events_text(ev.events).c_str());
    say("%s", recv_check(top, 10, seed + 2).c_str());
    close(ep);
    close(top);
    say("closed: the server sees %s", srv->ask("recvall 0").c_str());

    int s = stream_socket();
    r = res(dup2(s, top - 1));
    close(s);
    say("a new socket moved one below %s = %s", where,
        r.v == top - 1 ? "that number" : text(r).c_str());
    r = res(connect(top - 1, addr.sa(), addr.len));
    no_delay(top - 1);
    say("connect from there = %s", text(r).c_str());
    srv->ask("accept");
    first_round_trip(top - 1, srv, "the connection made there");
    close(top - 1);
    say("closed: the server sees %s", srv->ask("recvall 0").c_str());
}

} // namespace

void fd_exhaustion_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    Peer *srv = spawn_server("server", lfd);
    close(lfd);
    int a = dial(addr);
    srv->ask("accept");
    first_round_trip(a, srv, "connection A");
    int b = dial(addr);
    srv->ask("accept");
    first_round_trip(b, srv, "connection B");

    say("the server lowers its limit to its lowest free descriptor: %s",
        srv->ask("limit-lowest").c_str());
    say("server: socket %s", srv->ask("socket").c_str());
    say("server: pipe %s", srv->ask("pipe").c_str());
    say("server: epoll_create1 %s", srv->ask("epoll").c_str());
    int d = dial(addr);
    say("a client connects meanwhile (the backlog takes it)");
    say("server: accept %s", srv->ask("try-accept").c_str());
    say("server: accept again %s", srv->ask("try-accept").c_str());
    srv->ask("use 0");
    say("at its limit, the server serves connection A: %s", round_trip(a, srv, 60).c_str());
    srv->ask("use 1");
    say("and connection B: %s", round_trip(b, srv, 62).c_str());
    say("the server restores its limit: %s", srv->ask("limit-restore").c_str());
    say("server: accept %s", srv->ask("try-accept").c_str());
    first_round_trip(d, srv, "connection D");

    rlimit saved;
    getrlimit(RLIMIT_NOFILE, &saved);
    int low = lowest_free();
    say("we lower our own limit to our lowest free descriptor = %s",
        text(set_soft(static_cast<rlim_t>(low))).c_str());
    say("socket = %s", text(res(stream_socket(0, true))).c_str());
    say("one descriptor left = %s", text(set_soft(static_cast<rlim_t>(low + 1))).c_str());
    int e = stream_socket(0, true);
    say("socket = %s", e >= 0 ? "a descriptor" : text(res(e)).c_str());
    if (e >= 0) {
        Res r = res(connect(e, addr.sa(), addr.len));
        no_delay(e);
        say("connect = %s", text(r).c_str());
        say("another socket = %s", text(res(stream_socket(0, true))).c_str());
        say("server: accept %s", srv->ask("try-accept").c_str());
        say("a round trip on it: %s", round_trip(e, srv, 64).c_str());
    }
    say("our limit restored = %s", text(res(setrlimit(RLIMIT_NOFILE, &saved))).c_str());
    for (int fd : {a, b, d, e}) close(fd);
    srv->ask("exit");
    join_ok(srv);
}

void high_fd_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    Peer *srv = spawn_server("server", lfd);
    close(lfd);
    rlimit l;
    getrlimit(RLIMIT_NOFILE, &l);
    rlim_t hard = l.rlim_max;
    say("soft limit raised to the hard limit = %s", text(set_soft(hard)).c_str());
    int c = dial(addr);
    srv->ask("accept");
    first_round_trip(c, srv, "connection");
    int top = static_cast<int>(std::min<rlim_t>(hard, 1 << 22)) - 1;
    at_top(top, c, addr, srv, 70, "the limit - 1");

    if (hard > 65536) {
        say("the hard limit is above 65535: the descriptors above were beyond it");
    } else {
        rlimit big{69632, 69632};
        Res r = res(setrlimit(RLIMIT_NOFILE, &big));
        say("raising both limits to 69632 (above 65535) = %s%s", text(r).c_str(),
            r.v == 0 ? "" : ": not run above 65535 here");
        if (r.v == 0) {
            c = dial(addr);
            srv->ask("accept");
            first_round_trip(c, srv, "a connection for fd 69631");
            at_top(69631, c, addr, srv, 80, "69631");
        }
    }
    srv->ask("exit");
    join_ok(srv);
}

} // namespace sockdiff
