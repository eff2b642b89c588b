// How many VIs one host holds and what they cost, and the paper's argument
// for VIs shared across fork().
//
//   bench-vi-scale --mode fleet [--vis N] [--timeout S]
//     N connected VIs (N/2 connections) spread over server and client
//     processes (libvipl/tests/scale/fleet.h), one message each way on every
//     VI, then 512-byte messages until every ring went once round; set-up
//     rate and memory per idle connected VI at each stage.
//     VIPL_SHM_RING_SIZE in the environment sets the ring size.
//
//   bench-vi-scale --mode paper --servers S --clients C --share 0|1 [--timeout S]
//     The paper's parallel database on one node: S server processes and C
//     client processes, fully connected, two VIs (one at each end) per
//     connection.  Without sharing every server process connects to every
//     client process (S x C connections).  With sharing a server parent
//     connects one shareable VI per client (C connections) and forks its S
//     workers, which all use them.  In both cases every server worker sends
//     one message to every client, which answers it; both check the content.
//
// Output, one figure a line (parsed by run.py):  MODE KEY VALUE UNIT
//
// Memory is what the kernel added (Shmem, PageTables, KernelStack from
// /proc/meminfo, slab objects from /proc/slabinfo but for the /proc entries
// that programs listing /proc/PID/fd made meanwhile) plus the growth of the
// processes' own memory (sum of Pss_Anon), between two points of the run.
#include "fleet.h"

#include <vipl.h>
#include <vipl_ext.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using vt::fmt;

[[noreturn]] void die(const std::string &what) {
    fprintf(stderr, "bench-vi-scale: %s\n", what.c_str());
    exit(1);
}

// In a child just forked: it dies with its parent (a coordinator that gives
// up leaves nothing running).
void die_with_parent(pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(70);
}

// ------------------------------------------------------------------ fleet

int run_fleet_mode(long long vis, double timeout) {
    vt::FleetPlan p = vt::fleet_plan(vis);
    p.prefix = fmt("b%d-f", getpid());
    p.timeout_s = timeout;
    vt::FleetResult r =
        vt::run_fleet(p, [](const std::string &s) { fprintf(stderr, "  %s\n", s.c_str()); });
    if (!r.err.empty()) die(r.err);
    if (r.connected != r.vis || r.messages_checked != r.vis || r.destroyed != r.vis ||
        r.wrap_messages < 8 * r.vis)
        die(fmt("%lld of %lld connected, %lld messages checked, %lld destroyed", r.connected, r.vis,
                r.messages_checked, r.destroyed));
    if (r.clean_workers != r.workers || r.conn_maps_left || r.sockets_left)
        die(fmt("something of the connections outlived them: %d of %d workers clean, %lld "
                "connection mappings, %d listening sockets left (%s)",
                r.clean_workers, r.workers, r.conn_maps_left, r.sockets_left, r.unclean.c_str()));
    vt::PerVi idle = vt::per_vi(r.ready, r.connected_idle, r.p_ready, r.p_connected, r.vis);
    vt::PerVi used = vt::per_vi(r.ready, r.after_messages, r.p_ready, r.p_messages, r.vis);
    vt::PerVi full = vt::per_vi(r.ready, r.after_wrap, r.p_ready, r.p_wrap, r.vis);
    printf("fleet vis %lld VIs\n", r.vis);
    printf("fleet processes %d 1\n", r.workers);
    printf("fleet setup_rate %.0f conn/s\n", r.connections / r.setup_s);
    printf("fleet setup_s %.3f s\n", r.setup_s);
    printf("fleet teardown_rate %.0f VIs/s\n", r.vis / r.teardown_s);
    printf("fleet fds_per_vi %.3f 1\n", double(r.fds_connected - r.fds_ready) / r.vis);
    printf("fleet maps_per_vi %.3f 1\n", double(r.maps_connected - r.maps_ready) / r.vis);
    printf("fleet ring %u B\n", vt::ring_size());
    printf("fleet wrap_messages %lld 1\n", r.wrap_messages);
    for (auto [tag, m] :
         {std::pair{"idle", idle}, std::pair{"msg", used}, std::pair{"wrap", full}}) {
        printf("fleet kib_per_vi_%s %.3f KiB\n", tag, m.total);
        printf("fleet shmem_per_vi_%s %.3f KiB\n", tag, m.shmem);
        printf("fleet slab_per_vi_%s %.3f KiB\n", tag, m.slab);
        printf("fleet procslab_per_vi_%s %.3f KiB\n", tag, m.proc_slab);
        printf("fleet slabpages_per_vi_%s %.3f KiB\n", tag, m.slab_pages);
        printf("fleet pagetables_per_vi_%s %.3f KiB\n", tag, m.page_tables + m.kernel_stack);
        printf("fleet anon_per_vi_%s %.3f KiB\n", tag, m.anon);
        printf("fleet memavail_per_vi_%s %.3f KiB\n", tag, m.mem_available);
    }
    return 0;
}

