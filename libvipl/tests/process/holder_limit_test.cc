// At most 64 processes hold a shareable VI at once.  A child forked beyond
// that holds nothing (its calls are refused with VIP_INVALID_PARAMETER)
// while the holders go on working; a holder that has gone frees its place
// for a child forked later.
#include "process_util.h"

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr int kLimit = 64; // holders, the parent included
constexpr int kMaxKids = 90;

struct LimitCtl {
    vt::Board board;
    std::atomic<int> ready[kMaxKids + 1];
    std::atomic<int> want[kMaxKids + 1]; // turns child i is asked to take
    std::atomic<int> go[kMaxKids + 1];   // child i is asked to leave
    std::atomic<int> query_rc[kMaxKids + 1];
    std::atomic<int> post_rc[kMaxKids + 1];
    std::atomic<int> done_rc[kMaxKids + 1];
    std::atomic<int> destroy_rc[kMaxKids + 1];
    std::atomic<int> acted[kMaxKids + 1];
    std::atomic<int> bell[kMaxKids + 1]; // moves when want or go of child i does
    std::atomic<int> leave_how{0};       // 0 exit, 1 VipDestroyVi then exit
    LimitCtl() {
        for (int i = 0; i <= kMaxKids; ++i)
            query_rc[i] = post_rc[i] = done_rc[i] = destroy_rc[i] = -1;
    }
};

// Sends message (sender, seq) and takes its completion, alone on the VI.
VIP_RETURN send_one(vt::ShVi &v, int sender, uint32_t seq, VIP_RETURN *post_rc) {
    int slot = static_cast<int>(seq % vt::kSlots);
    int proc = sender % vt::kProcs;
    vt::make_msg(v.send_buf(proc, slot), sender, seq);
    vt::set_desc(v.send_desc(proc, slot), v.send_buf(proc, slot), vt::kMsgBytes, v.mh);
    *post_rc = VipPostSend(v.vi, v.send_desc(proc, slot), v.mh);
    if (*post_rc != VIP_SUCCESS) return *post_rc;
    VIP_DESCRIPTOR *d = nullptr;
    double end = vt::now_ms() + 3000;
    for (;;) {
        VIP_RETURN rc = VipSendDone(v.vi, &d);
        if (rc != VIP_NOT_DONE)
            return rc == VIP_SUCCESS && d != v.send_desc(proc, slot) ? VIP_DESCRIPTOR_ERROR : rc;
        if (vt::now_ms() > end) return VIP_TIMEOUT;
        sched_yield();
    }
}

// A child: says it runs, then takes the turns it is asked to (query and
// send message seq 0 on the first, 1 on the second), or leaves.
int kid(vt::ShVi &v, LimitCtl *c, int i) {
    c->ready[i] = 1;
    uint32_t seq = 0;
    double end = vt::now_ms() + 60000;
    while (vt::now_ms() < end) {
        int rung = c->bell[i].load();
        if (c->go[i].load()) {
            if (c->leave_how.load() == 1) c->destroy_rc[i] = VipDestroyVi(v.vi);
            return 0;
        }
        if (c->want[i].load() <= int(seq)) {
            // Asleep till its turn: 64 children polling would load two CPUs, and an exit
            // then waited seconds in the kernel for CPU time (a leave timed out).
            vt::wait_word(c->bell[i], rung, 100);
            continue;
        }
        VIP_VI_STATE s;
        c->query_rc[i] = VipQueryVi(v.vi, &s, nullptr, nullptr, nullptr);
        VIP_RETURN post = VIP_SUCCESS;
        VIP_RETURN done = send_one(v, i, seq, &post);
        c->post_rc[i] = post;
        c->done_rc[i] = done;
        if (c->query_rc[i] != VIP_SUCCESS) c->destroy_rc[i] = VipDestroyVi(v.vi);
        ++seq;
        c->acted[i] = int(seq);
    }
    return 1;
}

// How long a child may take to start or to act: sized for the slowest build the suite
// runs (ASan, a loaded machine), not the common case (milliseconds).
constexpr int kChildStepMs = 30000;

struct Fleet {
    vt::ShVi &v;
    LimitCtl *c;
    std::vector<pid_t> pids = std::vector<pid_t>(kMaxKids + 1, -1);
    ~Fleet() {
        for (pid_t p : pids)
            if (p > 0) kill(p, SIGKILL);
        for (pid_t p : pids)
            if (p > 0) waitpid(p, nullptr, 0);
    }
    // Forks child i and waits until it runs (its fork handler has run).
    void fork_kid(int i) {
        pids[i] = vt::spawn_child([&, i] { return kid(v, c, i); });
        REQUIRE(vt::wait_for([&] { return c->ready[i].load() == 1; }, kChildStepMs));
    }
    void ring(int i) {
        c->bell[i]++;
        vt::wake_word(c->bell[i]);
    }
    // Child i's turn number `round` (1-based): returns when it acted.
    void act(int i, int round) {
        c->want[i] = round;
        ring(i);
        REQUIRE(vt::wait_for([&] { return c->acted[i].load() >= round; }, kChildStepMs));
    }
    int leave(int i, int how) {
        c->leave_how = how;
        c->go[i] = 1;
        ring(i);
        int s = vt::wait_child(pids[i], 10);
        pids[i] = -1;
        return s;
    }
};

} // namespace

