// Blocking on a shareable VI from a child: VipRecvWait, VipSendWait, VipCQWait and
// VipWaitViEvent sleep in the child as in the parent (even after the parent
// slept on the same VI and CQ before fork), and the wait descriptors the
// parent got keep working in the child (vipl_ext.h: "inherited and keeps
// working"), as do the child's own; and they keep working in the parent
// after the child dropped its references to the VI and the CQ.
//
// Runs in a fresh process with VIPL_SPIN_US=0 so that every wait really sleeps.
#include "process_util.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

namespace {

// Nothing is pending, so the wait must sleep its whole timeout and say so.
std::string sleeps_until_timeout(VIP_VI_HANDLE vi, bool recv) {
    VIP_DESCRIPTOR *d = nullptr;
    double t0 = vt::now_ms();
    VIP_RETURN rc = recv ? VipRecvWait(vi, 40, &d) : VipSendWait(vi, 40, &d);
    double took = vt::now_ms() - t0;
    if (rc != VIP_TIMEOUT)
        return vt::fmt("%s with nothing pending: %s", recv ? "VipRecvWait" : "VipSendWait",
                       VipReturnString(rc));
    if (took < 30) return vt::fmt("timed out after %.1f ms of 40", took);
    return "";
}

std::string cq_sleeps_until_timeout(VIP_CQ_HANDLE cq) {
    VIP_VI_HANDLE h;
    VIP_BOOLEAN r;
    double t0 = vt::now_ms();
    VIP_RETURN rc = VipCQWait(cq, 40, &h, &r);
    double took = vt::now_ms() - t0;
    if (rc != VIP_TIMEOUT)
        return vt::fmt("VipCQWait with nothing pending: %s", VipReturnString(rc));
    if (took < 30) return vt::fmt("VipCQWait timed out after %.1f ms of 40", took);
    return "";
}

// A round trip through the CQ, sleeping in VipCQWait.
std::string cq_round_trip(vt::ShVi &v, int proc, uint32_t sender, uint32_t seq) {
    int slot = static_cast<int>(seq % vt::kSlots);
    VIP_DESCRIPTOR *sd = v.send_desc(proc, slot);
    vt::make_msg(v.send_buf(proc, slot), sender, seq);
    vt::set_desc(sd, v.send_buf(proc, slot), vt::kMsgBytes, v.mh);
    VIP_RETURN rc = VipPostSend(v.vi, sd, v.mh);
    if (rc != VIP_SUCCESS) return vt::fmt("VipPostSend: %s", VipReturnString(rc));
    bool sent = false, echoed = false;
    while (!sent || !echoed) {
        VIP_VI_HANDLE h = nullptr;
        VIP_BOOLEAN r = VIP_FALSE;
        rc = VipCQWait(v.cq, 3000, &h, &r);
        if (rc != VIP_SUCCESS) return vt::fmt("VipCQWait: %s", VipReturnString(rc));
        if (h != v.vi) return "VipCQWait named another VI";
        VIP_DESCRIPTOR *d = nullptr;
        rc = r ? VipRecvDone(v.vi, &d) : VipSendDone(v.vi, &d);
        if (rc != VIP_SUCCESS) return vt::fmt("Done after a CQ entry: %s", VipReturnString(rc));
        if (!r) {
            if (d != sd) return "another send descriptor completed";
            sent = true;
            continue;
        }
        int idx = v.recv_index(d);
        uint32_t s2, q2;
        std::string why;
        if (idx < 0 || idx >= vt::kRecvs ||
            !vt::parse_msg(v.recv_buf(idx), d->CS.Length, &s2, &q2, &why))
            return "bad echo " + why;
        if (s2 != sender || q2 != seq)
            return vt::fmt("echo of %u/%u, expected %u/%u", s2, q2, sender, seq);
        vt::set_desc(d, v.recv_buf(idx), vt::kMsgBytes, v.mh);
        if (VipPostRecv(v.vi, d, v.mh) != VIP_SUCCESS) return "VipPostRecv failed";
        echoed = true;
    }
    return "";
}

// The same, sleeping in VipWaitViEvent and taking with Done.
std::string event_sleeps_until_timeout(VIP_VI_HANDLE vi) {
    double t0 = vt::now_ms();
    VIP_RETURN rc = VipWaitViEvent(vi, VIP_ARM_ANY, 40);
    double took = vt::now_ms() - t0;
    if (rc != VIP_TIMEOUT)
        return vt::fmt("VipWaitViEvent with nothing pending: %s", VipReturnString(rc));
    if (took < 30) return vt::fmt("VipWaitViEvent timed out after %.1f ms of 40", took);
    return "";
}

std::string event_round_trip(vt::ShVi &v, int proc, uint32_t sender, uint32_t seq) {
    int slot = static_cast<int>(seq % vt::kSlots);
    VIP_DESCRIPTOR *sd = v.send_desc(proc, slot);
    vt::make_msg(v.send_buf(proc, slot), sender, seq);
    vt::set_desc(sd, v.send_buf(proc, slot), vt::kMsgBytes, v.mh);
    if (VipPostSend(v.vi, sd, v.mh) != VIP_SUCCESS) return "VipPostSend failed";
    bool sent = false, echoed = false;
    double end = vt::now_ms() + 3000;
    while (!sent || !echoed) {
        if (vt::now_ms() > end)
            return vt::fmt("nothing after 3 s (sent %d echoed %d)", sent, echoed);
        VIP_RETURN rc = VipWaitViEvent(v.vi, sent ? VIP_ARM_ARRIVALS : VIP_ARM_ANY, 3000);
        if (rc != VIP_SUCCESS && rc != VIP_TIMEOUT)
            return vt::fmt("VipWaitViEvent: %s", VipReturnString(rc));
        VIP_DESCRIPTOR *d;
        if (!sent && VipSendDone(v.vi, &d) == VIP_SUCCESS) {
            if (d != sd) return "another send descriptor completed";
            sent = true;
        }
        if (echoed || VipRecvDone(v.vi, &d) != VIP_SUCCESS) continue;
        int idx = v.recv_index(d);
        uint32_t s2, q2;
        std::string why;
        if (idx < 0 || idx >= vt::kRecvs ||
            !vt::parse_msg(v.recv_buf(idx), d->CS.Length, &s2, &q2, &why) || s2 != sender ||
            q2 != seq)
            return "wrong echo " + why;
        vt::set_desc(d, v.recv_buf(idx), vt::kMsgBytes, v.mh);
        if (VipPostRecv(v.vi, d, v.mh) != VIP_SUCCESS) return "VipPostRecv failed";
        echoed = true;
    }
    return "";
}

// The fd must be a live descriptor that poll reports readable once a
// message's echo is back (after Done said VIP_NOT_DONE, which re-arms it).
std::string fd_wakes(vt::ShVi &v, int fd, bool cq, int proc, uint32_t sender, uint32_t seq) {
    if (fcntl(fd, F_GETFD) < 0) return vt::fmt("wait fd %d is not open here", fd);
    VIP_DESCRIPTOR *d;
    VIP_VI_HANDLE h;
    VIP_BOOLEAN r;
    if (cq) {
        if (VipCQDone(v.cq, &h, &r) != VIP_NOT_DONE) return "CQ not empty before the test";
    } else {
        if (VipRecvDone(v.vi, &d) != VIP_NOT_DONE) return "receive queue not empty before";
        if (VipSendDone(v.vi, &d) != VIP_NOT_DONE) return "send queue not empty before";
    }
    int slot = static_cast<int>(seq % vt::kSlots);
    VIP_DESCRIPTOR *sd = v.send_desc(proc, slot);
    vt::make_msg(v.send_buf(proc, slot), sender, seq);
    vt::set_desc(sd, v.send_buf(proc, slot), vt::kMsgBytes, v.mh);
    if (VipPostSend(v.vi, sd, v.mh) != VIP_SUCCESS) return "VipPostSend failed";
    bool sent = false, echoed = false;
    double end = vt::now_ms() + 3000;
    while (!sent || !echoed) {
        int left = static_cast<int>(end - vt::now_ms());
        if (left <= 0)
            return vt::fmt("wait fd %d: nothing after 3 s (sent %d echoed %d)", fd, sent, echoed);
        pollfd p{fd, POLLIN, 0};
        int n = poll(&p, 1, left);
        if (n < 0) return vt::fmt("poll on wait fd %d failed", fd);
        if (n == 0) continue;
        if (p.revents & POLLNVAL) return vt::fmt("wait fd %d is not valid", fd);
        // Take everything there is; the next NOT_DONE re-arms the fd.
        for (;;) {
            VIP_RETURN rc;
            bool recv;
            if (cq) {
                rc = VipCQDone(v.cq, &h, &r);
                if (rc == VIP_NOT_DONE) break;
                if (rc != VIP_SUCCESS) return "VipCQDone failed";
                recv = r;
                rc = recv ? VipRecvDone(v.vi, &d) : VipSendDone(v.vi, &d);
                if (rc != VIP_SUCCESS) return "Done after a CQ entry failed";
            } else {
                recv = false;
                rc = VipSendDone(v.vi, &d);
                if (rc == VIP_NOT_DONE) {
                    recv = true;
                    rc = VipRecvDone(v.vi, &d);
                }
                if (rc == VIP_NOT_DONE) break;
                if (rc != VIP_SUCCESS) return "Done failed";
            }
            if (!recv) {
                sent = true;
                continue;
            }
            int idx = v.recv_index(d);
            uint32_t s2, q2;
            std::string why;
            if (idx < 0 || idx >= vt::kRecvs ||
                !vt::parse_msg(v.recv_buf(idx), d->CS.Length, &s2, &q2, &why) || s2 != sender ||
                q2 != seq)
                return "wrong echo " + why;
            vt::set_desc(d, v.recv_buf(idx), vt::kMsgBytes, v.mh);
            if (VipPostRecv(v.vi, d, v.mh) != VIP_SUCCESS) return "VipPostRecv failed";
            echoed = true;
        }
    }
    return "";
}

} // namespace