// ------------------------------------------------------------------ paper

constexpr uint32_t kMsg = 64;
constexpr size_t kSlot = 128; // a descriptor, then its 64-byte buffer
constexpr uint32_t kMagic = 0x50415052;

struct Msg {
    uint32_t magic;
    uint16_t reply; // 1: the client's answer
    uint16_t worker;
    uint32_t client;
    uint32_t pad;
};

uint64_t seed(const Msg &m) {
    return (uint64_t(m.client) << 20) ^ (uint64_t(m.worker) << 4) ^ m.reply ^ 0x5a5a;
}

enum Cmd : char { kFork = 'W', kGo = 'G', kExchange = 'X', kClose = 'C' };

struct Report {
    int32_t ok = 0;
    int32_t pid = 0;
    int64_t count = 0;
    char err[200] = {};
};

struct Plan {
    int S = 8, C = 64;
    bool share = false;
    std::string prefix;
    double timeout = 60;
};

// A NIC with one registered region of slots; the region is shareable (and
// MAP_SHARED) when the VIs are.
struct Endpoint {
    VIP_NIC_HANDLE nic{};
    VIP_PROTECTION_HANDLE ptag{};
    VIP_MEM_HANDLE mh{};
    uint8_t *mem = nullptr;
    size_t size = 0;
    VIP_VI_ATTRIBUTES attrs{};
    std::string err;

