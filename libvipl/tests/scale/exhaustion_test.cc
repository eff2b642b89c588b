// Running out of resources while creating and connecting VIs: a process
// whose descriptors (RLIMIT_NOFILE) or address space (RLIMIT_AS) run out
// gets VIP_ERROR_RESOURCE from the call that needed more, never a crash or
// another code; the VIs it connected before keep working both ways, and
// everything can be destroyed, leaving the process with the descriptors
// and mappings it had before it opened the NIC.
//
// The limited process runs against a helper process without limits that
// accepts (or requests) connections as long as the limited one asks.  Limits
// are set with setrlimit in the forked limited process only.
#include "scale_util.h"
#include "support.h"

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

namespace {

constexpr uint32_t kMsg = 64;
constexpr size_t kSlot = 256; // send descriptor, receive descriptor, send buffer, receive buffer
constexpr uint32_t kMagic = 0x45584831;
constexpr int kWaitMs = 10000;

enum class Limit { nofile, address_space };
enum Step : int32_t { kNone = 0, kCreate, kPostRecv, kConnectWait, kAccept, kRequest };
const char *step_name(int s) {
    static const char *const n[] = {"none",           "VipCreateVi",      "VipPostRecv",
                                    "VipConnectWait", "VipConnectAccept", "VipConnectRequest"};
    return s >= 0 && s <= kRequest ? n[s] : "?";
}

const char *rc_name(int32_t rc) {
    return VipReturnString(static_cast<VIP_RETURN>(rc));
}

enum Command : char { kStop = 'S', kExchange = 'X', kClose = 'C' };

struct Report {
    int32_t ok = 0;
    int32_t connected = 0; // VIs connected before the failure (helper: in all)
    int32_t step = kNone;  // the call that failed
    int32_t rc = VIP_SUCCESS;
    int32_t checked = 0; // replies (limited) / messages answered (helper) checked
    int32_t clean = 0;   // descriptors and mappings back to before VipOpenNic
    int32_t fds_before = 0, fds_after = 0, maps_before = 0, maps_after = 0;
    char err[200] = {};
};

struct Msg {
    uint32_t magic;
    uint32_t index; // the limited process's connection number
    uint32_t reply; // 1: the helper's answer
    uint32_t pad;
};

uint64_t seed(uint32_t index, bool reply) {
    return index * 2ull + reply + 77;
}

// One NIC, one registered region of `max` slots, the VIs made so far.
class Side {
public:
    explicit Side(int max) : max_(max) {}

    bool open() {
        if (!vt::warm_up_library()) return fail("VipOpenNic (warm-up)");
        fds_before_ = vt::fd_count();
        maps_before_ = vt::map_count();
        if (VipOpenNic("shm0", &nic_) != VIP_SUCCESS) return fail("VipOpenNic");
        if (VipCreatePtag(nic_, &ptag_) != VIP_SUCCESS) return fail("VipCreatePtag");
        size_ = (max_ * kSlot + 4095) & ~size_t(4095);
        void *m = mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (m == MAP_FAILED) return fail("mmap");
        mem_ = static_cast<uint8_t *>(m);
        VIP_MEM_ATTRIBUTES ma{ptag_, VIP_FALSE, VIP_FALSE, VIP_FALSE};
        if (VipRegisterMem(nic_, mem_, size_, &ma, &mh_) != VIP_SUCCESS)
            return fail("VipRegisterMem");
        attrs_.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        attrs_.MaxTransferSize = 4096;
        attrs_.Ptag = ptag_;
        vis_.reserve(max_);
        return true;
    }

