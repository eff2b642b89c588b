// Scenario names: who is at the other end and where.  SO_PEERCRED on both ends (on a unix
// socket: the client's pid and uid for the server, the listening process's for the
// client); getsockname and getpeername on both ends (the server's peer is the client's
// own address); socket options PostgreSQL and libpq set and read; the errors of names
// asked of an unconnected socket and of a second connect.
#include "harness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace sockdiff {

namespace {

std::string cred_text(pid_t pid, long uid, long gid) {
    std::string s = "pid " + (pid == 0 ? std::string("0") : role_of(pid));
    s += uid == static_cast<long>(getuid()) ? ", our uid" : ", uid " + std::to_string(uid);
    s += gid == static_cast<long>(getgid()) ? ", our gid" : ", gid " + std::to_string(gid);
    return s;
}

std::string name_text(int fd, bool peer) {
    Addr a;
    a.len = sizeof a.ss;
    Res r = res(peer ? getpeername(fd, reinterpret_cast<sockaddr *>(&a.ss), &a.len)
                     : getsockname(fd, reinterpret_cast<sockaddr *>(&a.ss), &a.len));
    return r.v < 0 ? text(r) : where_text(a.sa(), a.len);
}

std::string opt_text(int fd, int level, int name) {
    int v = -1;
    socklen_t l = sizeof v;
    Res r = res(getsockopt(fd, level, name, &v, &l));
    return r.v < 0 ? text(r) : std::to_string(v);
}

} // namespace

void names_scenario() {
    // The server listens itself: its pid is the one a client's SO_PEERCRED names.
    Peer *srv = spawn_server("server", -1);
    std::string hex = srv->ask("listen");
    if (hex.rfind("ok ", 0) != 0) fatal("listen: %s", hex.c_str());
    Addr addr = addr_from_hex(hex.substr(3));
    note_listener(addr);
    int c = dial(addr);
    srv->ask("accept");
    first_round_trip(c, srv, "connection");

    std::istringstream in(srv->ask("peercred"));
    std::string ok;
    long pid = -1, uid = -1, gid = -1;
    in >> ok >> pid >> uid >> gid;
    say("the server's SO_PEERCRED: %s",
        ok == "ok" ? cred_text(static_cast<pid_t>(pid), uid, gid).c_str() : ok.c_str());
    ucred uc{};
    socklen_t l = sizeof uc;
    Res r = res(getsockopt(c, SOL_SOCKET, SO_PEERCRED, &uc, &l));
    say("our SO_PEERCRED = %s: %s", text(r).c_str(), cred_text(uc.pid, uc.uid, uc.gid).c_str());

    say("our getsockname: %s", name_text(c, false).c_str());
    say("our getpeername: %s", name_text(c, true).c_str());
    std::string names = srv->ask("names");
    say("the server's getsockname|getpeername: %s", names.c_str());
    Addr me;
    me.len = sizeof me.ss;
    getsockname(c, reinterpret_cast<sockaddr *>(&me.ss), &me.len);
    std::string peer_hex = srv->ask("peer-hex");
    say("the server's peer is our own address: %s",
        peer_hex == "ok " + addr_hex(me) ? "yes" : "no");

    say("SO_TYPE %s, SO_DOMAIN %s, SO_PROTOCOL %s, SO_ACCEPTCONN %s, SO_ERROR %s",
        opt_text(c, SOL_SOCKET, SO_TYPE).c_str(), opt_text(c, SOL_SOCKET, SO_DOMAIN).c_str(),
        opt_text(c, SOL_SOCKET, SO_PROTOCOL).c_str(),
        opt_text(c, SOL_SOCKET, SO_ACCEPTCONN).c_str(), opt_text(c, SOL_SOCKET, SO_ERROR).c_str());
    int one = 1;
    Res k = res(setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one));
    say("SO_KEEPALIVE set = %s, read back %s", text(k).c_str(),
        opt_text(c, SOL_SOCKET, SO_KEEPALIVE).c_str());
    if (run().tcp()) say("TCP_NODELAY read back %s", opt_text(c, IPPROTO_TCP, TCP_NODELAY).c_str());

    int u = stream_socket();
    say("an unconnected socket: getpeername %s; getsockname %s", name_text(u, true).c_str(),
        name_text(u, false).c_str());
    close(u);
    say("connect again on a connected socket = %s",
        text(res(connect(c, addr.sa(), addr.len))).c_str());
    say("connect with a too short address = %s", text(res(connect(c, addr.sa(), 1))).c_str());

    close(c);
    say("the server sees: %s", srv->ask("recvall 0").c_str());
    srv->ask("exit");
    join_ok(srv);
}

} // namespace sockdiff
