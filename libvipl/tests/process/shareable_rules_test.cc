// The rules that make a VI shareable: its memory must really be shared with
// fork children, its CQs must be shareable too, its descriptors must lie in
// shareable regions; and a shareable CQ, like a VI, is only released by the
// last process holding it.
#include "process_util.h"

#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

VIP_MEM_ATTRIBUTES shareable_attrs(VIP_PROTECTION_HANDLE ptag, bool shareable = true) {
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = ptag;
    ma.Shareable = shareable ? VIP_TRUE : VIP_FALSE;
    return ma;
}

// Runs fn with the library's log lines (stderr) captured; returns them.
std::string capture_stderr(const std::function<void()> &fn) {
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(p[1], 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(p[1]);
    std::string out;
    char buf[4096];
    pollfd pf{p[0], POLLIN, 0};
    while (poll(&pf, 1, 0) > 0) {
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    close(p[0]);
    return out;
}

std::string hex(const void *p) {
    return vt::fmt("%p", p);
}

} // namespace

// In a fresh process with VIPL_LOG_LEVEL=warn, whatever the runner's environment says.
TEST_CASE("process child: private memory registered as shareable", "[.]") {
    vt::Nic n(vt::device());
    long page = sysconf(_SC_PAGESIZE);
    VIP_MEM_ATTRIBUTES ma = shareable_attrs(n.ptag);
    VIP_MEM_HANDLE mh;

    struct Private {
        const char *what;
        void *addr;
        size_t len;
    };
    void *anon =
        mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(anon != MAP_FAILED);
    std::vector<uint8_t> heap(8 * page);
    alignas(64) static uint8_t data_segment[8192];
    alignas(64) uint8_t stack[1024];
    // One shared page directly followed by a private one: one region, half private.
    uint8_t *both = static_cast<uint8_t *>(
        mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    REQUIRE(both != MAP_FAILED);
    REQUIRE(mmap(both + page, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0) == both + page);
    Private cases[] = {
        {"MAP_PRIVATE|MAP_ANONYMOUS", anon, size_t(4 * page)},
        {"heap", heap.data(), heap.size()},
        {"static data", data_segment, sizeof data_segment},
        {"stack", stack, sizeof stack},
        {"a shared page followed by a private one", both, size_t(2 * page)},
    };
    for (const Private &c : cases) {
        INFO(c.what);
        VIP_RETURN rc = VIP_SUCCESS;
        std::string log =
            capture_stderr([&] { rc = VipRegisterMem(n.nic, c.addr, c.len, &ma, &mh); });
        CHECK(rc == VIP_INVALID_PARAMETER);
        INFO("log: " << log);
        CHECK(log.find("vipl[") != std::string::npos);
        CHECK(log.find(hex(c.addr)) != std::string::npos);
    }
    // The shared page alone is fine.
    CHECK(VipRegisterMem(n.nic, both, page, &ma, &mh) == VIP_SUCCESS);
    CHECK(VipDeregisterMem(n.nic, both, mh) == VIP_SUCCESS);

    // Registered private, then made shareable: the same refusal.
    VIP_MEM_ATTRIBUTES plain = shareable_attrs(n.ptag, false);
    REQUIRE(VipRegisterMem(n.nic, anon, 4 * page, &plain, &mh) == VIP_SUCCESS);
    VIP_RETURN rc = VIP_SUCCESS;
    std::string log = capture_stderr([&] { rc = VipSetMemAttributes(n.nic, anon, mh, &ma); });
    CHECK(rc == VIP_INVALID_PARAMETER);
    INFO("log: " << log);
    CHECK(log.find(hex(anon)) != std::string::npos);
    VIP_MEM_ATTRIBUTES got{};
    REQUIRE(VipQueryMem(n.nic, anon, mh, &got) == VIP_SUCCESS);
    CHECK(got.Shareable == VIP_FALSE);
    CHECK(VipDeregisterMem(n.nic, anon, mh) == VIP_SUCCESS);
}

TEST_CASE("shareable memory: private memory is refused with a log line",
          "[process][shareable][rules]") {
    int status = vt::run_fresh("process child: private memory registered as shareable",
                               {"VIPL_LOG_LEVEL=warn"}, 60);
    REQUIRE(status == 0);
}

TEST_CASE("shareable memory: every kind of shared memory is accepted and shared with children",
          "[process][shareable][rules]") {
    vt::Nic n(vt::device());
    long page = sysconf(_SC_PAGESIZE);
    size_t len = 4 * page;
    VIP_MEM_ATTRIBUTES ma = shareable_attrs(n.ptag);

    void *anon = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(anon != MAP_FAILED);
    int mfd = memfd_create("process-test", MFD_CLOEXEC);
    REQUIRE(mfd >= 0);
    REQUIRE(ftruncate(mfd, static_cast<off_t>(len)) == 0);
    void *memfd = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    REQUIRE(memfd != MAP_FAILED);
    std::string shm_name = "/" + vt::unique_disc("shm");
    int sfd = shm_open(shm_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    REQUIRE(sfd >= 0);
    shm_unlink(shm_name.c_str());
    REQUIRE(ftruncate(sfd, static_cast<off_t>(len)) == 0);
    void *posix = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
    REQUIRE(posix != MAP_FAILED);
    int sysv_id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
    REQUIRE(sysv_id >= 0);
    void *sysv = shmat(sysv_id, nullptr, 0);
    shmctl(sysv_id, IPC_RMID, nullptr);
    REQUIRE(sysv != reinterpret_cast<void *>(-1));

    struct Kind {
        const char *what;
        void *addr;
    } kinds[] = {{"MAP_SHARED|MAP_ANONYMOUS", anon},
                 {"memfd", memfd},
                 {"POSIX shared memory", posix},
                 {"System V shared memory", sysv}};
    for (const Kind &k : kinds) {
        INFO(k.what);
        VIP_MEM_HANDLE mh = 0;
        REQUIRE(VipRegisterMem(n.nic, k.addr, len, &ma, &mh) == VIP_SUCCESS);
        VIP_MEM_ATTRIBUTES got{};
        CHECK(VipQueryMem(n.nic, k.addr, mh, &got) == VIP_SUCCESS);
        CHECK(got.Shareable == VIP_TRUE);
        CHECK(VipDeregisterMem(n.nic, k.addr, mh) == VIP_SUCCESS);
    }
    munmap(anon, len);
    munmap(memfd, len);
    close(mfd);
    munmap(posix, len);
    close(sfd);
    shmdt(sysv);
}

TEST_CASE("shareable VI: its CQs must be shareable, and a private VI's private",
          "[process][shareable][rules]") {
    vt::Nic n(vt::device());
    VIP_CQ_HANDLE priv = nullptr, shared = nullptr;
    REQUIRE(VipCreateCQ(n.nic, 64, &priv) == VIP_SUCCESS);
    REQUIRE(VipCreateCQEx(n.nic, 64, VIP_CQ_SHAREABLE, &shared) == VIP_SUCCESS);
    VIP_CQ_HANDLE unknown_flags = nullptr;
    CHECK(VipCreateCQEx(n.nic, 64, 0x2, &unknown_flags) == VIP_INVALID_PARAMETER);
    VIP_VI_ATTRIBUTES sa = vt::vi_attrs(n);
    sa.Shareable = VIP_TRUE;
    VIP_VI_ATTRIBUTES pa = vt::vi_attrs(n);
    struct Combo {
        const char *what;
        VIP_VI_ATTRIBUTES *attrs;
        VIP_CQ_HANDLE scq, rcq;
    } bad[] = {
        {"shareable VI, private send CQ", &sa, priv, nullptr},
        {"shareable VI, private receive CQ", &sa, nullptr, priv},
        {"shareable VI, shareable send CQ, private receive CQ", &sa, shared, priv},
        {"private VI, shareable send CQ", &pa, shared, nullptr},
        {"private VI, shareable receive CQ", &pa, nullptr, shared},
    };
    for (const Combo &c : bad) {
        INFO(c.what);
        VIP_VI_HANDLE vi = nullptr;
        CHECK(VipCreateVi(n.nic, c.attrs, c.scq, c.rcq, &vi) == VIP_INVALID_PARAMETER);
    }
    // Nothing was left attached: both CQs can go.
    VIP_VI_HANDLE ok1 = nullptr, ok2 = nullptr;
    CHECK(VipCreateVi(n.nic, &sa, shared, shared, &ok1) == VIP_SUCCESS);
    CHECK(VipCreateVi(n.nic, &pa, priv, priv, &ok2) == VIP_SUCCESS);
    CHECK(VipDestroyVi(ok1) == VIP_SUCCESS);
    CHECK(VipDestroyVi(ok2) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(priv) == VIP_SUCCESS);
    CHECK(VipDestroyCQ(shared) == VIP_SUCCESS);
}

TEST_CASE("shareable VI: descriptors and buffers in private regions are refused",
          "[process][shareable][rules]") {
    vt::Nic n(vt::device());
    vt::Memory priv(n, 1 << 16); // private, registered without Shareable
    void *p = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    auto *shared = static_cast<uint8_t *>(p);
    VIP_MEM_ATTRIBUTES ma = shareable_attrs(n.ptag);
    VIP_MEM_HANDLE smh;
    REQUIRE(VipRegisterMem(n.nic, shared, 1 << 16, &ma, &smh) == VIP_SUCCESS);
    VIP_VI_ATTRIBUTES sa = vt::vi_attrs(n);
    sa.Shareable = VIP_TRUE;
    VIP_VI_HANDLE vi;
    REQUIRE(VipCreateVi(n.nic, &sa, nullptr, nullptr, &vi) == VIP_SUCCESS);

    // A descriptor in a private region: it cannot be read by the other holders.
    VIP_DESCRIPTOR *pd = priv.desc(0);
    vt::set_desc(pd, shared + 4096, 64, smh);
    CHECK(VipPostRecv(vi, pd, priv.mh) == VIP_INVALID_PARAMETER);
    // A descriptor in the shareable region naming a private buffer: refused
    // too, as any segment outside the VI's memory is (semantics.md: a
    // protection error in Status); vipl_ext.h calls it an invalid parameter.
    auto *sd = reinterpret_cast<VIP_DESCRIPTOR *>(shared);
    vt::set_desc(sd, priv.base + 4096, 64, priv.mh);
    VIP_RETURN rc = VipPostRecv(vi, sd, smh);
    INFO(VipReturnString(rc) << ", status 0x" << std::hex << sd->CS.Status);
    CHECK((rc == VIP_INVALID_PARAMETER ||
           (rc == VIP_DESCRIPTOR_ERROR && (sd->CS.Status & VIP_STATUS_PROTECTION_ERROR))));
    VIP_BOOLEAN rq_empty = VIP_FALSE;
    REQUIRE(VipQueryVi(vi, nullptr, nullptr, nullptr, &rq_empty) == VIP_SUCCESS);
    CHECK(rq_empty == VIP_TRUE);
    // Everything shareable: accepted.
    vt::set_desc(sd, shared + 4096, 64, smh);
    CHECK(VipPostRecv(vi, sd, smh) == VIP_SUCCESS);
    // An idle VI keeps its receive posted: closing the NIC takes everything.
    n.close();
    munmap(shared, 1 << 16);
}

TEST_CASE("shareable CQ: VipDestroyCQ in a holder that is not the last only drops its reference",
          "[process][shareable][rules]") {
    int status = vt::run_checked(
        [] {
            vt::Shared<vt::ServerStats> srv;
            vt::Shared<vt::Board> board;
            srv->max_conns = 1;
            std::string disc = vt::unique_disc("dq");
            vt::Child server(vt::spawn_server(&*srv, disc));
            vt::ShVi v;
            INFO(v.err);
            REQUIRE(v.open(true));
            REQUIRE(v.post_recvs());
            REQUIRE(v.connect(disc));
            VIP_CQ_HANDLE lone = nullptr; // a shareable CQ no VI uses
            REQUIRE(VipCreateCQEx(v.nic, 16, VIP_CQ_SHAREABLE, &lone) == VIP_SUCCESS);

            int cs = vt::run_child(
                [&] {
                    int wrong = 0;
                    auto expect = [&](VIP_RETURN got, VIP_RETURN want, const char *what) {
                        if (got == want) return;
                        board->fail(wrong++, vt::fmt("child: %s: %s, expected %s", what,
                                                     VipReturnString(got), VipReturnString(want)));
                    };
                    VIP_VI_HANDLE h;
                    VIP_BOOLEAN r;
                    expect(VipDestroyCQ(lone), VIP_SUCCESS, "VipDestroyCQ(unused shareable CQ)");
                    expect(VipCQDone(lone, &h, &r), VIP_INVALID_PARAMETER,
                           "VipCQDone after destroying");
                    expect(VipDestroyVi(v.vi), VIP_SUCCESS, "VipDestroyVi(not the last holder)");
                    expect(VipDestroyCQ(v.cq), VIP_SUCCESS, "VipDestroyCQ(CQ of the shared VI)");
                    expect(VipCQDone(v.cq, &h, &r), VIP_INVALID_PARAMETER,
                           "VipCQDone after destroying");
                    return wrong;
                },
                20);
            INFO("child " << vt::status_text(cs) << "\n" << board->all());
            CHECK(cs == 0);

            // Both CQs are still there for this process, and the VI still reports to its CQ.
            VIP_VI_HANDLE h = nullptr;
            VIP_BOOLEAN r = VIP_FALSE;
            CHECK(VipCQDone(lone, &h, &r) == VIP_NOT_DONE);
            CHECK(VipCQDone(v.cq, &h, &r) == VIP_NOT_DONE);
            for (uint32_t seq = 0; seq < 20; ++seq) {
                VIP_DESCRIPTOR *sd = v.send_desc(0, 0);
                vt::make_msg(v.send_buf(0, 0), 0, seq);
                vt::set_desc(sd, v.send_buf(0, 0), vt::kMsgBytes, v.mh);
                REQUIRE(VipPostSend(v.vi, sd, v.mh) == VIP_SUCCESS);
                int sends = 0, recvs = 0;
                while (sends + recvs < 2) {
                    REQUIRE(VipCQWait(v.cq, 2000, &h, &r) == VIP_SUCCESS);
                    REQUIRE(h == v.vi);
                    VIP_DESCRIPTOR *d = nullptr;
                    REQUIRE((r ? VipRecvDone(v.vi, &d) : VipSendDone(v.vi, &d)) == VIP_SUCCESS);
                    if (r) {
                        int idx = v.recv_index(d);
                        uint32_t s2, q2;
                        std::string why;
                        REQUIRE(vt::parse_msg(v.recv_buf(idx), d->CS.Length, &s2, &q2, &why));
                        CHECK(q2 == seq);
                        vt::set_desc(d, v.recv_buf(idx), vt::kMsgBytes, v.mh);
                        REQUIRE(VipPostRecv(v.vi, d, v.mh) == VIP_SUCCESS);
                        ++recvs;
                    } else {
                        CHECK(d == sd);
                        ++sends;
                    }
                }
            }
            // The last holder: the usual rule (a VI uses the CQ) applies.
            CHECK(VipDestroyCQ(v.cq) == VIP_INVALID_STATE);
            REQUIRE(v.close_last());
            CHECK(VipDestroyCQ(v.cq) == VIP_SUCCESS);
            CHECK(VipDestroyCQ(lone) == VIP_SUCCESS);
            CHECK(VipCloseNic(v.nic) == VIP_SUCCESS);
            CHECK(srv->bad.load() == 0);
            return 0;
        },
        60);
    REQUIRE(status == 0);
}