    // A new VI; on failure *step and *rc say why.
    VIP_VI_HANDLE make(int32_t *step, int32_t *rc) {
        VIP_VI_HANDLE vi = nullptr;
        *rc = VipCreateVi(nic_, &attrs_, nullptr, nullptr, &vi);
        if (*rc != VIP_SUCCESS) *step = kCreate;
        return *rc == VIP_SUCCESS ? vi : nullptr;
    }
    // The receive of a VI just connected, in slot vis_.size() (posted before
    // any message is sent to it: the messages come later).
    bool post_recv(VIP_VI_HANDLE vi, int32_t *step, int32_t *rc) {
        size_t k = vis_.size();
        set(rdesc(k), rbuf(k));
        *rc = VipPostRecv(vi, rdesc(k), mh_);
        if (*rc != VIP_SUCCESS) *step = kPostRecv;
        return *rc == VIP_SUCCESS;
    }
    // A VI that is not kept: disconnected if it connected, destroyed.
    bool drop(VIP_VI_HANDLE vi) {
        VIP_VI_STATE st;
        if (VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS && st != VIP_STATE_IDLE)
            VipDisconnect(vi);
        drain(vi);
        VIP_RETURN rc = VipDestroyVi(vi);
        return rc == VIP_SUCCESS || fail("VipDestroyVi of a VI not kept: %s", VipReturnString(rc));
    }
    // Takes every completion, flushed ones included (bounded: the queues are short).
    static void drain(VIP_VI_HANDLE vi) {
        VIP_DESCRIPTOR *d;
        for (int i = 0; i < 64 && VipSendDone(vi, &d) != VIP_NOT_DONE; ++i) {
        }
        for (int i = 0; i < 64 && VipRecvDone(vi, &d) != VIP_NOT_DONE; ++i) {
        }
    }
    void keep(VIP_VI_HANDLE vi) { vis_.push_back(vi); }

    bool post_send(size_t k, const Msg &m) {
        memcpy(sbuf(k), &m, sizeof m);
        vt::fill(sbuf(k) + sizeof m, kMsg - sizeof m, seed(m.index, m.reply));
        set(sdesc(k), sbuf(k));
        VIP_RETURN rc = VipPostSend(vis_[k], sdesc(k), mh_);
        return rc == VIP_SUCCESS || fail("VipPostSend on VI %zu: %s", k, VipReturnString(rc));
    }
    // The message received on VI k, if it is well formed.
    bool received(size_t k, VIP_DESCRIPTOR *d, Msg *m) {
        if (d != rdesc(k) || (d->CS.Status & VIP_STATUS_ERROR_MASK) || d->CS.Length != kMsg)
            return false;
        memcpy(m, rbuf(k), sizeof *m);
        return m->magic == kMagic &&
               vt::check(rbuf(k) + sizeof *m, kMsg - sizeof *m, seed(m->index, m->reply));
    }

    bool destroy_all(Report *r) {
        bool ok = true;
        for (VIP_VI_HANDLE vi : vis_) {
            VIP_VI_STATE st;
            if (VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS &&
                st != VIP_STATE_IDLE)
                VipDisconnect(vi);
            drain(vi);
            VIP_RETURN rc = VipDestroyVi(vi);
            if (rc != VIP_SUCCESS) ok = fail("VipDestroyVi: %s", VipReturnString(rc));
        }
        vis_.clear();
        if (VipDeregisterMem(nic_, mem_, mh_) != VIP_SUCCESS) ok = fail("VipDeregisterMem");
        if (VipDestroyPtag(nic_, ptag_) != VIP_SUCCESS) ok = fail("VipDestroyPtag");
        if (VipCloseNic(nic_) != VIP_SUCCESS) ok = fail("VipCloseNic");
        munmap(mem_, size_);
        std::vector<VIP_VI_HANDLE>().swap(vis_);
        r->fds_before = fds_before_;
        r->maps_before = maps_before_;
        r->fds_after = vt::fd_count();
        r->maps_after = vt::map_count();
        r->clean = r->fds_after == r->fds_before && r->maps_after == r->maps_before;
        return ok;
    }

    bool fail(const char *f, ...) __attribute__((format(printf, 2, 3))) {
        if (!err[0]) {
            va_list ap;
            va_start(ap, f);
            vsnprintf(err, sizeof err, f, ap);
            va_end(ap);
        }
        return false;
    }