TEST_CASE("process child: waits in a fork child", "[.]") {
    REQUIRE(vt::config_value("SPIN_US") == "0");
    vt::Shared<vt::ServerStats> s1, s2;
    vt::Shared<vt::Board> board;
    s1->max_conns = 1;
    s2->max_conns = 1;
    std::string d1 = vt::unique_disc("w1"), d2 = vt::unique_disc("w2");
    vt::Child srv1(vt::spawn_server(&*s1, d1)), srv2(vt::spawn_server(&*s2, d2));
    vt::ShVi v, w; // v: its own queues; w: a shareable CQ
    INFO(v.err << w.err);
    REQUIRE(v.open(false));
    REQUIRE(w.open(true));
    REQUIRE(v.post_recvs());
    REQUIRE(w.post_recvs());
    REQUIRE(v.connect(d1));
    REQUIRE(w.connect(d2));
    // The parent sleeps on everything first, and gets the wait fds.
    CHECK(sleeps_until_timeout(v.vi, true) == "");
    CHECK(sleeps_until_timeout(v.vi, false) == "");
    CHECK(cq_sleeps_until_timeout(w.cq) == "");
    CHECK(event_sleeps_until_timeout(v.vi) == "");
    CHECK(event_round_trip(v, 0, 2, 0) == ""); // sender 2: the parent's own sequence
    CHECK(vt::round_trip(v, 0, 0, 0, 3000, true) == "");
    CHECK(cq_round_trip(w, 0, 0, 0) == "");
    int vfd = -1, cfd = -1;
    REQUIRE(VipGetViWaitFd(v.vi, &vfd) == VIP_SUCCESS);
    REQUIRE(VipGetCQWaitFd(w.cq, &cfd) == VIP_SUCCESS);
    CHECK(fd_wakes(v, vfd, false, 0, 0, 1) == "");
    CHECK(fd_wakes(w, cfd, true, 0, 0, 1) == "");

    int cs = vt::run_child(
        [&] {
            int n = 0;
            auto note = [&](const std::string &what, const std::string &e) {
                if (!e.empty()) board->fail(n++, "child, " + what + ": " + e);
            };
            note("VipRecvWait", sleeps_until_timeout(v.vi, true));
            note("VipSendWait", sleeps_until_timeout(v.vi, false));
            note("VipCQWait", cq_sleeps_until_timeout(w.cq));
            note("VipWaitViEvent", event_sleeps_until_timeout(v.vi));
            for (uint32_t i = 0; i < 20 && n == 0; ++i)
                note(vt::fmt("round trip %u sleeping in VipWaitViEvent", i),
                     event_round_trip(v, 1, 3, i));
            for (uint32_t i = 0; i < 20 && n == 0; ++i)
                note(vt::fmt("round trip %u sleeping in Send/RecvWait", i),
                     vt::round_trip(v, 1, 1, i, 3000, true));
            for (uint32_t i = 0; i < 20 && n == 0; ++i)
                note(vt::fmt("round trip %u sleeping in VipCQWait", i), cq_round_trip(w, 1, 1, i));
            note("the parent's VI wait fd", fd_wakes(v, vfd, false, 1, 1, 20));
            note("the parent's CQ wait fd", fd_wakes(w, cfd, true, 1, 1, 20));
            int own_v = -1, own_c = -1;
            if (VipGetViWaitFd(v.vi, &own_v) != VIP_SUCCESS)
                note("VipGetViWaitFd", "refused");
            else
                note("the child's own VI wait fd", fd_wakes(v, own_v, false, 1, 1, 21));
            if (VipGetCQWaitFd(w.cq, &own_c) != VIP_SUCCESS)
                note("VipGetCQWaitFd", "refused");
            else
                note("the child's own CQ wait fd", fd_wakes(w, own_c, true, 1, 1, 21));
            // It leaves before it exits: only its references go (the parent's
            // waits below must not notice).
            for (VIP_VI_HANDLE vi : {v.vi, w.vi})
                if (VIP_RETURN rc = VipDestroyVi(vi); rc != VIP_SUCCESS)
                    note("VipDestroyVi(not the last holder)", VipReturnString(rc));
            if (VIP_RETURN rc = VipDestroyCQ(w.cq); rc != VIP_SUCCESS)
                note("VipDestroyCQ(not the last holder)", VipReturnString(rc));
            return n;
        },
        60);
    INFO("child " << vt::status_text(cs) << "\n" << board->all());
    CHECK(cs == 0);
    // And the parent's waits still work after the child used the VI and left.
    CHECK(sleeps_until_timeout(v.vi, true) == "");
    CHECK(event_round_trip(v, 0, 2, 1) == "");
    CHECK(vt::round_trip(v, 0, 0, 2, 3000, true) == "");
    CHECK(cq_round_trip(w, 0, 0, 2) == "");
    CHECK(fd_wakes(v, vfd, false, 0, 0, 3) == "");
    CHECK(fd_wakes(w, cfd, true, 0, 0, 3) == "");
    INFO("servers: " << s1->first_error << " / " << s2->first_error);
    CHECK(s1->bad.load() == 0);
    CHECK(s2->bad.load() == 0);
    REQUIRE(v.close_last());
    REQUIRE(w.close_last());
    REQUIRE(v.close_nic());
    REQUIRE(w.close_nic());
    CHECK(vt::wait_child(srv1.pid, 10) == 0);
    CHECK(vt::wait_child(srv2.pid, 10) == 0);
    srv1.pid = srv2.pid = -1;
}

TEST_CASE("shareable VI: a child sleeps in VipRecvWait, VipSendWait, VipCQWait and on the wait "
          "fds of a VI and CQ its parent slept on",
          "[process][shareable][waits]") {
    int status = vt::run_fresh("process child: waits in a fork child", {"VIPL_SPIN_US=0"}, 90);
    REQUIRE(status == 0);
}