    bool open(size_t slots, bool shareable) {
        if (VipOpenNic("shm0", &nic) != VIP_SUCCESS) return fail("VipOpenNic");
        if (VipCreatePtag(nic, &ptag) != VIP_SUCCESS) return fail("VipCreatePtag");
        size = (slots * kSlot + 4095) & ~size_t(4095);
        int flags = (shareable ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS | MAP_POPULATE;
        void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, flags, -1, 0);
        if (m == MAP_FAILED) return fail("mmap");
        mem = static_cast<uint8_t *>(m);
        VIP_MEM_ATTRIBUTES ma{ptag, VIP_FALSE, VIP_FALSE, shareable ? VIP_TRUE : VIP_FALSE};
        if (VipRegisterMem(nic, mem, size, &ma, &mh) != VIP_SUCCESS) return fail("VipRegisterMem");
        attrs.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        attrs.MaxTransferSize = 4096;
        attrs.Ptag = ptag;
        attrs.Shareable = shareable ? VIP_TRUE : VIP_FALSE;
        return true;
    }
    bool fail(const std::string &e) {
        if (err.empty()) err = e;
        return false;
    }
    bool check(VIP_RETURN rc, const char *what) {
        return rc == VIP_SUCCESS || fail(fmt("%s: %s", what, VipReturnString(rc)));
    }
    VIP_DESCRIPTOR *desc(size_t slot) {
        return reinterpret_cast<VIP_DESCRIPTOR *>(mem + slot * kSlot);
    }
    uint8_t *buf(size_t slot) { return mem + slot * kSlot + 64; }
    void set(size_t slot) {
        VIP_DESCRIPTOR *d = desc(slot);
        memset(d, 0, sizeof *d);
        d->CS.SegCount = 1;
        d->CS.Length = kMsg;
        d->DS[0].Local.Data.Address = buf(slot);
        d->DS[0].Local.Handle = mh;
        d->DS[0].Local.Length = kMsg;
    }
    bool post_recv(VIP_VI_HANDLE vi, size_t slot) {
        set(slot);
        return check(VipPostRecv(vi, desc(slot), mh), "VipPostRecv");
    }
    bool post_send(VIP_VI_HANDLE vi, size_t slot, const Msg &m) {
        memcpy(buf(slot), &m, sizeof m);
        vt::fill(buf(slot) + sizeof m, kMsg - sizeof m, seed(m));
        set(slot);
        return check(VipPostSend(vi, desc(slot), mh), "VipPostSend");
    }
    // The message in a completed receive, if it arrived whole and intact.
    bool message(VIP_DESCRIPTOR *d, Msg *m) {
        if ((d->CS.Status & VIP_STATUS_ERROR_MASK) || d->CS.Length != kMsg) return false;
        const uint8_t *b = reinterpret_cast<const uint8_t *>(d->DS[0].Local.Data.Address);
        memcpy(m, b, sizeof *m);
        return m->magic == kMagic && vt::check(b + sizeof *m, kMsg - sizeof *m, seed(*m));
    }
    void close() {
        if (mh) VipDeregisterMem(nic, mem, mh);
        if (ptag) VipDestroyPtag(nic, ptag);
        if (nic) VipCloseNic(nic);
        if (mem) munmap(mem, size);
        mh = 0;
        ptag = nullptr;
        nic = nullptr;
        mem = nullptr;
    }
};

void drain(VIP_VI_HANDLE vi) {
    VIP_DESCRIPTOR *d;
    for (int i = 0; i < 1024 && VipSendDone(vi, &d) != VIP_NOT_DONE; ++i) {
    }
    for (int i = 0; i < 1024 && VipRecvDone(vi, &d) != VIP_NOT_DONE; ++i) {
    }
}