    VIP_NIC_HANDLE nic_{};
    std::vector<VIP_VI_HANDLE> vis_;
    char err[200] = {};

private:
    VIP_DESCRIPTOR *sdesc(size_t k) { return reinterpret_cast<VIP_DESCRIPTOR *>(mem_ + k * kSlot); }
    VIP_DESCRIPTOR *rdesc(size_t k) {
        return reinterpret_cast<VIP_DESCRIPTOR *>(mem_ + k * kSlot + 64);
    }
    uint8_t *sbuf(size_t k) { return mem_ + k * kSlot + 128; }
    uint8_t *rbuf(size_t k) { return mem_ + k * kSlot + 128 + kMsg; }
    void set(VIP_DESCRIPTOR *d, uint8_t *buf) {
        memset(d, 0, sizeof *d);
        d->CS.SegCount = 1;
        d->CS.Length = kMsg;
        d->DS[0].Local.Data.Address = buf;
        d->DS[0].Local.Handle = mh_;
        d->DS[0].Local.Length = kMsg;
    }

    size_t max_;
    VIP_PROTECTION_HANDLE ptag_{};
    VIP_MEM_HANDLE mh_{};
    VIP_VI_ATTRIBUTES attrs_{};
    uint8_t *mem_ = nullptr;
    size_t size_ = 0;
    int fds_before_ = 0, maps_before_ = 0;
};

// The RLIMIT_NOFILE that leaves exactly `free` descriptor numbers to open
// (new descriptors take the lowest free number, below the limit).
rlim_t limit_leaving(int free) {
    std::vector<bool> used;
    if (DIR *d = opendir("/proc/self/fd")) {
        int self = dirfd(d);
        while (dirent *e = readdir(d)) {
            if (e->d_name[0] == '.') continue;
            int fd = atoi(e->d_name);
            if (fd == self) continue;
            if (fd >= static_cast<int>(used.size())) used.resize(fd + 1, false);
            used[fd] = true;
        }
        closedir(d);
    }
    rlim_t n = 0;
    for (int left = free;; ++n) {
        bool busy = n < used.size() && used[n];
        if (!busy && left-- == 0) return n;
    }
}

long vm_size_kib() {
    long v = -1;
    if (FILE *f = fopen("/proc/self/status", "re")) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "VmSize:", 7)) v = atol(line + 7);
        fclose(f);
    }
    return v;
}

struct Setup {
    Limit limit;
    bool limited_is_client;
    int slack;        // descriptors beyond a multiple of three (shifts where the limit bites)
    int max_vis;      // the limit must bite before this many
    std::string disc; // the server's
};

