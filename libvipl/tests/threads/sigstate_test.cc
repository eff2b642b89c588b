// The library leaves signals to the program: after heavy use (NICs,
// connections, transfers, sleeping waits, an error callback and Notify
// handlers, a peer that dies) every signal's disposition and every calling
// thread's mask are what they were, it raised none of SIGURG, SIGUSR1,
// SIGUSR2, SIGPWR (PostgreSQL's) or SIGPIPE, and those signals reach the
// program's handlers, on the program's threads, as usual.  Run in a fresh
// process, so that "before" means before any VIPL call.
#include "thr_util.h"

#include <atomic>
#include <cstring>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

const int kProgramSignals[] = {SIGURG, SIGUSR1, SIGUSR2, SIGPWR};

std::atomic<int> g_count[65];
std::atomic<pid_t> g_last_tid[65];

void on_signal(int sig, siginfo_t *, void *) {
    ++g_count[sig];
    g_last_tid[sig] = vt::tid();
}

uint64_t bit(int sig) {
    return 1ull << (sig - 1);
}

sigset_t set_of(std::initializer_list<int> sigs) {
    sigset_t s;
    sigemptyset(&s);
    for (int sig : sigs) sigaddset(&s, sig);
    return s;
}

uint64_t mask_of(std::initializer_list<int> sigs) {
    uint64_t m = 0;
    for (int sig : sigs) m |= bit(sig);
    return m;
}

// A call on its own thread with its own signal mask: what the mask was
// before and after the call, as the thread itself sees it.
struct MaskedCall {
    uint64_t want, before = 0, after = 0;
    std::unique_ptr<vt::Call> call;
    MaskedCall(std::initializer_list<int> blocked, std::function<VIP_RETURN()> fn)
        : want(mask_of(blocked)) {
        sigset_t s = set_of(blocked);
        call = std::make_unique<vt::Call>([this, s, fn] {
            pthread_sigmask(SIG_SETMASK, &s, nullptr);
            before = vt::own_mask();
            VIP_RETURN rc = fn();
            after = vt::own_mask();
            return rc;
        });
    }
    // While the call sleeps inside the library, the kernel shows the thread's own mask.
    void check_asleep() {
        REQUIRE(call->asleep());
        CHECK(vt::mask_text(vt::kernel_mask(call->thread_id())) == vt::mask_text(want));
    }
    VIP_RETURN finish() {
        VIP_RETURN rc = call->join();
        CHECK(vt::mask_text(before) == vt::mask_text(want));
        CHECK(vt::mask_text(after) == vt::mask_text(want));
        return rc;
    }
};

std::atomic<int> g_notified{0}, g_errors{0};
void on_recv_notify(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_DESCRIPTOR *) {
    ++g_notified;
}
void on_cq_notify(VIP_PVOID, VIP_NIC_HANDLE, VIP_VI_HANDLE, VIP_BOOLEAN) {
    ++g_notified;
}
void on_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *) {
    ++g_errors;
}

template <class F>
bool eventually(F f, int ms = 5000) {
    double end = vt::now_ms() + ms;
    while (!f()) {
        if (vt::now_ms() > end) return false;
        vt::sleep_ms(0.5);
    }
    return true;
}

std::vector<uint8_t> addr(VIP_NIC_HANDLE nic, const std::string &disc) {
    std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 64 + disc.size());
    auto *na = reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
    char host[] = "localhost";
    REQUIRE(VipNSGetHostByName(nic, host, na, 0) == VIP_SUCCESS);
    na->DiscriminatorLen = static_cast<VIP_UINT16>(disc.size());
    memcpy(na->HostAddress + na->HostAddressLen, disc.data(), disc.size());
    return a;
}
VIP_NET_ADDRESS *as_addr(std::vector<uint8_t> &a) {
    return reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
}

// VipSendWait for an RDMA whose target VI makes no call meanwhile: the
// target is kept progressing (VipSendDone on it: it sends nothing, so
// VIP_NOT_DONE), since on tcp it places an RDMA write's data, acknowledges it
// and answers a read inside its own calls (doc/semantics.md, "Progress").
VIP_RETURN rdma_wait(VIP_VI_HANDLE vi, VIP_VI_HANDLE target, VIP_DESCRIPTOR **d) {
    double end = vt::now_ms() + vt::kWaitMs;
    VIP_DESCRIPTOR *none;
    for (;;) {
        VIP_RETURN rc = VipSendDone(vi, d);
        if (rc != VIP_NOT_DONE || vt::now_ms() > end) return rc;
        if (VipSendDone(target, &none) != VIP_NOT_DONE) return VIP_ERROR_RESOURCE;
    }
}