// Disconnects and destroys a VI this process is the last holder of.
bool destroy(VIP_VI_HANDLE vi) {
    VIP_VI_STATE st;
    if (VipQueryVi(vi, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS && st != VIP_STATE_IDLE)
        VipDisconnect(vi);
    drain(vi);
    return VipDestroyVi(vi) == VIP_SUCCESS;
}

// What the server parent and its workers share besides the VIs (sharing mode).
struct Board {
    std::atomic<int64_t> replies, sends; // taken by any worker
    std::atomic<uint32_t> client_of[1];  // per shared VI; then seen[S*C]
};

class Paper {
public:
    explicit Paper(const Plan &p) : p_(p) {}
    int main();

private:
    // --- processes
    int parent(vt::Link &self);
    int worker(int w, vt::Link &self);
    int client(int c, vt::Link &self);
    bool accept_clients(Endpoint &ep, std::vector<VIP_VI_HANDLE> &vis, const std::string &disc,
                        std::vector<uint32_t> &client_of, int recvs_per_vi, size_t first_slot);

    std::atomic<uint32_t> *seen(int w, int c) {
        return &board_->client_of[p_.C] + size_t(w) * p_.C + c;
    }
    static bool reply(vt::Link &l, bool ok, int64_t count, const std::string &err) {
        Report r;
        r.ok = ok;
        r.pid = getpid();
        r.count = count;
        snprintf(r.err, sizeof r.err, "%s", err.c_str());
        return l.put(&r, sizeof r);
    }
    bool get_cmd(vt::Link &l, char want) {
        char c = 0;
        return l.get(&c, 1, static_cast<int>(p_.timeout * 1000)) && c == want;
    }
    std::string disc(const char *role, int i) const { return p_.prefix + role + std::to_string(i); }

    const Plan &p_;
    // Made before fork: the parent's and the workers' views of the same objects.
    std::vector<std::unique_ptr<vt::Link>> worker_links_;
    Endpoint shared_ep_;
    std::vector<VIP_VI_HANDLE> shared_vis_;
    Board *board_ = nullptr;
    size_t board_size_ = 0;
};

bool Paper::accept_clients(Endpoint &ep, std::vector<VIP_VI_HANDLE> &vis, const std::string &name,
                           std::vector<uint32_t> &client_of, int recvs_per_vi, size_t first_slot) {
    auto local = vt::address(ep.nic, name);
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 256);
    std::string want = p_.prefix + "c";
    long deadline_ms = static_cast<long>(p_.timeout * 1000);
    for (int k = 0; k < p_.C; ++k) {
        VIP_VI_HANDLE vi;
        if (!ep.check(VipCreateVi(ep.nic, &ep.attrs, nullptr, nullptr, &vi), "VipCreateVi"))
            return false;
        vis.push_back(vi);
        for (int j = 0; j < recvs_per_vi; ++j)
            if (!ep.post_recv(vi, first_slot + size_t(k) * recvs_per_vi + j)) return false;
        VIP_VI_ATTRIBUTES ra;
        VIP_CONN_HANDLE conn;
        if (!ep.check(
                VipConnectWait(ep.nic, vt::net(local), deadline_ms, vt::net(remote), &ra, &conn),
                "VipConnectWait"))
            return false;
        std::string d = vt::disc_of(vt::net(remote));
        unsigned c;
        if (d.compare(0, want.size(), want) != 0 ||
            sscanf(d.c_str() + want.size(), "%u", &c) != 1 || c >= unsigned(p_.C))
            return ep.fail("unexpected client " + d);
        client_of.push_back(c);
        if (!ep.check(VipConnectAccept(conn, vi), "VipConnectAccept")) return false;
    }
    return true;
}

// Sharing: holds the NIC, the shareable memory and VIs, forks the workers.
// Without sharing: only forks the workers (at the same point of the run, so
// that both runs count the same processes).
int Paper::parent(vt::Link &self) {
    std::vector<uint32_t> client_of;
    if (p_.share) {
        // Receive slots: S per VI; send slots: one per worker and VI.
        if (!shared_ep_.open(2 * size_t(p_.S) * p_.C, true))
            return reply(self, false, 0, shared_ep_.err), 1;
        board_size_ = (sizeof(Board) + 4 * (p_.C + size_t(p_.S) * p_.C) + 4095) & ~size_t(4095);
        void *b =
            mmap(nullptr, board_size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED) return reply(self, false, 0, "mmap"), 1;
        board_ = new (b) Board{};
    }
    if (!reply(self, true, 0, "")) return 2;
    std::vector<pid_t> kids;
    bool forked = false;
    for (;;) {
        char c = 0;
        if (!self.get(&c, 1, static_cast<int>(p_.timeout * 1000))) return 3;
        if (c == kGo && p_.share) {
            bool ok = accept_clients(shared_ep_, shared_vis_, disc("p", 0), client_of, p_.S, 0);
            for (size_t k = 0; k < client_of.size(); ++k) board_->client_of[k] = client_of[k];
            if (!reply(self, ok, static_cast<int64_t>(shared_vis_.size()), shared_ep_.err))
                return 4;
        } else if (c == kFork && !forked) {
            forked = true;
            fflush(nullptr);
            pid_t self_pid = getpid();
            for (int w = 0; w < p_.S; ++w) {
                pid_t pid = fork();
                if (pid == 0) {
                    die_with_parent(self_pid);
                    for (int o = 0; o < p_.S; ++o)
                        if (o != w) {
                            close(worker_links_[o]->down[0]);
                            close(worker_links_[o]->up[1]);
                        }
                    worker_links_[w]->in_child();
                    int code = worker(w, *worker_links_[w]);
                    fflush(nullptr);
                    _exit(code);
                }
                kids.push_back(pid);
            }
            // The workers report to the coordinator themselves.
        } else if (c == kClose) {
            bool ok = true;
            std::string err;
            double end = vt::now_s() + p_.timeout;
            for (pid_t k : kids) {
                int st = -1;
                while (waitpid(k, &st, WNOHANG) == 0 && vt::now_s() < end) usleep(1000);
                if (st != 0) {
                    kill(k, SIGKILL);
                    waitpid(k, nullptr, 0);
                    ok = false;
                    err = fmt("worker %d ended with status %#x", k, st);
                }
            }
            // The workers dropped their references: this process is the last holder.
            for (VIP_VI_HANDLE vi : shared_vis_)
                if (!destroy(vi)) ok = false, err = "VipDestroyVi in the parent";
            if (p_.share) shared_ep_.close();
            reply(self, ok, 0, err);
            return ok ? 0 : 5;
        } else {
            return 6;
        }
    }
}

