// A holder of a shareable VI killed with SIGKILL while inside the library
// must not wedge the others: either it did not hold the VI's lock and the VI
// goes on working, or it did and the VI goes to the Error state with
// VIP_ERROR_CATASTROPHIC for every holder, the peer sees the connection end,
// and no call of another process hangs.  Never may a message be corrupted,
// duplicated or reordered.
//
// The victim runs a tight loop of VipPostSend / VipSendDone / VipRecvDone
// against a sink server that checks every message.  One test kills it at
// random moments; the others first stop it (SIGSTOP) and probe from another
// thread or process whether it holds the lock (the probe then blocks), so
// that the kill is known to hit a holder of the lock.
#include "process_util.h"

#include <csignal>
#include <fstream>
#include <mutex>
#include <random>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

constexpr int kMaxVictims = 1000; // sender ids 1..kMaxVictims; 0 is the parent
constexpr int kWindow = 32;       // sends a victim keeps outstanding

struct KillCtl {
    vt::Board board;
    std::atomic<uint32_t> attempted[kMaxVictims + 1]; // seq + 1 of the last post started
    std::atomic<uint32_t> confirmed[kMaxVictims + 1]; // seq + 1 of the last post that returned
    std::atomic<uint32_t> completed[kMaxVictims + 1]; // sends the victim took back
    std::atomic<int> started[kMaxVictims + 1];
    std::atomic<int> iteration{0};
    std::atomic<int> step{0};
    // A bystander holder's orders and answers.
    std::atomic<int> order{0};
    std::atomic<int> answered{0};
    std::atomic<int> probe_rc{-1};
    std::atomic<int> probe_state{-1};
    std::atomic<int> destroy_rc{-1};
};

const char *step_name(int s) {
    static const char *const names[] = {
        "start",      "fork victim",    "victim running", "kill",       "query",       "drain",
        "check peer", "liveness check", "reconnect",      "stop probe", "probe waits", "done"};
    return s >= 0 && s < 12 ? names[s] : "?";
}

// The errors the parent's NIC reports.
struct Errors {
    std::mutex m;
    std::vector<std::pair<VIP_VI_HANDLE, VIP_ERROR_CODE>> seen;
    static void handler(VIP_PVOID ctx, VIP_ERROR_DESCRIPTOR *e) {
        auto *self = static_cast<Errors *>(ctx);
        std::lock_guard<std::mutex> g(self->m);
        self->seen.emplace_back(e->ViHandle, e->ErrorCode);
    }
    bool has(VIP_VI_HANDLE vi, VIP_ERROR_CODE code) {
        std::lock_guard<std::mutex> g(m);
        for (auto &[v, c] : seen)
            if (v == vi && c == code) return true;
        return false;
    }
    std::string list() {
        std::lock_guard<std::mutex> g(m);
        std::string s;
        for (auto &[v, c] : seen) s += vt::fmt(" (%p, %d)", v, int(c));
        return s.empty() ? " none" : s;
    }
};

// The victim: never returns by itself before its deadline.  Besides its
// own window of outstanding sends it keeps fewer messages unread by the
// sink than the sink has receives posted (VIA needs a receive posted before
// a message arrives, and a fast sender outruns a sink that also sends).
int victim(vt::ShVi &v, KillCtl *k, vt::ServerStats *srv, int id) {
    uint32_t seq = 0;
    uint64_t posted = 0, reaped = 0;
    k->started[id] = 1;
    double end = vt::now_ms() + 10000;
    while (vt::now_ms() < end) {
        VIP_DESCRIPTOR *d;
        VIP_RETURN rc;
        while ((rc = VipSendDone(v.vi, &d)) != VIP_NOT_DONE) {
            if (rc != VIP_SUCCESS) {
                k->board.fail(id % 100, vt::fmt("victim %d: send completed with %s", id,
                                                VipReturnString(rc)));
                return 3;
            }
            ++reaped;
            k->completed[id].fetch_add(1);
        }
        rc = VipRecvDone(v.vi, &d);
        if (rc != VIP_NOT_DONE) {
            k->board.fail(id % 100, vt::fmt("victim %d: VipRecvDone: %s", id, VipReturnString(rc)));
            return 4;
        }
        if (posted - reaped < kWindow && seq - srv->next_seq[id].load() < 2 * kWindow) {
            int slot = static_cast<int>(seq % vt::kSlots);
            vt::make_msg(v.send_buf(0, slot), id, seq);
            vt::set_desc(v.send_desc(0, slot), v.send_buf(0, slot), vt::kMsgBytes, v.mh);
            k->attempted[id] = seq + 1;
            rc = VipPostSend(v.vi, v.send_desc(0, slot), v.mh);
            if (rc != VIP_SUCCESS) {
                VIP_VI_STATE s = VIP_STATE_IDLE;
                VipQueryVi(v.vi, &s, nullptr, nullptr, nullptr);
                k->board.fail(id % 100,
                              vt::fmt("victim %d: VipPostSend of message %u: %s (VI state %d)", id,
                                      seq, VipReturnString(rc), int(s)));
                return 5;
            }
            k->confirmed[id] = ++seq;
            ++posted;
        }
    }
    return 6;
}