// The limited process: connects until a call fails, then proves its VIs work.
int limited(const Setup &s, vt::Link &link) {
    Report r;
    Side side(s.max_vis);
    auto send = [&] {
        snprintf(r.err, sizeof r.err, "%s", side.err);
        return link.put(&r, sizeof r);
    };
    if (!side.open()) return send(), 1;
    std::vector<uint8_t> self = vt::address(side.nic_, s.disc + "c");
    std::vector<uint8_t> server = vt::address(side.nic_, s.disc);
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 256);
    rlimit old_as;
    getrlimit(RLIMIT_AS, &old_as);
    if (s.limit == Limit::nofile) {
        // Room for about eight connections (three descriptors each).
        rlimit nl;
        getrlimit(RLIMIT_NOFILE, &nl);
        nl.rlim_cur = limit_leaving(3 * 8 + s.slack);
        if (setrlimit(RLIMIT_NOFILE, &nl) != 0) return side.fail("setrlimit NOFILE"), send(), 1;
    } else {
        // 4 MiB more: the first connection maps the peer's region table (2 MiB
        // with the default VIPL_MAX_REGIONS), every connection 20 KiB of rings.
        rlimit al = old_as;
        al.rlim_cur = (vm_size_kib() + 4096) * 1024;
        if (setrlimit(RLIMIT_AS, &al) != 0) return side.fail("setrlimit AS"), send(), 1;
    }
    // From here until the limit is lifted nothing is allocated by this code.
    double end = vt::now_s() + 60;
    while (static_cast<int>(side.vis_.size()) < s.max_vis) {
        VIP_VI_HANDLE vi = side.make(&r.step, &r.rc);
        if (!vi) break;
        VIP_RETURN rc;
        if (s.limited_is_client) {
            for (;;) {
                VIP_VI_ATTRIBUTES ra;
                rc = VipConnectRequest(vi, vt::net(self), vt::net(server), kWaitMs, &ra);
                if (rc != VIP_NO_MATCH || vt::now_s() > end) break;
                usleep(1000);
            }
            if (rc != VIP_SUCCESS) r.step = kRequest;
        } else {
            VIP_VI_ATTRIBUTES ra;
            VIP_CONN_HANDLE conn;
            rc = VipConnectWait(side.nic_, vt::net(server), kWaitMs, vt::net(remote), &ra, &conn);
            if (rc != VIP_SUCCESS) {
                r.step = kConnectWait;
            } else {
                rc = VipConnectAccept(conn, vi);
                if (rc != VIP_SUCCESS) r.step = kAccept;
            }
        }
        if (rc != VIP_SUCCESS) {
            r.rc = rc;
            side.drop(vi);
            break;
        }
        if (!side.post_recv(vi, &r.step, &r.rc)) {
            side.drop(vi);
            break;
        }
        side.keep(vi);
    }
    r.connected = static_cast<int32_t>(side.vis_.size());
    // A program that ran out of memory frees some; descriptors stay limited.
    if (s.limit == Limit::address_space) setrlimit(RLIMIT_AS, &old_as);
    r.ok = !side.err[0];
    if (!send()) return 2;

    char c;
    if (!link.get(&c, 1, 60000) || c != kExchange) return 3;
    // Every VI connected before the failure: a message out, the helper's answer back.
    bool ok = true;
    for (size_t k = 0; k < side.vis_.size() && ok; ++k)
        ok = side.post_send(k, Msg{kMagic, static_cast<uint32_t>(k), 0, 0});
    std::vector<uint8_t> got(side.vis_.size(), 0), sent(side.vis_.size(), 0);
    size_t n = side.vis_.size(), recvs = 0, sends = 0;
    end = vt::now_s() + 20;
    while (ok && (recvs < n || sends < n) && vt::now_s() < end) {
        for (size_t k = 0; k < n; ++k) {
            VIP_DESCRIPTOR *d;
            Msg m;
            if (!got[k] && VipRecvDone(side.vis_[k], &d) == VIP_SUCCESS) {
                got[k] = 1;
                ++recvs;
                if (side.received(k, d, &m) && m.index == k && m.reply == 1)
                    ++r.checked;
                else
                    ok = side.fail("VI %zu: wrong or failed answer (status %#x)", k, d->CS.Status);
            }
            if (!sent[k] && VipSendDone(side.vis_[k], &d) == VIP_SUCCESS) {
                sent[k] = 1;
                ++sends;
                if (d->CS.Status & VIP_STATUS_ERROR_MASK)
                    ok = side.fail("send on VI %zu: status %#x", k, d->CS.Status);
            }
        }
        usleep(200);
    }
    if (ok && (recvs < n || sends < n))
        side.fail("%zu of %zu answers, %zu of %zu sends", recvs, n, sends, n);
    r.ok = !side.err[0];
    if (!send()) return 4;

    if (!link.get(&c, 1, 60000) || c != kClose) return 5;
    r.ok = side.destroy_all(&r) && !side.err[0];
    send();
    return r.ok ? 0 : 6;
}