int Paper::worker(int w, vt::Link &self) {
    Endpoint own;
    Endpoint &ep = p_.share ? shared_ep_ : own;
    std::vector<VIP_VI_HANDLE> vis;
    std::vector<uint32_t> client_of;
    if (p_.share) {
        vis = shared_vis_;
        for (int k = 0; k < p_.C; ++k) client_of.push_back(board_->client_of[k]);
    } else if (!own.open(2 * size_t(p_.C), false)) {
        return reply(self, false, 0, own.err), 1;
    }
    if (!reply(self, true, 0, "")) return 2;
    if (!p_.share) {
        if (!get_cmd(self, kGo)) return 3;
        // Receive slot k, send slot C + k.
        bool ok = accept_clients(own, vis, disc("s", w), client_of, 1, 0);
        if (!reply(self, ok, static_cast<int64_t>(vis.size()), own.err)) return 4;
    }
    if (!get_cmd(self, kExchange)) return 5;
    int64_t mine = 0;
    bool ok = true;
    for (int k = 0; k < p_.C && ok; ++k) {
        size_t slot = p_.share ? size_t(p_.S) * p_.C + size_t(w) * p_.C + k : size_t(p_.C) + k;
        ok = ep.post_send(vis[k], slot, Msg{kMagic, 0, uint16_t(w), client_of[k], 0});
    }
    // Without sharing each worker waits for its own C answers; with sharing
    // any worker may take any completion of a shared VI: they stop together.
    int64_t sends = 0, replies = 0;
    int64_t total = p_.share ? int64_t(p_.S) * p_.C : p_.C;
    double end = vt::now_s() + p_.timeout;
    auto done = [&] {
        if (!p_.share) return replies == total && sends == total;
        return board_->replies.load() == total && board_->sends.load() == total;
    };
    while (ok && !done()) {
        bool progress = false;
        for (int k = 0; k < p_.C && ok; ++k) {
            VIP_DESCRIPTOR *d;
            Msg m;
            if (VipRecvDone(vis[k], &d) == VIP_SUCCESS) {
                progress = true;
                if (!ep.message(d, &m) || m.reply != 1 || m.client != client_of[k] ||
                    m.worker >= p_.S || (!p_.share && m.worker != w)) {
                    ok = ep.fail(fmt("worker %d, VI %d: wrong answer", w, k));
                    break;
                }
                if (p_.share && seen(m.worker, m.client)->fetch_add(1) != 0) {
                    ok = ep.fail(
                        fmt("answer to worker %u from client %u taken twice", m.worker, m.client));
                    break;
                }
                ++mine;
                ++replies;
                if (p_.share) board_->replies.fetch_add(1);
            }
            if (VipSendDone(vis[k], &d) == VIP_SUCCESS) {
                progress = true;
                if (d->CS.Status & VIP_STATUS_ERROR_MASK)
                    ok = ep.fail(fmt("worker %d: send status %#x", w, d->CS.Status));
                ++sends;
                if (p_.share) board_->sends.fetch_add(1);
            }
        }
        if (!progress) {
            if (vt::now_s() > end) ok = ep.fail(fmt("worker %d: exchange timed out", w));
            usleep(100);
        }
    }
    if (!reply(self, ok, mine, ep.err)) return 6;
    if (!get_cmd(self, kClose)) return 7;
    // With sharing this only drops the worker's reference.
    for (VIP_VI_HANDLE vi : vis) {
        bool gone = p_.share ? VipDestroyVi(vi) == VIP_SUCCESS : destroy(vi);
        if (!gone) ok = ep.fail(fmt("worker %d: VipDestroyVi", w));
    }
    if (!p_.share) own.close();
    reply(self, ok, 0, ep.err);
    return ok ? 0 : 8;
}

