// Scenario echo: messages of 1 B to 1 MiB sent with write, send, sendto, sendmsg and
// writev, echoed, and read back with read, recv, recvfrom, recvmsg and readv (each side
// using another pair for every size); then partial reads, MSG_PEEK, MSG_WAITALL,
// MSG_DONTWAIT and FIONREAD on bytes the server wrote while the client waited; the bytes
// of a blocking send reaching the server while the client waits elsewhere.
//
// The server reads an 8-byte header (MSG_WAITALL): length, how it receives, how it
// sends, and what to do: echo the length's bytes, or write them itself (at once, in three
// pieces, or after a pause) and say so over the Chan.
#include "harness.h"

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sockdiff {

namespace {

const char *const kSendNames[] = {"write", "send", "sendto", "sendmsg", "writev"};
const char *const kRecvNames[] = {"read", "recv", "recvfrom", "recvmsg", "readv"};

enum Op : uint8_t { op_echo, op_burst, op_pieces, op_late };

struct Header {
    uint32_t len;
    uint8_t recv_how, send_how, op, pad;
};

// One call of kind `how`; a vector call splits the buffer in uneven parts (sendmsg in two,
// writev in three).
Res send_once(int fd, const uint8_t *p, size_t n, int how) {
    auto *b = const_cast<uint8_t *>(p);
    iovec three[3] = {{b, n / 3}, {b + n / 3, n / 2 - n / 3}, {b + n / 2, n - n / 2}};
    iovec two[2] = {{b, n / 2}, {b + n / 2, n - n / 2}};
    msghdr m{};
    switch (how) {
    case 0:
        return res(write(fd, p, n));
    case 1:
        return res(send(fd, p, n, 0));
    case 2:
        return res(sendto(fd, p, n, 0, nullptr, 0));
    case 3:
        m.msg_iov = two;
        m.msg_iovlen = 2;
        return res(sendmsg(fd, &m, 0));
    default:
        return res(writev(fd, three, 3));
    }
}

// What recvfrom and recvmsg said about the sender, the first time each was used.
struct Seen {
    bool from = false, msg = false;
};

Res recv_once(int fd, uint8_t *p, size_t n, int how, Seen *seen) {
    iovec three[3] = {{p, n / 3}, {p + n / 3, n / 2 - n / 3}, {p + n / 2, n - n / 2}};
    iovec two[2] = {{p, n / 2}, {p + n / 2, n - n / 2}};
    Addr from;
    from.len = sizeof from.ss;
    msghdr m{};
    Res r;
    switch (how) {
    case 0:
        return res(read(fd, p, n));
    case 1:
        return res(recv(fd, p, n, 0));
    case 2:
        r = res(recvfrom(fd, p, n, 0, reinterpret_cast<sockaddr *>(&from.ss), &from.len));
        if (r.v > 0 && seen && !seen->from) {
            seen->from = true;
            say("recvfrom names the sender: %s", where_text(from.sa(), from.len).c_str());
        }
        return r;
    case 3:
        m.msg_iov = two;
        m.msg_iovlen = 2;
        m.msg_name = &from.ss;
        m.msg_namelen = sizeof from.ss;
        r = res(recvmsg(fd, &m, 0));
        if (r.v > 0 && seen && !seen->msg) {
            seen->msg = true;
            say("recvmsg names the sender: %s; msg_flags 0x%x, msg_controllen %zu",
                where_text(from.sa(), m.msg_namelen).c_str(), m.msg_flags, m.msg_controllen);
        }
        return r;
    default:
        return res(readv(fd, three, 3));
    }
}

// All of n bytes, one kind of call; false on a failure (said).
bool send_how(int fd, const uint8_t *p, size_t n, int how) {
    for (size_t done = 0; done < n;) {
        Res r = send_once(fd, p + done, n - done, how);
        if (r.v < 0 && r.err == EINTR) continue;
        if (!check(r.v > 0, "%s of %zu B: %s", kSendNames[how], n - done, text(r).c_str()))
            return false;
        done += static_cast<size_t>(r.v);
    }
    return true;
}

// n bytes in calls of at most `piece` bytes; the count read.
size_t recv_how(int fd, uint8_t *p, size_t n, int how, size_t piece, Seen *seen) {
    size_t done = 0;
    while (done < n) {
        Res r = recv_once(fd, p + done, std::min(piece, n - done), how, seen);
        if (r.v < 0 && r.err == EINTR) continue;
        if (!check(r.v > 0, "%s after %zu of %zu B: %s", kRecvNames[how], done, n, text(r).c_str()))
            break;
        done += static_cast<size_t>(r.v);
    }
    return done;
}

bool is_pattern(const uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != pattern_byte(i, seed)) return false;
    return true;
}

void server(Chan &ch, int lfd) {
    enter_server_side();
    int c = accept_one(lfd);
    std::vector<uint8_t> buf;
    int messages = 0;
    Seen seen;
    for (;;) {
        Header h;
        Res r = res(recv(c, &h, sizeof h, MSG_WAITALL));
        if (r.v == 0) {
            say("end of stream after %d messages", messages);
            break;
        }
        if (!check(r.v == sizeof h, "header: recv(MSG_WAITALL) = %s", text(r).c_str())) break;
        ++messages;
        buf.resize(h.len);
        if (h.op == op_echo) {
            size_t got = recv_how(c, buf.data(), h.len, h.recv_how, h.len, &seen);
            say("echo %u B: in by %s, %s, crc %08x, out by %s", h.len, kRecvNames[h.recv_how],
                got == h.len && is_pattern(buf.data(), h.len, h.len) ? "pattern ok"
                                                                     : "pattern broken",
                crc(buf.data(), got), kSendNames[h.send_how]);
            send_how(c, buf.data(), got, h.send_how);
            if (messages == 1) expect_carried(c, "echo server's connection");
            continue;
        }
        fill(buf.data(), h.len, 0, 77);
        if (h.op == op_burst) {
            send_how(c, buf.data(), h.len, h.send_how);
            ch.tell("sent");
        } else if (h.op == op_pieces) {
            for (int i = 0; i < 3; ++i) {
                size_t a = h.len * i / 3, b = h.len * (i + 1) / 3;
                send_how(c, buf.data() + a, b - a, h.send_how);
                sleep_ms(20);
            }
        } else {
            ch.tell("waiting");
            sleep_ms(50);
            send_how(c, buf.data(), h.len, h.send_how);
        }
    }
    close(c);
}

void ask_server(int c, uint32_t len, int recv_how, int send_how, Op op) {
    Header h{len, static_cast<uint8_t>(recv_how), static_cast<uint8_t>(send_how), op, 0};
    Res r;
    if (send_all(c, &h, sizeof h, &r) != sizeof h) fatal("header: %s", text(r).c_str());
}

} // namespace