// The helper: accepts (or requests) connections until told to stop, then
// answers every message.
int helper(const Setup &s, vt::Link &link) {
    Report r;
    Side side(s.max_vis + 8);
    auto send = [&] {
        snprintf(r.err, sizeof r.err, "%s", side.err);
        return link.put(&r, sizeof r);
    };
    if (!side.open()) return send(), 1;
    std::vector<uint8_t> self = vt::address(side.nic_, s.disc + "h");
    std::vector<uint8_t> server = vt::address(side.nic_, s.disc);
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 256);
    VIP_VI_HANDLE spare = nullptr;
    double end = vt::now_s() + 60;
    char c = 0;
    while (vt::now_s() < end) {
        if (link.get(&c, 1, 0)) break;
        if (static_cast<int>(side.vis_.size()) >= s.max_vis + 8) {
            usleep(1000);
            continue;
        }
        if (!spare && !(spare = side.make(&r.step, &r.rc))) {
            side.fail("helper: %s: %s", step_name(r.step), rc_name(r.rc));
            break;
        }
        VIP_RETURN rc;
        if (s.limited_is_client) {
            VIP_VI_ATTRIBUTES ra;
            VIP_CONN_HANDLE conn;
            rc = VipConnectWait(side.nic_, vt::net(server), 100, vt::net(remote), &ra, &conn);
            if (rc == VIP_TIMEOUT) continue;
            if (rc == VIP_SUCCESS) rc = VipConnectAccept(conn, spare);
        } else {
            VIP_VI_ATTRIBUTES ra;
            rc = VipConnectRequest(spare, vt::net(self), vt::net(server), 300, &ra);
            if (rc != VIP_SUCCESS) usleep(1000);
        }
        // A VI whose connection failed is Idle again: tried again.
        if (rc != VIP_SUCCESS) continue;
        if (!side.post_recv(spare, &r.step, &r.rc)) {
            side.fail("helper: VipPostRecv: %s", rc_name(r.rc));
            break;
        }
        side.keep(spare);
        spare = nullptr;
    }
    if (spare) side.drop(spare);
    r.connected = static_cast<int32_t>(side.vis_.size());
    r.ok = c == kStop && !side.err[0];
    if (!r.ok && !side.err[0]) side.fail("helper: no stop command");
    if (!send()) return 2;

    int32_t expect;
    if (!link.get(&expect, sizeof expect, 60000)) return 3;
    // Connections the limited process gave up half-way end in error here: skipped.
    size_t n = side.vis_.size();
    std::vector<uint8_t> got(n, 0);
    end = vt::now_s() + 20;
    while (r.checked < expect && vt::now_s() < end && !side.err[0]) {
        for (size_t k = 0; k < n; ++k) {
            VIP_DESCRIPTOR *d;
            Msg m;
            if (got[k] || VipRecvDone(side.vis_[k], &d) != VIP_SUCCESS) continue;
            got[k] = 1;
            if (!side.received(k, d, &m)) continue;
            if (m.reply != 0) side.fail("helper: VI %zu got an answer", k);
            ++r.checked;
            side.post_send(k, Msg{kMagic, m.index, 1, 0});
        }
        for (size_t k = 0; k < n; ++k) {
            VIP_DESCRIPTOR *d;
            VipSendDone(side.vis_[k], &d);
        }
        usleep(200);
    }
    // Until the limited process has its answers, keep the sends progressing.
    if (!link.get(&c, 1, 60000) || c != kClose) return 4;
    r.ok = side.destroy_all(&r) && !side.err[0];
    send();
    return r.ok ? 0 : 5;
}