// Everything a program does with the library, on the main thread and on
// threads with masks of their own.
void heavy_use(vt::Nic &na, vt::Nic &nb, vt::Memory &ma, vt::Memory &mb) {
    REQUIRE(VipErrorCallback(na.nic, nullptr, on_error) == VIP_SUCCESS);
    REQUIRE(VipErrorCallback(nb.nic, nullptr, on_error) == VIP_SUCCESS);
    VIP_CQ_HANDLE cq;
    REQUIRE(VipCreateCQ(na.nic, 64, &cq) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES aa = vt::vi_attrs(na, VIP_SERVICE_RELIABLE_DELIVERY, 0, true, true);
    VIP_VI_ATTRIBUTES ab = vt::vi_attrs(nb, VIP_SERVICE_RELIABLE_DELIVERY, 0, true, true);
    VIP_VI_HANDLE a, b;
    REQUIRE(VipCreateVi(na.nic, &aa, nullptr, cq, &a) == VIP_SUCCESS);
    REQUIRE(VipCreateVi(nb.nic, &ab, nullptr, nullptr, &b) == VIP_SUCCESS);
    std::string disc = vt::unique_disc("-sig");
    std::vector<uint8_t> server = addr(na.nic, disc), client = addr(nb.nic, disc + "c"),
                         target = addr(nb.nic, disc);
    {
        // The server side sleeps in VipConnectWait on a thread of its own.
        MaskedCall accept({SIGWINCH}, [&] {
            vt::AddressBuffer remote;
            VIP_VI_ATTRIBUTES ra;
            VIP_CONN_HANDLE conn;
            VIP_RETURN rc =
                VipConnectWait(na.nic, as_addr(server), 10000, remote.get(), &ra, &conn);
            return rc == VIP_SUCCESS ? VipConnectAccept(conn, a) : rc;
        });
        accept.check_asleep();
        REQUIRE(vt::connect_request(b, as_addr(client), as_addr(target), 10000) == VIP_SUCCESS);
        CHECK(accept.finish() == VIP_SUCCESS);
    }
    uint8_t *abuf = ma.base + 65536, *bbuf = mb.base + 65536;
    VIP_DESCRIPTOR *d;
    for (uint32_t len : {64u, 200000u}) {
        // A receive that sleeps until the message comes.
        vt::set_desc(ma.desc(0), abuf, 200000, ma.mh);
        REQUIRE(VipPostRecv(a, ma.desc(0), ma.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *got; // written by the waiting thread only
        MaskedCall recv({SIGTTIN, SIGXCPU}, [&] { return VipRecvWait(a, 10000, &got); });
        recv.check_asleep();
        vt::fill_msg(bbuf, len, 1, len);
        vt::set_desc(mb.desc(0), bbuf, len, mb.mh);
        REQUIRE(VipPostSend(b, mb.desc(0), mb.mh) == VIP_SUCCESS);
        CHECK(recv.finish() == VIP_SUCCESS);
        REQUIRE(VipSendWait(b, vt::kWaitMs, &d) == VIP_SUCCESS);
        VIP_VI_HANDLE vi;
        VIP_BOOLEAN r;
        REQUIRE(VipCQWait(cq, vt::kWaitMs, &vi, &r) == VIP_SUCCESS);
    }
    {
        // A large send sleeps until the receiver reads it.  (One waiter at a
        // time on a VI and its CQ: see the waiters tests for both at once.)
        vt::set_desc(mb.desc(1), bbuf, 200000, mb.mh);
        REQUIRE(VipPostRecv(b, mb.desc(1), mb.mh) == VIP_SUCCESS);
        vt::set_desc(ma.desc(1), abuf, 150000, ma.mh);
        REQUIRE(VipPostSend(a, ma.desc(1), ma.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *sent; // written by the waiting thread only
        MaskedCall send({}, [&] { return VipSendWait(a, 10000, &sent); });
        send.check_asleep();
        REQUIRE(VipRecvWait(b, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(send.finish() == VIP_SUCCESS);
        // A CQ waiter sleeps until a receive completes.
        vt::set_desc(ma.desc(0), abuf, 200000, ma.mh);
        REQUIRE(VipPostRecv(a, ma.desc(0), ma.mh) == VIP_SUCCESS);
        MaskedCall cqwait({SIGTTOU}, [&] {
            VIP_VI_HANDLE vi;
            VIP_BOOLEAN r;
            return VipCQWait(cq, 10000, &vi, &r);
        });
        cqwait.check_asleep();
        vt::set_desc(mb.desc(0), bbuf, 32, mb.mh);
        REQUIRE(VipPostSend(b, mb.desc(0), mb.mh) == VIP_SUCCESS);
        REQUIRE(VipSendWait(b, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(cqwait.finish() == VIP_SUCCESS);
        REQUIRE(VipRecvWait(a, vt::kWaitMs, &d) == VIP_SUCCESS);
    }
    {
        // RDMA both ways.
        vt::set_rdma(mb.desc(2), VIP_CONTROL_OP_RDMAWRITE, bbuf, 100000, mb.mh,
                     reinterpret_cast<uint64_t>(abuf), ma.mh);
        REQUIRE(VipPostSend(b, mb.desc(2), mb.mh) == VIP_SUCCESS);
        REQUIRE(rdma_wait(b, a, &d) == VIP_SUCCESS);
        vt::set_rdma(mb.desc(2), VIP_CONTROL_OP_RDMAREAD, bbuf, 100000, mb.mh,
                     reinterpret_cast<uint64_t>(abuf), ma.mh);
        REQUIRE(VipPostSend(b, mb.desc(2), mb.mh) == VIP_SUCCESS);
        CHECK(rdma_wait(b, a, &d) == VIP_SUCCESS);
        // Notify handlers on the library's thread; the wait fds.
        REQUIRE(VipRecvNotify(a, nullptr, on_recv_notify) == VIP_SUCCESS);
        vt::set_desc(ma.desc(0), abuf, 4096, ma.mh);
        REQUIRE(VipPostRecv(a, ma.desc(0), ma.mh) == VIP_SUCCESS);
        vt::set_desc(mb.desc(0), bbuf, 100, mb.mh);
        REQUIRE(VipPostSend(b, mb.desc(0), mb.mh) == VIP_SUCCESS);
        CHECK(eventually([] { return g_notified >= 1; }));
        REQUIRE(VipCQNotify(cq, nullptr, on_cq_notify) == VIP_SUCCESS);
        CHECK(eventually([] { return g_notified >= 2; }));
        int fd;
        REQUIRE(VipGetViWaitFd(b, &fd) == VIP_SUCCESS);
        REQUIRE(VipGetCQWaitFd(cq, &fd) == VIP_SUCCESS);
        while (VipSendDone(b, &d) == VIP_SUCCESS) {
        }
    }
    {
        // A peer-to-peer connection, one side waiting on a thread of its own.
        VIP_VI_HANDLE p1, p2;
        REQUIRE(VipCreateVi(na.nic, &aa, nullptr, nullptr, &p1) == VIP_SUCCESS);
        REQUIRE(VipCreateVi(nb.nic, &ab, nullptr, nullptr, &p2) == VIP_SUCCESS);
        std::string pd = vt::unique_disc("-sigp");
        std::vector<uint8_t> l1 = addr(na.nic, pd + "1"), l2 = addr(nb.nic, pd + "2");
        REQUIRE(VipConnectPeerRequest(p1, as_addr(l1), as_addr(l2), 10000) == VIP_SUCCESS);
        MaskedCall peer({SIGWINCH, SIGTTOU}, [&] {
            VIP_VI_ATTRIBUTES ra;
            return VipConnectPeerWait(p1, &ra);
        });
        peer.check_asleep();
        REQUIRE(VipConnectPeerRequest(p2, as_addr(l2), as_addr(l1), 10000) == VIP_SUCCESS);
        VIP_VI_ATTRIBUTES ra;
        CHECK(VipConnectPeerWait(p2, &ra) == VIP_SUCCESS);
        CHECK(peer.finish() == VIP_SUCCESS);
        CHECK(VipDisconnect(p2) == VIP_SUCCESS);
        CHECK(eventually([] { return g_errors >= 1; }));
        vt::destroy_vi(p1);
        vt::destroy_vi(p2);
    }
    {
        // A peer process that connects, then dies.
        std::string cd = vt::unique_disc("-sigc");
        std::vector<uint8_t> local = addr(na.nic, cd);
        VIP_VI_HANDLE s;
        REQUIRE(VipCreateVi(na.nic, &aa, nullptr, nullptr, &s) == VIP_SUCCESS);
        int errors = g_errors;
        int child = vt::spawn_child([&] {
            VIP_NIC_HANDLE nic;
            VIP_VI_HANDLE vi;
            VIP_NIC_ATTRIBUTES attrs;
            VIP_PROTECTION_HANDLE ptag;
            if (VipOpenNic(vt::device().c_str(), &nic) != VIP_SUCCESS || VipQueryNic(nic, &attrs) ||
                VipCreatePtag(nic, &ptag))
                return 1;
            VIP_VI_ATTRIBUTES va{};
            va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
            va.MaxTransferSize = attrs.MaxTransferSize;
            va.Ptag = ptag;
            va.EnableRdmaWrite = va.EnableRdmaRead = VIP_TRUE;
            if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS) return 2;
            std::vector<uint8_t> me(sizeof(VIP_NET_ADDRESS) + 128), there(me.size());
            char host[] = "localhost";
            auto *m = reinterpret_cast<VIP_NET_ADDRESS *>(me.data());
            auto *t = reinterpret_cast<VIP_NET_ADDRESS *>(there.data());
            VipNSGetHostByName(nic, host, m, 0);
            VipNSGetHostByName(nic, host, t, 0);
            std::string mine = cd + "c";
            m->DiscriminatorLen = static_cast<VIP_UINT16>(mine.size());
            memcpy(m->HostAddress + m->HostAddressLen, mine.data(), mine.size());
            t->DiscriminatorLen = static_cast<VIP_UINT16>(cd.size());
            memcpy(t->HostAddress + t->HostAddressLen, cd.data(), cd.size());
            return vt::connect_request(vi, m, t, 10000) == VIP_SUCCESS ? 0 : 3;
        });
        vt::AddressBuffer remote;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        REQUIRE(VipConnectWait(na.nic, as_addr(local), 10000, remote.get(), &ra, &conn) ==
                VIP_SUCCESS);
        REQUIRE(VipConnectAccept(conn, s) == VIP_SUCCESS);
        int status = vt::wait_child(child, 30);
        INFO("child " << vt::status_text(status));
        CHECK(status == 0);
        CHECK(eventually([&] { return g_errors > errors; }));
        CHECK(vt::vi_state(s) == VIP_STATE_ERROR);
        vt::destroy_vi(s);
    }
    vt::destroy_vi(a);
    vt::destroy_vi(b);
    CHECK(VipDestroyCQ(cq) == VIP_SUCCESS);
}

} // namespace

TEST_CASE("signal state (fresh process)", "[.][threads-sigstate]") {
    // Before any VIPL call: loading the library installed no handler (the
    // caught signals are Catch2's own).
    const uint64_t catch2 = mask_of({SIGINT, SIGILL, SIGFPE, SIGSEGV, SIGTERM, SIGABRT});
    uint64_t caught = strtoull(vt::status_field(0, "SigCgt").c_str(), nullptr, 16);
    INFO("caught at start: " << vt::mask_text(caught));
    CHECK((caught & ~catch2) == 0);
    const uint64_t main_mask = vt::own_mask();

    // glibc sets up its own signals (32, 33: no program can use them) when the
    // first thread starts; let that happen before the snapshot.
    std::thread([] {}).join();
    const uint64_t glibc = bit(32) | bit(33);

    std::vector<std::unique_ptr<vt::ScopedHandler>> handlers;
    for (int sig : kProgramSignals)
        handlers.emplace_back(new vt::ScopedHandler(sig, on_signal, sig == SIGUSR1));
    handlers.emplace_back(new vt::ScopedHandler(SIGPIPE, on_signal, false));
    const std::vector<vt::Disposition> before = vt::dispositions();
    auto caught_now = [&] {
        return vt::mask_text(strtoull(vt::status_field(0, "SigCgt").c_str(), nullptr, 16) & ~glibc);
    };
    const std::string caught_before = caught_now();
    const std::string ignored_before = vt::status_field(0, "SigIgn");
    for (int sig = 1; sig <= 64; ++sig) g_count[sig] = 0;

    {
        vt::Nic na(vt::device()), nb(vt::device());
        vt::Memory ma(na, 1 << 20, true, true), mb(nb, 1 << 20, true, true);
        heavy_use(na, nb, ma, mb);

        // The notification thread blocks everything for itself only.
        std::vector<pid_t> notify = vt::threads_named("vipl-notify");
        REQUIRE(notify.size() == 1);
        uint64_t all = 0;
        for (int sig = 1; sig <= 64; ++sig)
            if (sig != SIGKILL && sig != SIGSTOP && sig != 32 && sig != 33) all |= bit(sig);
        CHECK(vt::mask_text(vt::kernel_mask(notify[0]) & all) == vt::mask_text(all));

        // The library raised none of the program's signals, nor SIGPIPE.
        for (int sig : kProgramSignals) {
            INFO(strsignal(sig));
            CHECK(g_count[sig] == 0);
        }
        CHECK(g_count[SIGPIPE] == 0);

        // Nothing changed: dispositions, what the kernel shows, this thread's mask.
        std::vector<std::string> diff = vt::compare(before, vt::dispositions());
        INFO(vt::fmt("%zu changes", diff.size()));
        for (const std::string &s : diff) FAIL_CHECK(s);
        CHECK(caught_now() == caught_before);
        CHECK(vt::status_field(0, "SigIgn") == ignored_before);
        CHECK(vt::mask_text(vt::own_mask()) == vt::mask_text(main_mask));
        CHECK(vt::mask_text(vt::kernel_mask(vt::tid())) == vt::mask_text(main_mask));

        // Process-directed signals reach the program's handler on the
        // program's thread, even when that thread sleeps inside the library
        // and the library's own thread is there: only the waiting thread
        // leaves them unblocked here.
        sigset_t program = set_of({SIGURG, SIGUSR1, SIGUSR2, SIGPWR});
        pthread_sigmask(SIG_BLOCK, &program, nullptr);
        VIP_VI_ATTRIBUTES va = vt::vi_attrs(na);
        VIP_VI_HANDLE idle;
        REQUIRE(VipCreateVi(na.nic, &va, nullptr, nullptr, &idle) == VIP_SUCCESS);
        vt::set_desc(ma.desc(0), ma.base + 65536, 64, ma.mh);
        REQUIRE(VipPostRecv(idle, ma.desc(0), ma.mh) == VIP_SUCCESS);
        for (int sig : kProgramSignals) {
            INFO(strsignal(sig));
            VIP_DESCRIPTOR *d;
            MaskedCall wait({SIGWINCH}, [&] { return VipRecvWait(idle, 10000, &d); });
            wait.check_asleep();
            int n = g_count[sig];
            REQUIRE(kill(getpid(), sig) == 0);
            CHECK(eventually([&] { return g_count[sig] == n + 1; }, 3000));
            CHECK(g_last_tid[sig] == wait.call->thread_id());
            CHECK(wait.finish() == VIP_INTERRUPTED);
        }
        // Signals sent while this thread blocked them wait for it, as usual.
        for (int sig : kProgramSignals) REQUIRE(kill(getpid(), sig) == 0);
        vt::sleep_ms(20);
        for (int sig : kProgramSignals) CHECK(g_count[sig] == 1);
        pthread_sigmask(SIG_UNBLOCK, &program, nullptr);
        for (int sig : kProgramSignals) {
            INFO(strsignal(sig));
            CHECK(g_count[sig] == 2);
            CHECK(g_last_tid[sig] == vt::tid());
        }
        // And raise() from this thread runs the handler at once.
        for (int sig : kProgramSignals) {
            REQUIRE(raise(sig) == 0);
            CHECK(g_count[sig] == 3);
        }
        CHECK(VipDestroyVi(idle) == VIP_INVALID_STATE);
        na.close();
        nb.close();
    }
    // After closing everything, still nothing changed.
    std::vector<std::string> diff = vt::compare(before, vt::dispositions());
    for (const std::string &s : diff) FAIL_CHECK(s);
    CHECK(vt::mask_text(vt::own_mask()) == vt::mask_text(main_mask));
    CHECK(g_count[SIGPIPE] == 0);
}

TEST_CASE("The library leaves signal dispositions and masks alone and sends no signal",
          "[threads][signals][sigstate]") {
    int status = vt::run_fresh("signal state (fresh process)", {}, 90);
    INFO(vt::status_text(status));
    CHECK(status == 0);
}
