// Shareable VIs used by several processes at once: a VI created and
// connected before fork() is used by the parent and N children together;
// every message must reach the peer once and in order per sender, every
// completion must be taken by exactly one process, with or without a
// shareable CQ.  VipDestroyVi in a holder that is not the last one only
// drops that holder's reference.
#include "process_util.h"

#include <sys/wait.h>
#include <unistd.h>

namespace {

struct Result {
    vt::Board board;
    std::atomic<int> destroy_rc[vt::kProcs];
    std::atomic<int> query_after_destroy[vt::kProcs];
};

// Parent (process 0) and `children` children exchange `per_proc` messages
// each over one shareable VI, then the children leave and the parent, last
// holder, closes the connection.
void run_traffic(int children, int per_proc, bool use_cq, bool accepting = false) {
    const int nproc = children + 1;
    REQUIRE(nproc <= vt::kProcs);
    REQUIRE(per_proc <= vt::Traffic::kMaxPer);
    vt::Shared<vt::ServerStats> srv;
    vt::Shared<vt::Traffic> t;
    vt::Shared<Result> res;
    t->nproc = nproc;
    t->per_proc = per_proc;
    t->window = 200; // the server keeps 256 receives posted
    srv->max_conns = 1;
    std::string disc = vt::unique_disc("tr");
    vt::ServerOpts so;
    so.client = accepting;
    vt::Child server(vt::spawn_server(&*srv, disc, so));

    vt::ShVi v;
    INFO(v.err);
    REQUIRE(v.open(use_cq));
    REQUIRE(v.post_recvs());
    if (accepting)
        REQUIRE(v.accept(disc));
    else
        REQUIRE(v.connect(disc));

    std::vector<pid_t> kids;
    for (int c = 1; c <= children; ++c) {
        pid_t pid = vt::spawn_child([&, c] {
            std::string e = vt::traffic(v, &*t, c, use_cq, 30000);
            if (!e.empty()) {
                res->board.fail(c, vt::fmt("child %d: %s", c, e.c_str()));
                return 1;
            }
            // Not the last holder: only this process's reference goes.
            res->destroy_rc[c] = VipDestroyVi(v.vi);
            res->query_after_destroy[c] = VipQueryVi(v.vi, nullptr, nullptr, nullptr, nullptr);
            return 0;
        });
        kids.push_back(pid);
    }
    std::string e = vt::traffic(v, &*t, 0, use_cq, 30000);
    if (!e.empty()) res->board.fail(0, "parent: " + e);
    for (size_t i = 0; i < kids.size(); ++i) {
        int status = vt::wait_child(kids[i], 30);
        INFO("child " << i + 1 << ": " << vt::status_text(status) << "\n" << res->board.all());
        CHECK(status == 0);
    }
    INFO(res->board.all());
    REQUIRE_FALSE(res->board.any());

    // Exactly once: every send completion and every echo taken by one process.
    int64_t total = int64_t(nproc) * per_proc;
    int dup_send = 0, lost_send = 0, dup_recv = 0, lost_recv = 0;
    for (int p = 0; p < nproc; ++p)
        for (int s = 0; s < per_proc; ++s) {
            uint32_t ns = t->send_taken[p * vt::Traffic::kMaxPer + s].load();
            uint32_t nr = t->recv_taken[p * vt::Traffic::kMaxPer + s].load();
            dup_send += ns > 1;
            lost_send += ns == 0;
            dup_recv += nr > 1;
            lost_recv += nr == 0;
        }
    CHECK(dup_send == 0);
    CHECK(lost_send == 0);
    CHECK(dup_recv == 0);
    CHECK(lost_recv == 0);
    CHECK(t->sends_done.load() == total);
    CHECK(t->echoes.load() == total);
    int64_t by_send = 0, by_recv = 0, takers = 0;
    std::string split;
    for (int p = 0; p < nproc; ++p) {
        by_send += t->by_proc_send[p].load();
        by_recv += t->by_proc_recv[p].load();
        takers += (t->by_proc_send[p].load() + t->by_proc_recv[p].load()) > 0;
        split += vt::fmt(" p%d:%u/%u", p, t->by_proc_send[p].load(), t->by_proc_recv[p].load());
        if (use_cq)
            CHECK(t->cq_entries[p].load() == t->by_proc_send[p].load() + t->by_proc_recv[p].load());
    }
    printf("[measure] %s: completions taken per process (sends/receives):%s\n",
           use_cq ? "shareable CQ" : "VI queues", split.c_str());
    CHECK(by_send == total);
    CHECK(by_recv == total);

    // The peer: everything once, in order per sender, nothing malformed.
    INFO("server: " << srv->first_error);
    CHECK(srv->received.load() == uint64_t(total));
    CHECK(srv->bad.load() == 0);
    for (int p = 0; p < nproc; ++p) CHECK(srv->next_seq[p].load() == uint32_t(per_proc));

    // The children left while the parent held the VI.
    for (int c = 1; c <= children; ++c) {
        INFO("child " << c);
        CHECK(res->destroy_rc[c].load() == VIP_SUCCESS);
        CHECK(res->query_after_destroy[c].load() == VIP_INVALID_PARAMETER);
    }
    CHECK(srv->ended.load() == 0);

    // The parent is the last holder: the usual state rules apply to it.
    CHECK(VipDestroyVi(v.vi) == VIP_INVALID_STATE);
    CHECK(vt::vi_state(v.vi) == VIP_STATE_CONNECTED);
    CHECK(vt::round_trip(v, 0, 0, per_proc) == "");
    double t0 = vt::now_ms();
    INFO(v.err);
    REQUIRE(v.close_last());
    CHECK(vt::wait_for([&] { return srv->ended.load() == 1; }, 2000));
    CHECK(srv->end_code[0].load() == VIP_ERROR_CONN_LOST);
    if (srv->ended.load())
        printf("[measure] peer saw the end %.1f ms after the last holder left\n",
               srv->ended_ms[0].load() - t0);
    CHECK(vt::wait_child(server.pid, 10) == 0);
    server.pid = -1;
    if (v.cq) CHECK(VipDestroyCQ(v.cq) == VIP_SUCCESS);
    CHECK(VipCloseNic(v.nic) == VIP_SUCCESS);
}

} // namespace

TEST_CASE("shareable VI: parent and 3 children send, receive and take completions concurrently",
          "[process][shareable]") {
    int status = vt::run_checked(
        [] {
            run_traffic(3, 1500, false);
            return 0;
        },
        90);
    REQUIRE(status == 0);
}

TEST_CASE("shareable VI: parent and 5 children share the VI and a shareable CQ (VipCQWait)",
          "[process][shareable]") {
    int status = vt::run_checked(
        [] {
            run_traffic(5, 800, true);
            return 0;
        },
        90);
    REQUIRE(status == 0);
}

TEST_CASE("shareable VI: accepted by a server, it is shared with the workers the server forks",
          "[process][shareable]") {
    int status = vt::run_checked(
        [] {
            run_traffic(3, 1000, false, true);
            return 0;
        },
        90);
    REQUIRE(status == 0);
}
