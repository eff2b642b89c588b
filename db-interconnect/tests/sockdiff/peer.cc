// The server peer: a process that accepts connections and does, on the connection it uses,
// what its parent tells it over the Chan, one command a line, one answer a line:
//
//   accept [nonblock]       accept the next connection from the listener; it becomes the
//                           one in use (numbered 0, 1, ... in accepting order)
//   listen                  make a listener of its own (answer: its address, addr_hex);
//                           later accepts use it
//   use K                   use connection K
//   send N SEED             blocking send of N pattern bytes: "ok N" or "err ERR after M"
//   recv N SEED [MS]        read N bytes, waiting at most MS (default kWaitMs) for each
//                           piece: "ok N match|mismatch", or "end M EOF|ERR"
//   recvall SEED            read to the end: "ok TOTAL match|mismatch EOF|ERR"
//   send-after MS N SEED    answer "ok" at once, sleep MS, send; then "done N" or "done err
//   recv-after MS N SEED    ERR after M" (resp. the recv answer with "done" for "ok")
//   stream SEED             answer "ok", then send pattern bytes until a send fails: "done ERR"
//   shutdown rd|wr|rdwr     "ok RESULT"
//   close                   close the connection in use
//   poll                    its poll bits now (IN OUT RDHUP asked): "ok BITS"
//   peercred                SO_PEERCRED: "ok PID UID GID" or "err ERR"
//   names                   "ok <getsockname>|<getpeername>" (where_text)
//   peer-hex                getpeername as addr_hex
//   carried                 expect_carried on the connection in use; "ok"
//   echo                    answer "ok", then echo frames (u32 length, bytes) until the end
//                           of the stream: "done FRAMES EOF|ERR"
//   limit-lowest            RLIMIT_NOFILE's soft limit down to the lowest free descriptor
//                           (no new descriptor can be made); limit-restore puts it back
//   socket | pipe | epoll   make one (closed again at once): "ok RESULT"
//   try-accept              wait for a connection to be pending, accept it: "ok BITS
//                           RESULT" (a connection accepted becomes the one in use)
//   exit                    "ok", then exit
#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace sockdiff {

namespace {

struct Server {
    Chan &ch;
    int lfd;
    std::vector<int> conns;
    int cur = -1;
    rlimit saved{};

    int conn() {
        if (cur < 0 || cur >= static_cast<int>(conns.size()) || conns[cur] < 0)
            fatal("no connection in use");
        return conns[cur];
    }

    std::string do_send(size_t n, uint32_t seed) {
        Res last;
        size_t sent = send_pattern(conn(), n, seed, &last);
        if (sent == n) return "ok " + std::to_string(n);
        return "err " + std::string(errname(last.err)) + " after " + std::to_string(sent);
    }

    std::string do_recv(size_t n, uint32_t seed, int timeout_ms = kWaitMs) {
        std::vector<uint8_t> buf(n);
        Res last;
        size_t got = recv_exact(conn(), buf.data(), n, &last, timeout_ms);
        bool match = true;
        for (size_t i = 0; i < got && match; ++i) match = buf[i] == pattern_byte(i, seed);
        if (got == n) return "ok " + std::to_string(n) + (match ? " match" : " mismatch");
        return "end " + std::to_string(got) + " " + (last.v == 0 ? "EOF" : errname(last.err));
    }

    std::string do_recvall(uint32_t seed) {
        uint8_t buf[65536];
        uint64_t total = 0;
        bool match = true;
        Res last{0, 0};
        for (;;) {
            if (!wait_for(conn(), POLLIN, kWaitMs)) {
                last = {-1, ETIMEDOUT};
                break;
            }
            last = res(::recv(conn(), buf, sizeof buf, MSG_DONTWAIT));
            if (last.v < 0 && (last.err == EINTR || last.err == EAGAIN)) continue;
            if (last.v <= 0) break;
            for (long i = 0; i < last.v && match; ++i)
                match = buf[i] == pattern_byte(total + i, seed);
            total += static_cast<uint64_t>(last.v);
        }
        return "ok " + std::to_string(total) + (match ? " match " : " mismatch ") +
               (last.v == 0 ? "EOF" : errname(last.err));
    }