int Paper::client(int c, vt::Link &self) {
    Endpoint ep;
    // Receive slot j and send slot S + j: one per server worker.
    if (!ep.open(2 * size_t(p_.S), false)) return reply(self, false, 0, ep.err), 1;
    if (!reply(self, true, 0, "")) return 2;
    if (!get_cmd(self, kGo)) return 3;
    std::vector<VIP_VI_HANDLE> vis;
    auto local = vt::address(ep.nic, p_.prefix + "c" + std::to_string(c));
    double end = vt::now_s() + p_.timeout;
    bool ok = true;
    int nvis = p_.share ? 1 : p_.S;
    for (int s = 0; s < nvis && ok; ++s) {
        VIP_VI_HANDLE vi;
        ok = ep.check(VipCreateVi(ep.nic, &ep.attrs, nullptr, nullptr, &vi), "VipCreateVi");
        if (!ok) break;
        vis.push_back(vi);
        for (int j = p_.share ? 0 : s; j < (p_.share ? p_.S : s + 1) && ok; ++j)
            ok = ep.post_recv(vi, j);
        auto remote = vt::address(ep.nic, p_.share ? disc("p", 0) : disc("s", s));
        VIP_RETURN rc;
        for (;;) {
            VIP_VI_ATTRIBUTES ra;
            long left = std::max(0L, long((end - vt::now_s()) * 1000));
            rc = VipConnectRequest(vi, vt::net(local), vt::net(remote), left, &ra);
            if (rc != VIP_NO_MATCH || left == 0) break;
            usleep(1000);
        }
        ok = ok && ep.check(rc, "VipConnectRequest");
    }
    if (!reply(self, ok, static_cast<int64_t>(vis.size()), ep.err)) return 4;
    if (!get_cmd(self, kExchange)) return 5;
    // Answers every worker's message on the VI it came by.
    std::vector<uint8_t> from(p_.S, 0);
    int answered = 0, sent = 0;
    end = vt::now_s() + p_.timeout;
    while (ok && (answered < p_.S || sent < p_.S)) {
        bool progress = false;
        for (size_t v = 0; v < vis.size() && ok; ++v) {
            VIP_DESCRIPTOR *d;
            Msg m;
            if (VipRecvDone(vis[v], &d) == VIP_SUCCESS) {
                progress = true;
                if (!ep.message(d, &m) || m.reply != 0 || m.client != unsigned(c) ||
                    m.worker >= p_.S || (!p_.share && m.worker != v) || from[m.worker]++) {
                    ok = ep.fail(fmt("client %d: wrong message on VI %zu", c, v));
                    break;
                }
                m.reply = 1;
                ok = ep.post_send(vis[v], p_.S + m.worker, m);
                ++answered;
            }
            if (VipSendDone(vis[v], &d) == VIP_SUCCESS) {
                progress = true;
                if (d->CS.Status & VIP_STATUS_ERROR_MASK)
                    ok = ep.fail(fmt("client %d: send status %#x", c, d->CS.Status));
                ++sent;
            }
        }
        if (!progress) {
            if (vt::now_s() > end)
                ok = ep.fail(fmt("client %d: %d of %d answered", c, answered, p_.S));
            usleep(100);
        }
    }
    if (!reply(self, ok, answered, ep.err)) return 6;
    if (!get_cmd(self, kClose)) return 7;
    for (VIP_VI_HANDLE vi : vis)
        if (!destroy(vi)) ok = ep.fail("VipDestroyVi");
    ep.close();
    reply(self, ok, 0, ep.err);
    return ok ? 0 : 8;
}

