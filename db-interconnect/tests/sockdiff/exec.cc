// Scenario exec: a child execs this program with two copies of a live connection, one
// close-on-exec and one not.  The new image finds the first gone (EBADF) and the second a
// socket of the run's family (F_GETFD, getsockname, getpeername, SO_TYPE) that carries a
// round trip with the server (inetd's pattern; the interposer hands a connection that
// rides vipl back to its kernel socket at the exec).  The parent's copies keep working
// after the child exec'd and exited.
#include "compare.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace sockdiff {

// sockdiff exec-image LOG CLOEXEC_FD KEPT_FD FAMILY LISTENER_HEX
int exec_image_main(int argc, char **argv) {
    if (argc != 5) return 2;
    int gone = std::atoi(argv[1]), kept = std::atoi(argv[2]);
    // Looked at before anything opens a descriptor (which could take the number of the
    // copy exec closed).
    Res gone_fl = res(fcntl(gone, F_GETFD));
    Res kept_fl = res(fcntl(kept, F_GETFD));
    Addr me, peer;
    me.len = peer.len = sizeof me.ss;
    Res a = res(getsockname(kept, reinterpret_cast<sockaddr *>(&me.ss), &me.len));
    Res b = res(getpeername(kept, reinterpret_cast<sockaddr *>(&peer.ss), &peer.len));
    int type = -1;
    socklen_t l = sizeof type;
    Res t = res(getsockopt(kept, SOL_SOCKET, SO_TYPE, &type, &l));

    int log = open(argv[0], O_WRONLY | O_APPEND | O_CLOEXEC);
    if (log < 0) return 3;
    become("new image", log);
    if (!family_from(argv[3], &run().family)) return 4;
    if (run().family == Family::netns)
        if (const char *spec = std::getenv("SOCKDIFF_NETNS")) netns_enter_client(spec, false);
    note_listener(addr_from_hex(argv[4]));
    say("close-on-exec copy: F_GETFD = %s", text(gone_fl).c_str());
    say("kept copy: F_GETFD = %s", text(kept_fl).c_str());
    say("kept copy: getsockname %s: %s", text(a).c_str(), where_text(me.sa(), me.len).c_str());
    say("kept copy: getpeername %s: %s", text(b).c_str(), where_text(peer.sa(), peer.len).c_str());
    say("kept copy: SO_TYPE %s: %s", text(t).c_str(),
        type == SOCK_STREAM ? "SOCK_STREAM" : "other");
    // The server, told before the exec, reads 100 B and answers 100 B.
    Res r;
    size_t sent = send_pattern(kept, 100, 40, &r);
    say("kept copy: 100 B sent: %s; the answer: %s", sent == 100 ? "all" : text(r).c_str(),
        recv_check(kept, 100, 41).c_str());
    return failures() ? 1 : 0;
}

void exec_scenario() {
    Addr addr;
    Served one = serve_one(SOCK_CLOEXEC, &addr);
    Peer *srv = one.srv;
    int c = one.fd;
    int kept = dup(c);
    say("the original is %s, its dup is %s",
        fcntl(c, F_GETFD) & FD_CLOEXEC ? "close-on-exec" : "kept on exec",
        fcntl(kept, F_GETFD) & FD_CLOEXEC ? "close-on-exec" : "kept on exec");

    std::string log = run().dir + "/new-image.log";
    int lf = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (lf < 0) fatal("%s: %s", log.c_str(), strerror(errno));
    close(lf);
    std::string exe = run().exe, a1 = std::to_string(c), a2 = std::to_string(kept);
    std::string fam = family_name(run().family), hex = addr_hex(addr);
    srv->post("recv 100 40");
    srv->post("send 100 41");
    Peer *child = spawn("child", [&](Chan &) {
        // The new image writes its own lines to `log`; ours (none) stay empty.
        execl(exe.c_str(), "sockdiff", "exec-image", log.c_str(), a1.c_str(), a2.c_str(),
              fam.c_str(), hex.c_str(), static_cast<char *>(nullptr));
        fatal("execl: %s", strerror(errno));
    });
    join_ok(child);
    std::string heard = srv->answer();
    std::string answered = srv->answer();
    say("the server heard from the new image: %s; answered: %s", heard.c_str(), answered.c_str());
    int fd = open(log.c_str(), O_RDONLY | O_CLOEXEC);
    char buf[4096];
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    buf[n > 0 ? n : 0] = '\0';
    for (char *line = strtok(buf, "\n"); line; line = strtok(nullptr, "\n"))
        say("new image: %s", line);

    say("after the child exec'd and exited: round trip through the original: %s",
        round_trip(c, srv, 20).c_str());
    say("and through the kept copy: %s", round_trip(kept, srv, 22).c_str());
    close(kept);
    say("the kept copy closed: through the original: %s", round_trip(c, srv, 24).c_str());
    close(c);
    say("the last copy closed: the server sees %s", srv->ask("recvall 0").c_str());
    srv->ask("exit");
    join_ok(srv);
}

} // namespace sockdiff
