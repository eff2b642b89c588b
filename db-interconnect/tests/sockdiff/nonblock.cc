// Scenario nonblock: what libpq and a PostgreSQL backend do with non-blocking sockets.
// A non-blocking accept with no client; a non-blocking connect (EINPROGRESS, or done at
// once as on unix) followed by poll(POLLOUT) and SO_ERROR; EAGAIN on nothing to read;
// sends until EAGAIN while the server does not read, no POLLOUT then, POLLOUT again once
// it drains (every byte arriving, in order); SO_RCVTIMEO; a refused connect.
#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace sockdiff {

namespace {

int so_error(int fd, Res *r) {
    int err = -1;
    socklen_t l = sizeof err;
    *r = res(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l));
    return err;
}

void set_nonblock(int fd, bool on) {
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

// A non-blocking connect to an address that refuses, then a blocking one.
void refused() {
    Addr where;
    int u = make_unlistened(&where);
    int d = stream_socket(SOCK_NONBLOCK);
    Res r = res(connect(d, where.sa(), where.len));
    int err = r.v == 0 ? 0 : r.err;
    if (r.v < 0 && r.err == EINPROGRESS) {
        say("non-blocking connect to an address nobody listens on = -1 EINPROGRESS");
        say("poll(POLLOUT) after it = %s", events_text(wait_for(d, POLLOUT, kWaitMs)).c_str());
        err = so_error(d, &r);
    }
    say("that connect failed with %s", err ? errname(err) : "nothing (it connected)");
    say("SO_ERROR once more = %d", so_error(d, &r));
    close(d);
    d = stream_socket();
    r = res(connect(d, where.sa(), where.len));
    say("blocking connect to it = %s", text(r).c_str());
    close(d);
    close(u);
}

} // namespace

void nonblock_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    set_nonblock(lfd, true);
    say("accept on a non-blocking listener, no client = %s",
        text(res(accept(lfd, nullptr, nullptr))).c_str());
    set_nonblock(lfd, false); // the server's copy shares the flag
    Peer *srv = spawn_server("server", lfd);
    close(lfd);

    int c = stream_socket(SOCK_NONBLOCK);
    Res r = res(connect(c, addr.sa(), addr.len));
    bool started = r.v == 0 || r.err == EINPROGRESS;
    say("non-blocking connect: %s", started ? "in progress or done" : text(r).c_str());
    say("poll(POLLOUT) = %s", events_text(wait_for(c, POLLOUT, kWaitMs)).c_str());
    int err = so_error(c, &r);
    say("SO_ERROR = %s, %d", text(r).c_str(), err);
    no_delay(c);
    say("connect again = %s", text(res(connect(c, addr.sa(), addr.len))).c_str());
    srv->ask("accept");

    uint8_t buf[100];
    say("recv on nothing = %s", text(res(recv(c, buf, sizeof buf, 0))).c_str());
    say("read on nothing = %s", text(res(read(c, buf, sizeof buf))).c_str());
    first_round_trip(c, srv, "client");

    // Fill: the server does not read.  How much the buffers took is not the kernel's
    // promise; that the sends stop with EAGAIN, and that every byte arrives, is.
    std::vector<uint8_t> chunk(65536);
    uint64_t total = 0;
    for (int i = 0; i < 8192; ++i) {
        fill(chunk.data(), chunk.size(), total, 5);
        r = res(send(c, chunk.data(), chunk.size(), 0));
        if (r.v < 0) break;
        total += static_cast<uint64_t>(r.v);
    }
    say("sends while the server does not read end with %s",
        r.v < 0 && r.err == EAGAIN && total > 0 ? "EAGAIN (send filled)" : text(r).c_str());
    // Whether room comes back before the reader reads is no promise either: TCP's send
    // buffer empties into the receiver's by itself, a unix socket's (and a stream's) does
    // not.  Only unix connections, where both agree, are compared.
    std::string full = events_text(wait_for(c, POLLOUT, kQuietMs));
    say("poll(POLLOUT) while full = %s", run().tcp() ? "(TCP: not compared)" : full.c_str());
    // The server reads it all, then answers 8 bytes; we wait on the socket as a program
    // that still has something to do would.
    check(srv->ask("recv-after 0 " + std::to_string(total) + " 5") == "ok", "drain");
    srv->chan.tell("send 8 66");
    say("poll(POLLOUT) while the server reads = %s",
        events_text(wait_for(c, POLLOUT, kWaitMs)).c_str());
    say("poll(POLLIN) for its answer = %s", events_text(wait_for(c, POLLIN, kWaitMs)).c_str());
    say("its answer: %s", recv_check(c, 8, 66).c_str());
    std::string drained = srv->chan.hear();
    say("the server read every byte sent: %s",
        drained == "done " + std::to_string(total) + " match" ? "yes, in order" : drained.c_str());
    check(srv->chan.hear() == "ok 8", "answer");
    fill(buf, sizeof buf, 0, 6);
    say("send after the drain = %s", text(res(send(c, buf, sizeof buf, 0))).c_str());
    say("the server reads it: %s", srv->ask("recv 100 6").c_str());

    // Blocking again, with a receive timeout: EAGAIN once it runs out.
    set_nonblock(c, false);
    timeval tv{0, 100000};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint64_t t0 = now_ns();
    r = res(recv(c, buf, sizeof buf, 0));
    uint64_t ms = (now_ns() - t0) / 1000000;
    say("blocking recv with SO_RCVTIMEO 100 ms = %s, after 90 ms to 1 s: %s", text(r).c_str(),
        ms >= 90 && ms < 1000 ? "yes" : "no");
    tv = {0, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    say("recv(MSG_DONTWAIT) on a blocking socket = %s",
        text(res(recv(c, buf, sizeof buf, MSG_DONTWAIT))).c_str());

    refused();

    close(c);
    say("the server sees: %s", srv->ask("recvall 0").c_str());
    srv->ask("exit");
    join_ok(srv);
}

} // namespace sockdiff