int Paper::main() {
    vt::Link parent_link;
    for (int w = 0; w < p_.S; ++w) worker_links_.push_back(std::make_unique<vt::Link>());
    std::vector<std::unique_ptr<vt::Link>> client_links;
    for (int c = 0; c < p_.C; ++c) client_links.push_back(std::make_unique<vt::Link>());
    vt::Workers procs; // the parent and the clients (the workers are the parent's)
    fflush(nullptr);
    pid_t me = getpid();
    pid_t pp = fork();
    if (pp < 0) die("fork");
    if (pp == 0) {
        die_with_parent(me);
        for (auto &l : client_links) l->in_parent(); // closes the clients' ends here
        parent_link.in_child();
        int code = parent(parent_link);
        fflush(nullptr);
        _exit(code);
    }
    procs.pids.push_back(pp);
    parent_link.in_parent();
    for (auto &l : worker_links_) l->in_parent();
    for (int c = 0; c < p_.C; ++c) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            die_with_parent(me);
            client_links[c]->in_child();
            int code = client(c, *client_links[c]);
            fflush(nullptr);
            _exit(code);
        }
        procs.pids.push_back(pid);
        client_links[c]->in_parent();
    }
    std::vector<pid_t> worker_pids;
    auto get = [&](vt::Link &l, const char *what) {
        Report r;
        if (!l.get(&r, sizeof r, static_cast<int>(p_.timeout * 1000)))
            die(fmt("%s: no report (timed out or died)", what));
        if (!r.ok) die(fmt("%s: %s", what, r.err));
        return r;
    };
    auto send_all = [&](std::vector<std::unique_ptr<vt::Link>> &ls, char c) {
        for (auto &l : ls)
            if (!l->put(&c, 1)) die("a process is gone");
    };
    auto all_pids = [&] {
        std::vector<pid_t> v = procs.pids;
        v.insert(v.end(), worker_pids.begin(), worker_pids.end());
        return v;
    };
    struct Point {
        vt::MemInfo m;
        long long anon = 0, fds = 0, maps = 0;
    };
    auto point = [&] {
        Point pt;
        pt.m = vt::meminfo();
        for (pid_t pid : all_pids()) {
            pt.anon += vt::proc_mem(pid).pss_anon;
            pt.fds += vt::fd_count(pid);
            pt.maps += vt::map_count(pid);
        }
        return pt;
    };
    auto slab = [](const Point &a, const Point &b) { return vt::slab_growth(a.m, b.m); };
    auto kib = [&](const Point &a, const Point &b) {
        return double(b.m.shmem - a.m.shmem + b.m.page_tables - a.m.page_tables + b.m.kernel_stack -
                      a.m.kernel_stack + b.anon - a.anon) +
               slab(a, b);
    };

    get(parent_link, "server parent");
    for (auto &l : client_links) get(*l, "client");
    vt::settle();
    Point ready = point();
    char cmd;
    auto fork_workers = [&] {
        cmd = kFork;
        if (!parent_link.put(&cmd, 1)) die("server parent gone");
        for (auto &l : worker_links_) worker_pids.push_back(get(*l, "worker").pid);
    };
    Point mid, full;
    double t0 = 0, setup = 0;
    long long vis_node = 0;
    if (!p_.share) {
        fork_workers();
        mid = point();
        t0 = vt::now_s();
        send_all(worker_links_, kGo);
        send_all(client_links, kGo);
        for (auto &l : worker_links_) vis_node += get(*l, "worker connecting").count;
        for (auto &l : client_links) vis_node += get(*l, "client connecting").count;
        setup = vt::now_s() - t0;
        full = point();
    } else {
        t0 = vt::now_s();
        cmd = kGo;
        if (!parent_link.put(&cmd, 1)) die("server parent gone");
        send_all(client_links, kGo);
        vis_node += get(parent_link, "server parent connecting").count;
        for (auto &l : client_links) vis_node += get(*l, "client connecting").count;
        setup = vt::now_s() - t0;
        mid = point();
        fork_workers();
        full = point();
    }
    send_all(worker_links_, kExchange);
    send_all(client_links, kExchange);
    long long by_workers = 0, by_clients = 0;
    for (auto &l : worker_links_) by_workers += get(*l, "worker exchanging").count;
    for (auto &l : client_links) by_clients += get(*l, "client exchanging").count;
    long long want = (long long)p_.S * p_.C;
    if (by_workers != want || by_clients != want)
        die(fmt("%lld answers taken by the workers, %lld messages answered by the clients, %lld "
                "expected",
                by_workers, by_clients, want));
    Point msgs = point();
    send_all(worker_links_, kClose);
    for (auto &l : worker_links_) get(*l, "worker closing");
    cmd = kClose;
    if (!parent_link.put(&cmd, 1)) die("server parent gone");
    get(parent_link, "server parent closing");
    send_all(client_links, kClose);
    for (auto &l : client_links) get(*l, "client closing");
    std::vector<int> st = procs.wait_all(vt::now_s() + p_.timeout);
    for (int s : st)
        if (s != 0) die(fmt("a process ended with status %#x", s));

    // VIs: made by connecting; processes: the S workers being forked.
    const Point &v0 = p_.share ? ready : mid, &v1 = p_.share ? mid : full;
    const Point &w0 = p_.share ? mid : ready, &w1 = p_.share ? full : mid;
    const char *mode = p_.share ? "shared" : "private";
    auto out = [&](const char *key, double v, const char *unit) {
        printf("paper %s %s %.10g %s\n", mode, key, v, unit);
    };
    out("connections", vis_node / 2, "1");
    out("vis", vis_node, "VIs");
    out("setup_s", setup, "s");
    out("mem_vis", kib(v0, v1), "KiB");
    out("mem_vis_shmem", v1.m.shmem - v0.m.shmem, "KiB");
    out("mem_vis_slab", slab(v0, v1), "KiB");
    out("mem_vis_pagetables", v1.m.page_tables - v0.m.page_tables, "KiB");
    out("mem_vis_anon", v1.anon - v0.anon, "KiB");
    out("mem_workers", kib(w0, w1), "KiB");
    out("mem_node", kib(ready, full), "KiB");
    out("mem_node_msg", kib(ready, msgs), "KiB");
    out("fds", full.fds - ready.fds, "1");
    out("maps", full.maps - ready.maps, "1");
    out("messages", by_workers + by_clients, "1");
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    std::string mode = "fleet";
    long long vis = 131072;
    Plan p;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i], v = argv[i + 1];
        if (k == "--mode")
            mode = v;
        else if (k == "--vis")
            vis = atoll(v.c_str());
        else if (k == "--servers")
            p.S = atoi(v.c_str());
        else if (k == "--clients")
            p.C = atoi(v.c_str());
        else if (k == "--share")
            p.share = v == "1";
        else if (k == "--timeout")
            p.timeout = atof(v.c_str());
        else
            die("unknown option " + k);
    }
    // A hung run ends itself; run.py's timeout is the second line of defence.
    alarm(static_cast<unsigned>(p.timeout * 3 + 30));
    if (mode == "fleet") return run_fleet_mode(vis, p.timeout);
    if (mode != "paper" || p.S < 1 || p.C < 1 || p.S > 60) die("bad arguments");
    p.prefix = fmt("b%d-%s", getpid(), p.share ? "y" : "n");
    return Paper(p).main();
}
