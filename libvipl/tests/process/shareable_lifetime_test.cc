// How long a shareable VI's connection lives: as long as one holder keeps
// it.  The parent may destroy its VI or exit and the peer keeps talking to
// the children; the peer sees the connection end only when the last holder
// destroys the VI or exits, however it exits.  Connecting a shareable VI
// makes the connecting process its only holder.
//
// Each case runs in a root process that adopts orphans (a subreaper), so a
// holder whose parent exited can still be waited for and killed.
#include "process_util.h"

#include <csignal>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

// How long the peer may take to see the end once the last holder went: the end is that
// process's exit closing its descriptors, which the kernel can hold up for seconds on a
// loaded machine (an exit waiting for a lock on a mapping the other holders share).  The
// usual figure is milliseconds (the "[measure]" lines).
constexpr int kEndSeenMs = 5000;

struct Ctl {
    vt::Board board;
    std::atomic<int> phase{0};
    std::atomic<pid_t> pid[8];
    std::atomic<int> value[16];
    std::atomic<int> done[8];
};

// Waits in a child until the root sets phase >= want (or gives up).
bool await_phase(Ctl *c, int want, int timeout_ms = 20000) {
    return vt::wait_for([&] { return c->phase.load() >= want; }, timeout_ms);
}

// A root that adopts orphaned descendants and kills what is left on return.
struct Reaper {
    Ctl *c;
    explicit Reaper(Ctl *ctl) : c(ctl) { prctl(PR_SET_CHILD_SUBREAPER, 1); }
    ~Reaper() {
        for (auto &p : c->pid)
            if (p.load() > 0) kill(p.load(), SIGKILL);
        while (waitpid(-1, nullptr, WNOHANG) > 0) {
        }
    }
};

// Round trips by one holder; records the first failure on the board.
bool trips(vt::ShVi &v, Ctl *c, int slot, int proc, uint32_t sender, uint32_t from, int n) {
    for (int i = 0; i < n; ++i) {
        std::string e = vt::round_trip(v, proc, sender, from + i);
        if (!e.empty()) {
            c->board.fail(slot, vt::fmt("sender %u message %u: %s", sender, from + i, e.c_str()));
            return false;
        }
    }
    return true;
}

int wait_pid(pid_t pid, int timeout_s = 20) {
    return vt::wait_child(pid, timeout_s);
}

enum class ParentEnd { exits, killed };
enum class LastEnd { exits, killed, disconnects };

