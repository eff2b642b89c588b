// Done and Wait called on one VI or one CQ from several threads at once:
// every completion goes to exactly one caller, each queue still hands its
// descriptors out in posting order, and threads posting on one VI keep their
// own order.
#include "thr_util.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace {

constexpr uint32_t kBuf = 1024;

// Both sides of the copy threshold (512 bytes): ring copies and SEND-GET.
uint32_t size_of(uint32_t k) {
    static const uint32_t sizes[] = {16, 100, 600, 1024};
    return sizes[k % 4];
}

// n descriptors followed by n buffers of kBuf bytes, registered.
struct Slots {
    size_t n;
    vt::Memory mem;
    Slots(const vt::Nic &nic, size_t count) : n(count), mem(nic, count * (64 + kBuf)) {}
    VIP_DESCRIPTOR *desc(size_t i) { return mem.desc(i); }
    uint8_t *buf(size_t i) { return mem.base + n * 64 + i * kBuf; }
    // Position of a descriptor of this set, -1 for anything else.
    long index(const VIP_DESCRIPTOR *d) {
        auto off = reinterpret_cast<uintptr_t>(d) - reinterpret_cast<uintptr_t>(desc(0));
        if (reinterpret_cast<uintptr_t>(d) < reinterpret_cast<uintptr_t>(desc(0)) || off % 64 ||
            off / 64 >= n)
            return -1;
        return static_cast<long>(off / 64);
    }
};

bool completed_ok(const VIP_DESCRIPTOR *d) {
    return (d->CS.Status & VIP_STATUS_DONE) && !(d->CS.Status & VIP_STATUS_ERROR_MASK);
}

// What each thread took, in the order it took it.
using Taken = std::vector<std::vector<long>>;

// Every index in [0, n) taken exactly once over all threads, and each thread's
// takes in increasing order (the queue hands descriptors out in order).
void check_once_in_order(const Taken &taken, long n, const char *what) {
    INFO(what);
    std::vector<int> count(static_cast<size_t>(n), 0);
    vt::Notes out_of_order;
    long out_of_range = 0;
    for (size_t t = 0; t < taken.size(); ++t) {
        for (size_t i = 0; i < taken[t].size(); ++i) {
            long k = taken[t][i];
            if (k < 0 || k >= n) {
                ++out_of_range;
                continue;
            }
            ++count[static_cast<size_t>(k)];
            if (i > 0 && taken[t][i - 1] >= k)
                out_of_order.add(vt::fmt("thread %zu took %ld before %ld", t, taken[t][i - 1], k));
        }
    }
    long missing = 0, twice = 0;
    for (int c : count) {
        missing += c == 0;
        twice += c > 1;
    }
    CHECK(out_of_range == 0);
    CHECK(missing == 0);
    CHECK(twice == 0);
    INFO(out_of_order.text());
    CHECK(out_of_order.size() == 0);
}

} // namespace

