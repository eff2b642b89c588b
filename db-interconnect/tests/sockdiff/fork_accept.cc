// Scenario fork-accept: the PostgreSQL postmaster pattern.  A postmaster waits in select(),
// accept()s, sets TCP_NODELAY and SO_KEEPALIVE, forks a backend and closes its own copy
// of the connection at once.  The backend closes the listener, sets O_NONBLOCK, builds an
// epoll set of the socket, a signalfd (SIGURG, as latches use) and a pipe, each with a
// pointer as data, and only then reads the startup packet; it serves 100 round trips,
// waiting in epoll_wait on EAGAIN, until the client closes.  Two clients at once.  The
// client forks children too (one closes its copies and exits, one exits with them open,
// one calls _exit): the connections carry on in the client.
#include "harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sockdiff {

namespace {

constexpr int kClients = 2;
constexpr int kTrips = 100; // then 10 more after each child of the client
constexpr size_t kStartup = 16, kRequest = 32, kReply = 64;

struct Item {
    const char *name;
    int fd;
};

// Reads n bytes from a non-blocking socket, waiting in epoll_wait on EAGAIN; every event
// must carry one of the items' pointers.  False at the end of the stream or an error.
bool backend_read(int c, int ep, Item *items, int nitems, uint8_t *p, size_t n, bool *eof) {
    size_t done = 0;
    *eof = false;
    while (done < n) {
        Res r = res(recv(c, p + done, n - done, 0));
        if (r.v > 0) {
            done += static_cast<size_t>(r.v);
            continue;
        }
        if (r.v == 0) {
            *eof = true;
            return false;
        }
        if (r.err == EINTR) continue;
        if (!check(r.err == EAGAIN, "backend recv: %s", text(r).c_str())) return false;
        epoll_event ev[4];
        int k = epoll_wait(ep, ev, 4, kWaitMs);
        if (!check(k > 0, "backend epoll_wait = %s", text(res(k)).c_str())) return false;
        for (int i = 0; i < k; ++i) {
            bool known = false;
            for (int j = 0; j < nitems; ++j) known |= ev[i].data.ptr == &items[j];
            check(known, "an epoll event with a pointer the backend never gave");
        }
    }
    return true;
}

void backend(int c, int lfd, int k) {
    close(lfd);
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    sigset_t urg;
    sigemptyset(&urg);
    sigaddset(&urg, SIGURG);
    sigprocmask(SIG_BLOCK, &urg, nullptr);
    int sfd = signalfd(-1, &urg, SFD_NONBLOCK | SFD_CLOEXEC);
    int pp[2];
    if (sfd < 0 || pipe2(pp, O_CLOEXEC | O_NONBLOCK) != 0) fatal("signalfd or pipe");
    Item items[3] = {{"socket", c}, {"signalfd", sfd}, {"pipe", pp[0]}};
    int ep = epoll_create1(EPOLL_CLOEXEC);
    for (Item &it : items) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.ptr = &it;
        check(epoll_ctl(ep, EPOLL_CTL_ADD, it.fd, &ev) == 0, "epoll_ctl ADD %s", it.name);
    }
    uint8_t buf[kReply];
    bool eof;
    bool ok = backend_read(c, ep, items, 3, buf, kStartup, &eof);
    bool pattern = ok;
    for (size_t i = 0; i < kStartup && ok; ++i) pattern &= buf[i] == pattern_byte(i, 100 + k);
    say("startup packet: %s", pattern ? "16 B, pattern ok" : "missing or broken");

    // A latch set by a signal: the signalfd's event comes with its own pointer.
    kill(getpid(), SIGURG);
    bool seen = false;
    for (int round = 0; round < 10 && !seen; ++round) {
        epoll_event ev[4];
        int n = epoll_wait(ep, ev, 4, kWaitMs);
        for (int i = 0; i < n; ++i) seen |= ev[i].data.ptr == &items[1];
    }
    signalfd_siginfo si;
    say("SIGURG: the signalfd's event came with its pointer: %s; read = %s", seen ? "yes" : "no",
        text(res(read(sfd, &si, sizeof si))).c_str());