// The parent connects, forks two children and goes; the children talk to the
// peer in turn; the last one ends the connection in the way given.
void parent_goes(ParentEnd pe, LastEnd le) {
    vt::Shared<vt::ServerStats> srv;
    vt::Shared<Ctl> c;
    Reaper reaper(&*c);
    srv->max_conns = 1;
    std::string disc = vt::unique_disc("pg");
    vt::Child server(vt::spawn_server(&*srv, disc));

    pid_t parent = vt::spawn_child([&] {
        vt::ShVi v;
        if (!v.open() || !v.post_recvs() || !v.connect(disc)) {
            c->board.fail(0, "parent: " + v.err);
            return 1;
        }
        if (!trips(v, &*c, 0, 0, 0, 0, 10)) return 2;
        for (int k = 1; k <= 2; ++k) {
            pid_t pid = fork();
            if (pid == 0) {
                int code = 0;
                int start = k == 1 ? 1 : 2; // phase in which this child talks
                if (!await_phase(&*c, start)) _exit(3);
                if (!trips(v, &*c, k, k, k, 0, 30)) _exit(4);
                c->done[k].store(1);
                if (k == 2) {
                    // Alone now (the first child left): 30 more, then end as told.
                    if (!await_phase(&*c, 4)) _exit(5);
                    if (!trips(v, &*c, k, k, k, 30, 30)) _exit(6);
                    c->done[k].store(2);
                    if (!await_phase(&*c, 5)) _exit(9);
                    if (le == LastEnd::disconnects) {
                        c->value[0] = VipDestroyVi(v.vi);
                        if (!v.close_last()) {
                            c->board.fail(k, "last child: " + v.err);
                            code = 7;
                        }
                        c->done[k].store(3);
                        if (!await_phase(&*c, 6)) _exit(8);
                    } else if (le == LastEnd::killed) {
                        pause();
                    }
                } else if (!await_phase(&*c, 3)) {
                    _exit(10);
                }
                _exit(code);
            }
            c->pid[k].store(pid);
        }
        if (pe == ParentEnd::killed) pause();
        return 0; // exits holding the VI
    });
    c->pid[0].store(parent);
    if (pe == ParentEnd::killed) {
        REQUIRE(vt::wait_for([&] { return c->pid[2].load() > 0; }, 10000));
        REQUIRE(vt::wait_for([&] { return srv->next_seq[0].load() == 10; }, 10000));
        kill(parent, SIGKILL);
    }
    int ps = wait_pid(parent);
    INFO("parent " << vt::status_text(ps) << "\n" << c->board.all());
    if (pe == ParentEnd::exits)
        REQUIRE(ps == 0);
    else
        REQUIRE(WIFSIGNALED(ps));
    REQUIRE(c->pid[1].load() > 0);
    REQUIRE(c->pid[2].load() > 0);
    CHECK(srv->next_seq[0].load() == 10);

    // The peer keeps talking to the children, one after the other.
    c->phase = 1;
    REQUIRE(vt::wait_for([&] { return c->done[1].load() == 1 || c->board.any(); }, 10000));
    c->phase = 2;
    REQUIRE(vt::wait_for([&] { return c->done[2].load() == 1 || c->board.any(); }, 10000));
    {
        INFO(c->board.all());
        REQUIRE_FALSE(c->board.any());
    }
    CHECK(srv->ended.load() == 0);

    // The first child exits; the second still holds the connection.
    c->phase = 3;
    int s1 = wait_pid(c->pid[1].load());
    CHECK(s1 == 0);
    c->pid[1] = 0;
    vt::sleep_ms(50); // longer than the peer's liveness check
    CHECK(srv->ended.load() == 0);
    c->phase = 4;
    REQUIRE(vt::wait_for([&] { return c->done[2].load() >= 2 || c->board.any(); }, 10000));
    {
        INFO(c->board.all());
        REQUIRE_FALSE(c->board.any());
    }
    CHECK(srv->ended.load() == 0);
    CHECK(srv->next_seq[1].load() == 30);
    CHECK(srv->next_seq[2].load() == 60);
    CHECK(srv->bad.load() == 0);

    // The last holder goes: now, and only now, the peer sees the end.
    double t0 = vt::now_ms();
    switch (le) {
    case LastEnd::disconnects:
        c->phase = 5;
        REQUIRE(vt::wait_for([&] { return c->done[2].load() == 3 || c->board.any(); }, 10000));
        {
            INFO(c->board.all());
            REQUIRE_FALSE(c->board.any());
        }
        CHECK(c->value[0].load() == VIP_INVALID_STATE); // last holder, still connected
        break;
    case LastEnd::exits:
        c->phase = 5;
        break;
    case LastEnd::killed:
        c->phase = 5;
        vt::sleep_ms(5);
        kill(c->pid[2].load(), SIGKILL);
        break;
    }
    CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, kEndSeenMs));
    CHECK(srv->end_code[0].load() == VIP_ERROR_CONN_LOST);
    if (srv->ended.load())
        printf("[measure] peer saw the end %.1f ms after the last holder went\n",
               srv->ended_ms[0].load() - t0);
    c->phase = 6;
    int s2 = wait_pid(c->pid[2].load());
    c->pid[2] = 0;
    if (le == LastEnd::killed)
        CHECK(WIFSIGNALED(s2));
    else
        CHECK(s2 == 0);
    INFO("server: " << srv->first_error);
    CHECK(srv->bad.load() == 0);
    CHECK(vt::wait_child(server.pid, 10) == 0);
    server.pid = -1;
}

} // namespace