TEST_CASE("Threads taking from both queues of one VI get each descriptor once, in queue order",
          "[threads][waiters][tsan]") {
    constexpr int N = 3000; // all posted at once: below MaxDescriptorsPerQueue
    constexpr int kReceivers = 4, kReapers = 2;
    vt::Nic na(vt::device()), nb(vt::device());
    REQUIRE(na.attrs.MaxDescriptorsPerQueue >= VIP_ULONG(N));
    Slots ra(na, N), sb(nb, N);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    for (int k = 0; k < N; ++k) {
        vt::set_desc(ra.desc(k), ra.buf(k), kBuf, ra.mem.mh);
        REQUIRE(VipPostRecv(p.a, ra.desc(k), ra.mem.mh) == VIP_SUCCESS);
    }
    vt::Notes notes;
    std::atomic<int> recv_taken{0}, send_taken{0};
    Taken rlog(kReceivers), slog(kReapers);
    const double deadline = vt::now_ms() + 60000;

    auto receiver = [&](int t) {
        for (unsigned i = 0; recv_taken < N && vt::now_ms() < deadline; ++i) {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = i % 3 == 2 ? VipRecvDone(p.a, &d) : VipRecvWait(p.a, 20, &d);
            if (rc == VIP_NOT_DONE || rc == VIP_TIMEOUT) continue;
            if (rc != VIP_SUCCESS) {
                notes.add(vt::fmt("receiver %d: %s", t, VipReturnString(rc)));
                return;
            }
            long k = ra.index(d);
            if (k < 0) {
                notes.add(vt::fmt("receiver %d: foreign descriptor %p", t, (void *)d));
                continue;
            }
            rlog[t].push_back(k);
            ++recv_taken;
            uint32_t sender = 0, seq = 0;
            if (!completed_ok(d) || d->CS.Length != size_of(k) ||
                !vt::check_msg(ra.buf(k), d->CS.Length, &sender, &seq) || seq != uint32_t(k))
                notes.add(vt::fmt("receive %ld: status 0x%x length %u, holds message %u", k,
                                  d->CS.Status, d->CS.Length, seq));
        }
    };
    auto reaper = [&](int t) {
        for (unsigned i = 0; send_taken < N && vt::now_ms() < deadline; ++i) {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = i % 3 == 2 ? VipSendDone(p.b, &d) : VipSendWait(p.b, 20, &d);
            if (rc == VIP_NOT_DONE || rc == VIP_TIMEOUT) continue;
            if (rc != VIP_SUCCESS) {
                notes.add(vt::fmt("reaper %d: %s", t, VipReturnString(rc)));
                return;
            }
            long k = sb.index(d);
            if (k < 0) {
                notes.add(vt::fmt("reaper %d: foreign descriptor %p", t, (void *)d));
                continue;
            }
            slog[t].push_back(k);
            ++send_taken;
            if (!completed_ok(d)) notes.add(vt::fmt("send %ld: status 0x%x", k, d->CS.Status));
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kReceivers; ++t) threads.emplace_back(receiver, t);
    for (int t = 0; t < kReapers; ++t) threads.emplace_back(reaper, t);
    int post_errors = 0;
    for (int k = 0; k < N; ++k) {
        vt::fill_msg(sb.buf(k), size_of(k), 0, k);
        vt::set_desc(sb.desc(k), sb.buf(k), size_of(k), sb.mem.mh);
        if (VipPostSend(p.b, sb.desc(k), sb.mem.mh) != VIP_SUCCESS) ++post_errors;
    }
    for (auto &t : threads) t.join();
    CHECK(post_errors == 0);
    INFO(notes.text());
    CHECK(notes.size() == 0);
    CHECK(recv_taken == N);
    CHECK(send_taken == N);
    check_once_in_order(rlog, N, "receives");
    check_once_in_order(slog, N, "sends");
    VIP_DESCRIPTOR *d;
    CHECK(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    CHECK(VipSendDone(p.b, &d) == VIP_NOT_DONE);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("Threads taking from one CQ get each entry once, and each VI's descriptors in order",
          "[threads][waiters][cq][tsan]") {
    constexpr int kVis = 3, N = 1200; // messages per VI
    constexpr int kReceivers = 4, kReapers = 2;
    vt::Nic na(vt::device()), nb(vt::device());
    Slots ra(na, kVis * N), sb(nb, kVis * N);
    VIP_CQ_HANDLE rcq, scq;
    REQUIRE(VipCreateCQ(na.nic, kVis * N, &rcq) == VIP_SUCCESS);
    REQUIRE(VipCreateCQ(nb.nic, kVis * N, &scq) == VIP_SUCCESS);
    std::vector<vt::Pair> pairs;
    for (int i = 0; i < kVis; ++i)
        pairs.push_back(vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, rcq,
                                         scq, nullptr));
    auto vi_index = [&](VIP_VI_HANDLE vi, bool a_side) {
        for (int i = 0; i < kVis; ++i)
            if ((a_side ? pairs[i].a : pairs[i].b) == vi) return i;
        return -1;
    };
    for (int i = 0; i < kVis; ++i)
        for (int k = 0; k < N; ++k) {
            long s = i * N + k;
            vt::set_desc(ra.desc(s), ra.buf(s), kBuf, ra.mem.mh);
            REQUIRE(VipPostRecv(pairs[i].a, ra.desc(s), ra.mem.mh) == VIP_SUCCESS);
        }
    vt::Notes notes;
    std::atomic<int> recv_taken{0}, send_taken{0};
    // Per thread and per VI: the positions taken on that VI's queue.
    std::vector<Taken> rlog(kVis, Taken(kReceivers)), slog(kVis, Taken(kReapers));
    const int total = kVis * N;
    const double deadline = vt::now_ms() + 60000;

    auto taker = [&](int t, bool recv_side) {
        VIP_CQ_HANDLE cq = recv_side ? rcq : scq;
        std::atomic<int> &taken = recv_side ? recv_taken : send_taken;
        const char *who = recv_side ? "receiver" : "reaper";
        for (unsigned n = 0; taken < total && vt::now_ms() < deadline; ++n) {
            VIP_VI_HANDLE vi = nullptr;
            VIP_BOOLEAN recv = VIP_FALSE;
            VIP_RETURN rc = n % 3 == 2 ? VipCQDone(cq, &vi, &recv) : VipCQWait(cq, 20, &vi, &recv);
            if (rc == VIP_NOT_DONE || rc == VIP_TIMEOUT) continue;
            if (rc != VIP_SUCCESS) {
                notes.add(vt::fmt("%s %d: CQ %s", who, t, VipReturnString(rc)));
                return;
            }
            int i = vi_index(vi, recv_side);
            if (i < 0 || bool(recv) != recv_side) {
                notes.add(
                    vt::fmt("%s %d: entry (%p, %d) names no queue of this CQ", who, t, vi, recv));
                continue;
            }
            // The entry stands for a completed descriptor: Done must have one.
            VIP_DESCRIPTOR *d = nullptr;
            rc = recv_side ? VipRecvDone(vi, &d) : VipSendDone(vi, &d);
            if (rc != VIP_SUCCESS) {
                notes.add(vt::fmt("%s %d: CQ entry for VI %d but Done returned %s", who, t, i,
                                  VipReturnString(rc)));
                continue;
            }
            long s = recv_side ? ra.index(d) : sb.index(d);
            if (s < i * N || s >= (i + 1) * N) {
                notes.add(
                    vt::fmt("%s %d: VI %d returned descriptor %ld of another VI", who, t, i, s));
                continue;
            }
            (recv_side ? rlog : slog)[i][t].push_back(s - i * N);
            ++taken;
            uint32_t sender = 0, seq = 0;
            if (!completed_ok(d))
                notes.add(vt::fmt("%s %d: status 0x%x", who, t, d->CS.Status));
            else if (recv_side && (!vt::check_msg(ra.buf(s), d->CS.Length, &sender, &seq) ||
                                   sender != uint32_t(i) || seq != uint32_t(s - i * N)))
                notes.add(vt::fmt("VI %d receive %ld holds message %u of VI %u", i, s - i * N, seq,
                                  sender));
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kReceivers; ++t) threads.emplace_back(taker, t, true);
    for (int t = 0; t < kReapers; ++t) threads.emplace_back(taker, t, false);
    int post_errors = 0;
    for (int k = 0; k < N; ++k)
        for (int i = 0; i < kVis; ++i) {
            long s = i * N + k;
            vt::fill_msg(sb.buf(s), size_of(k), i, k);
            vt::set_desc(sb.desc(s), sb.buf(s), size_of(k), sb.mem.mh);
            if (VipPostSend(pairs[i].b, sb.desc(s), sb.mem.mh) != VIP_SUCCESS) ++post_errors;
        }
    for (auto &t : threads) t.join();
    CHECK(post_errors == 0);
    INFO(notes.text());
    CHECK(notes.size() == 0);
    CHECK(recv_taken == total);
    CHECK(send_taken == total);
    for (int i = 0; i < kVis; ++i) {
        INFO("VI " << i);
        check_once_in_order(rlog[i], N, "receives");
        check_once_in_order(slog[i], N, "sends");
    }
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    CHECK(VipCQDone(rcq, &vi, &recv) == VIP_NOT_DONE);
    CHECK(VipCQDone(scq, &vi, &recv) == VIP_NOT_DONE);
    for (auto &pr : pairs) {
        vt::destroy_vi(pr.a);
        vt::destroy_vi(pr.b);
    }
    CHECK(VipDestroyCQ(rcq) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(scq) == VIP_SUCCESS);
}

TEST_CASE("Threads posting on one VI at once: each thread's messages arrive once, in its order",
          "[threads][waiters][tsan]") {
    constexpr int kPosters = 4, M = 2000, kSlots = 32, kRecvs = 64;
    vt::Nic na(vt::device()), nb(vt::device());
    Slots ra(na, kRecvs), sb(nb, kPosters * kSlots);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    for (int k = 0; k < kRecvs; ++k) {
        vt::set_desc(ra.desc(k), ra.buf(k), kBuf, ra.mem.mh);
        REQUIRE(VipPostRecv(p.a, ra.desc(k), ra.mem.mh) == VIP_SUCCESS);
    }
    // A send is posted only against a receive known to be posted: a reliable
    // VI that finds none breaks the connection.
    std::atomic<int> credits{kRecvs};
    std::unique_ptr<std::atomic<bool>[]> busy(new std::atomic<bool>[kPosters * kSlots]);
    for (int i = 0; i < kPosters * kSlots; ++i) busy[i] = false;
    vt::Notes notes;
    const double deadline = vt::now_ms() + 60000;
    std::atomic<int> reaped{0};

    // Any poster may take any poster's completion; it frees the owner's slot.
    auto reap = [&](int t, bool wait) {
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = wait ? VipSendWait(p.b, 5, &d) : VipSendDone(p.b, &d);
        if (rc == VIP_NOT_DONE || rc == VIP_TIMEOUT) return;
        long s = rc == VIP_SUCCESS ? sb.index(d) : -1;
        if (s < 0 || !completed_ok(d)) {
            notes.add(vt::fmt("poster %d: SendDone %s, descriptor %ld", t, VipReturnString(rc), s));
            return;
        }
        if (!busy[s].exchange(false)) notes.add(vt::fmt("send slot %ld completed twice", s));
        ++reaped;
    };
    auto poster = [&](int t) {
        for (int seq = 0; seq < M && vt::now_ms() < deadline;) {
            int slot = -1;
            for (int j = 0; j < kSlots && slot < 0; ++j)
                if (!busy[t * kSlots + j]) slot = t * kSlots + j;
            int c = credits.load();
            if (slot < 0 || c == 0) {
                reap(t, slot < 0);
                continue;
            }
            if (!credits.compare_exchange_weak(c, c - 1)) continue;
            busy[slot] = true;
            uint32_t len = size_of(seq * 3 + t);
            vt::fill_msg(sb.buf(slot), len, t, seq);
            vt::set_desc(sb.desc(slot), sb.buf(slot), len, sb.mem.mh);
            VIP_RETURN rc = VipPostSend(p.b, sb.desc(slot), sb.mem.mh);
            if (rc != VIP_SUCCESS) {
                notes.add(vt::fmt("poster %d: VipPostSend %s", t, VipReturnString(rc)));
                return;
            }
            ++seq;
            if (seq % 4 == 0) reap(t, false);
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kPosters; ++t) threads.emplace_back(poster, t);

    std::vector<int> next(kPosters, 0);
    int received = 0;
    while (received < kPosters * M && vt::now_ms() < deadline) {
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = VipRecvWait(p.a, 50, &d);
        if (rc == VIP_TIMEOUT) continue;
        if (rc != VIP_SUCCESS) {
            notes.add(vt::fmt("receiver: %s", VipReturnString(rc)));
            break;
        }
        long k = ra.index(d);
        uint32_t sender = 0, seq = 0;
        if (k < 0 || !completed_ok(d) || !vt::check_msg(ra.buf(k), d->CS.Length, &sender, &seq) ||
            sender >= uint32_t(kPosters)) {
            notes.add(vt::fmt("receive %ld: status 0x%x, not a message of this test", k,
                              d ? d->CS.Status : 0));
            break;
        }
        if (int(seq) != next[sender])
            notes.add(
                vt::fmt("poster %u: message %u arrived, %d expected", sender, seq, next[sender]));
        next[sender] = int(seq) + 1;
        ++received;
        vt::set_desc(d, ra.buf(k), kBuf, ra.mem.mh);
        if (VipPostRecv(p.a, d, ra.mem.mh) != VIP_SUCCESS) notes.add("receiver: repost failed");
        ++credits;
    }
    for (auto &t : threads) t.join();
    // Whatever is still outstanding completes now.
    while (reaped < kPosters * M && vt::now_ms() < deadline) reap(-1, true);
    INFO(notes.text());
    CHECK(notes.size() == 0);
    CHECK(received == kPosters * M);
    for (int t = 0; t < kPosters; ++t) CHECK(next[t] == M);
    CHECK(reaped == kPosters * M);
    VIP_DESCRIPTOR *d;
    CHECK(VipRecvDone(p.a, &d) == VIP_NOT_DONE);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("Closing a NIC while threads wait on its VIs and CQ ends their waits",
          "[threads][waiters][tsan]") {
    vt::Nic na(vt::device()), nb(vt::device());
    vt::Memory ma(na, 1 << 16), mb(nb, 1 << 16);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 16, &cq) == VIP_SUCCESS);
    vt::Pair connected =
        vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, nullptr);
    vt::Pair on_cq = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, cq);
    VIP_VI_ATTRIBUTES va = vt::vi_attrs(na);
    VIP_VI_HANDLE idle;
    REQUIRE(VipCreateVi(na.nic, &va, nullptr, nullptr, &idle) == VIP_SUCCESS);
    vt::set_desc(ma.desc(0), ma.base + 4096, 64, ma.mh);
    REQUIRE(VipPostRecv(connected.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
    vt::set_desc(ma.desc(1), ma.base + 8192, 64, ma.mh);
    REQUIRE(VipPostRecv(on_cq.a, ma.desc(1), ma.mh) == VIP_SUCCESS);

    constexpr int kTimeout = 1500;
    struct Waiter {
        const char *what;
        std::atomic<pid_t> tid{0};
        VIP_RETURN rc = VIP_NOT_DONE;
        VIP_DESCRIPTOR *desc = nullptr;
        double ms = 0;
        std::thread thread;
    };
    Waiter w[4];
    auto run = [&](Waiter &x, const char *what, std::function<VIP_RETURN(VIP_DESCRIPTOR **)> fn) {
        x.what = what;
        x.thread = std::thread([&x, fn] {
            x.tid = vt::tid();
            double t0 = vt::now_ms();
            x.rc = fn(&x.desc);
            x.ms = vt::now_ms() - t0;
        });
    };
    run(w[0], "VipRecvWait on a connected VI",
        [&](VIP_DESCRIPTOR **d) { return VipRecvWait(connected.a, kTimeout, d); });
    run(w[1], "VipSendWait on a connected VI",
        [&](VIP_DESCRIPTOR **d) { return VipSendWait(connected.a, kTimeout, d); });
    run(w[2], "VipCQWait", [&](VIP_DESCRIPTOR **) {
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN recv;
        return VipCQWait(cq, kTimeout, &vi, &recv);
    });
    run(w[3], "VipRecvWait on an idle VI",
        [&](VIP_DESCRIPTOR **d) { return VipRecvWait(idle, kTimeout, d); });
    for (Waiter &x : w) {
        INFO(x.what);
        while (!x.tid) vt::sleep_ms(1);
        CHECK(vt::wait_asleep(x.tid, 2000));
    }
    na.close();
    for (Waiter &x : w) x.thread.join();
    for (Waiter &x : w) {
        INFO(x.what << ": " << VipReturnString(x.rc) << " after " << x.ms << " ms");
        // A receive flushed by the close may be handed out (and reach the CQ);
        // otherwise the handle is gone.
        bool flushed = x.rc == VIP_DESCRIPTOR_ERROR && x.desc &&
                       (x.desc->CS.Status & VIP_STATUS_DESC_FLUSHED_ERROR);
        bool cq_entry = &x == &w[2] && x.rc == VIP_SUCCESS;
        CHECK((x.rc == VIP_INVALID_PARAMETER || flushed || cq_entry));
        CHECK(x.ms < kTimeout + 1000);
    }
    VIP_DESCRIPTOR *d;
    CHECK(VipRecvDone(connected.a, &d) == VIP_INVALID_PARAMETER);
    VIP_VI_HANDLE vi;
    VIP_BOOLEAN recv;
    CHECK(VipCQDone(cq, &vi, &recv) == VIP_INVALID_PARAMETER);
    CHECK(VipQueryVi(idle, nullptr, nullptr, nullptr, nullptr) == VIP_INVALID_PARAMETER);
    vt::destroy_vi(connected.b);
    vt::destroy_vi(on_cq.b);
}

TEST_CASE("A VI waiter and a CQ waiter on the same VI both wake when their completion comes",
          "[threads][waiters][cq]") {
    vt::Nic na(vt::device()), nb(vt::device());
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 16, &cq) == VIP_SUCCESS);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb), nullptr, cq);
    uint8_t *abuf = ma.base + 65536, *bbuf = mb.base + 65536;
    // Far longer than any wake-up takes, far shorter than the calls' timeouts.
    constexpr int kRounds = 30, kLate = 1000;
    int send_late = 0, cq_late = 0, rounds = 0;
    for (; rounds < kRounds && !send_late && !cq_late; ++rounds) {
        // a's large send sleeps until b reads it; a's receive, reported to
        // the CQ, waits for b's reply.
        vt::set_desc(mb.desc(0), bbuf, 200000, mb.mh);
        REQUIRE(VipPostRecv(p.b, mb.desc(0), mb.mh) == VIP_SUCCESS);
        vt::set_desc(ma.desc(0), abuf, 100000, ma.mh);
        REQUIRE(VipPostSend(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
        vt::set_desc(ma.desc(1), abuf + 200000, 4096, ma.mh);
        REQUIRE(VipPostRecv(p.a, ma.desc(1), ma.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *sent = nullptr;
        VIP_VI_HANDLE vi = nullptr;
        VIP_BOOLEAN recv = VIP_FALSE;
        vt::Call send([&] { return VipSendWait(p.a, 5000, &sent); });
        vt::Call cqwait([&] { return VipCQWait(cq, 8000, &vi, &recv); });
        REQUIRE(send.asleep());
        REQUIRE(cqwait.asleep());
        // b reads the data: a's send is complete.
        VIP_DESCRIPTOR *d;
        REQUIRE(VipRecvWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
        double t0 = vt::now_ms();
        if (!send.finished(kLate)) ++send_late;
        VIP_RETURN rc = send.join();
        INFO("round " << rounds << ": VipSendWait returned " << VipReturnString(rc) << " "
                      << vt::now_ms() - t0 << " ms after its send completed");
        CHECK(rc == VIP_SUCCESS);
        CHECK_FALSE(cqwait.done());
        // b's reply completes a's receive.
        vt::set_desc(mb.desc(1), bbuf + 200000, 64, mb.mh);
        REQUIRE(VipPostSend(p.b, mb.desc(1), mb.mh) == VIP_SUCCESS);
        t0 = vt::now_ms();
        if (!cqwait.finished(kLate)) ++cq_late;
        rc = cqwait.join();
        INFO("VipCQWait returned " << VipReturnString(rc) << " " << vt::now_ms() - t0
                                   << " ms after its receive completed");
        CHECK(rc == VIP_SUCCESS);
        REQUIRE(VipSendWait(p.b, vt::kWaitMs, &d) == VIP_SUCCESS);
        REQUIRE(VipRecvWait(p.a, vt::kWaitMs, &d) == VIP_SUCCESS);
        while (VipCQDone(cq, &vi, &recv) == VIP_SUCCESS) {
        }
    }
    INFO(rounds << " rounds");
    CHECK(send_late == 0);
    CHECK(cq_late == 0);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
    CHECK(VipDestroyCQ(cq) == VIP_SUCCESS);
}
