// Scenario epoll: registrations by pointer (data.ptr) and by descriptor; level- and
// edge-triggered; EPOLLONESHOT re-armed by EPOLL_CTL_MOD; one socket in two sets; a set
// mixing the socket with a pipe and a signalfd (PostgreSQL's wait set); EPOLLRDHUP on
// the server's shutdown(SHUT_WR); EPOLLHUP/EPOLLERR when the server dies with bytes
// unread; a socket registered before its first byte (a backend registers before it
// reads); a set made and freed for every wait (walreceiver, postgres_fdw).
#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sockdiff {

namespace {

struct Named {
    uint64_t data;
    std::string name;
};

std::vector<Named> g_named; // what each registration's data means

uint64_t named(uint64_t data, const std::string &name) {
    g_named.push_back({data, name});
    return data;
}

std::string name_of(uint64_t data) {
    for (const Named &n : g_named)
        if (n.data == data) return n.name;
    return "unknown data";
}

// epoll_wait's result as a transcript shows it: "= 2: A IN, c2 IN RDHUP" (sorted).
std::string wait_text(int ep, int timeout_ms) {
    epoll_event ev[8];
    int k = epoll_wait(ep, ev, 8, timeout_ms);
    if (k < 0) return "= " + text(res(k));
    std::vector<std::string> v;
    for (int i = 0; i < k; ++i)
        v.push_back(name_of(ev[i].data.u64) + " " + events_text(ev[i].events));
    std::sort(v.begin(), v.end());
    std::string s = "= " + std::to_string(k);
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : ": ") + v[i];
    return s;
}

int ctl(int ep, int op, int fd, uint32_t events, uint64_t data) {
    epoll_event e{};
    e.events = events;
    e.data.u64 = data;
    return epoll_ctl(ep, op, fd, &e);
}

std::string drain(int fd, size_t n) {
    std::vector<uint8_t> buf(n);
    Res r;
    size_t got = recv_exact(fd, buf.data(), n, &r);
    return got == n ? "read " + std::to_string(n) + " B" : "read only " + std::to_string(got);
}

int g_tag_a, g_tag_b; // registered by address

} // namespace