TEST_CASE("shareable VI: the peer talks to the children after the parent exits, and the "
          "last holder's end ends the connection",
          "[process][shareable][lifetime]") {
    auto pe = GENERATE(ParentEnd::exits, ParentEnd::killed);
    auto le = GENERATE(LastEnd::exits, LastEnd::killed, LastEnd::disconnects);
    INFO("parent " << (pe == ParentEnd::exits ? "exits" : "is killed") << ", last holder "
                   << (le == LastEnd::exits    ? "exits"
                       : le == LastEnd::killed ? "is killed"
                                               : "disconnects and destroys"));
    int status = vt::run_checked(
        [&] {
            parent_goes(pe, le);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("shareable VI: the parent destroys its VI while a child uses it, which is then the "
          "last holder",
          "[process][shareable][lifetime]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<Ctl> c;
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("pd");
            vt::Child server(vt::spawn_server(&*srv, disc));
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open());
            REQUIRE(v.post_recvs());
            REQUIRE(v.connect(disc));
            REQUIRE(trips(v, &*c, 0, 0, 0, 0, 10));
            vt::Child child(vt::spawn_child([&] {
                c->done[0] = 1;
                if (!await_phase(&*c, 1)) return 1;
                if (!trips(v, &*c, 1, 1, 1, 0, 50)) return 2;
                c->value[0] = srv->ended.load();
                // Last holder now: a connected VI cannot be destroyed...
                c->value[1] = VipDestroyVi(v.vi);
                c->value[2] = VipDisconnect(v.vi);
                VIP_DESCRIPTOR *d;
                while (VipRecvDone(v.vi, &d) != VIP_NOT_DONE) {
                }
                while (VipSendDone(v.vi, &d) != VIP_NOT_DONE) {
                }
                // ...an idle one can.
                c->value[3] = VipDestroyVi(v.vi);
                return 0;
            }));
            // (Running: it holds the VI.  Destroying at once after fork() is another case.)
            REQUIRE(vt::wait_for([&] { return c->done[0].load() == 1; }, 10000));
            // Only this process's reference goes; the child keeps the connection.
            CHECK(VipDestroyVi(v.vi) == VIP_SUCCESS);
            CHECK(VipQueryVi(v.vi, nullptr, nullptr, nullptr, nullptr) == VIP_INVALID_PARAMETER);
            CHECK(VipPostSend(v.vi, v.send_desc(0, 0), v.mh) == VIP_INVALID_PARAMETER);
            VIP_DESCRIPTOR *d;
            CHECK(VipRecvDone(v.vi, &d) == VIP_INVALID_PARAMETER);
            CHECK(VipDisconnect(v.vi) == VIP_INVALID_PARAMETER);
            c->phase = 1;
            int cs = child.wait(20);
            INFO("child " << vt::status_text(cs) << "\n" << c->board.all());
            REQUIRE(cs == 0);
            CHECK(c->value[0].load() == 0); // the peer had not seen any end
            CHECK(srv->next_seq[1].load() == 50);
            CHECK(c->value[1].load() == VIP_INVALID_STATE);
            CHECK(c->value[2].load() == VIP_SUCCESS);
            CHECK(c->value[3].load() == VIP_SUCCESS);
            CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, kEndSeenMs));
            CHECK(srv->end_code[0].load() == VIP_ERROR_CONN_LOST);
            CHECK(srv->bad.load() == 0);
            CHECK(vt::wait_child(server.pid, 10) == 0);
            server.pid = -1;
            CHECK(VipCloseNic(v.nic) == VIP_SUCCESS);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("shareable VI: connected after fork, it is refused in older children and shared "
          "with newer ones",
          "[process][shareable][lifetime]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<Ctl> c;
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("ca");
            vt::Child server(vt::spawn_server(&*srv, disc));
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open());
            REQUIRE(v.post_recvs());
            vt::Child older(vt::spawn_child([&] {
                // A holder of the idle VI...
                VIP_VI_STATE s = VIP_STATE_ERROR;
                c->value[0] = VipQueryVi(v.vi, &s, nullptr, nullptr, nullptr);
                c->value[1] = s;
                c->done[0] = 1;
                if (!await_phase(&*c, 1)) return 1;
                // ...is none once the parent connected it.
                VIP_DESCRIPTOR *d;
                c->value[2] = VipQueryVi(v.vi, &s, nullptr, nullptr, nullptr);
                c->value[3] = VipPostSend(v.vi, v.send_desc(1, 0), v.mh);
                c->value[4] = VipRecvDone(v.vi, &d);
                c->value[5] = VipDisconnect(v.vi);
                c->value[6] = VipDestroyVi(v.vi);
                return 0;
            }));
            REQUIRE(vt::wait_for([&] { return c->done[0].load() == 1; }, 10000));
            CHECK(c->value[0].load() == VIP_SUCCESS);
            CHECK(c->value[1].load() == VIP_STATE_IDLE);
            REQUIRE(v.connect(disc));
            c->phase = 1;
            REQUIRE(older.wait(20) == 0);
            CHECK(c->value[2].load() == VIP_INVALID_PARAMETER);
            CHECK(c->value[3].load() == VIP_INVALID_PARAMETER);
            CHECK(c->value[4].load() == VIP_INVALID_PARAMETER);
            CHECK(c->value[5].load() == VIP_INVALID_PARAMETER);
            CHECK(c->value[6].load() == VIP_INVALID_PARAMETER);
            // The refused calls changed nothing.
            CHECK(vt::vi_state(v.vi) == VIP_STATE_CONNECTED);
            CHECK(vt::round_trip(v, 0, 0, 0) == "");
            int ns = vt::run_child([&] { return trips(v, &*c, 2, 2, 2, 0, 20) ? 0 : 1; }, 20);
            INFO("newer child " << vt::status_text(ns) << "\n" << c->board.all());
            CHECK(ns == 0);
            CHECK(srv->next_seq[2].load() == 20);
            CHECK(vt::round_trip(v, 0, 0, 1) == "");
            CHECK(srv->ended.load() == 0);
            CHECK(srv->bad.load() == 0);
            REQUIRE(v.close_last());
            CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, kEndSeenMs));
            CHECK(vt::wait_child(server.pid, 10) == 0);
            server.pid = -1;
            CHECK(VipCloseNic(v.nic) == VIP_SUCCESS);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("shareable VI: a child that connects the VI it inherited idle becomes its only holder",
          "[process][shareable][lifetime]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<Ctl> c;
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("cc");
            vt::Child server(vt::spawn_server(&*srv, disc));
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open());
            REQUIRE(v.post_recvs());
            // Made here: the child cannot use this process's NIC for name service.
            std::vector<uint8_t> local = vt::address(v.nic, disc + "c"),
                                 remote = vt::address(v.nic, disc);
            vt::Child child(vt::spawn_child([&] {
                if (!v.connect_to(local, remote)) {
                    c->board.fail(1, "child: " + v.err);
                    return 1;
                }
                c->done[1] = 1;
                if (!trips(v, &*c, 1, 1, 1, 0, 10)) return 2;
                // The peer checks its RDMA writes against the connecting process's regions.
                std::string e = vt::remote_write(v, &*srv, 1024, 0xC0FFEE);
                if (!e.empty()) {
                    c->board.fail(2, "child, RDMA write from the peer: " + e);
                    return 3;
                }
                // Its own children share it from now on.
                int gs = vt::run_child([&] { return trips(v, &*c, 3, 2, 2, 0, 10) ? 0 : 1; }, 20);
                if (gs != 0) {
                    c->board.fail(4, "grandchild " + vt::status_text(gs));
                    return 4;
                }
                if (!await_phase(&*c, 1)) return 5;
                if (!v.close_last()) {
                    c->board.fail(1, "child: " + v.err);
                    return 6;
                }
                return 0;
            }));
            REQUIRE(vt::wait_for([&] { return c->done[1].load() == 1 || c->board.any(); }, 10000));
            {
                INFO(c->board.all());
                REQUIRE(c->done[1].load() == 1);
            }
            // The parent created the VI, but the child connected it.
            CHECK(VipQueryVi(v.vi, nullptr, nullptr, nullptr, nullptr) == VIP_INVALID_PARAMETER);
            CHECK(VipPostSend(v.vi, v.send_desc(0, 0), v.mh) == VIP_INVALID_PARAMETER);
            c->phase = 1;
            int cs = child.wait(30);
            INFO("child " << vt::status_text(cs) << "\n" << c->board.all());
            CHECK(cs == 0);
            CHECK(srv->next_seq[1].load() == 10);
            CHECK(srv->next_seq[2].load() == 10);
            INFO("server: " << srv->first_error);
            CHECK(srv->bad.load() == 0);
            CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, kEndSeenMs));
            CHECK(vt::wait_child(server.pid, 10) == 0);
            server.pid = -1;
            CHECK(VipCloseNic(v.nic) == VIP_SUCCESS);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("shareable VI: the peer's RDMA writes reach the shared memory after the connecting "
          "process exits",
          "[process][shareable][lifetime]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<Ctl> c;
            Reaper reaper(&*c);
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("rw");
            vt::Child server(vt::spawn_server(&*srv, disc));
            pid_t parent = vt::spawn_child([&] {
                vt::ShVi v;
                if (!v.open() || !v.post_recvs() || !v.connect(disc)) {
                    c->board.fail(0, "parent: " + v.err);
                    return 1;
                }
                // While the connecting process lives, it works.
                std::string e = vt::remote_write(v, &*srv, 2048, 0x1111);
                if (!e.empty()) {
                    c->board.fail(0, "parent: " + e);
                    return 2;
                }
                pid_t pid = fork();
                if (pid == 0) {
                    c->done[1] = 1;
                    if (!await_phase(&*c, 1)) _exit(3);
                    std::string e2 = vt::remote_write(v, &*srv, 2048, 0x2222);
                    if (!e2.empty()) c->board.fail(1, "child, parent gone: " + e2);
                    c->done[1] = 2;
                    if (!trips(v, &*c, 2, 1, 1, 0, 10)) _exit(4);
                    _exit(e2.empty() ? 0 : 5);
                }
                c->pid[1] = pid;
                vt::wait_for([&] { return c->done[1].load() == 1; }, 10000);
                return 0;
            });
            c->pid[0] = parent;
            int ps = wait_pid(parent);
            c->pid[0] = 0;
            INFO("parent " << vt::status_text(ps) << "\n" << c->board.all());
            REQUIRE(ps == 0);
            REQUIRE(c->pid[1].load() > 0);
            c->phase = 1;
            int cs = wait_pid(c->pid[1].load());
            c->pid[1] = 0;
            INFO("child " << vt::status_text(cs) << "\n" << c->board.all());
            CHECK(cs == 0);
            CHECK(srv->next_seq[1].load() == 10);
            CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, kEndSeenMs));
            INFO("server: " << srv->first_error);
            CHECK(srv->bad.load() == 0);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}

