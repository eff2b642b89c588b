// Scenario half-close: shutdown(SHUT_WR) after sending: the server reads the rest, then the
// end of the stream, and can still answer; a send after it fails with EPIPE.
// shutdown(SHUT_RD): our reads end, what the server may still send and what becomes of
// it (the kernel's answer differs between unix and TCP sockets: each family is compared
// with itself).  shutdown(SHUT_RDWR).  shutdown of an unconnected socket, and a bad `how`.
// Closing a connection nobody accepted yet returns at once.
#include "harness.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace sockdiff {

namespace {

std::string poll_bits(int fd) {
    pollfd p{fd, POLLIN | POLLOUT | POLLRDHUP, 0};
    Res r = res(poll(&p, 1, 0));
    return r.v < 0 ? text(r) : events_text(p.revents);
}

} // namespace

void half_close_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    Peer *srv[3];
    for (int i = 0; i < 3; ++i) srv[i] = spawn_server("server " + std::to_string(i + 1), lfd);
    close(lfd);
    int c[3];
    for (int i = 0; i < 3; ++i) {
        c[i] = dial(addr);
        srv[i]->ask("accept");
        first_round_trip(c[i], srv[i], ("connection " + std::to_string(i + 1)).c_str());
    }
    uint8_t buf[4096];

    // SHUT_WR after 3000 bytes.
    Res r;
    size_t sent = send_pattern(c[0], 3000, 21, &r);
    say("sent %zu B; shutdown(SHUT_WR) = %s", sent, text(res(shutdown(c[0], SHUT_WR))).c_str());
    say("server 1 reads the rest, then: %s", srv[0]->ask("recvall 21").c_str());
    say("server 1's poll: %s", srv[0]->ask("poll").c_str());
    say("server 1 can still answer: %s", srv[0]->ask("send 500 22").c_str());
    say("its answer: %s", recv_check(c[0], 500, 22).c_str());
    say("our poll: %s", poll_bits(c[0]).c_str());
    say("send after SHUT_WR = %s", text(res(send(c[0], buf, 10, MSG_NOSIGNAL))).c_str());
    say("server 1 closes: %s", srv[0]->ask("close").c_str());
    say("recv = %s", text(res(recv(c[0], buf, sizeof buf, 0))).c_str());
    say("our poll: %s", poll_bits(c[0]).c_str());
    close(c[0]);

    // SHUT_RD.
    say("shutdown(SHUT_RD) = %s", text(res(shutdown(c[1], SHUT_RD))).c_str());
    say("recv(MSG_DONTWAIT) = %s", text(res(recv(c[1], buf, sizeof buf, MSG_DONTWAIT))).c_str());
    say("our poll: %s", poll_bits(c[1]).c_str());
    say("server 2 sends 100 B after it: %s", srv[1]->ask("send 100 23").c_str());
    // Whatever the family does with them, they have arrived (or not) within 200 ms.
    say("FIONREAD = %d", readable_bytes(c[1], 100, 200));
    r = res(recv(c[1], buf, sizeof buf, MSG_DONTWAIT));
    say("recv(MSG_DONTWAIT) = %s", text(r).c_str());
    fill(buf, 50, 0, 24);
    r = res(send(c[1], buf, 50, MSG_NOSIGNAL));
    say("we can still send: %s; server 2 reads %s", text(r).c_str(),
        srv[1]->ask("recv 50 24").c_str());
    close(c[1]);
    say("after our close, server 2 sees: %s", srv[1]->ask("recvall 0").c_str());

    // SHUT_RDWR.
    say("shutdown(SHUT_RDWR) = %s", text(res(shutdown(c[2], SHUT_RDWR))).c_str());
    say("server 3 sees: %s", srv[2]->ask("recvall 0").c_str());
    say("our poll: %s", poll_bits(c[2]).c_str());
    say("send = %s", text(res(send(c[2], buf, 10, MSG_NOSIGNAL))).c_str());
    say("recv(MSG_DONTWAIT) = %s", text(res(recv(c[2], buf, sizeof buf, MSG_DONTWAIT))).c_str());
    close(c[2]);

    int u = stream_socket();
    say("shutdown of an unconnected socket = %s", text(res(shutdown(u, SHUT_WR))).c_str());
    say("shutdown(how = 7) = %s", text(res(shutdown(u, 7))).c_str());
    close(u);

    // Nobody accepts this one (the listener's backlog holds it): closing it does not wait.
    u = dial(addr);
    fill(buf, 10, 0, 25);
    r = res(send(u, buf, 10, MSG_NOSIGNAL));
    uint64_t t0 = now_ns();
    Res cl = res(close(u));
    uint64_t ms = (now_ns() - t0) / 1000000;
    say("a connection nobody accepted: send = %s; close = %s, within 100 ms: %s", text(r).c_str(),
        text(cl).c_str(), ms < 100 ? "yes" : "no");
    note("close took %llu ms", static_cast<unsigned long long>(ms));
    for (Peer *p : srv) {
        p->ask("exit");
        join_ok(p);
    }
}

} // namespace sockdiff