void run_case(Limit limit, bool limited_is_client, int slack) {
    Setup s{limit, limited_is_client, slack, limit == Limit::nofile ? 40 : 400,
            vt::unique_disc("-x")};
    INFO("limited process: " << (limited_is_client ? "client" : "server") << ", limit: "
                             << (limit == Limit::nofile ? "RLIMIT_NOFILE" : "RLIMIT_AS")
                             << ", slack " << slack);
    vt::Link lim_link, help_link;
    vt::Workers w;
    w.pids.push_back(vt::spawn_child([&] {
        lim_link.in_child();
        return limited(s, lim_link);
    }));
    w.pids.push_back(vt::spawn_child([&] {
        help_link.in_child();
        return helper(s, help_link);
    }));
    lim_link.in_parent();
    help_link.in_parent();

    Report lr, hr;
    REQUIRE(lim_link.get(&lr, sizeof lr, 70000));
    INFO("limited: " << lr.err);
    CHECK(lr.ok);
    printf("[measure] %s, limited %s, slack %d: %d VIs connected, then %s returned %s\n",
           limit == Limit::nofile ? "RLIMIT_NOFILE" : "RLIMIT_AS",
           limited_is_client ? "client" : "server", slack, lr.connected, step_name(lr.step),
           rc_name(lr.rc));
    fflush(stdout);
    // The limit was reached (not the loop's end), with some VIs connected first.
    CHECK(lr.step != kNone);
    CHECK(lr.connected >= 1);
    CHECK(lr.connected < s.max_vis);
    CHECK(rc_name(lr.rc) == std::string("VIP_ERROR_RESOURCE"));

    char c = kStop;
    REQUIRE(help_link.put(&c, 1));
    REQUIRE(help_link.get(&hr, sizeof hr, 70000));
    INFO("helper: " << hr.err);
    REQUIRE(hr.ok);
    // The helper may hold one more: a connection the limited side gave up after the helper's last
    // step.
    CHECK(hr.connected >= lr.connected);
    CHECK(hr.connected <= lr.connected + 1);

    int32_t expect = lr.connected;
    REQUIRE(help_link.put(&expect, sizeof expect));
    c = kExchange;
    REQUIRE(lim_link.put(&c, 1));
    REQUIRE(lim_link.get(&lr, sizeof lr, 70000));
    INFO("limited after the exchange: " << lr.err);
    CHECK(lr.ok);
    CHECK(lr.checked == lr.connected);

    c = kClose;
    REQUIRE(lim_link.put(&c, 1));
    REQUIRE(help_link.put(&c, 1));
    REQUIRE(lim_link.get(&lr, sizeof lr, 70000));
    REQUIRE(help_link.get(&hr, sizeof hr, 70000));
    INFO("limited at the end: " << lr.err << "; helper: " << hr.err);
    CHECK(lr.ok);
    CHECK(hr.ok);
    CHECK(hr.checked == lr.connected);
    INFO("limited: " << lr.fds_after << " descriptors, " << lr.maps_after << " mappings; before "
                     << lr.fds_before << ", " << lr.maps_before);
    CHECK(lr.clean);
    std::vector<int> st = w.wait_all(vt::now_s() + 20);
    CHECK(vt::status_text(st[0]) == "exit 0");
    CHECK(vt::status_text(st[1]) == "exit 0");
}

} // namespace

TEST_CASE("out of descriptors: VIP_ERROR_RESOURCE, earlier VIs keep working, all destroyable",
          "[scale][exhaustion]") {
    bool client = GENERATE(true, false);
    // A connection takes three descriptors, and more for a moment while it is
    // set up: three slacks make the limit bite at every step of the handshake.
    int slack = GENERATE(0, 1, 2);
    run_case(Limit::nofile, client, slack);
}

TEST_CASE("out of address space: VIP_ERROR_RESOURCE, earlier VIs keep working, all destroyable",
          "[scale][exhaustion]") {
    bool client = GENERATE(true, false);
    run_case(Limit::address_space, client, 0);
}