char proc_state(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(in, s);
    size_t p = s.rfind(')');
    return p == std::string::npos || p + 2 >= s.size() ? '?' : s[p + 2];
}

// One connection to the sink and what the parent does with it.
struct Conn {
    vt::ShVi v;
    Errors *errors;
    uint32_t parent_seq = 0;
    double worst_ms = 0; // slowest call made right after a kill

    bool open(const std::string &disc, Errors *e) {
        errors = e;
        if (!v.open() || !v.connect(disc)) return false;
        return VipErrorCallback(v.nic, e, Errors::handler) == VIP_SUCCESS;
    }
    void close() {
        if (v.vi) v.close_last();
        if (v.nic) VipCloseNic(v.nic);
        if (v.mem) munmap(v.mem, vt::kRegionBytes);
        v.vi = nullptr;
        v.nic = nullptr;
        v.mem = nullptr;
    }
    // A call that must return promptly even right after a holder died in the library.
    template <class F>
    VIP_RETURN timed(F &&f) {
        double t0 = vt::now_ms();
        VIP_RETURN rc = f();
        double took = vt::now_ms() - t0;
        if (took > worst_ms) worst_ms = took;
        return rc;
    }
    VIP_VI_STATE state(VIP_BOOLEAN *sq_empty = nullptr) {
        VIP_VI_STATE s = VIP_STATE_IDLE;
        VIP_RETURN rc = timed([&] { return VipQueryVi(v.vi, &s, nullptr, sq_empty, nullptr); });
        REQUIRE(rc == VIP_SUCCESS);
        return s;
    }
    // Takes what is left of the dead victim's sends; returns how many completed without error.
    int drain(bool live) {
        int ok = 0;
        double end = vt::now_ms() + 3000;
        for (;;) {
            VIP_DESCRIPTOR *d;
            VIP_RETURN rc = timed([&] { return VipSendDone(v.vi, &d); });
            if (rc == VIP_SUCCESS)
                ++ok;
            else if (rc == VIP_DESCRIPTOR_ERROR) {
                if (live)
                    FAIL_CHECK("a send completed with status 0x" << std::hex << d->CS.Status
                                                                 << " on a live VI");
                else
                    CHECK((d->CS.Status & VIP_STATUS_ERROR_MASK) != 0);
            } else {
                REQUIRE(rc == VIP_NOT_DONE);
                VIP_BOOLEAN empty = VIP_FALSE;
                state(&empty);
                if (empty) return ok;
            }
            REQUIRE(vt::now_ms() < end);
        }
    }
};

// Checks what the sink got from victim id: a prefix of what it attempted,
// with everything it was told was posted unless the VI was broken.
void check_victim_stream(vt::ServerStats *srv, KillCtl *k, int id, bool broken) {
    uint32_t got = srv->next_seq[id].load();
    INFO("victim " << id << ": attempted " << k->attempted[id].load() << ", confirmed "
                   << k->confirmed[id].load() << ", sink got " << got);
    CHECK(got <= k->attempted[id].load());
    if (!broken) {
        CHECK(vt::wait_for([&] { return srv->next_seq[id].load() >= k->confirmed[id].load(); },
                           2000));
    }
}