    std::string do_echo() {
        int frames = 0;
        std::vector<uint8_t> buf;
        for (;;) {
            uint32_t len;
            Res last;
            size_t got = recv_exact(conn(), &len, sizeof len, &last);
            if (got < sizeof len)
                return "done " + std::to_string(frames) + " " +
                       (got == 0 && last.v == 0 ? "EOF" : errname(last.err));
            buf.resize(len);
            if (recv_exact(conn(), buf.data(), len, &last) < len)
                return "done " + std::to_string(frames) + " short frame";
            if (send_all(conn(), &len, sizeof len) < sizeof len ||
                send_all(conn(), buf.data(), len) < len)
                return "done " + std::to_string(frames) + " send failed";
            ++frames;
        }
    }

    std::string do_stream(uint32_t seed) {
        std::vector<uint8_t> buf(65536);
        uint64_t off = 0;
        for (;;) {
            fill(buf.data(), buf.size(), off, seed);
            ssize_t n = ::send(conn(), buf.data(), buf.size(), MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return std::string("done ") + errname(errno);
            // A short send leaves the rest for the next one: the pattern stays continuous.
            off += static_cast<uint64_t>(n);
            if (static_cast<size_t>(n) < buf.size()) {
                size_t rest = buf.size() - static_cast<size_t>(n);
                Res last;
                if (send_all(conn(), buf.data() + n, rest, &last) < rest)
                    return std::string("done ") + errname(last.err);
                off += rest;
            }
        }
    }

    std::string handle(const std::string &line) {
        std::istringstream in(line);
        std::string cmd;
        in >> cmd;
        if (cmd == "accept") {
            std::string opt;
            in >> opt;
            conns.push_back(accept_one(lfd, opt == "nonblock" ? SOCK_NONBLOCK : 0));
            cur = static_cast<int>(conns.size()) - 1;
            return "ok";
        }
        if (cmd == "listen") {
            Addr a;
            lfd = make_listener(&a);
            return "ok " + addr_hex(a);
        }
        if (cmd == "use") {
            in >> cur;
            return "ok";
        }
        if (cmd == "send" || cmd == "recv") {
            size_t n = 0;
            uint32_t seed = 0;
            int ms = kWaitMs;
            in >> n >> seed;
            if (!(in >> ms)) ms = kWaitMs;
            return cmd == "send" ? do_send(n, seed) : do_recv(n, seed, ms);
        }
        if (cmd == "send-after" || cmd == "recv-after") {
            int ms = 0;
            size_t n = 0;
            uint32_t seed = 0;
            in >> ms >> n >> seed;
            ch.tell("ok");
            sleep_ms(ms);
            std::string r = cmd == "send-after" ? do_send(n, seed) : do_recv(n, seed);
            return "done" + r.substr(r.find(' '));
        }
        if (cmd == "recvall") {
            uint32_t seed = 0;
            in >> seed;
            return do_recvall(seed);
        }
        if (cmd == "stream") {
            uint32_t seed = 0;
            in >> seed;
            ch.tell("ok");
            return do_stream(seed);
        }
        if (cmd == "echo") {
            ch.tell("ok");
            return do_echo();
        }
        if (cmd == "shutdown") {
            std::string how;
            in >> how;
            int h = how == "rd" ? SHUT_RD : how == "wr" ? SHUT_WR : SHUT_RDWR;
            return "ok " + text(res(::shutdown(conn(), h)));
        }
        if (cmd == "close") {
            ::close(conn());
            conns[cur] = -1;
            return "ok";
        }
        if (cmd == "poll") {
            pollfd p{conn(), POLLIN | POLLOUT | POLLRDHUP, 0};
            int r = ::poll(&p, 1, 0);
            return "ok " + (r < 0 ? text(res(r)) : events_text(p.revents));
        }
        if (cmd == "peercred") {
            ucred uc{};
            socklen_t l = sizeof uc;
            Res r = res(getsockopt(conn(), SOL_SOCKET, SO_PEERCRED, &uc, &l));
            if (r.v != 0) return "err " + std::string(errname(r.err));
            return "ok " + std::to_string(uc.pid) + " " + std::to_string(uc.uid) + " " +
                   std::to_string(uc.gid);
        }
        if (cmd == "names" || cmd == "peer-hex") {
            Addr me, peer;
            me.len = peer.len = sizeof me.ss;
            Res a = res(getsockname(conn(), reinterpret_cast<sockaddr *>(&me.ss), &me.len));
            Res b = res(getpeername(conn(), reinterpret_cast<sockaddr *>(&peer.ss), &peer.len));
            if (cmd == "peer-hex") return b.v == 0 ? "ok " + addr_hex(peer) : "err " + text(b);
            return "ok " + (a.v == 0 ? where_text(me.sa(), me.len) : text(a)) + "|" +
                   (b.v == 0 ? where_text(peer.sa(), peer.len) : text(b));
        }
        if (cmd == "carried") {
            expect_carried(conn(), (self_role() + "'s connection").c_str());
            return "ok";
        }
        if (cmd == "limit-lowest") {
            int lowest = fcntl(0, F_DUPFD, 0);
            if (lowest < 0) return "err " + text(res(lowest));
            ::close(lowest);
            getrlimit(RLIMIT_NOFILE, &saved);
            rlimit l = saved;
            l.rlim_cur = static_cast<rlim_t>(lowest);
            return "ok " + text(res(setrlimit(RLIMIT_NOFILE, &l)));
        }
        if (cmd == "limit-restore") return "ok " + text(res(setrlimit(RLIMIT_NOFILE, &saved)));
        if (cmd == "socket" || cmd == "pipe" || cmd == "epoll") {
            int fds[2] = {-1, -1};
            Res r = cmd == "socket" ? res(::socket(run().domain(), SOCK_STREAM, 0))
                    : cmd == "pipe" ? res(pipe2(fds, O_CLOEXEC))
                                    : res(epoll_create1(EPOLL_CLOEXEC));
            if (cmd != "pipe" && r.v >= 0) ::close(static_cast<int>(r.v));
            for (int fd : fds)
                if (fd >= 0) ::close(fd);
            return "ok " + text(r);
        }
        if (cmd == "try-accept") {
            short ev = wait_for(lfd, POLLIN, kWaitMs);
            Res r = res(accept(lfd, nullptr, nullptr));
            if (r.v >= 0) {
                no_delay(static_cast<int>(r.v));
                conns.push_back(static_cast<int>(r.v));
                cur = static_cast<int>(conns.size()) - 1;
            }
            return "ok " + events_text(ev) + " " + (r.v >= 0 ? "accepted" : text(r));
        }
        if (cmd == "exit") return "ok";
        fatal("unknown command \"%s\"", line.c_str());
    }
};

} // namespace

void first_round_trip(int fd, Peer *server, const char *what) {
    Res last;
    bool ok = send_pattern(fd, 16, 901, &last) == 16;
    server->post("recv 16 901");
    server->post("send 16 902");
    std::string c = recv_check(fd, 16, 902);
    std::string a = server->answer();
    std::string b = server->answer();
    ok = check(ok && a == "ok 16 match" && b == "ok 16" && c == "16 B, pattern ok",
               "%s: first round trip: send %s, server \"%s\", \"%s\", back %s", what,
               text(last).c_str(), a.c_str(), b.c_str(), c.c_str());
    if (ok) say("%s: first round trip ok", what);
    expect_carried(fd, what);
    server->ask("carried");
}

std::string round_trip(int fd, Peer *server, uint32_t seed) {
    Res r;
    if (send_pattern(fd, 100, seed, &r) != 100) return "send " + text(r);
    std::string a = server->ask("recv 100 " + std::to_string(seed));
    std::string b = server->ask("send 100 " + std::to_string(seed + 1));
    std::string c = recv_check(fd, 100, seed + 1);
    return a == "ok 100 match" && b == "ok 100" && c == "100 B, pattern ok"
               ? "ok"
               : a + "; " + b + "; " + c;
}

std::string recv_check(int fd, size_t n, uint32_t seed) {
    std::vector<uint8_t> buf(n);
    Res last;
    size_t got = recv_exact(fd, buf.data(), n, &last);
    if (got < n)
        return std::to_string(got) + " of " + std::to_string(n) + " B, then " +
               (last.v == 0 ? "EOF" : errname(last.err));
    for (size_t i = 0; i < n; ++i)
        if (buf[i] != pattern_byte(i, seed)) return std::to_string(n) + " B, pattern broken";
    return std::to_string(n) + " B, pattern ok";
}

Peer *spawn_server(const std::string &role, int lfd) {
    return spawn(role, [lfd](Chan &ch) {
        enter_server_side();
        Server s{ch, lfd, {}, -1};
        for (;;) {
            std::string line;
            // The parent ends us by "exit", or by going away (end of the Chan).
            if (!ch.hear_maybe(&line, 60000)) return;
            ch.tell(s.handle(line));
            if (line == "exit") return;
        }
    });
}

Served serve_one(int sock_flags, Addr *addr) {
    Addr where;
    int lfd = make_listener(&where);
    Peer *srv = spawn_server("server", lfd);
    close(lfd);
    int c = dial(where, sock_flags);
    srv->ask("accept");
    first_round_trip(c, srv, "connection");
    if (addr) *addr = where;
    return {srv, c};
}

} // namespace sockdiff