TEST_CASE("holder limit: children beyond 64 holders are refused, the holders keep working",
          "[process][shareable][limit]") {
    int status = vt::run_checked(
        [] {
            constexpr int kKids = 70;
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<LimitCtl> c;
            srv->max_conns = 1;
            vt::ServerOpts so;
            so.echo = false;
            std::string disc = vt::unique_disc("hl");
            vt::Child server(vt::spawn_server(&*srv, disc, so));
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open());
            REQUIRE(v.connect(disc));
            Fleet f{v, &*c};
            for (int i = 1; i <= kKids; ++i) f.fork_kid(i);
            for (int i = 1; i <= kKids; ++i) f.act(i, 1);
            std::string wrong;
            for (int i = 1; i <= kKids; ++i) {
                bool holder = i < kLimit;
                int want = holder ? VIP_SUCCESS : VIP_INVALID_PARAMETER;
                int q = c->query_rc[i].load(), p = c->post_rc[i].load();
                int last = holder ? c->done_rc[i].load() : c->destroy_rc[i].load();
                if (q != want || p != want || last != want)
                    wrong +=
                        vt::fmt("child %d (process %d): query %d, post %d, %s %d; expected %d\n", i,
                                i + 1, q, p, holder ? "completion" : "destroy", last, want);
            }
            INFO("children that were not what their place makes them:\n" << wrong);
            CHECK(wrong.empty());
            // The refused ones go; the holders still work, and so does the parent.
            for (int i = kLimit; i <= kKids; ++i) CHECK(f.leave(i, 1) == 0);
            std::string failed;
            for (int i = 1; i < kLimit; ++i) {
                f.act(i, 2);
                if (c->done_rc[i].load() != VIP_SUCCESS)
                    failed += vt::fmt(" %d (%d)", i, c->done_rc[i].load());
            }
            INFO("holders whose second message failed:" << failed);
            CHECK(failed.empty());
            VIP_RETURN post;
            CHECK(send_one(v, 0, 0, &post) == VIP_SUCCESS);
            CHECK(vt::wait_for(
                [&] {
                    for (int i = 1; i < kLimit; ++i)
                        if (srv->next_seq[i].load() != 2) return false;
                    return srv->next_seq[0].load() == 1;
                },
                3000));
            for (int i = kLimit; i <= kKids; ++i) CHECK(srv->next_seq[i].load() == 0);
            INFO("sink: " << srv->first_error);
            CHECK(srv->bad.load() == 0);
            CHECK(srv->ended.load() == 0);
            // The holders leave; the parent, last, closes.
            for (int i = 1; i < kLimit; ++i) {
                CHECK(f.leave(i, 1) == 0);
                CHECK(c->destroy_rc[i].load() == VIP_SUCCESS);
            }
            REQUIRE(v.close_last());
            CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, 2000));
            return 0;
        },
        90);
    REQUIRE(status == 0);
}

TEST_CASE("holder limit: a holder that is gone frees its place for a later child",
          "[process][shareable][limit]") {
    int how = GENERATE(0, 1, 2);
    const char *names[] = {"holders exit", "holders call VipDestroyVi, then exit",
                           "holders are killed"};
    INFO(names[how]);
    int status = vt::run_checked(
        [&] {
            constexpr int kGone = 10;
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<LimitCtl> c;
            srv->max_conns = 1;
            vt::ServerOpts so;
            so.echo = false;
            std::string disc = vt::unique_disc("hf");
            vt::Child server(vt::spawn_server(&*srv, disc, so));
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open());
            REQUIRE(v.connect(disc));
            Fleet f{v, &*c};
            // Full: the parent and 63 children; one more is refused.
            for (int i = 1; i <= kLimit; ++i) f.fork_kid(i);
            f.act(kLimit, 1);
            REQUIRE(c->query_rc[kLimit].load() == VIP_INVALID_PARAMETER);
            CHECK(f.leave(kLimit, 0) == 0);
            // Ten holders go.
            for (int i = 1; i <= kGone; ++i) {
                if (how == 2) {
                    kill(f.pids[i], SIGKILL);
                    CHECK(WIFSIGNALED(vt::wait_child(f.pids[i], 10)));
                    f.pids[i] = -1;
                } else {
                    CHECK(f.leave(i, how) == 0);
                    if (how == 1) CHECK(c->destroy_rc[i].load() == VIP_SUCCESS);
                }
            }
            // Ten new children: as many places as went.
            for (int i = kLimit + 1; i <= kLimit + kGone; ++i) f.fork_kid(i);
            std::string refused;
            for (int i = kLimit + 1; i <= kLimit + kGone; ++i) {
                f.act(i, 1);
                if (c->query_rc[i].load() != VIP_SUCCESS || c->done_rc[i].load() != VIP_SUCCESS)
                    refused += vt::fmt(" %d (query %d, completion %d)", i, c->query_rc[i].load(),
                                       c->done_rc[i].load());
            }
            INFO("new children that are no holders:" << refused);
            CHECK(refused.empty());
            // The remaining holders are unaffected.
            std::string failed;
            for (int i = kGone + 1; i < kLimit; ++i) {
                f.act(i, 1);
                if (c->done_rc[i].load() != VIP_SUCCESS) failed += vt::fmt(" %d", i);
            }
            INFO("holders whose message failed:" << failed);
            CHECK(failed.empty());
            // Everything that was said to be sent arrived.
            CHECK(vt::wait_for(
                [&] {
                    for (int i = kGone + 1; i <= kLimit + kGone; ++i)
                        if (i != kLimit && c->done_rc[i].load() == VIP_SUCCESS &&
                            srv->next_seq[i].load() != 1)
                            return false;
                    return true;
                },
                3000));
            INFO("sink: " << srv->first_error);
            CHECK(srv->bad.load() == 0);
            CHECK(srv->ended.load() == 0);
            return 0;
        },
        90);
    REQUIRE(status == 0);
}