// After the kill the VI was broken: what every observer must see.
void check_broken(Conn &c, vt::ServerStats *srv, int ended_before) {
    CHECK(vt::wait_for([&] { return c.errors->has(c.v.vi, VIP_ERROR_CATASTROPHIC); }, 1000));
    INFO("errors reported to the parent:" << c.errors->list());
    CHECK(c.errors->has(c.v.vi, VIP_ERROR_CATASTROPHIC));
    CHECK(vt::wait_for([&] { return srv->ended.load() > ended_before; }, 2000));
    CHECK(srv->end_code[ended_before].load() == VIP_ERROR_CONN_LOST);
    c.drain(false);
    VIP_RETURN rc = c.timed([&] { return VipPostSend(c.v.vi, c.v.send_desc(1, 0), c.v.mh); });
    CHECK(rc == VIP_INVALID_STATE);
}

void parent_liveness(Conn &c, vt::ServerStats *srv) {
    int slot = static_cast<int>(c.parent_seq % vt::kSlots);
    vt::make_msg(c.v.send_buf(1, slot), 0, c.parent_seq);
    vt::set_desc(c.v.send_desc(1, slot), c.v.send_buf(1, slot), vt::kMsgBytes, c.v.mh);
    REQUIRE(c.timed([&] { return VipPostSend(c.v.vi, c.v.send_desc(1, slot), c.v.mh); }) ==
            VIP_SUCCESS);
    VIP_DESCRIPTOR *d = nullptr;
    REQUIRE(VipSendWait(c.v.vi, 2000, &d) == VIP_SUCCESS);
    REQUIRE(d == c.v.send_desc(1, slot));
    ++c.parent_seq;
    REQUIRE(vt::wait_for([&] { return srv->next_seq[0].load() == c.parent_seq; }, 2000));
}

// Whether a thread (or a process's only thread) sleeps in futex(): a VipQueryVi
// that does, while the victim is stopped, waits for the lock the victim holds.
bool in_futex(const std::string &task) {
    std::ifstream in(task + "/syscall");
    long nr = -1;
    in >> nr;
    return nr == SYS_futex;
}

// Decides whether a probe call blocks: it did not finish within 50 ms and
// sleeps in futex() (a merely slow probe gets up to a second more).
bool probe_blocks(const std::function<bool()> &finished, const std::string &task) {
    if (vt::wait_for(finished, 50)) return false;
    double end = vt::now_ms() + 1000;
    while (vt::now_ms() < end) {
        if (finished()) return false;
        if (in_futex(task)) return true;
        vt::sleep_ms(1);
    }
    return !finished();
}