void epoll_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    Peer *p1 = spawn_server("server 1", lfd);
    Peer *p2 = spawn_server("server 2", lfd);
    Peer *p3 = spawn_server("server 3", lfd);
    close(lfd);
    int c1 = dial(addr);
    p1->ask("accept");
    first_round_trip(c1, p1, "connection 1");
    int c2 = dial(addr);
    p2->ask("accept");
    first_round_trip(c2, p2, "connection 2");

    uint64_t a = named(reinterpret_cast<uint64_t>(&g_tag_a), "A (ptr)");
    uint64_t b = named(reinterpret_cast<uint64_t>(&g_tag_b), "B (ptr)");
    epoll_data_t by_fd{};
    by_fd.fd = c2;
    named(by_fd.u64, "c2 (fd)");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int r1 = ctl(ep, EPOLL_CTL_ADD, c1, EPOLLIN, a);
    int r2 = ctl(ep, EPOLL_CTL_ADD, c2, EPOLLIN, by_fd.u64);
    say("add connection 1 by pointer = %d, connection 2 by fd = %d", r1, r2);
    say("nothing ready: epoll_wait %s", wait_text(ep, kQuietMs).c_str());
    p1->ask("send 10 1");
    say("server 1 sent 10 B: epoll_wait %s", wait_text(ep, kWaitMs).c_str());
    say("level-triggered, not read: epoll_wait %s", wait_text(ep, kQuietMs).c_str());
    std::string d = drain(c1, 10);
    say("%s; epoll_wait %s", d.c_str(), wait_text(ep, kQuietMs).c_str());
    p2->ask("send 10 2");
    say("server 2 sent 10 B: epoll_wait %s", wait_text(ep, kWaitMs).c_str());
    d = drain(c2, 10);
    say("%s; epoll_wait %s", d.c_str(), wait_text(ep, kQuietMs).c_str());

    say("MOD connection 1 to EPOLLIN|EPOLLET = %d",
        ctl(ep, EPOLL_CTL_MOD, c1, EPOLLIN | EPOLLET, a));
    say("edge, nothing yet: epoll_wait %s", wait_text(ep, kQuietMs).c_str());
    p1->ask("send 10 1");
    say("edge, 10 B came: epoll_wait %s", wait_text(ep, kWaitMs).c_str());
    say("edge, nothing new: epoll_wait %s", wait_text(ep, kQuietMs).c_str());
    p1->ask("send 10 1");
    say("edge, 10 B more: epoll_wait %s", wait_text(ep, kWaitMs).c_str());
    d = drain(c1, 20);
    say("%s; epoll_wait %s", d.c_str(), wait_text(ep, kQuietMs).c_str());

    say("MOD to EPOLLIN|EPOLLONESHOT = %d", ctl(ep, EPOLL_CTL_MOD, c1, EPOLLIN | EPOLLONESHOT, a));
    p1->ask("send 10 1");
    say("one-shot, 10 B came: epoll_wait %s", wait_text(ep, kWaitMs).c_str());
    say("one-shot, reported once, not read: epoll_wait %s", wait_text(ep, kQuietMs).c_str());
    p1->ask("send 10 1");
    say("one-shot, 10 B more: epoll_wait %s", wait_text(ep, kQuietMs).c_str());
    r1 = ctl(ep, EPOLL_CTL_MOD, c1, EPOLLIN | EPOLLONESHOT, a);
    say("re-armed by MOD = %d: epoll_wait %s", r1, wait_text(ep, kWaitMs).c_str());
    d = drain(c1, 20);
    say("%s; MOD back to EPOLLIN = %d", d.c_str(), ctl(ep, EPOLL_CTL_MOD, c1, EPOLLIN, a));

    int ep2 = epoll_create1(EPOLL_CLOEXEC);
    say("connection 1 in a second set too = %d", ctl(ep2, EPOLL_CTL_ADD, c1, EPOLLIN, b));
    p1->ask("send 10 1");
    std::string w1 = wait_text(ep, kWaitMs);
    say("10 B came: first set %s; second set %s", w1.c_str(), wait_text(ep2, kWaitMs).c_str());
    d = drain(c1, 10);
    say("%s; second set %s", d.c_str(), wait_text(ep2, kQuietMs).c_str());
    close(ep2);

    // PostgreSQL's wait set: the socket, a pipe, a signalfd.
    sigset_t urg;
    sigemptyset(&urg);
    sigaddset(&urg, SIGURG);
    sigprocmask(SIG_BLOCK, &urg, nullptr);
    int sfd = signalfd(-1, &urg, SFD_CLOEXEC | SFD_NONBLOCK);
    int pp[2];
    if (sfd < 0 || pipe2(pp, O_CLOEXEC) != 0) fatal("signalfd or pipe");
    int ep3 = epoll_create1(EPOLL_CLOEXEC);
    ctl(ep3, EPOLL_CTL_ADD, c1, EPOLLIN, named(1, "socket"));
    ctl(ep3, EPOLL_CTL_ADD, pp[0], EPOLLIN, named(2, "pipe"));
    ctl(ep3, EPOLL_CTL_ADD, sfd, EPOLLIN, named(3, "signalfd"));
    say("mixed set, nothing ready: epoll_wait %s", wait_text(ep3, kQuietMs).c_str());
    char x = 'x';
    write(pp[1], &x, 1);
    say("the pipe written: epoll_wait %s", wait_text(ep3, kWaitMs).c_str());
    read(pp[0], &x, 1);
    kill(getpid(), SIGURG);
    say("SIGURG raised: epoll_wait %s", wait_text(ep3, kWaitMs).c_str());
    signalfd_siginfo si;
    read(sfd, &si, sizeof si);
    p1->ask("send 10 1");
    say("server 1 sent 10 B: epoll_wait %s", wait_text(ep3, kWaitMs).c_str());
    write(pp[1], &x, 1);
    kill(getpid(), SIGURG);
    say("all three: epoll_wait %s", wait_text(ep3, kWaitMs).c_str());
    read(pp[0], &x, 1);
    read(sfd, &si, sizeof si);
    d = drain(c1, 10);
    say("%s; epoll_wait %s", d.c_str(), wait_text(ep3, kQuietMs).c_str());
    close(ep3);

    say("MOD connection 1 to EPOLLIN|EPOLLRDHUP = %d",
        ctl(ep, EPOLL_CTL_MOD, c1, EPOLLIN | EPOLLRDHUP, a));
    say("server 1 shuts down writing: %s", p1->ask("shutdown wr").c_str());
    say("epoll_wait %s", wait_text(ep, kWaitMs).c_str());
    uint8_t buf[100];
    say("recv = %s", text(res(recv(c1, buf, sizeof buf, 0))).c_str());
    fill(buf, 5, 0, 8);
    Res r = res(send(c1, buf, 5, 0));
    say("we can still send: %s; server 1 reads %s", text(r).c_str(), p1->ask("recv 5 8").c_str());
    say("DEL connection 1 = %d", ctl(ep, EPOLL_CTL_DEL, c1, 0, 0));

    // Server 2 dies with 100 bytes it never read: the connection is reset.
    say("MOD connection 2 to EPOLLIN|EPOLLRDHUP = %d",
        ctl(ep, EPOLL_CTL_MOD, c2, EPOLLIN | EPOLLRDHUP, by_fd.u64));
    fill(buf, 100, 0, 9);
    say("send 100 B server 2 will not read = %s", text(res(send(c2, buf, 100, 0))).c_str());
    kill(p2->pid, SIGKILL);
    join(p2);
    // The reset may come in steps (EOF first): look until it is complete or 300 ms passed.
    std::string seen;
    for (uint64_t end = now_ns() + 300000000ull; now_ns() < end;) {
        seen = wait_text(ep, kWaitMs);
        if (seen.find("HUP") != std::string::npos) break;
        sleep_ms(5);
    }
    say("epoll_wait %s", seen.c_str());
    say("recv = %s", text(res(recv(c2, buf, sizeof buf, 0))).c_str());
    say("recv again = %s", text(res(recv(c2, buf, sizeof buf, 0))).c_str());
    close(ep);
    close(c2);

    // Registered before its first byte, the registration follows the connection.
    int c3 = dial(addr);
    int ep4 = epoll_create1(EPOLL_CLOEXEC);
    by_fd.fd = c3;
    say("a new connection registered at once = %d",
        ctl(ep4, EPOLL_CTL_ADD, c3, EPOLLIN, named(by_fd.u64, "c3 (fd)")));
    p3->ask("accept");
    say("nothing sent yet: epoll_wait %s", wait_text(ep4, kQuietMs).c_str());
    send_pattern(c3, 8, 31);
    p3->post("recv 8 31");
    p3->post("send 8 32");
    say("the server answered: epoll_wait %s", wait_text(ep4, kWaitMs).c_str());
    std::string back = recv_check(c3, 8, 32);
    std::string got = p3->answer();
    say("its answer: %s; server 3: %s, %s", back.c_str(), got.c_str(), p3->answer().c_str());
    expect_carried(c3, "connection 3");
    p3->ask("carried");
    close(ep4);

    // A set made and freed for every wait.
    int reported = 0;
    for (int i = 0; i < 20; ++i) {
        p3->ask("send 16 " + std::to_string(40 + i));
        int e = epoll_create1(EPOLL_CLOEXEC);
        ctl(e, EPOLL_CTL_ADD, c3, EPOLLIN, named(100 + i, "fresh set"));
        epoll_event ev;
        if (epoll_wait(e, &ev, 1, kWaitMs) == 1 && ev.data.u64 == static_cast<uint64_t>(100 + i) &&
            (ev.events & EPOLLIN))
            ++reported;
        close(e);
        check(recv_check(c3, 16, 40 + i) == "16 B, pattern ok", "fresh set %d", i);
    }
    say("20 waits, each in a fresh set: %d reported IN with their data", reported);
    close(c3);
    say("server 3 sees: %s", p3->ask("recvall 0").c_str());
    for (Peer *p : {p1, p3}) {
        p->ask("exit");
        join_ok(p);
    }
}

} // namespace sockdiff