void echo_scenario() {
    Addr addr;
    int lfd = make_listener(&addr);
    Peer *srv = spawn("server", [lfd](Chan &ch) { server(ch, lfd); });
    Peer *srv2 = spawn_server("server 2", lfd);
    close(lfd);
    int c = dial(addr);

    const size_t sizes[] = {1, 2, 7, 100, 1000, 4096, 65535, 65536, 65537, 200000, 1048576};
    std::vector<uint8_t> out, back;
    Seen seen;
    for (size_t i = 0; i < std::size(sizes); ++i) {
        size_t n = sizes[i];
        int my_send = static_cast<int>(i % 5), my_recv = static_cast<int>((i + 2) % 5);
        int its_recv = static_cast<int>((i + 1) % 5), its_send = static_cast<int>((i + 3) % 5);
        out.resize(n);
        back.assign(n, 0);
        fill(out.data(), n, 0, static_cast<uint32_t>(n));
        ask_server(c, static_cast<uint32_t>(n), its_recv, its_send, op_echo);
        if (!send_how(c, out.data(), n, my_send)) break;
        // One size is read in pieces of at most 1000 bytes: a partial read is the rule.
        size_t piece = n == 65536 ? 1000 : n;
        size_t got = recv_how(c, back.data(), n, my_recv, piece, &seen);
        say("echo %zu B: out by %s, back by %s%s: %s, crc %08x", n, kSendNames[my_send],
            kRecvNames[my_recv], piece < n ? " in pieces of <= 1000 B" : "",
            got == n && back == out ? "the same bytes" : "DIFFERENT BYTES", crc(back.data(), got));
        check(got == n && back == out, "echo of %zu B", n);
        if (i == 0) expect_carried(c, "echo client's connection");
    }

    // Bytes the server wrote while we waited: FIONREAD, a partial read, MSG_PEEK,
    // MSG_WAITALL, MSG_DONTWAIT.
    ask_server(c, 4096, 0, 1, op_burst);
    check(srv->chan.hear() == "sent", "burst");
    say("FIONREAD after 4096 B arrived = %d", readable_bytes(c, 4096));
    uint8_t buf[4096], peeked[100];
    Res r = res(recv(c, buf, 10, 0));
    say("recv(10) = %s, %s", text(r).c_str(), is_pattern(buf, 10, 77) ? "pattern ok" : "broken");
    r = res(recv(c, peeked, sizeof peeked, MSG_PEEK));
    say("recv(100, MSG_PEEK) = %s", text(r).c_str());
    r = res(recv(c, buf, 100, 0));
    say("recv(100) = %s, the peeked bytes: %s", text(r).c_str(),
        r.v == 100 && std::memcmp(buf, peeked, 100) == 0 ? "yes" : "no");
    say("FIONREAD = %d", readable_bytes(c, 0, 0));
    r = res(recv(c, buf, 3986, MSG_WAITALL));
    say("recv(3986, MSG_WAITALL) = %s", text(r).c_str());
    say("FIONREAD = %d", readable_bytes(c, 0, 0));
    r = res(recv(c, buf, 10, MSG_DONTWAIT));
    say("recv(10, MSG_DONTWAIT) on nothing = %s", text(r).c_str());

    // MSG_WAITALL over three pieces 20 ms apart.
    ask_server(c, 3000, 0, 2, op_pieces);
    r = res(recv(c, buf, 3000, MSG_WAITALL));
    bool whole = r.v == 3000 && is_pattern(buf, 3000, 77);
    say("recv(3000, MSG_WAITALL) over three pieces = %s, %s", text(r).c_str(),
        whole ? "pattern ok" : "broken");

    // A blocking MSG_PEEK waits for the bytes, and leaves them.
    ask_server(c, 10, 0, 3, op_late);
    check(srv->chan.hear() == "waiting", "late");
    r = res(recv(c, peeked, sizeof peeked, MSG_PEEK));
    say("blocking recv(100, MSG_PEEK) = %s", text(r).c_str());
    r = res(recv(c, buf, sizeof buf, 0));
    say("recv(4096) = %s, the peeked bytes: %s", text(r).c_str(),
        r.v == 10 && std::memcmp(buf, peeked, 10) == 0 ? "yes" : "no");

    r = res(send(c, buf, 0, 0));
    say("send of 0 B = %s", text(r).c_str());
    r = res(recv(c, buf, 10, MSG_DONTWAIT));
    say("recv(10, MSG_DONTWAIT) on nothing = %s", text(r).c_str());
    close(c);
    join_ok(srv);

    // A blocking send has handed its bytes over when it returns: they reach the server
    // while the client waits on something else (here the Chan, as a program waiting on
    // another connection or a pipe would).
    int c2 = dial(addr);
    srv2->ask("accept");
    Res last;
    size_t sent = send_pattern(c2, 100, 33, &last);
    say("a new connection, 100 B sent (%s); the server reads within 1 s: %s",
        sent == 100 ? "all" : text(last).c_str(), srv2->ask("recv 100 33 1000", 15000).c_str());
    close(c2);
    srv2->ask("exit");
    join_ok(srv2);
}

} // namespace sockdiff