// Collects this process's stderr (the library's log lines) while it lives;
// then counts the lines that contain `expected` and passes the others on.
class LogTap {
public:
    explicit LogTap(const char *expected) : expected_(expected) {
        fflush(stderr);
        saved_ = dup(2);
        file_ = memfd_create("log-tap", MFD_CLOEXEC);
        if (file_ >= 0) dup2(file_, 2);
    }
    ~LogTap() { finish(); }
    // Restores stderr; returns how many lines matched.
    int finish() {
        if (saved_ < 0) return count_;
        fflush(stderr);
        dup2(saved_, 2);
        close(saved_);
        saved_ = -1;
        if (file_ < 0) return count_;
        std::string text;
        char buf[4096];
        lseek(file_, 0, SEEK_SET);
        for (ssize_t n; (n = read(file_, buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
        close(file_);
        size_t at = 0;
        while (at < text.size()) {
            size_t nl = text.find('\n', at);
            std::string line =
                text.substr(at, nl == std::string::npos ? std::string::npos : nl - at + 1);
            at = nl == std::string::npos ? text.size() : nl + 1;
            if (line.find(expected_) != std::string::npos)
                ++count_;
            else
                fputs(line.c_str(), stderr);
        }
        return count_;
    }

private:
    std::string expected_;
    int saved_ = -1, file_ = -1, count_ = 0;
};

// Waits for the victim to be stopped; false if it is not within a second.
bool stopped(pid_t pid) {
    return vt::wait_for([&] { return proc_state(pid) == 'T'; }, 1000);
}

} // namespace

TEST_CASE("holder killed in the library: 200 SIGKILLs at random moments never wedge, corrupt "
          "or duplicate",
          "[process][shareable][kill]") {
    vt::Shared<KillCtl> k;
    int status = vt::run_checked(
        [&] {
            constexpr int kIterations = 200;
            constexpr double kBudgetMs = 45000;
            vt::Shared<vt::ServerStats> srv;
            srv->max_conns = vt::ServerStats::kMaxConns;
            vt::ServerOpts so;
            so.echo = false;
            std::string disc = vt::unique_disc("kr");
            vt::Child server(vt::spawn_server(&*srv, disc, so));
            // One warning per broken VI would flood the output: counted instead.
            LogTap tap("died inside the library");
            Errors errors;
            Conn c;
            INFO(c.v.err);
            REQUIRE(c.open(disc, &errors));
            std::mt19937 rng(20001);
            int poisoned = 0, survived = 0, ran = 0;
            double worst = 0, t_start = vt::now_ms();
            for (int it = 0; it < kIterations && vt::now_ms() - t_start < kBudgetMs; ++it) {
                int id = it + 1;
                k->iteration = it;
                k->step = 1;
                pid_t pid = vt::spawn_child([&] { return victim(c.v, &*k, &*srv, id); });
                vt::Child vic(pid);
                k->step = 2;
                REQUIRE(vt::wait_for([&] { return k->started[id].load() == 1; }, 5000));
                vt::sleep_ms(std::uniform_real_distribution<double>(0, 3)(rng));
                k->step = 3;
                vic.kill_now();
                int vs = vic.wait(10);
                INFO("iteration " << it << ": victim " << vt::status_text(vs) << "\n"
                                  << k->board.all());
                INFO("sink: "
                     << srv->first_error << "; connections ended " << srv->ended.load()
                     << ", last reason "
                     << srv->end_code[srv->ended.load() ? srv->ended.load() - 1 : 0].load());
                REQUIRE(WIFSIGNALED(vs));
                ++ran;
                k->step = 4;
                c.worst_ms = 0;
                int ended_before = srv->ended.load();
                VIP_VI_STATE s = c.state();
                if (s == VIP_STATE_CONNECTED) {
                    ++survived;
                    k->step = 5;
                    c.drain(true);
                    k->step = 6;
                    check_victim_stream(&*srv, &*k, id, false);
                    k->step = 7;
                    parent_liveness(c, &*srv);
                    CHECK(srv->ended.load() == ended_before);
                } else {
                    REQUIRE(s == VIP_STATE_ERROR);
                    ++poisoned;
                    k->step = 6;
                    check_broken(c, &*srv, ended_before);
                    check_victim_stream(&*srv, &*k, id, true);
                    k->step = 8;
                    c.close();
                    REQUIRE(c.open(disc, &errors));
                    c.parent_seq = 0;
                    srv->next_seq[0] = 0;
                    parent_liveness(c, &*srv);
                }
                worst = std::max(worst, c.worst_ms);
                CHECK(c.worst_ms < 1000);
                INFO("sink: " << srv->first_error);
                REQUIRE(srv->bad.load() == 0);
            }
            k->step = 11;
            int logged = tap.finish();
            printf("[measure] %d kills: %d left the VI working, %d broke it (holder had the lock, "
                   "%d logged); slowest call after a kill %.1f ms\n",
                   ran, survived, poisoned, logged, worst);
            CHECK(ran >= 50);
            c.close();
            srv->stop = 1;
            return 0;
        },
        120);
    INFO("stopped at iteration " << k->iteration.load() << ", step " << step_name(k->step.load())
                                 << "\n"
                                 << k->board.all());
    REQUIRE(status == 0);
}

TEST_CASE("holder killed while it holds the VI's lock: Error and CATASTROPHIC for the parent, "
          "the peer sees the end",
          "[process][shareable][kill]") {
    vt::Shared<KillCtl> k;
    int status = vt::run_checked(
        [&] {
            constexpr int kRounds = 4;
            vt::Shared<vt::ServerStats> srv;
            srv->max_conns = kRounds;
            vt::ServerOpts so;
            so.echo = false;
            std::string disc = vt::unique_disc("kd");
            vt::Child server(vt::spawn_server(&*srv, disc, so));
            Errors errors;
            std::mt19937 rng(777);
            for (int round = 0; round < kRounds; ++round) {
                int id = round + 1;
                k->iteration = round;
                Conn c;
                INFO("round " << round << ": " << c.v.err);
                REQUIRE(c.open(disc, &errors));
                parent_liveness(c, &*srv);
                int ended_before = srv->ended.load();
                vt::Child vic(vt::spawn_child([&] { return victim(c.v, &*k, &*srv, id); }));
                REQUIRE(vt::wait_for([&] { return k->started[id].load() == 1; }, 5000));
                bool caught = false;
                int attempts = 0;
                for (; attempts < 500 && !caught; ++attempts) {
                    vt::sleep_ms(std::uniform_real_distribution<double>(0, 0.5)(rng));
                    k->step = 9;
                    kill(vic.pid, SIGSTOP);
                    REQUIRE(stopped(vic.pid));
                    k->step = 10;
                    auto probe_done = std::make_shared<std::atomic<bool>>(false);
                    auto probe_state = std::make_shared<std::atomic<int>>(-1);
                    auto probe_tid = std::make_shared<std::atomic<long>>(0);
                    VIP_VI_HANDLE vi = c.v.vi;
                    std::thread probe([=] {
                        probe_tid->store(syscall(SYS_gettid));
                        VIP_VI_STATE s = VIP_STATE_IDLE;
                        if (VipQueryVi(vi, &s, nullptr, nullptr, nullptr) == VIP_SUCCESS)
                            probe_state->store(s);
                        probe_done->store(true);
                    });
                    REQUIRE(vt::wait_for([&] { return probe_tid->load() != 0; }, 5000));
                    std::string task = vt::fmt("/proc/self/task/%ld", probe_tid->load());
                    if (!probe_blocks([&] { return probe_done->load(); }, task)) {
                        probe.join();
                        REQUIRE(probe_state->load() == VIP_STATE_CONNECTED);
                        kill(vic.pid, SIGCONT);
                        continue;
                    }
                    // Stopped with the lock held: the probe waits for it.
                    caught = true;
                    double t0 = vt::now_ms();
                    vic.kill_now();
                    bool returned = vt::wait_for([&] { return probe_done->load(); }, 3000);
                    if (!returned) {
                        probe.detach(); // wedged: nothing more can be learnt here
                        FAIL("a holder killed with the lock held wedged another thread's "
                             "VipQueryVi");
                    }
                    probe.join();
                    printf("[measure] the waiting call returned %.2f ms after the lock holder was "
                           "killed\n",
                           vt::now_ms() - t0);
                    CHECK(probe_state->load() == VIP_STATE_ERROR);
                }
                INFO("stopped the victim " << attempts << " times");
                REQUIRE(caught);
                CHECK(WIFSIGNALED(vic.wait(10)));
                CHECK(c.state() == VIP_STATE_ERROR);
                check_broken(c, &*srv, ended_before);
                check_victim_stream(&*srv, &*k, id, true);
                INFO("sink: " << srv->first_error);
                CHECK(srv->bad.load() == 0);
                CHECK(c.worst_ms < 1000);
                c.close();
                srv->next_seq[0] = 0;
            }
            srv->stop = 1;
            return 0;
        },
        90);
    INFO("round " << k->iteration.load() << ", step " << step_name(k->step.load()) << "\n"
                  << k->board.all());
    REQUIRE(status == 0);
}

TEST_CASE("holder killed with the lock held, found by another child: every holder sees Error "
          "and CATASTROPHIC, nothing leaks",
          "[process][shareable][kill]") {
    vt::Shared<KillCtl> k;
    int status = vt::run_checked(
        [&] {
            vt::Shared<vt::ServerStats> srv;
            srv->max_conns = 1;
            vt::ServerOpts so;
            so.echo = false;
            std::string disc = vt::unique_disc("kb");
            vt::Child server(vt::spawn_server(&*srv, disc, so));
            // The notification thread and its descriptors stay for the life of the
            // process once an error callback was set: start it before the snapshot.
            {
                vt::Nic dummy(vt::device());
                Errors none;
                REQUIRE(VipErrorCallback(dummy.nic, &none, Errors::handler) == VIP_SUCCESS);
            }
            auto fds0 = vt::fds_of(); // nothing of the connection's yet
            Errors errors;
            Conn c;
            INFO(c.v.err);
            REQUIRE(c.open(disc, &errors));
            parent_liveness(c, &*srv);
            // The bystander: a holder that probes the lock when told to.
            vt::Child bystander(vt::spawn_child([&] {
                int served = 0;
                double end = vt::now_ms() + 30000;
                while (vt::now_ms() < end) {
                    int o = k->order.load();
                    if (o == served) {
                        vt::sleep_ms(0.05);
                        continue;
                    }
                    served = o;
                    if (o < 0) { // leave
                        k->destroy_rc = VipDestroyVi(c.v.vi);
                        k->answered = o;
                        return 0;
                    }
                    VIP_VI_STATE s = VIP_STATE_IDLE;
                    k->probe_rc = VipQueryVi(c.v.vi, &s, nullptr, nullptr, nullptr);
                    k->probe_state = s;
                    k->answered = o;
                }
                return 1;
            }));
            int id = 1;
            vt::Child vic(vt::spawn_child([&] { return victim(c.v, &*k, &*srv, id); }));
            REQUIRE(vt::wait_for([&] { return k->started[id].load() == 1; }, 5000));
            std::mt19937 rng(4242);
            bool caught = false;
            int attempts = 0;
            for (; attempts < 500 && !caught; ++attempts) {
                vt::sleep_ms(std::uniform_real_distribution<double>(0, 0.5)(rng));
                kill(vic.pid, SIGSTOP);
                REQUIRE(stopped(vic.pid));
                int order = attempts + 1;
                k->order = order;
                std::string task = vt::fmt("/proc/%d", int(bystander.pid));
                if (!probe_blocks([&] { return k->answered.load() == order; }, task)) {
                    REQUIRE(k->probe_state.load() == VIP_STATE_CONNECTED);
                    kill(vic.pid, SIGCONT);
                    continue;
                }
                caught = true;
                vic.kill_now();
                REQUIRE(vt::wait_for([&] { return k->answered.load() == order; }, 3000));
            }
            INFO("stopped the victim " << attempts << " times");
            REQUIRE(caught);
            CHECK(WIFSIGNALED(vic.wait(10)));
            // The bystander found the dead holder's lock; the parent never touched it.
            CHECK(k->probe_rc.load() == VIP_SUCCESS);
            CHECK(k->probe_state.load() == VIP_STATE_ERROR);
            CHECK(c.state() == VIP_STATE_ERROR);
            check_broken(c, &*srv, 0);
            check_victim_stream(&*srv, &*k, id, true);
            CHECK(srv->bad.load() == 0);
            k->order = -1;
            REQUIRE(vt::wait_for([&] { return k->answered.load() == -1; }, 5000));
            CHECK(k->destroy_rc.load() == VIP_SUCCESS);
            CHECK(bystander.wait(10) == 0);
            c.close();
            // The parent holds nothing of the broken connection any more.
            std::string extra;
            for (auto &[fd, info] : vt::fds_of()) {
                auto it = fds0.find(fd);
                if (it == fds0.end() || it->second.link != info.link)
                    extra += vt::fmt("%d -> %s\n", fd, info.link.c_str());
            }
            std::string maps;
            for (const std::string &m : vt::maps_of())
                if (m.find("memfd:vipl") != std::string::npos) maps += m + "\n";
            INFO("descriptors left after closing everything:\n" << extra);
            CHECK(extra.empty());
            INFO("mappings left after closing everything:\n" << maps);
            CHECK(maps.empty());
            return 0;
        },
        60);
    INFO(k->board.all());
    REQUIRE(status == 0);
}
