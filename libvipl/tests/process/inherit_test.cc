// What a child gets of the library, seen from outside: /proc/<pid>/fd and
// /proc/<pid>/maps.  A fork child holds none of the parent's VIPL
// descriptors or connection memory; a program exec'd by any process that
// used VIPL (with private or shareable objects) holds nothing of VIPL at all,
// and does not count as a holder of a shareable VI.
#include "process_util.h"

#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef VIPL_EXEC_INSPECT
#error "VIPL_EXEC_INSPECT: path of the vipl-exec-inspect program"
#endif

namespace {

void notify_recv(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) {}
void on_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *) {}

// Private objects of every kind: connected VIs to a server process and
// within this process, a region, a CQ, wait fds, the notification thread, a
// listening socket, a peer-to-peer request in progress.
struct PrivateWorld {
    vt::PrivEp ep;
    vt::Nic a{vt::device()}, b{vt::device()};
    vt::Memory ma{a, 1 << 16}, mb{b, 1 << 16};
    VIP_CQ_HANDLE cq = nullptr;
    VIP_VI_HANDLE peer_vi = nullptr;
    vt::Pair pair;
    explicit PrivateWorld(const std::string &disc) {
        INFO(ep.err);
        REQUIRE(ep.setup(disc));
        REQUIRE(ep.round_trip(0, 0) == "");
        REQUIRE(VipCreateCQ(a.nic, 64, &cq) == VIP_SUCCESS);
        pair = vt::connect_pair(a, b, vt::vi_attrs(a), vt::vi_attrs(b), nullptr, cq);
        int fd;
        REQUIRE(VipGetViWaitFd(pair.a, &fd) == VIP_SUCCESS);
        REQUIRE(VipGetCQWaitFd(cq, &fd) == VIP_SUCCESS);
        REQUIRE(VipErrorCallback(a.nic, nullptr, on_error) == VIP_SUCCESS);
        REQUIRE(VipRecvNotify(pair.b, nullptr, notify_recv) == VIP_SUCCESS);
        // A listener left behind by a wait that timed out.
        std::vector<uint8_t> local = vt::address(a.nic, vt::unique_disc("ls"));
        std::vector<uint8_t> from(sizeof(VIP_NET_ADDRESS) + 128);
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        REQUIRE(VipConnectWait(a.nic, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), 1,
                               reinterpret_cast<VIP_NET_ADDRESS *>(from.data()), &ra,
                               &conn) == VIP_TIMEOUT);
        // A peer-to-peer request waiting for its peer (the larger discriminator listens).
        VIP_VI_ATTRIBUTES pa = vt::vi_attrs(b);
        REQUIRE(VipCreateVi(b.nic, &pa, nullptr, nullptr, &peer_vi) == VIP_SUCCESS);
        std::vector<uint8_t> me = vt::address(b.nic, "zz" + vt::unique_disc("pp"));
        std::vector<uint8_t> other = vt::address(b.nic, "aa" + vt::unique_disc("pp"));
        REQUIRE(VipConnectPeerRequest(peer_vi, reinterpret_cast<VIP_NET_ADDRESS *>(me.data()),
                                      reinterpret_cast<VIP_NET_ADDRESS *>(other.data()),
                                      60000) == VIP_SUCCESS);
    }
};

// Descriptors and mappings this process gained since `fds0`/`maps0`.
struct Gained {
    std::map<int, vt::FdInfo> fds;
    std::vector<std::string> maps;
};
Gained gained(const std::map<int, vt::FdInfo> &fds0, const std::vector<std::string> &maps0) {
    Gained g;
    for (auto &[fd, info] : vt::fds_of()) {
        auto it = fds0.find(fd);
        if (it == fds0.end() || it->second.link != info.link) g.fds[fd] = info;
    }
    std::set<std::string> before(maps0.begin(), maps0.end());
    for (const std::string &m : vt::maps_of())
        if (!before.count(m) &&
            (m.find("memfd:vipl") != std::string::npos || vt::shared_mapping_keys({m}).size() == 1))
            g.maps.push_back(m);
    return g;
}