TEST_CASE("shareable VI: VipDestroyVi at once after fork() leaves the VI to the child",
          "[process][shareable][lifetime]") {
    // The child holds the VI from fork() on, whether or not it has run yet.
    int status = vt::run_checked(
        [] {
            constexpr int kRounds = 30;
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<Ctl> c;
            srv->max_conns = kRounds;
            std::string disc = vt::unique_disc("df");
            vt::Child server(vt::spawn_server(&*srv, disc));
            int destroy_wrong = 0, child_failed = 0;
            for (int round = 0; round < kRounds; ++round) {
                vt::ShVi v;
                INFO("round " << round << ": " << v.err);
                REQUIRE(v.open());
                REQUIRE(v.post_recvs());
                REQUIRE(v.connect(disc));
                pid_t pid = vt::spawn_child([&] {
                    if (!trips(v, &*c, round % 100, 1, 100 + round, 0, 3)) return 1;
                    if (!v.close_last()) {
                        c->board.fail(100 + round % 50,
                                      vt::fmt("round %d child: %s", round, v.err.c_str()));
                        return 2;
                    }
                    return 0;
                });
                VIP_RETURN rc = VipDestroyVi(v.vi);
                if (rc != VIP_SUCCESS) {
                    ++destroy_wrong;
                    c->board.fail(150 + round % 10,
                                  vt::fmt("round %d: VipDestroyVi right after fork: %s", round,
                                          VipReturnString(rc)));
                    if (vt::vi_state(v.vi) == VIP_STATE_CONNECTED) {
                        // Refused: this process still holds it; wait for the child first.
                        vt::wait_child(pid, 20);
                        pid = -1;
                        v.close_last();
                    }
                }
                if (pid > 0 && vt::wait_child(pid, 20) != 0) ++child_failed;
                REQUIRE(vt::wait_for([&] { return srv->ended.load() == round + 1; }, 3000));
                VipCloseNic(v.nic);
                munmap(v.mem, vt::kRegionBytes);
            }
            INFO(c->board.all());
            CHECK(destroy_wrong == 0);
            CHECK(child_failed == 0);
            INFO("server: " << srv->first_error);
            CHECK(srv->bad.load() == 0);
            return 0;
        },
        90);
    REQUIRE(status == 0);
}

