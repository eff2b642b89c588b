// Scenario dup: copies of a connection made by dup, dup2, dup3 and F_DUPFD_CLOEXEC all
// carry it (a round trip through each), their close-on-exec flags are as asked, closing
// some keeps the connection, closing the last gives the server the end of the stream;
// dup2 over another connection's descriptor ends that connection.
#include "harness.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace sockdiff {

namespace {

// A round trip through fd with the server; the result as a transcript word.
std::string trip(int fd, Peer *srv, uint32_t seed) {
    Res r;
    if (send_pattern(fd, 100, seed, &r) != 100) return "send " + text(r);
    std::string a = srv->ask("recv 100 " + std::to_string(seed));
    if (a != "ok 100 match") return "server: " + a;
    std::string b = srv->ask("send 100 " + std::to_string(seed + 1));
    if (b != "ok 100") return "server: " + b;
    std::string c = recv_check(fd, 100, seed + 1);
    return c == "100 B, pattern ok" ? "ok" : c;
}

const char *cloexec(int fd) {
    int f = fcntl(fd, F_GETFD);
    return f < 0 ? errname(errno) : (f & FD_CLOEXEC) ? "close-on-exec" : "kept on exec";
}

} // namespace

void dup_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    Peer *s1 = spawn_server("server 1", lfd);
    Peer *s2 = spawn_server("server 2", lfd);
    close(lfd);
    int c = dial(addr);
    s1->ask("accept");
    first_round_trip(c, s1, "connection 1");
    int c2 = dial(addr);
    s2->ask("accept");
    first_round_trip(c2, s2, "connection 2");

    int d1 = dup(c);
    Res r2 = res(dup2(c, 150));
    Res r3 = res(dup3(c, 151, O_CLOEXEC));
    int d4 = fcntl(c, F_DUPFD_CLOEXEC, 160);
    say("dup = %s", d1 >= 0 && d1 != c && d1 != c2 ? "a new number" : text(res(d1)).c_str());
    say("dup2(c, 150) = %s, dup3(c, 151, O_CLOEXEC) = %s", text(r2).c_str(), text(r3).c_str());
    say("fcntl(F_DUPFD_CLOEXEC, 160) = %s", d4 >= 160 ? "160 or above" : text(res(d4)).c_str());
    say("flags: original %s, dup %s, dup2 %s, dup3 %s, F_DUPFD_CLOEXEC %s", cloexec(c), cloexec(d1),
        cloexec(150), cloexec(151), cloexec(d4));
    say("dup2 onto itself = %s", dup2(c, c) == c ? "its number" : "another");
    say("dup3 onto itself = %s", text(res(dup3(c, c, 0))).c_str());

    const struct {
        const char *name;
        int fd;
    } copies[] = {
        {"the original", c}, {"dup", d1}, {"dup2", 150}, {"dup3", 151}, {"F_DUPFD_CLOEXEC", d4}};
    uint32_t seed = 10;
    for (auto &cp : copies) {
        say("round trip through %s: %s", cp.name, trip(cp.fd, s1, seed).c_str());
        seed += 2;
    }

    close(c);
    close(d1);
    std::string seen = s1->ask("poll");
    say("after closing the original and dup: server 1 sees %s; through dup2: %s", seen.c_str(),
        trip(150, s1, seed).c_str());
    close(150);
    close(151);
    seed += 2;
    say("after closing dup2 and dup3 too: through F_DUPFD_CLOEXEC: %s", trip(d4, s1, seed).c_str());

    // dup2 over connection 2's only descriptor: connection 2 ends, the number carries 1.
    Res r = res(dup2(d4, c2));
    say("dup2 over connection 2's descriptor = %s", r.v == c2 ? "its number" : text(r).c_str());
    say("server 2 sees: %s", s2->ask("recvall 0").c_str());
    seed += 2;
    say("through that number now: %s", trip(c2, s1, seed).c_str());
    close(d4);
    say("one copy left: server 1 sees %s", s1->ask("poll").c_str());
    close(c2);
    say("after the last close, server 1 sees: %s", s1->ask("recvall 0").c_str());
    s1->ask("exit");
    s2->ask("exit");
    join_ok(s1);
    join_ok(s2);
}

} // namespace sockdiff