// Whether the provider under test maps each connection's memory ("vipl-conn",
// shm); a tcp connection is a socket and memory of the library's own.
bool maps_connections() {
    return vt::device().rfind("shm", 0) == 0;
}

bool has_link(const std::map<int, vt::FdInfo> &fds, const char *what) {
    for (auto &[fd, info] : fds)
        if (info.link.find(what) != std::string::npos) return true;
    return false;
}

bool has_line(const std::vector<std::string> &lines, const char *what) {
    for (const std::string &l : lines)
        if (l.find(what) != std::string::npos) return true;
    return false;
}

// A mapping that belongs to no freshly exec'd program: shared memory of any kind.
bool foreign_mapping(const std::string &line) {
    return line.find("memfd:") != std::string::npos || line.find("SYSV") != std::string::npos ||
           line.find("/dev/zero") != std::string::npos ||
           vt::shared_mapping_keys({line}).size() == 1;
}

struct Report {
    int status = -2;
    int report_fd = -1;
    std::map<int, std::string> fds;
    std::vector<std::string> maps;
    bool complete = false;
    std::string raw;
};

// Forks and execs vipl-exec-inspect; collects what it reports.  The program
// then stays alive linger_ms; *pid_out (if given) gets its pid and the
// caller waits for it, else this function does.
Report exec_inspect(int linger_ms = 0, pid_t *pid_out = nullptr) {
    Report r;
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    fflush(nullptr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int fd = fcntl(p[1], F_DUPFD, 900); // without close-on-exec, unlike everything else
        std::string fd_text = std::to_string(fd), linger = std::to_string(linger_ms);
        execl(VIPL_EXEC_INSPECT, "vipl-exec-inspect", fd_text.c_str(), linger.c_str(),
              static_cast<char *>(nullptr));
        _exit(127);
    }
    close(p[1]);
    double end = vt::now_ms() + 10000;
    char buf[4096];
    while (vt::now_ms() < end && r.raw.find("end\n") == std::string::npos) {
        pollfd pf{p[0], POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n <= 0) break;
        r.raw.append(buf, static_cast<size_t>(n));
    }
    close(p[0]);
    size_t at = 0;
    while (at < r.raw.size()) {
        size_t nl = r.raw.find('\n', at);
        if (nl == std::string::npos) break;
        std::string line = r.raw.substr(at, nl - at);
        at = nl + 1;
        if (line == "end")
            r.complete = true;
        else if (line.rfind("fd ", 0) == 0) {
            size_t sp = line.find(' ', 3);
            r.fds[atoi(line.c_str() + 3)] = sp == std::string::npos ? "" : line.substr(sp + 1);
        } else if (line.rfind("map ", 0) == 0) {
            r.maps.push_back(line.substr(4));
        }
    }
    for (auto &[fd, link] : r.fds)
        if (fd >= 900 && link.find("pipe:") == 0) r.report_fd = fd;
    if (pid_out)
        *pid_out = pid;
    else
        r.status = vt::wait_child(pid, 20);
    return r;
}

// Checks an exec'd program's report against what this process had before
// it used VIPL: only standard streams, the report pipe and descriptors
// inherited from our own launcher without close-on-exec may be open; no
// shared mapping at all.
void check_nothing_survives(const Report &r, const std::map<int, vt::FdInfo> &fds0) {
    INFO("report:\n" << r.raw);
    REQUIRE(r.complete);
    REQUIRE(r.report_fd >= 900);
    REQUIRE(has_line(r.maps, "vipl-exec-inspect")); // it did read its own maps
    std::string bad_fds;
    for (auto &[fd, link] : r.fds) {
        if (fd <= 2 || fd == r.report_fd) continue;
        auto it = fds0.find(fd);
        if (it != fds0.end() && !it->second.cloexec && it->second.link == link) continue;
        bad_fds += vt::fmt("%d -> %s\n", fd, link.c_str());
    }
    std::string bad_maps;
    for (const std::string &m : r.maps)
        if (foreign_mapping(m)) bad_maps += m + "\n";
    INFO("descriptors that survived exec:\n" << bad_fds);
    CHECK(bad_fds.empty());
    INFO("mappings that survived exec:\n" << bad_maps);
    CHECK(bad_maps.empty());
}

} // namespace

