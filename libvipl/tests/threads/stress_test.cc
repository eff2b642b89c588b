// Eight threads on shared VIs and CQs: two post sends and RDMA writes at
// random on three connections, four take receives (two through a shared CQ,
// two waiting on one VI), one takes send completions from a shared CQ, and
// one creates, queries and destroys other objects meanwhile.  Every message
// must arrive exactly once, every descriptor complete exactly once, every RDMA
// write land.  Built with -fsanitize=thread this is the data-race check of
// scripts/test.sh ("[tsan]").
#include "thr_util.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif

// ThreadSanitizer slows everything down several times: fewer operations.
constexpr int kOps = kTsan ? 10000 : 30000; // per sending thread
constexpr int kSenders = 2;
constexpr int kVis = 3;     // connections; 0 and 1 on the shared CQs, 2 on none
constexpr int kRecvs = 48;  // receives kept posted per connection
constexpr int kSlots = 48;  // send descriptors per sending thread
constexpr int kTargets = 8; // RDMA target slots per (sender, connection)
constexpr uint32_t kBuf = 2048, kRdma = 256;
constexpr int kDeadlineMs = 120000;

uint32_t send_size(uint32_t r) {
    static const uint32_t sizes[] = {16, 200, 700, 2000}; // ring copies and SEND-GET
    return sizes[r % 4];
}

bool completed_ok(const VIP_DESCRIPTOR *d) {
    return (d->CS.Status & VIP_STATUS_DONE) && !(d->CS.Status & VIP_STATUS_ERROR_MASK);
}

struct Stress {
    bool notify;
    vt::ErrorLog log_a, log_b; // outlive the NICs
    vt::Nic na{vt::device()}, nb{vt::device()};
    // A: send descriptors and buffers.  B: receive descriptors and buffers,
    // then the RDMA targets.
    static constexpr size_t kSizeA = kSenders * kSlots * (64 + kBuf);
    static constexpr size_t kSizeB =
        kVis * kRecvs * (64 + kBuf) + kSenders * kVis * kTargets * kRdma;
    vt::Memory ma{na, kSizeA};
    vt::Memory mb{nb, kSizeB, true};
    // The churning thread's own NICs and memory (made here: Catch2 assertions
    // belong to the main thread).
    vt::Nic nc{vt::device()}, nd{vt::device()};
    vt::Memory mc{nc, 1 << 16}, md{nd, 1 << 16};
    VIP_CQ_HANDLE scq = nullptr, rcq = nullptr;
    vt::Pair pair[kVis];
    vt::Notes notes;
    const double deadline = vt::now_ms() + kDeadlineMs;

    std::atomic<int> credits[kVis];
    std::unique_ptr<std::atomic<bool>[]> busy =
        std::make_unique<std::atomic<bool>[]>(kSenders * kSlots);
    // Messages per (sender, connection): how many were sent, how often each arrived.
    std::atomic<int> sent[kSenders][kVis];
    std::vector<std::unique_ptr<std::atomic<uint8_t>[]>> arrivals;
    // The last RDMA write posted to each target slot (only its sender writes it).
    int last_write[kSenders][kVis][kTargets];
    std::atomic<long> posted_total{0}, completed_total{0}, received_total{0}, sent_total{0};
    std::atomic<int> senders_running{kSenders};
    std::atomic<long> churn_rounds{0}, peer_connections{0}, notified{0};