TEST_CASE("shareable VI: when the peer ends the connection every holder sees the Error state and "
          "none keeps its descriptors or memory",
          "[process][shareable][lifetime]") {
    int status = vt::run_checked(
        [] {
            auto fds0 = vt::fds_of(); // before anything of VIPL in this process
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<Ctl> c;
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("pe");
            vt::Child server(vt::spawn_server(&*srv, disc));
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open());
            REQUIRE(v.post_recvs());
            REQUIRE(v.connect(disc));
            REQUIRE(trips(v, &*c, 0, 0, 0, 0, 5));
            auto leftovers = [&](const char *who, int slot) {
                std::map<int, vt::FdInfo> now = vt::fds_of();
                std::string extra;
                for (auto &[fd, info] : now) {
                    auto it = fds0.find(fd);
                    if (it == fds0.end() || it->second.link != info.link)
                        extra += vt::fmt(" %d->%s", fd, info.link.c_str());
                }
                if (!extra.empty())
                    c->board.fail(slot, vt::fmt("%s keeps descriptors:%s", who, extra.c_str()));
                for (const std::string &m : vt::maps_of())
                    if (m.find("vipl-conn") != std::string::npos)
                        c->board.fail(slot + 1, vt::fmt("%s keeps the connection mapped: %s", who,
                                                        m.c_str()));
            };
            std::vector<std::unique_ptr<vt::Child>> kids;
            for (int k = 1; k <= 2; ++k)
                kids.push_back(std::make_unique<vt::Child>(vt::spawn_child([&, k] {
                    c->done[k] = 1;
                    if (!await_phase(&*c, k)) return 1;
                    VIP_VI_STATE s = VIP_STATE_IDLE;
                    if (k == 1) {
                        // The first to look finds the end.
                        VIP_DESCRIPTOR *d;
                        VIP_RETURN rc = VipRecvWait(v.vi, 2000, &d);
                        c->value[1] = rc;
                        vt::wait_for(
                            [&] {
                                return VipQueryVi(v.vi, &s, nullptr, nullptr, nullptr) ==
                                           VIP_SUCCESS &&
                                       s == VIP_STATE_ERROR;
                            },
                            2000);
                    } else {
                        VipQueryVi(v.vi, &s, nullptr, nullptr, nullptr);
                        c->value[3] = VipPostSend(v.vi, v.send_desc(k, 0), v.mh);
                    }
                    c->value[k * 4] = s;
                    c->done[k] = 2;
                    if (!await_phase(&*c, 3)) return 2;
                    c->value[k * 4 + 1] = VipDestroyVi(v.vi);
                    leftovers(k == 1 ? "child 1 (found the end)" : "child 2", k * 10);
                    return 0;
                })));
            REQUIRE(vt::wait_for([&] { return c->done[1].load() == 1 && c->done[2].load() == 1; },
                                 10000));
            srv->stop = 1; // the server disconnects
            REQUIRE(vt::wait_child(server.pid, 10) == 0);
            server.pid = -1;
            c->phase = 1;
            REQUIRE(vt::wait_for([&] { return c->done[1].load() == 2; }, 5000));
            c->phase = 2;
            REQUIRE(vt::wait_for([&] { return c->done[2].load() == 2; }, 5000));
            CHECK(c->value[4].load() == VIP_STATE_ERROR);
            CHECK(c->value[8].load() == VIP_STATE_ERROR);
            CHECK(c->value[3].load() == VIP_INVALID_STATE);
            CHECK(vt::vi_state(v.vi) == VIP_STATE_ERROR);
            c->phase = 3;
            for (auto &k : kids) CHECK(k->wait(20) == 0);
            CHECK(c->value[5].load() == VIP_SUCCESS);
            CHECK(c->value[9].load() == VIP_SUCCESS);
            REQUIRE(v.close_last());
            CHECK(VipCloseNic(v.nic) == VIP_SUCCESS);
            leftovers("the parent, after closing its NIC", 40);
            INFO(c->board.all());
            CHECK_FALSE(c->board.any());
            return 0;
        },
        60);
    REQUIRE(status == 0);
}