TEST_CASE("fork: the child holds none of the parent's VIPL descriptors or mappings",
          "[process][fork][inherit]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv; // shared memory of the test's own, before the snapshot
            auto fds0 = vt::fds_of();
            auto maps0 = vt::maps_of();
            std::string disc = vt::unique_disc("ih");
            vt::Child server(vt::spawn_server(&*srv, disc));
            PrivateWorld w(disc);
            vt::Pipe ready, go;
            Gained g = gained(fds0, maps0);
            g.fds.erase(ready.fd[0]);
            g.fds.erase(ready.fd[1]);
            g.fds.erase(go.fd[0]);
            g.fds.erase(go.fd[1]);
            auto fds1 = vt::fds_of();
            // What the library holds here: the test would see it in the child.
            INFO("library descriptors in the parent:\n" << vt::describe(g.fds));
            INFO("library mappings in the parent:\n" << vt::join(g.maps));
            REQUIRE(has_link(g.fds, "socket:"));
            REQUIRE(has_link(g.fds, "eventfd"));
            REQUIRE(has_link(g.fds, "eventpoll"));
            if (maps_connections()) REQUIRE(has_line(g.maps, "vipl-conn"));
            REQUIRE(has_line(g.maps, "vipl-regions"));

            vt::Child child(vt::spawn_child([&] {
                ready.put('r');
                char c;
                go.get(&c, 20000);
                return 0;
            }));
            char c;
            REQUIRE(ready.get(&c, 10000));
            auto cf = vt::fds_of(child.pid);
            auto cm = vt::maps_of(child.pid);
            go.put('g');
            REQUIRE(child.wait(10) == 0);
            INFO("child's descriptors:\n" << vt::describe(cf));
            std::string kept, foreign;
            for (auto &[fd, info] : cf) {
                if (g.fds.count(fd)) kept += vt::fmt("%d -> %s\n", fd, info.link.c_str());
                auto it = fds1.find(fd);
                if (it == fds1.end() || it->second.link != info.link)
                    foreign += vt::fmt("%d -> %s\n", fd, info.link.c_str());
            }
            INFO("library descriptors the child still has:\n" << kept);
            CHECK(kept.empty());
            INFO("descriptors the parent does not have:\n" << foreign);
            CHECK(foreign.empty());
            std::string vipl_maps;
            auto shared0 = vt::shared_mapping_keys(maps0);
            for (const std::string &m : cm) {
                auto keys = vt::shared_mapping_keys({m});
                if (m.find("memfd:vipl") != std::string::npos ||
                    (keys.size() == 1 && !shared0.count(*keys.begin())))
                    vipl_maps += m + "\n";
            }
            INFO("the child's shared or VIPL mappings:\n" << vipl_maps);
            CHECK(vipl_maps.empty());
            CHECK(w.ep.round_trip(0, 1) == "");
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("exec: nothing of VIPL survives exec() of a process with private objects",
          "[process][exec]") {
    int status = vt::run_checked(
        [] {
            auto fds0 = vt::fds_of();
            auto maps0 = vt::maps_of();
            vt::Shared<vt::ServerStats> srv;
            std::string disc = vt::unique_disc("ex");
            vt::Child server(vt::spawn_server(&*srv, disc));
            PrivateWorld w(disc);
            Gained g = gained(fds0, maps0);
            INFO("library descriptors in the parent:\n" << vt::describe(g.fds));
            INFO("library mappings in the parent:\n" << vt::join(g.maps));
            REQUIRE(has_link(g.fds, "socket:"));
            if (maps_connections()) REQUIRE(has_line(g.maps, "vipl-conn"));
            REQUIRE(has_line(g.maps, "vipl-regions"));
            Report r = exec_inspect();
            CHECK(r.status == 0);
            check_nothing_survives(r, fds0);
            CHECK(w.ep.round_trip(0, 1) == "");
            CHECK(srv->ended.load() == 0);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("exec: nothing of VIPL survives exec() of a process holding a shareable VI, CQ and "
          "region",
          "[process][exec]") {
    int status = vt::run_checked(
        [] {
            auto fds0 = vt::fds_of();
            auto maps0 = vt::maps_of();
            vt::Shared<vt::ServerStats> s1, s2;
            std::string d1 = vt::unique_disc("ey"), d2 = vt::unique_disc("ez");
            vt::Child server1(vt::spawn_server(&*s1, d1)), server2(vt::spawn_server(&*s2, d2));
            PrivateWorld w(d1);
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open(true));
            REQUIRE(v.post_recvs());
            REQUIRE(v.connect(d2));
            int fd;
            REQUIRE(VipGetViWaitFd(v.vi, &fd) == VIP_SUCCESS);
            REQUIRE(VipGetCQWaitFd(v.cq, &fd) == VIP_SUCCESS);
            Gained g = gained(fds0, maps0);
            INFO("library descriptors in the parent:\n" << vt::describe(g.fds));
            INFO("library mappings in the parent:\n" << vt::join(g.maps));
            // The shared arena and the shareable connection are there to be inherited by fork.
            REQUIRE(has_link(g.fds, "socket:"));
            if (maps_connections()) REQUIRE(has_line(g.maps, "vipl-conn"));
            REQUIRE(vt::shared_mapping_keys(g.maps).size() > 1);
            SECTION("exec'd by the process itself (after fork)") {
                Report r = exec_inspect();
                CHECK(r.status == 0);
                check_nothing_survives(r, fds0);
            }
            SECTION("exec'd by a child that held the shareable VI and used it") {
                vt::Shared<vt::Board> board;
                int cs = vt::run_child(
                    [&] {
                        std::string e = vt::round_trip(v, 1, 1, 0);
                        if (!e.empty()) {
                            board->fail(0, e);
                            return 1;
                        }
                        Report r = exec_inspect();
                        std::string bad;
                        for (auto &[f, link] : r.fds)
                            if (f > 2 && f != r.report_fd &&
                                !(fds0.count(f) && !fds0.at(f).cloexec && fds0.at(f).link == link))
                                bad += vt::fmt(" %d->%s", f, link.c_str());
                        for (const std::string &m : r.maps)
                            if (foreign_mapping(m)) bad += " [" + m + "]";
                        if (!r.complete) bad += " (incomplete report)";
                        if (!bad.empty()) board->fail(1, "survived exec:" + bad);
                        return bad.empty() ? 0 : 2;
                    },
                    30);
                INFO("child " << vt::status_text(cs) << "\n" << board->all());
                CHECK(cs == 0);
            }
            CHECK(vt::round_trip(v, 0, 0, 0) == "");
            CHECK(s2->ended.load() == 0);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("exec: a child that exec'd holds no shareable VI: the parent is its last holder",
          "[process][exec][shareable]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv;
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("eh");
            vt::Child server(vt::spawn_server(&*srv, disc));
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open());
            REQUIRE(v.post_recvs());
            REQUIRE(v.connect(disc));
            REQUIRE(vt::round_trip(v, 0, 0, 0) == "");
            pid_t pid = -1;
            Report r = exec_inspect(3000, &pid); // alive, but a new program
            vt::Child running(pid);
            REQUIRE(r.complete);
            // The parent is the last holder: a connected VI cannot be destroyed.
            CHECK(VipDestroyVi(v.vi) == VIP_INVALID_STATE);
            CHECK(VipQueryVi(v.vi, nullptr, nullptr, nullptr, nullptr) == VIP_SUCCESS);
            CHECK(srv->ended.load() == 0);
            if (VipQueryVi(v.vi, nullptr, nullptr, nullptr, nullptr) == VIP_SUCCESS) {
                CHECK(vt::round_trip(v, 0, 0, 1) == "");
                REQUIRE(v.close_last());
            }
            // The peer sees the end at once, not when the exec'd program exits.
            CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, 1000));
            CHECK(srv->end_code[0].load() == VIP_ERROR_CONN_LOST);
            running.kill_now();
            running.wait(5);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}