    explicit Stress(bool with_notify) : notify(with_notify) {
        if (notify) {
            log_a.install(na.nic);
            log_b.install(nb.nic);
        }
        REQUIRE(VipCreateCQ(na.nic, 1024, &scq) == VIP_SUCCESS);
        REQUIRE(VipCreateCQ(nb.nic, 1024, &rcq) == VIP_SUCCESS);
        VIP_VI_ATTRIBUTES aa = vt::vi_attrs(na, VIP_SERVICE_RELIABLE_DELIVERY, 0, true);
        VIP_VI_ATTRIBUTES ab = vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_DELIVERY, 0, true);
        for (int v = 0; v < kVis; ++v) {
            bool cqs = v < 2;
            pair[v] = vt::connect_pair(na, nb, aa, ab, cqs ? scq : nullptr, nullptr, nullptr,
                                       cqs ? rcq : nullptr, [&](VIP_VI_HANDLE, VIP_VI_HANDLE b) {
                                           for (int k = 0; k < kRecvs; ++k) {
                                               VIP_DESCRIPTOR *d = rdesc(v, k);
                                               vt::set_desc(d, rbuf(v, k), kBuf, mb.mh);
                                               REQUIRE(VipPostRecv(b, d, mb.mh) == VIP_SUCCESS);
                                           }
                                       });
            credits[v] = kRecvs;
        }
        for (int i = 0; i < kSenders * kSlots; ++i) busy[i] = false;
        for (int t = 0; t < kSenders; ++t)
            for (int v = 0; v < kVis; ++v) {
                sent[t][v] = 0;
                arrivals.emplace_back(new std::atomic<uint8_t>[kOps]);
                for (int k = 0; k < kOps; ++k) arrivals.back()[k] = 0;
                for (int j = 0; j < kTargets; ++j) last_write[t][v][j] = -1;
            }
    }

    VIP_DESCRIPTOR *sdesc(int slot) { return ma.desc(slot); }
    uint8_t *sbuf(int slot) { return ma.base + kSenders * kSlots * 64 + slot * kBuf; }
    VIP_DESCRIPTOR *rdesc(int v, int k) { return mb.desc(v * kRecvs + k); }
    uint8_t *rbuf(int v, int k) { return mb.base + kVis * kRecvs * 64 + (v * kRecvs + k) * kBuf; }
    uint8_t *target(int t, int v, int j) {
        return mb.base + kVis * kRecvs * (64 + kBuf) + ((t * kVis + v) * kTargets + j) * kRdma;
    }
    int vi_of(VIP_VI_HANDLE vi, bool a_side) {
        for (int v = 0; v < kVis; ++v)
            if ((a_side ? pair[v].a : pair[v].b) == vi) return v;
        return -1;
    }
    bool late() { return vt::now_ms() > deadline; }

    // A send or RDMA write descriptor came back (from a CQ entry or from Done).
    void complete(VIP_DESCRIPTOR *d, const char *who) {
        long slot = d - sdesc(0);
        if (slot < 0 || slot >= kSenders * kSlots) {
            notes.add(vt::fmt("%s: foreign send descriptor %p", who, (void *)d));
            return;
        }
        if (!completed_ok(d))
            notes.add(vt::fmt("%s: send slot %ld status 0x%x", who, slot, d->CS.Status));
        if (!busy[slot].exchange(false))
            notes.add(vt::fmt("%s: send slot %ld completed while not posted", who, slot));
        ++completed_total;
    }

    // Takes what the third connection (no CQ) completed; any sender takes any sender's.
    void reap_direct(int t, int wait_ms) {
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = wait_ms ? VipSendWait(pair[2].a, wait_ms, &d) : VipSendDone(pair[2].a, &d);
        if (rc == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR)
            complete(d, t == 0 ? "sender 0" : "sender 1");
        else if (rc != VIP_NOT_DONE && rc != VIP_TIMEOUT)
            notes.add(vt::fmt("sender %d: VipSendWait %s", t, VipReturnString(rc)));
    }

    // A sender's last RDMA write (connection 0 for sender 0, 2 for sender
    // 1) leaves only well after it counted itself out, as a frame that the
    // kernel delivers late does: the receiving side must still be calling
    // to place it (it counts among the posted descriptors, not the messages).
    void late_write(int t, int *wseq) {
        int v = t == 0 ? 0 : 2, slot = -1;
        while (slot < 0 && !late()) {
            for (int j = 0; j < kSlots && slot < 0; ++j)
                if (!busy[t * kSlots + j].load()) slot = t * kSlots + j;
            if (slot < 0) reap_direct(t, 1);
        }
        if (slot < 0) {
            --senders_running;
            return;
        }
        busy[slot] = true;
        VIP_DESCRIPTOR *d = sdesc(slot);
        int j = wseq[v] % kTargets;
        vt::fill_msg(sbuf(slot), kRdma, 100 + t * kVis + v, wseq[v]);
        vt::set_rdma(d, VIP_CONTROL_OP_RDMAWRITE, sbuf(slot), kRdma, ma.mh,
                     reinterpret_cast<uint64_t>(target(t, v, j)), mb.mh);
        last_write[t][v][j] = wseq[v]++;
        ++posted_total;
        --senders_running;
        vt::sleep_ms(20); // the receivers look several times meanwhile (5 ms waits)
        VIP_RETURN rc = VipPostSend(pair[v].a, d, ma.mh);
        if (rc != VIP_SUCCESS) {
            notes.add(vt::fmt("sender %d: the last VipPostSend: %s", t, VipReturnString(rc)));
            busy[slot] = false;
            --posted_total;
        }
    }

    void sender(int t) {
        std::mt19937 rng(1234 + t);
        int wseq[kVis] = {0, 0, 0};
        for (int op = 0; op < kOps && !late();) {
            int v = static_cast<int>(rng() % kVis);
            bool rdma = rng() % 4 == 0;
            int slot = -1;
            for (int j = 0; j < kSlots && slot < 0; ++j)
                if (!busy[t * kSlots + j].load()) slot = t * kSlots + j;
            if (slot < 0) {
                // Connections 0 and 1 are reaped by the CQ thread, 2 by the senders.
                reap_direct(t, 1);
                continue;
            }
            if (!rdma) {
                int c = credits[v].load();
                if (c == 0 || !credits[v].compare_exchange_strong(c, c - 1)) {
                    reap_direct(t, 0);
                    std::this_thread::yield();
                    continue;
                }
            }
            busy[slot] = true;
            VIP_DESCRIPTOR *d = sdesc(slot);
            if (rdma) {
                int j = wseq[v] % kTargets;
                vt::fill_msg(sbuf(slot), kRdma, 100 + t * kVis + v, wseq[v]);
                vt::set_rdma(d, VIP_CONTROL_OP_RDMAWRITE, sbuf(slot), kRdma, ma.mh,
                             reinterpret_cast<uint64_t>(target(t, v, j)), mb.mh);
                last_write[t][v][j] = wseq[v]++;
            } else {
                int seq = sent[t][v];
                uint32_t len = send_size(rng());
                vt::fill_msg(sbuf(slot), len, t * kVis + v, seq);
                vt::set_desc(d, sbuf(slot), len, ma.mh);
            }
            ++posted_total;
            VIP_RETURN rc = VipPostSend(pair[v].a, d, ma.mh);
            if (rc != VIP_SUCCESS) {
                notes.add(vt::fmt("sender %d: VipPostSend on connection %d: %s", t, v,
                                  VipReturnString(rc)));
                busy[slot] = false;
                --posted_total;
                break;
            }
            if (!rdma) {
                ++sent[t][v];
                ++sent_total;
            }
            ++op;
            if (rng() % 8 == 0) reap_direct(t, 0);
        }
        late_write(t, wseq);
        // Connection 2's completions are the senders' to take.
        while (completed_total < posted_total && !late()) reap_direct(t, 2);
    }

    // Takes send completions of connections 0 and 1 from their shared CQ.
    void cq_reaper() {
        for (unsigned n = 0; !late(); ++n) {
            if (!senders_running && completed_total == posted_total) break;
            VIP_VI_HANDLE vi = nullptr;
            VIP_BOOLEAN recv = VIP_TRUE;
            VIP_RETURN rc = n % 4 == 3 ? VipCQDone(scq, &vi, &recv) : VipCQWait(scq, 5, &vi, &recv);
            if (rc == VIP_NOT_DONE || rc == VIP_TIMEOUT) continue;
            int v = rc == VIP_SUCCESS ? vi_of(vi, true) : -1;
            if (v < 0 || v > 1 || recv) {
                notes.add(vt::fmt("send CQ: %s, entry (%p, %d)", VipReturnString(rc), vi, recv));
                continue;
            }
            VIP_DESCRIPTOR *d = nullptr;
            rc = VipSendDone(vi, &d);
            if (rc == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR)
                complete(d, "send CQ");
            else
                notes.add(vt::fmt("send CQ entry for connection %d, VipSendDone %s", v,
                                  VipReturnString(rc)));
        }
    }

    // The receiving side's threads are its only callers: an RDMA write is
    // placed, and acknowledged so that its descriptor completes, only inside
    // their calls (on tcp).  They go on until every descriptor posted has
    // completed, not merely until every message arrived: a write that
    // follows the last send of its connection may reach the socket after that.
    bool all_done() {
        return !senders_running && received_total == sent_total && completed_total == posted_total;
    }

    void received(int v, VIP_DESCRIPTOR *d, const char *who) {
        long k = d - rdesc(v, 0);
        uint32_t sender = 0, seq = 0;
        if (k < 0 || k >= kRecvs) {
            notes.add(vt::fmt("%s: connection %d returned a foreign descriptor", who, v));
            return;
        }
        if (!completed_ok(d) || !vt::check_msg(rbuf(v, k), d->CS.Length, &sender, &seq) ||
            sender >= uint32_t(kSenders * kVis) || int(sender % kVis) != v || seq >= kOps) {
            notes.add(vt::fmt("%s: connection %d receive %ld status 0x%x holds no message of its "
                              "senders (sender %u seq %u)",
                              who, v, k, d->CS.Status, sender, seq));
        } else if (arrivals[sender][seq]++ != 0) {
            notes.add(vt::fmt("%s: message %u of sender %u arrived twice", who, seq, sender));
        }
        ++received_total;
        vt::set_desc(d, rbuf(v, k), kBuf, mb.mh);
        VIP_RETURN rc = VipPostRecv(pair[v].b, d, mb.mh);
        if (rc != VIP_SUCCESS)
            notes.add(vt::fmt("%s: VipPostRecv %s", who, VipReturnString(rc)));
        else
            ++credits[v];
    }

    // Receives of connections 0 and 1 through their shared CQ.
    void cq_receiver(int t) {
        std::string who = vt::fmt("CQ receiver %d", t);
        for (unsigned n = 0; !all_done() && !late(); ++n) {
            VIP_VI_HANDLE vi = nullptr;
            VIP_BOOLEAN recv = VIP_FALSE;
            VIP_RETURN rc = n % 4 == 3 ? VipCQDone(rcq, &vi, &recv) : VipCQWait(rcq, 5, &vi, &recv);
            if (rc == VIP_NOT_DONE || rc == VIP_TIMEOUT) continue;
            int v = rc == VIP_SUCCESS ? vi_of(vi, false) : -1;
            if (v < 0 || v > 1 || !recv) {
                notes.add(
                    vt::fmt("%s: %s, entry (%p, %d)", who.c_str(), VipReturnString(rc), vi, recv));
                continue;
            }
            VIP_DESCRIPTOR *d = nullptr;
            rc = VipRecvDone(vi, &d);
            if (rc == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR)
                received(v, d, who.c_str());
            else
                notes.add(vt::fmt("%s: CQ entry for connection %d, VipRecvDone %s", who.c_str(), v,
                                  VipReturnString(rc)));
        }
    }

    // Receives of connection 2, two threads waiting on the same VI.
    void direct_receiver(int t) {
        std::string who = vt::fmt("receiver %d", t);
        for (unsigned n = 0; !all_done() && !late(); ++n) {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = n % 4 == 3 ? VipRecvDone(pair[2].b, &d) : VipRecvWait(pair[2].b, 5, &d);
            if (rc == VIP_NOT_DONE || rc == VIP_TIMEOUT) continue;
            if (rc == VIP_SUCCESS || rc == VIP_DESCRIPTOR_ERROR)
                received(2, d, who.c_str());
            else
                notes.add(vt::fmt("%s: VipRecvWait %s", who.c_str(), VipReturnString(rc)));
        }
    }

    static void on_recv(VIP_PVOID ctx, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *d) {
        auto *s = static_cast<Stress *>(ctx);
        if (!completed_ok(d)) s->notes.add("Notify handler: receive completed with an error");
        ++s->notified;
    }

    // A connection of its own between two NICs of its own, made peer to peer
    // (one side polling, the other waiting on a helper thread), used once and
    // torn down.
    void private_connection() {
        VIP_VI_ATTRIBUTES ac = vt::vi_attrs(nc), ad = vt::vi_attrs(nd);
        VIP_VI_HANDLE c = nullptr, d = nullptr;
        if (VipCreateVi(nc.nic, &ac, nullptr, nullptr, &c) != VIP_SUCCESS ||
            VipCreateVi(nd.nic, &ad, nullptr, nullptr, &d) != VIP_SUCCESS) {
            notes.add("churn: VipCreateVi failed");
            if (c) VipDestroyVi(c);
            return;
        }
        std::string disc = vt::unique_disc("-churn");
        std::vector<uint8_t> lc(sizeof(VIP_NET_ADDRESS) + 128), ld(lc.size());
        auto addr = [&](std::vector<uint8_t> &buf, VIP_NIC_HANDLE nic, const std::string &s) {
            auto *a = reinterpret_cast<VIP_NET_ADDRESS *>(buf.data());
            char host[] = "localhost";
            if (VipNSGetHostByName(nic, host, a, 0) != VIP_SUCCESS) return a;
            a->DiscriminatorLen = static_cast<VIP_UINT16>(s.size());
            memcpy(a->HostAddress + a->HostAddressLen, s.data(), s.size());
            return a;
        };
        VIP_NET_ADDRESS *pc = addr(lc, nc.nic, disc + "c"), *pd = addr(ld, nd.nic, disc + "d");
        vt::set_desc(md.desc(0), md.base + 4096, 256, md.mh);
        VIP_RETURN rc = VipPostRecv(d, md.desc(0), md.mh);
        VIP_RETURN rc_c = VIP_NOT_DONE, rc_d = VIP_NOT_DONE;
        if (rc == VIP_SUCCESS) rc = VipConnectPeerRequest(c, pc, pd, 5000);
        if (rc == VIP_SUCCESS) {
            std::thread other([&] {
                VIP_VI_ATTRIBUTES ra;
                rc_d = VipConnectPeerRequest(d, pd, pc, 5000);
                if (rc_d == VIP_SUCCESS) rc_d = VipConnectPeerWait(d, &ra);
            });
            VIP_VI_ATTRIBUTES ra;
            while (rc_c == VIP_NOT_DONE && !late()) {
                rc_c = VipConnectPeerDone(c, &ra);
                if (rc_c == VIP_NOT_DONE) vt::sleep_ms(0.2);
            }
            other.join();
        }
        if (rc != VIP_SUCCESS || rc_c != VIP_SUCCESS || rc_d != VIP_SUCCESS) {
            notes.add(vt::fmt("churn: peer connection %s / %s / %s", VipReturnString(rc),
                              VipReturnString(rc_c), VipReturnString(rc_d)));
        } else {
            bool by_notify = notify && peer_connections % 2 == 0;
            long before = notified;
            if (by_notify && VipRecvNotify(d, this, on_recv) != VIP_SUCCESS)
                notes.add("churn: VipRecvNotify failed");
            vt::fill_msg(mc.base + 4096, 256, 999, static_cast<uint32_t>(peer_connections));
            vt::set_desc(mc.desc(0), mc.base + 4096, 256, mc.mh);
            VIP_DESCRIPTOR *got = nullptr;
            uint32_t sender = 0, seq = 0;
            if (VipPostSend(c, mc.desc(0), mc.mh) != VIP_SUCCESS ||
                VipSendWait(c, 5000, &got) != VIP_SUCCESS)
                notes.add("churn: send on the private connection failed");
            if (by_notify) {
                while (notified == before && !late()) vt::sleep_ms(0.2);
            } else if (VipRecvWait(d, 5000, &got) != VIP_SUCCESS) {
                notes.add("churn: receive on the private connection failed");
            }
            if (!vt::check_msg(md.base + 4096, 256, &sender, &seq) || sender != 999 ||
                seq != uint32_t(peer_connections))
                notes.add("churn: the private connection delivered something else");
            ++peer_connections;
        }
        vt::destroy_vi(c);
        vt::destroy_vi(d);
    }

    // Everything else, concurrently with the traffic.
    void churn() {
        std::mt19937 rng(99);
        std::vector<uint8_t> spare(1 << 16);
        auto note = [&](const char *what, VIP_RETURN rc) {
            notes.add(vt::fmt("churn: %s: %s", what, VipReturnString(rc)));
        };
        while (senders_running && !late()) {
            ++churn_rounds;
            VIP_RETURN rc;
            switch (rng() % 9) {
            case 0: {
                VIP_NIC_ATTRIBUTES attrs;
                if ((rc = VipQueryNic(rng() % 2 ? na.nic : nb.nic, &attrs)) != VIP_SUCCESS)
                    note("VipQueryNic", rc);
                VIP_MEM_ATTRIBUTES mattrs;
                if ((rc = VipQueryMem(na.nic, ma.base, ma.mh, &mattrs)) != VIP_SUCCESS)
                    note("VipQueryMem", rc);
                break;
            }
            case 1: {
                int v = static_cast<int>(rng() % kVis);
                VIP_VI_HANDLE vi = rng() % 2 ? pair[v].a : pair[v].b;
                VIP_VI_STATE st;
                VIP_VI_ATTRIBUTES attrs;
                VIP_BOOLEAN sq, rq;
                VIP_VI_COUNTERS counters;
                if ((rc = VipQueryVi(vi, &st, &attrs, &sq, &rq)) != VIP_SUCCESS)
                    note("VipQueryVi", rc);
                else if (st != VIP_STATE_CONNECTED)
                    notes.add(vt::fmt("churn: connection %d left the Connected state (%d)", v, st));
                if ((rc = VipQueryViCounters(vi, &counters)) != VIP_SUCCESS)
                    note("VipQueryViCounters", rc);
                break;
            }
            case 2: {
                VIP_PROTECTION_HANDLE p;
                if ((rc = VipCreatePtag(na.nic, &p)) != VIP_SUCCESS) {
                    note("VipCreatePtag", rc);
                    break;
                }
                if ((rc = VipDestroyPtag(na.nic, p)) != VIP_SUCCESS) note("VipDestroyPtag", rc);
                break;
            }
            case 3: {
                // Regions come and go on the NICs whose regions the posts are checked against.
                VIP_MEM_ATTRIBUTES attrs{rng() % 2 ? na.ptag : nb.ptag, VIP_FALSE, VIP_FALSE,
                                         VIP_FALSE};
                VIP_NIC_HANDLE nic = attrs.Ptag == na.ptag ? na.nic : nb.nic;
                VIP_MEM_HANDLE mh;
                if ((rc = VipRegisterMem(nic, spare.data(), spare.size(), &attrs, &mh)) !=
                    VIP_SUCCESS) {
                    note("VipRegisterMem", rc);
                    break;
                }
                attrs.EnableRdmaWrite = VIP_TRUE;
                if ((rc = VipSetMemAttributes(nic, spare.data(), mh, &attrs)) != VIP_SUCCESS)
                    note("VipSetMemAttributes", rc);
                if ((rc = VipDeregisterMem(nic, spare.data(), mh)) != VIP_SUCCESS)
                    note("VipDeregisterMem", rc);
                break;
            }
            case 4: {
                VIP_CQ_HANDLE cq;
                if ((rc = VipCreateCQ(nb.nic, 4, &cq)) != VIP_SUCCESS) {
                    note("VipCreateCQ", rc);
                    break;
                }
                if ((rc = VipResizeCQ(cq, 64)) != VIP_SUCCESS) note("VipResizeCQ", rc);
                VIP_VI_HANDLE vi;
                VIP_BOOLEAN recv;
                if ((rc = VipCQDone(cq, &vi, &recv)) != VIP_NOT_DONE) note("VipCQDone", rc);
                if ((rc = VipDestroyCQ(cq)) != VIP_SUCCESS) note("VipDestroyCQ", rc);
                break;
            }
            case 5: {
                // A VI joins and leaves the CQ other threads are waiting on.
                VIP_VI_ATTRIBUTES attrs = vt::vi_attrs(nb);
                VIP_VI_HANDLE vi;
                if ((rc = VipCreateVi(nb.nic, &attrs, nullptr, rcq, &vi)) != VIP_SUCCESS) {
                    note("VipCreateVi on the shared CQ", rc);
                    break;
                }
                int fd;
                if ((rc = VipGetViWaitFd(vi, &fd)) != VIP_SUCCESS) note("VipGetViWaitFd", rc);
                attrs.MaxTransferSize = 4096;
                if ((rc = VipSetViAttributes(vi, &attrs)) != VIP_SUCCESS)
                    note("VipSetViAttributes", rc);
                if ((rc = VipDestroyVi(vi)) != VIP_SUCCESS) note("VipDestroyVi", rc);
                break;
            }
            case 6: {
                std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 64);
                auto *addr = reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
                char host[] = "localhost";
                char name[256];
                VIP_ULONG len = sizeof name;
                if ((rc = VipNSGetHostByName(na.nic, host, addr, 0)) != VIP_SUCCESS)
                    note("VipNSGetHostByName", rc);
                else if ((rc = VipNSGetHostByAddr(nb.nic, addr, name, &len)) != VIP_SUCCESS)
                    note("VipNSGetHostByAddr", rc);
                break;
            }
            case 7: {
                VIP_CQ_HANDLE cq;
                int fd;
                if ((rc = VipCreateCQ(na.nic, 8, &cq)) != VIP_SUCCESS) {
                    note("VipCreateCQ", rc);
                    break;
                }
                if ((rc = VipGetCQWaitFd(cq, &fd)) != VIP_SUCCESS) note("VipGetCQWaitFd", rc);
                if ((rc = VipDestroyCQ(cq)) != VIP_SUCCESS) note("VipDestroyCQ", rc);
                break;
            }
            case 8:
                private_connection();
                break;
            }
        }
    }

    void run() {
        std::vector<std::thread> threads;
        for (int t = 0; t < kSenders; ++t) threads.emplace_back([this, t] { sender(t); });
        threads.emplace_back([this] { cq_receiver(0); });
        threads.emplace_back([this] { cq_receiver(1); });
        threads.emplace_back([this] { direct_receiver(0); });
        threads.emplace_back([this] { direct_receiver(1); });
        threads.emplace_back([this] { cq_reaper(); });
        threads.emplace_back([this] { churn(); });
        REQUIRE(threads.size() == 8);
        for (auto &t : threads) t.join();
    }

    void verify() {
        INFO(notes.text());
        CHECK(notes.size() == 0);
        CHECK_FALSE(late());
        CHECK(received_total == sent_total);
        CHECK(completed_total == posted_total);
        CHECK(posted_total > kSenders * kOps / 2);
        long missing = 0, twice = 0;
        for (int s = 0; s < kSenders * kVis; ++s) {
            int n = sent[s / kVis][s % kVis];
            for (int k = 0; k < kOps; ++k) {
                uint8_t a = arrivals[s][k];
                if (k < n && a == 0) ++missing;
                if (a > 1 || (k >= n && a)) ++twice;
            }
        }
        CHECK(missing == 0);
        CHECK(twice == 0);
        // Each target slot holds the last write posted to it: writes of one
        // thread on one VI land in posting order.
        long wrong = 0, writes = 0;
        for (int t = 0; t < kSenders; ++t)
            for (int v = 0; v < kVis; ++v)
                for (int j = 0; j < kTargets; ++j) {
                    int last = last_write[t][v][j];
                    if (last < 0) continue;
                    ++writes;
                    uint32_t sender = 0, seq = 0;
                    if (!vt::check_msg(target(t, v, j), kRdma, &sender, &seq) ||
                        sender != uint32_t(100 + t * kVis + v) || seq != uint32_t(last))
                        ++wrong;
                }
        CHECK(writes > 0);
        CHECK(wrong == 0);
        for (int v = 0; v < kVis; ++v) {
            INFO("connection " << v);
            CHECK(credits[v] == kRecvs);
            CHECK(vt::vi_state(pair[v].a) == VIP_STATE_CONNECTED);
            CHECK(vt::vi_state(pair[v].b) == VIP_STATE_CONNECTED);
            VIP_DESCRIPTOR *d;
            CHECK(VipSendDone(pair[v].a, &d) == VIP_NOT_DONE);
            CHECK(VipRecvDone(pair[v].b, &d) == VIP_NOT_DONE);
        }
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
        CHECK(VipCQDone(scq, &vi, &recv) == VIP_NOT_DONE);
        CHECK(VipCQDone(rcq, &vi, &recv) == VIP_NOT_DONE);
        CHECK(churn_rounds > 50);
        CHECK(peer_connections > 0);
        if (notify) {
            CHECK(notified > 0);
            CHECK(log_a.all().empty());
            CHECK(log_b.all().empty());
        }
        for (int v = 0; v < kVis; ++v) {
            vt::destroy_vi(pair[v].a);
            vt::destroy_vi(pair[v].b);
        }
        CHECK(VipDestroyCQ(scq) == VIP_SUCCESS);
        CHECK(VipDestroyCQ(rcq) == VIP_SUCCESS);
    }
};

void stress(bool notify) {
    auto s = std::make_unique<Stress>(notify);
    double t0 = vt::now_ms();
    s->run();
    INFO("ran " << (vt::now_ms() - t0) << " ms: " << s->posted_total << " posts, "
                << s->received_total << " messages, " << s->churn_rounds << " churn rounds, "
                << s->peer_connections << " private connections");
    s->verify();
}

} // namespace

TEST_CASE("Stress: eight threads on shared VIs and CQs", "[threads][stress][tsan]") {
    stress(false);
}

TEST_CASE("Stress: eight threads on shared VIs and CQs, with the notification thread",
          "[threads][stress][tsan]") {
    stress(true);
}