namespace {

// One message each way between a and b (receives posted by the caller).
void exchange(VIP_VI_HANDLE a, VIP_VI_HANDLE b, uint8_t *mem, VIP_MEM_HANDLE mha, uint8_t *pmem,
              VIP_MEM_HANDLE mhb, uint32_t round) {
    auto *sa = reinterpret_cast<VIP_DESCRIPTOR *>(mem);
    auto *sb = reinterpret_cast<VIP_DESCRIPTOR *>(pmem);
    vt::fill(mem + 1024, kMsg, round * 2);
    vt::fill(pmem + 1024, kMsg, round * 2 + 1);
    vt::set_desc(sa, mem + 1024, kMsg, mha);
    vt::set_desc(sb, pmem + 1024, kMsg, mhb);
    REQUIRE(VipPostSend(a, sa, mha) == VIP_SUCCESS);
    REQUIRE(VipPostSend(b, sb, mhb) == VIP_SUCCESS);
    VIP_DESCRIPTOR *d;
    for (auto [vi, want] : {std::pair{a, sa}, std::pair{b, sb}}) {
        REQUIRE(VipSendWait(vi, vt::kWaitMs, &d) == VIP_SUCCESS);
        CHECK(d == want);
    }
    REQUIRE(VipRecvWait(a, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(vt::check(mem + 2048, kMsg, round * 2 + 1));
    REQUIRE(VipRecvWait(b, vt::kWaitMs, &d) == VIP_SUCCESS);
    CHECK(vt::check(pmem + 2048, kMsg, round * 2));
}

void post_recv(VIP_VI_HANDLE vi, uint8_t *mem, VIP_MEM_HANDLE mh) {
    auto *r = reinterpret_cast<VIP_DESCRIPTOR *>(mem + 64);
    vt::set_desc(r, mem + 2048, kMsg, mh);
    REQUIRE(VipPostRecv(vi, r, mh) == VIP_SUCCESS);
}

} // namespace

// Run in a fresh process with a 16 MiB shared arena (the smallest allowed).
TEST_CASE("arena exhaustion in a fresh process (run by the test below)", "[.][arena-body]") {
    REQUIRE(vt::config_value("SHARED_ARENA_MB") == "16");
    // Every shareable VI also holds an eventfd: room for many more than the arena holds.
    REQUIRE(vt::raise_nofile(std::min<rlim_t>(vt::nofile_reachable(), 65536)) == "");
    int fds_before = vt::fd_count();
    vt::Nic n("shm0"), peer("shm0");
    // Shareable VIs need their descriptors and buffers in shareable memory.
    size_t size = 1 << 16;
    void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    auto *mem = static_cast<uint8_t *>(m);
    VIP_MEM_ATTRIBUTES ma{n.ptag, VIP_FALSE, VIP_FALSE, VIP_TRUE};
    VIP_MEM_HANDLE mh;
    REQUIRE(VipRegisterMem(n.nic, mem, size, &ma, &mh) == VIP_SUCCESS);
    vt::Memory pm(peer, size);

    VIP_VI_ATTRIBUTES va = vt::vi_attrs(n);
    va.Shareable = VIP_TRUE;
    // One shareable VI connected and used before the arena fills up.
    vt::Pair p = vt::connect_pair(n, peer, va, vt::vi_attrs(peer), nullptr, nullptr, nullptr,
                                  nullptr, [&](VIP_VI_HANDLE a, VIP_VI_HANDLE b) {
                                      post_recv(a, mem, mh);
                                      post_recv(b, pm.base, pm.mh);
                                  });
    exchange(p.a, p.b, mem, mh, pm.base, pm.mh, 1);

    std::vector<VIP_VI_HANDLE> vis;
    VIP_RETURN rc = VIP_SUCCESS;
    while (vis.size() < 200000) {
        VIP_VI_HANDLE vi;
        rc = VipCreateVi(n.nic, &va, nullptr, nullptr, &vi);
        if (rc != VIP_SUCCESS) break;
        vis.push_back(vi);
    }
    rlimit nl;
    getrlimit(RLIMIT_NOFILE, &nl);
    int fds_full = vt::fd_count();
    printf("[measure] 16 MiB shared arena: %zu more shareable VIs, then VipCreateVi returned %s "
           "(%d descriptors open, limit %llu)\n",
           vis.size(), VipReturnString(rc), fds_full, static_cast<unsigned long long>(nl.rlim_cur));
    fflush(stdout);
    CHECK(rc == VIP_ERROR_RESOURCE);
    CHECK(vis.size() >= 100);
    // The arena ran out, not the descriptors.
    CHECK(static_cast<rlim_t>(fds_full) + 100 < nl.rlim_cur);

    // The VI connected before still works both ways.
    post_recv(p.a, mem, mh);
    post_recv(p.b, pm.base, pm.mh);
    exchange(p.a, p.b, mem, mh, pm.base, pm.mh, 2);

    for (VIP_VI_HANDLE vi : vis) CHECK(VipDestroyVi(vi) == VIP_SUCCESS);
    // What was freed is used again.
    VIP_VI_HANDLE again;
    CHECK(VipCreateVi(n.nic, &va, nullptr, nullptr, &again) == VIP_SUCCESS);
    CHECK(VipDestroyVi(again) == VIP_SUCCESS);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
    CHECK(VipDeregisterMem(n.nic, mem, mh) == VIP_SUCCESS);
    munmap(mem, size);
    n.close();
    peer.close();
    CHECK(vt::fd_count() == fds_before);
}

TEST_CASE("shared arena full: VIP_ERROR_RESOURCE, earlier VIs keep working, all destroyable",
          "[scale][exhaustion]") {
    int status = vt::run_fresh("arena exhaustion in a fresh process (run by the test below)",
                               {"VIPL_SHARED_ARENA_MB=16"}, 120);
    INFO(vt::status_text(status));
    CHECK(status == 0);
}
