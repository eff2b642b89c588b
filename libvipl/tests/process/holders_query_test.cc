// VipQueryViHolders: how many live processes hold a VI.  A child counts from fork() on,
// and stops counting when it destroys its VI, exits or is killed.
#include "process_util.h"

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

namespace {

VIP_ULONG holders(VIP_VI_HANDLE vi) {
    VIP_ULONG n = 0;
    REQUIRE(VipQueryViHolders(vi, &n) == VIP_SUCCESS);
    return n;
}

struct Ctl {
    std::atomic<int> phase{0};
    std::atomic<int> seen[4]; // [2]: the first child may go
};

} // namespace

TEST_CASE("VipQueryViHolders counts the live holders of a VI", "[process][shareable]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<Ctl> c;
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("hq");
            vt::Child server(vt::spawn_server(&*srv, disc));

            // A private VI has one holder, the caller.
            {
                vt::Nic n(vt::device());
                VIP_VI_ATTRIBUTES a = vt::vi_attrs(n);
                VIP_VI_HANDLE priv;
                REQUIRE(VipCreateVi(n.nic, &a, nullptr, nullptr, &priv) == VIP_SUCCESS);
                CHECK(holders(priv) == 1);
                CHECK(VipDestroyVi(priv) == VIP_SUCCESS);
            }

            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open());
            CHECK(holders(v.vi) == 1);
            REQUIRE(v.post_recvs());
            REQUIRE(v.connect(disc));
            CHECK(holders(v.vi) == 1);

            // A child counts at once, before it ran: the parent may leave right away.
            pid_t stays = vt::spawn_child([&] {
                c->seen[0] = static_cast<int>(holders(v.vi));
                vt::wait_for([&] { return c->seen[2].load() == 1; }, 20000);
                return 0;
            });
            CHECK(holders(v.vi) == 2);
            pid_t leaves = vt::spawn_child([&] {
                vt::wait_for([&] { return c->phase.load() >= 2; }, 20000);
                c->seen[1] = VipDestroyVi(v.vi);
                vt::wait_for([&] { return c->phase.load() >= 3; }, 20000);
                return 0;
            });
            pid_t killed = vt::spawn_child([&] {
                pause();
                return 0;
            });
            CHECK(holders(v.vi) == 4);
            // The first child saw itself and its parent, and maybe its younger siblings.
            CHECK(vt::wait_for([&] { return c->seen[0].load() >= 2; }, 5000));
            CHECK(c->seen[0].load() <= 4);

            // Destroyed in a holder: that one no longer counts, though it lives on.
            c->phase = 2;
            CHECK(vt::wait_for([&] { return holders(v.vi) == 3; }, 5000));
            CHECK(c->seen[1].load() == VIP_SUCCESS);
            // Killed: gone at once; exited: gone once it is.
            kill(killed, SIGKILL);
            CHECK(vt::wait_for([&] { return holders(v.vi) == 2; }, 5000));
            c->phase = 3;
            CHECK(vt::wait_child(leaves, 10) == 0);
            CHECK(holders(v.vi) == 2);
            c->seen[2] = 1;
            CHECK(vt::wait_child(stays, 10) == 0);
            CHECK(holders(v.vi) == 1);
            vt::wait_child(killed, 10);

            VIP_ULONG n;
            CHECK(VipQueryViHolders(v.vi, nullptr) == VIP_INVALID_PARAMETER);
            CHECK(VipQueryViHolders(nullptr, &n) == VIP_INVALID_PARAMETER);
            for (VIP_PVOID h : vt::garbage_handles(50))
                CHECK(VipQueryViHolders(h, &n) == VIP_INVALID_PARAMETER);
            VIP_VI_HANDLE gone = v.vi;
            REQUIRE(v.close_last());
            CHECK(VipQueryViHolders(gone, &n) == VIP_INVALID_PARAMETER);
            srv->stop = 1;
            return 0;
        },
        60);
    REQUIRE(status == 0);
}