    int trips = 0;
    while (ok) {
        if (!backend_read(c, ep, items, 3, buf, kRequest, &eof)) break;
        bool good = true;
        for (size_t i = 0; i < kRequest; ++i) good &= buf[i] == pattern_byte(i, 1000 + trips);
        check(good, "request %d broken", trips);
        fill(buf, kReply, 0, 2000 + trips);
        Res r;
        if (!check(send_all(c, buf, kReply, &r) == kReply, "reply: %s", text(r).c_str())) break;
        // The server side switches by its first answer at the latest (the client's stream
        // comes once it has read the server's reply to its hello).
        if (trips == 0) expect_carried(c, "backend's connection");
        ++trips;
    }
    say("served %d round trips, then %s", trips, eof ? "EOF" : "an error");
    close(ep);
}

void postmaster(Chan &ch, int lfd) {
    enter_server_side();
    std::vector<Peer *> backends;
    for (int k = 0; k < kClients; ++k) {
        fd_set rs;
        FD_ZERO(&rs);
        FD_SET(lfd, &rs);
        timeval tv{kWaitMs / 1000, 0};
        say("select on the listener = %s",
            text(res(select(lfd + 1, &rs, nullptr, nullptr, &tv))).c_str());
        int c = accept(lfd, nullptr, nullptr);
        if (c < 0) fatal("accept: %s", strerror(errno));
        Addr me;
        me.len = sizeof me.ss;
        getsockname(c, reinterpret_cast<sockaddr *>(&me.ss), &me.len);
        say("accepted; getsockname: %s", where_text(me.sa(), me.len).c_str());
        if (run().tcp()) {
            int one = 1;
            Res a = res(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
            Res b = res(setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one));
            say("TCP_NODELAY = %s, SO_KEEPALIVE = %s", text(a).c_str(), text(b).c_str());
        }
        backends.push_back(
            spawn("backend " + std::to_string(k + 1), [c, lfd, k](Chan &) { backend(c, lfd, k); }));
        say("forked backend %d; closing the accepted socket = %s", k + 1,
            text(res(close(c))).c_str());
    }
    std::string line;
    check(ch.hear_maybe(&line, 20000) && line == "stop", "no stop");
    for (Peer *b : backends) join_ok(b);
}

// Round trips `from` .. from + count - 1 on every connection: how many replies were right.
int round_trips(const int *c, int from, int count) {
    uint8_t buf[kReply];
    int good = 0;
    for (int i = from; i < from + count; ++i) {
        for (int k = 0; k < kClients; ++k) {
            fill(buf, kRequest, 0, 1000 + i);
            if (send_all(c[k], buf, kRequest) != kRequest) continue;
            if (recv_check(c[k], kReply, 2000 + i) == "64 B, pattern ok") ++good;
            if (i == 0) expect_carried(c[k], "client connection");
        }
    }
    return good;
}

} // namespace

void fork_accept_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    Peer *pm = spawn("postmaster", [lfd](Chan &ch) { postmaster(ch, lfd); });
    close(lfd);
    int c[kClients];
    uint8_t buf[kStartup];
    for (int k = 0; k < kClients; ++k) {
        c[k] = dial(addr);
        fill(buf, kStartup, 0, 100 + k);
        check(send_all(c[k], buf, kStartup) == kStartup, "startup packet");
    }
    int good = round_trips(c, 0, kTrips);
    say("%d round trips on each of %d connections: %d replies right", kTrips, kClients, good);
    check(good == kTrips * kClients, "replies");

    // The client forks children that end in three ways; its connections carry on.
    const char *const kEnds[] = {"closes its copies and exits", "exits", "calls _exit"};
    for (int e = 0; e < 3; ++e) {
        Peer *child = spawn("child " + std::to_string(e + 1), [e, &c](Chan &) {
            if (e == 0)
                for (int k = 0; k < kClients; ++k) close(c[k]);
            if (e == 2) _exit(0);
        });
        join_ok(child);
        good = round_trips(c, kTrips + 10 * e, 10);
        say("after a child that %s: 10 more round trips on each: %d replies right", kEnds[e], good);
        check(good == 10 * kClients, "replies after child %d", e + 1);
    }
    for (int k = 0; k < kClients; ++k) close(c[k]);
    pm->chan.tell("stop");
    join_ok(pm, 20000);
}

} // namespace sockdiff
