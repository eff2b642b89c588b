// Scenario peer-death: the server is SIGKILLed while it streams to us: the bytes before
// are intact, the end (EOF or ECONNRESET: either is the kernel's answer, depending on
// what was in flight) comes within 100 ms of the kill; poll then; a send fails with EPIPE
// (SIGPIPE ignored), with SIGPIPE handled (the handler runs), with MSG_NOSIGNAL (it does
// not), and with SIGPIPE's default action (a child dies of it).  A recv blocked when the
// server dies returns within 100 ms.  A client that writes and exits at once: the server
// still reads every byte, then the end.
#include "harness.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace sockdiff {

namespace {

volatile sig_atomic_t g_pipes = 0;
volatile pid_t g_victim = 0;
volatile uint64_t g_killed_at = 0;

void on_pipe(int) {
    g_pipes = g_pipes + 1;
}

void kill_victim(int) {
    g_killed_at = now_ns();
    kill(g_victim, SIGKILL);
}

std::string poll_bits(int fd) {
    pollfd p{fd, POLLIN | POLLOUT | POLLRDHUP, 0};
    Res r = res(poll(&p, 1, 0));
    return r.v < 0 ? text(r) : events_text(p.revents);
}

const char *end_text(Res r) {
    if (r.v == 0) return "EOF or ECONNRESET";
    if (r.v < 0 && r.err == ECONNRESET) return "EOF or ECONNRESET";
    return r.v < 0 ? errname(r.err) : "data";
}

// Sends a byte at a time (2 ms apart, up to 1 s) until a send fails: its result.
Res send_until_error(int fd, int flags) {
    char x = 'x';
    Res r{0, 0};
    for (int i = 0; i < 500; ++i) {
        r = res(send(fd, &x, 1, flags));
        if (r.v < 0) break;
        sleep_ms(2);
    }
    return r;
}

// Connects to a fresh server and makes the first round trip.
int connected(const Addr &addr, Peer *srv, const char *what) {
    int c = dial(addr);
    srv->ask("accept");
    first_round_trip(c, srv, what);
    return c;
}

} // namespace

void peer_death_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    // Peers before any connection of ours, so that none holds a copy of one.
    Peer *srv[5];
    for (int i = 0; i < 5; ++i) srv[i] = spawn_server("server " + std::to_string(i + 1), lfd);
    Peer *writer = spawn("writer", [&addr](Chan &ch) {
        ch.hear(30000);
        int c = dial(addr);
        send_pattern(c, 3000, 31);
        // No close: exit's own end of the process must deliver the bytes.
    });
    Peer *child = spawn("client", [&addr](Chan &ch) {
        signal(SIGPIPE, SIG_DFL);
        int c = dial(addr);
        ch.tell("dialed");
        check(recv_check(c, 16, 41) == "16 B, pattern ok", "the server's greeting");
        expect_carried(c, "the client's connection");
        ch.hear(30000); // the server is dead now
        send_until_error(c, 0);
        say("still alive after sending to a dead server: SIGPIPE did not come");
    });
    close(lfd);

    // SIGPIPE's default action, in a child.
    std::vector<uint8_t> buf(65536);
    check(child->chan.hear() == "dialed", "client");
    srv[1]->ask("accept");
    srv[1]->ask("send 16 41");
    srv[1]->ask("carried");
    kill(srv[1]->pid, SIGKILL);
    join(srv[1]);
    child->chan.tell("go");
    int status = join(child);
    check(WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE, "the client should die of SIGPIPE");

    // Killed mid-transfer.
    int c = connected(addr, srv[0], "connection 1");
    check(srv[0]->ask("stream 51") == "ok", "stream");
    uint64_t off = 0;
    bool intact = true;
    Res r{0, 0};
    uint64_t killed_at = 0;
    for (;;) {
        if (!killed_at && off >= (1u << 20)) {
            killed_at = now_ns();
            kill(srv[0]->pid, SIGKILL);
        }
        if (!wait_for(c, POLLIN, kWaitMs)) {
            r = {-1, ETIMEDOUT};
            break;
        }
        r = res(recv(c, buf.data(), buf.size(), 0));
        if (r.v <= 0) break;
        for (long i = 0; i < r.v; ++i) intact &= buf[i] == pattern_byte(off + i, 51);
        off += static_cast<uint64_t>(r.v);
    }
    uint64_t ms = (now_ns() - killed_at) / 1000000;
    join(srv[0]);
    say("killed while streaming: every byte before the end in order: %s; the end: %s",
        intact && off >= (1u << 20) ? "yes" : "no", end_text(r));
    say("the end came within 100 ms of the kill: %s", ms < 100 ? "yes" : "no");
    note("the end came %llu ms after the kill", static_cast<unsigned long long>(ms));
    say("poll: %s", poll_bits(c).c_str());
    say("send after it, SIGPIPE ignored: %s", text(send_until_error(c, 0)).c_str());
    say("poll: %s", poll_bits(c).c_str());
    close(c);

    // SIGPIPE handled, then MSG_NOSIGNAL.
    c = connected(addr, srv[2], "connection 3");
    struct sigaction sa {};
    sa.sa_handler = on_pipe;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, nullptr);
    kill(srv[2]->pid, SIGKILL);
    join(srv[2]);
    r = send_until_error(c, 0);
    say("send to the dead server, SIGPIPE handled: %s, the handler ran %d time(s)", text(r).c_str(),
        static_cast<int>(g_pipes));
    g_pipes = 0;
    r = res(send(c, "x", 1, MSG_NOSIGNAL));
    say("send(MSG_NOSIGNAL) = %s, the handler ran %d time(s)", text(r).c_str(),
        static_cast<int>(g_pipes));
    signal(SIGPIPE, SIG_IGN);
    close(c);

    // Blocked in recv when the server dies (killed from our SIGALRM handler).
    c = connected(addr, srv[3], "connection 4");
    g_victim = srv[3]->pid;
    sa.sa_handler = kill_victim;
    sigaction(SIGALRM, &sa, nullptr);
    itimerval it{{0, 0}, {0, 100000}};
    setitimer(ITIMER_REAL, &it, nullptr);
    r = res(recv(c, buf.data(), buf.size(), 0));
    ms = (now_ns() - g_killed_at) / 1000000;
    signal(SIGALRM, SIG_DFL);
    join(srv[3]);
    say("a recv blocked when the server was killed = %s, within 100 ms of the kill: %s",
        end_text(r), g_killed_at && ms < 100 ? "yes" : "no");
    note("the blocked recv returned %llu ms after the kill", static_cast<unsigned long long>(ms));
    close(c);

    // The writer writes and exits.
    writer->chan.tell("go");
    join_ok(writer);
    srv[4]->ask("accept");
    say("a client wrote 3000 B and exited: the server reads %s", srv[4]->ask("recvall 31").c_str());
    srv[4]->ask("exit");
    join_ok(srv[4]);
}

} // namespace sockdiff
