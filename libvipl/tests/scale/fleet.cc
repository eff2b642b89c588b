#include "fleet.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace vt {
namespace {

constexpr uint32_t kMagic = 0x5643414c; // "LACV"
// Per VI: send descriptor, receive descriptor, then the two buffers.
constexpr size_t kDescBytes = 64;

enum Command : char {
    kGo = 'G',
    kExchange = 'X',
    kWrapRecv = 'R',
    kWrapSend = 'S',
    kDestroy = 'D',
    kClose = 'C'
};
enum Phase : int32_t {
    kReady = 1,
    kConnected,
    kExchanged,
    kWrapPosted,
    kWrapped,
    kDestroyed,
    kClosed
};

// Ring traffic: sends that go through the ring as one record each
// (below VIPL_SHM_COPY_THRESHOLD), at most four outstanding per queue so
// that no work queue grows past its first allocation.
constexpr uint32_t kWrapMsg = 512;
constexpr int kWave = 4;
constexpr uint32_t kRecord = 576; // the message and its 16-byte header, in 64-byte lines

// Waves of kWave messages each way that take every ring once round.
int wrap_waves(uint32_t ring) {
    int msgs = static_cast<int>((ring + kRecord - 1) / kRecord) + 1;
    return (msgs + kWave - 1) / kWave;
}

struct Report {
    int32_t phase = 0;
    int32_t ok = 0;
    int64_t count = 0;  // connected / messages checked / destroyed
    int64_t count2 = 0; // sends completed
    int32_t fds = 0, maps = 0, conn_maps = 0, clean = 0;
    char err[200] = {};
};
static_assert(sizeof(Report) < 512);

// What a message carries before its pattern: the connection it belongs to.
struct Header {
    uint32_t magic;
    uint16_t to_client; // 1: sent by the server
    uint16_t server;
    uint32_t client;
    uint32_t index; // the client's VI number
};

uint64_t seed_of(const Header &h) {
    return (static_cast<uint64_t>(h.client) << 40) ^ (static_cast<uint64_t>(h.index) << 8) ^
           (static_cast<uint64_t>(h.server) << 28) ^ h.to_client;
}

class Worker {
public:
    Worker(const FleetPlan &p, bool server, int id, Link &link)
        : p_(p), server_(server), id_(id), link_(link) {}

    int run() {
        if (!warm_up_library()) return finish(kReady, false, "the library does not work here");
        base_fds_ = fd_count();
        base_maps_ = map_count();
        std::string why = raise_nofile(static_cast<rlim_t>(fleet_nofile(p_.per_proc)));
        if (!why.empty()) return finish(kReady, false, why);
        if (!open()) return finish(kReady, false, err_);
        Report r = report(kReady, true);
        if (!link_.put(&r, sizeof r)) return 1;
        for (;;) {
            char c;
            if (!link_.get(&c, 1, static_cast<int>(p_.timeout_s * 1000))) return 2;
            switch (c) {
            case kGo: {
                bool ok = server_ ? accept_all() : connect_all();
                r = report(kConnected, ok);
                r.count = connected_;
                break;
            }
            case kExchange: {
                bool ok = exchange();
                r = report(kExchanged, ok);
                r.count = checked_;
                r.count2 = sent_;
                break;
            }
            case kWrapRecv: {
                bool ok = wrap_post_recvs();
                r = report(kWrapPosted, ok);
                break;
            }
            case kWrapSend: {
                bool ok = wrap_send();
                r = report(kWrapped, ok);
                r.count = wrapped_;
                break;
            }
            case kDestroy: {
                bool ok = destroy_all();
                r = report(kDestroyed, ok);
                r.count = destroyed_;
                break;
            }
            case kClose: {
                bool ok = close_all();
                r = report(kClosed, ok);
                r.clean = fd_count() == base_fds_ && map_count() == base_maps_;
                if (!r.clean)
                    snprintf(r.err, sizeof r.err, "%d descriptors, %d mappings (%d, %d before)",
                             fd_count(), map_count(), base_fds_, base_maps_);
                link_.put(&r, sizeof r);
                return ok ? 0 : 3;
            }
            default:
                return 4;
            }
            if (!link_.put(&r, sizeof r)) return 5;
        }
    }

private:
    int finish(Phase ph, bool ok, const std::string &e) {
        err_ = e;
        Report r = report(ph, ok);
        link_.put(&r, sizeof r);
        return ok ? 0 : 6;
    }

    Report report(Phase ph, bool ok) {
        Report r;
        r.phase = ph;
        r.ok = ok;
        r.fds = fd_count();
        r.maps = map_count();
        r.conn_maps = maps_with("vipl-conn");
        snprintf(r.err, sizeof r.err, "%s", err_.c_str());
        return r;
    }

    bool fail(const std::string &e) {
        if (err_.empty()) err_ = (server_ ? "server " : "client ") + std::to_string(id_) + ": " + e;
        return false;
    }

    bool check(VIP_RETURN rc, const char *what, long k) {
        if (rc == VIP_SUCCESS) return true;
        return fail(fmt("%s (VI %ld): %s", what, k, VipReturnString(rc)));
    }

    VIP_DESCRIPTOR *sdesc(size_t k) { return reinterpret_cast<VIP_DESCRIPTOR *>(mem_ + k * slot_); }
    VIP_DESCRIPTOR *rdesc(size_t k) {
        return reinterpret_cast<VIP_DESCRIPTOR *>(mem_ + k * slot_ + kDescBytes);
    }
    uint8_t *sbuf(size_t k) { return mem_ + k * slot_ + 2 * kDescBytes; }
    uint8_t *rbuf(size_t k) { return mem_ + k * slot_ + 2 * kDescBytes + p_.msg; }

    void set(VIP_DESCRIPTOR *d, uint8_t *buf) {
        memset(d, 0, sizeof *d);
        d->CS.SegCount = 1;
        d->CS.Length = p_.msg;
        d->DS[0].Local.Data.Address = buf;
        d->DS[0].Local.Handle = mh_;
        d->DS[0].Local.Length = p_.msg;
    }

    bool open() {
        if (VipOpenNic("shm0", &nic_) != VIP_SUCCESS) return fail("VipOpenNic");
        if (VipCreatePtag(nic_, &ptag_) != VIP_SUCCESS) return fail("VipCreatePtag");
        slot_ = (2 * kDescBytes + 2 * p_.msg + 63) & ~size_t(63);
        // Then the wave descriptors, kWave each way per VI, and two shared buffers.
        wdesc_bytes_ = static_cast<size_t>(p_.per_proc) * 2 * kWave * kDescBytes;
        size_t main = static_cast<size_t>(p_.per_proc) * slot_;
        mem_size_ = (main + wdesc_bytes_ + 2 * kWrapMsg + 4095) & ~size_t(4095);
        // Populated now: the application's buffers are not the library's cost.
        void *m = mmap(nullptr, mem_size_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (m == MAP_FAILED) return fail("mmap");
        mem_ = static_cast<uint8_t *>(m);
        wmem_ = mem_ + main;
        VIP_MEM_ATTRIBUTES ma{ptag_, VIP_FALSE, VIP_FALSE, VIP_FALSE};
        if (VipRegisterMem(nic_, mem_, mem_size_, &ma, &mh_) != VIP_SUCCESS)
            return fail("VipRegisterMem");
        attrs_ = VIP_VI_ATTRIBUTES{};
        attrs_.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        attrs_.MaxTransferSize = 4096;
        attrs_.Ptag = ptag_;
        vis_.reserve(p_.per_proc);
        peer_.reserve(p_.per_proc);
        recv_done_.assign(p_.per_proc, 0);
        send_done_.assign(p_.per_proc, 0);
        return true;
    }

    // A new VI with its receive posted (VIA: before a message can arrive).
    bool new_vi(long k, VIP_VI_HANDLE *vi) {
        if (!check(VipCreateVi(nic_, &attrs_, nullptr, nullptr, vi), "VipCreateVi", k))
            return false;
        vis_.push_back(*vi);
        set(rdesc(k), rbuf(k));
        return check(VipPostRecv(*vi, rdesc(k), mh_), "VipPostRecv", k);
    }

    long left_ms() const { return std::max(0L, static_cast<long>((deadline_ - now_s()) * 1000)); }

    bool accept_all() {
        deadline_ = now_s() + p_.timeout_s;
        auto local = address(nic_, p_.prefix + "s" + std::to_string(id_));
        std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 256);
        std::string want = p_.prefix + "c";
        for (long k = 0; k < p_.per_proc; ++k) {
            VIP_VI_HANDLE vi;
            if (!new_vi(k, &vi)) return false;
            VIP_VI_ATTRIBUTES ra;
            VIP_CONN_HANDLE conn;
            if (!check(VipConnectWait(nic_, net(local), left_ms(), net(remote), &ra, &conn),
                       "VipConnectWait", k))
                return false;
            // The client names itself and its VI in its discriminator.
            std::string d = disc_of(net(remote));
            unsigned c, i;
            if (d.compare(0, want.size(), want) != 0 ||
                sscanf(d.c_str() + want.size(), "%u.%u", &c, &i) != 2 ||
                static_cast<int>((c + i) % p_.servers) != id_)
                return fail("unexpected client discriminator " + d);
            peer_.push_back({c, i});
            if (!check(VipConnectAccept(conn, vi), "VipConnectAccept", k)) return false;
            ++connected_;
        }
        return true;
    }

    bool connect_all() {
        deadline_ = now_s() + p_.timeout_s;
        std::vector<std::vector<uint8_t>> servers;
        for (int s = 0; s < p_.servers; ++s)
            servers.push_back(address(nic_, p_.prefix + "s" + std::to_string(s)));
        for (long i = 0; i < p_.per_proc; ++i) {
            VIP_VI_HANDLE vi;
            if (!new_vi(i, &vi)) return false;
            unsigned s = (id_ + i) % p_.servers;
            peer_.push_back({static_cast<unsigned>(id_), static_cast<unsigned>(i)});
            auto local =
                address(nic_, p_.prefix + "c" + std::to_string(id_) + "." + std::to_string(i));
            VIP_RETURN rc;
            for (;;) {
                VIP_VI_ATTRIBUTES ra;
                rc = VipConnectRequest(vi, net(local), net(servers[s]), left_ms(), &ra);
                // The server may not wait on its discriminator yet.
                if (rc != VIP_NO_MATCH || left_ms() == 0) break;
                usleep(1000);
            }
            if (!check(rc, "VipConnectRequest", i)) return false;
            ++connected_;
        }
        return true;
    }

    Header header_for(size_t k, bool from_server) {
        Header h{};
        h.magic = kMagic;
        h.to_client = from_server ? 1 : 0;
        h.client = peer_[k].first;
        h.index = peer_[k].second;
        h.server = static_cast<uint16_t>(server_ ? id_ : (h.client + h.index) % p_.servers);
        return h;
    }

    bool exchange() {
        double end = now_s() + p_.timeout_s;
        for (size_t k = 0; k < vis_.size(); ++k) {
            Header h = header_for(k, server_);
            memcpy(sbuf(k), &h, sizeof h);
            fill(sbuf(k) + sizeof h, p_.msg - sizeof h, seed_of(h));
            set(sdesc(k), sbuf(k));
            if (!check(VipPostSend(vis_[k], sdesc(k), mh_), "VipPostSend", k)) return false;
        }
        size_t want = vis_.size();
        size_t recvs = 0, sends = 0;
        while (recvs < want || sends < want) {
            bool progress = false;
            for (size_t k = 0; k < want; ++k) {
                VIP_DESCRIPTOR *d;
                if (!recv_done_[k] && VipRecvDone(vis_[k], &d) == VIP_SUCCESS) {
                    recv_done_[k] = 1;
                    ++recvs;
                    progress = true;
                    if (!check_message(k, d)) return false;
                    ++checked_;
                }
                if (!send_done_[k] && VipSendDone(vis_[k], &d) == VIP_SUCCESS) {
                    send_done_[k] = 1;
                    ++sends;
                    progress = true;
                    if (d != sdesc(k) || (d->CS.Status & VIP_STATUS_ERROR_MASK))
                        return fail(
                            fmt("send on VI %zu completed with status %#x", k, d->CS.Status));
                    ++sent_;
                }
            }
            if (progress) continue;
            if (now_s() > end)
                return fail(fmt("%zu of %zu messages, %zu of %zu sends after %.0f s", recvs, want,
                                sends, want, p_.timeout_s));
            usleep(200);
        }
        return true;
    }

    bool check_message(size_t k, VIP_DESCRIPTOR *d) {
        if (d != rdesc(k) || (d->CS.Status & VIP_STATUS_ERROR_MASK) || d->CS.Length != p_.msg)
            return fail(
                fmt("receive on VI %zu: status %#x, %u bytes", k, d->CS.Status, d->CS.Length));
        Header want = header_for(k, !server_);
        Header got;
        memcpy(&got, rbuf(k), sizeof got);
        if (memcmp(&got, &want, sizeof got) != 0)
            return fail(fmt("VI %zu got the message of server %u client %u VI %u", k, got.server,
                            got.client, got.index));
        if (!vt::check(rbuf(k) + sizeof got, p_.msg - sizeof got, seed_of(want)))
            return fail(fmt("VI %zu: message content differs", k));
        return true;
    }

    VIP_DESCRIPTOR *wdesc(size_t k, int i, bool recv) {
        return reinterpret_cast<VIP_DESCRIPTOR *>(wmem_ + (k * 2 * kWave + (recv ? kWave : 0) + i) *
                                                              kDescBytes);
    }
    uint8_t *wsbuf() { return wmem_ + wdesc_bytes_; }
    uint8_t *wrbuf() { return wmem_ + wdesc_bytes_ + kWrapMsg; }
    void wset(VIP_DESCRIPTOR *d, uint8_t *buf) {
        memset(d, 0, sizeof *d);
        d->CS.SegCount = 1;
        d->CS.Length = kWrapMsg;
        d->DS[0].Local.Data.Address = buf;
        d->DS[0].Local.Handle = mh_;
        d->DS[0].Local.Length = kWrapMsg;
    }

    // Before the peer sends its wave (VIA: a receive must wait for each message).
    bool wrap_post_recvs() {
        for (size_t k = 0; k < vis_.size(); ++k)
            for (int i = 0; i < kWave; ++i) {
                wset(wdesc(k, i, true), wrbuf());
                if (!check(VipPostRecv(vis_[k], wdesc(k, i, true), mh_), "VipPostRecv (wave)", k))
                    return false;
            }
        return true;
    }

    bool wrap_send() {
        double end = now_s() + p_.timeout_s;
        fill(wsbuf(), kWrapMsg, 99);
        for (size_t k = 0; k < vis_.size(); ++k)
            for (int i = 0; i < kWave; ++i) {
                wset(wdesc(k, i, false), wsbuf());
                if (!check(VipPostSend(vis_[k], wdesc(k, i, false), mh_), "VipPostSend (wave)", k))
                    return false;
            }
        size_t want = vis_.size() * kWave, recvs = 0, sends = 0;
        std::fill(recv_done_.begin(), recv_done_.end(), 0);
        std::fill(send_done_.begin(), send_done_.end(), 0);
        while (recvs < want || sends < want) {
            bool progress = false;
            for (size_t k = 0; k < vis_.size(); ++k) {
                VIP_DESCRIPTOR *d;
                while (recv_done_[k] < kWave && VipRecvDone(vis_[k], &d) == VIP_SUCCESS) {
                    // Every wave message carries the same bytes: the receives share a buffer.
                    if (d != wdesc(k, recv_done_[k], true) ||
                        (d->CS.Status & VIP_STATUS_ERROR_MASK) || d->CS.Length != kWrapMsg ||
                        !vt::check(wrbuf(), kWrapMsg, 99))
                        return fail(fmt("wave message on VI %zu: status %#x", k, d->CS.Status));
                    ++recv_done_[k];
                    ++recvs;
                    ++wrapped_;
                    progress = true;
                }
                while (send_done_[k] < kWave && VipSendDone(vis_[k], &d) == VIP_SUCCESS) {
                    if (d->CS.Status & VIP_STATUS_ERROR_MASK)
                        return fail(fmt("wave send on VI %zu: status %#x", k, d->CS.Status));
                    ++send_done_[k];
                    ++sends;
                    progress = true;
                }
            }
            if (progress) continue;
            if (now_s() > end)
                return fail(
                    fmt("wave: %zu of %zu messages, %zu of %zu sends", recvs, want, sends, want));
            usleep(200);
        }
        return true;
    }

    bool destroy_all() {
        bool ok = true;
        for (size_t k = 0; k < vis_.size(); ++k) {
            VIP_VI_STATE st;
            if (VipQueryVi(vis_[k], &st, nullptr, nullptr, nullptr) == VIP_SUCCESS &&
                st != VIP_STATE_IDLE)
                VipDisconnect(vis_[k]);
            // Flushed completions too (bounded: one descriptor each way was posted).
            VIP_DESCRIPTOR *d;
            for (int i = 0; i < 8 && VipSendDone(vis_[k], &d) != VIP_NOT_DONE; ++i) {
            }
            for (int i = 0; i < 8 && VipRecvDone(vis_[k], &d) != VIP_NOT_DONE; ++i) {
            }
            VIP_RETURN rc = VipDestroyVi(vis_[k]);
            if (rc == VIP_SUCCESS)
                ++destroyed_;
            else
                ok = check(rc, "VipDestroyVi", static_cast<long>(k)) && ok;
        }
        vis_.clear();
        return ok;
    }

    bool close_all() {
        bool ok = true;
        if (mh_ && VipDeregisterMem(nic_, mem_, mh_) != VIP_SUCCESS) ok = fail("VipDeregisterMem");
        if (ptag_ && VipDestroyPtag(nic_, ptag_) != VIP_SUCCESS) ok = fail("VipDestroyPtag");
        if (nic_ && VipCloseNic(nic_) != VIP_SUCCESS) ok = fail("VipCloseNic");
        if (mem_) munmap(mem_, mem_size_);
        // What the worker allocated for itself goes too: only the library's state is compared.
        std::vector<VIP_VI_HANDLE>().swap(vis_);
        std::vector<std::pair<unsigned, unsigned>>().swap(peer_);
        return ok;
    }

    const FleetPlan &p_;
    bool server_;
    int id_;
    Link &link_;
    std::string err_;
    int base_fds_ = 0, base_maps_ = 0;
    VIP_NIC_HANDLE nic_{};
    VIP_PROTECTION_HANDLE ptag_{};
    VIP_MEM_HANDLE mh_{};
    VIP_VI_ATTRIBUTES attrs_{};
    uint8_t *mem_ = nullptr, *wmem_ = nullptr;
    size_t mem_size_ = 0, slot_ = 0, wdesc_bytes_ = 0;
    double deadline_ = 0;
    std::vector<VIP_VI_HANDLE> vis_;
    std::vector<std::pair<unsigned, unsigned>> peer_; // (client, index) of each connection
    std::vector<uint8_t> recv_done_, send_done_;
    long long connected_ = 0, checked_ = 0, sent_ = 0, destroyed_ = 0, wrapped_ = 0;
};

} // namespace

uint32_t ring_size() {
    for (VIP_ULONG i = 0; i < VipConfigCount(); ++i) {
        VIP_CONFIG_INFO ci;
        if (VipConfigInfo(i, &ci) == VIP_SUCCESS && !strcmp(ci.Name, "SHM_RING_SIZE"))
            return static_cast<uint32_t>(strtoul(ci.Value, nullptr, 0));
    }
    return 8192;
}

long long fleet_nofile(int per_proc) {
    return 3LL * per_proc + 64;
}

FleetPlan fleet_plan(long long vis) {
    long maps = 65530;
    if (FILE *f = fopen("/proc/sys/vm/max_map_count", "re")) {
        if (fscanf(f, "%ld", &maps) != 1) maps = 65530;
        fclose(f);
    }
    rlim_t nofile = nofile_reachable();
    FleetPlan p;
    for (p.servers = 16;; p.servers *= 2) {
        p.per_proc = static_cast<int>((vis / 2 + p.servers - 1) / p.servers);
        bool fits =
            fleet_nofile(p.per_proc) <= static_cast<long long>(nofile) && p.per_proc + 1024 <= maps;
        if (fits || p.servers >= 1024) break;
    }
    // Every server accepts as many connections as each client makes.
    p.per_proc = std::max(p.servers, (p.per_proc + p.servers - 1) / p.servers * p.servers);
    return p;
}

PerVi per_vi(const MemInfo &a, const MemInfo &b, const ProcMem &pa, const ProcMem &pb,
             long long vis) {
    double n = vis > 0 ? static_cast<double>(vis) : 1;
    PerVi r;
    r.shmem = (b.shmem - a.shmem) / n;
    r.proc_slab = (b.proc_inodes_kib - a.proc_inodes_kib) / n;
    r.slab = slab_growth(a, b) / n;
    r.slab_pages = (b.slab - a.slab) / n - r.proc_slab;
    r.page_tables = (b.page_tables - a.page_tables) / n;
    r.kernel_stack = (b.kernel_stack - a.kernel_stack) / n;
    r.anon = (pb.pss_anon - pa.pss_anon) / n;
    r.total = r.shmem + r.slab + r.page_tables + r.kernel_stack + r.anon;
    r.mem_available = (a.mem_available - b.mem_available) / n;
    r.mem_free = (a.mem_free - b.mem_free) / n;
    r.pss = (pb.pss - pa.pss) / n;
    r.rss = (pb.rss - pa.rss) / n;
    return r;
}

FleetResult run_fleet(const FleetPlan &p, const std::function<void(const std::string &)> &log) {
    auto say = [&](const std::string &s) {
        if (log) log(s);
    };
    FleetResult res;
    res.workers = 2 * p.servers;
    res.vis = 2LL * p.servers * p.per_proc;
    res.connections = res.vis / 2;
    res.nofile = fleet_nofile(p.per_proc);
    double deadline = now_s() + p.timeout_s;
    std::vector<std::unique_ptr<Link>> links;
    Workers workers;
    fflush(nullptr);
    pid_t coordinator = getpid();
    // Servers first: 0..servers-1, then the clients.
    for (int w = 0; w < res.workers; ++w) {
        links.push_back(std::make_unique<Link>());
        pid_t pid = fork();
        if (pid < 0) {
            res.err = "fork failed";
            return res;
        }
        if (pid == 0) {
            // A coordinator killed by a time limit takes its workers with it.
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != coordinator) _exit(70);
            Link &l = *links.back();
            l.in_child();
            // The other workers' pipes are the coordinator's business.
            for (size_t o = 0; o + 1 < links.size(); ++o) {
                close(links[o]->down[1]);
                close(links[o]->up[0]);
            }
            bool server = w < p.servers;
            Worker worker(p, server, server ? w : w - p.servers, l);
            int code = worker.run();
            fflush(nullptr);
            _exit(code);
        }
        links.back()->in_parent();
        workers.pids.push_back(pid);
    }
    auto fail = [&](const std::string &e) {
        if (res.err.empty()) res.err = e;
        return false;
    };
    // Sends cmd to every worker (none for 0) and collects one report from each.
    auto phase = [&](char cmd, Phase want, std::vector<Report> *out) {
        for (auto &l : links)
            if (cmd && !l->put(&cmd, 1)) return fail("a worker is gone");
        out->assign(links.size(), Report{});
        for (size_t w = 0; w < links.size(); ++w) {
            int left = static_cast<int>(std::max(0.0, deadline - now_s()) * 1000);
            Report &r = (*out)[w];
            if (!links[w]->get(&r, sizeof r, left))
                return fail(fmt("worker %zu: no report of phase %d (timed out or died)", w, want));
            if (r.phase != want || !r.ok)
                return fail(fmt("phase %d: %s", want, r.err[0] ? r.err : "failed"));
        }
        return true;
    };
    auto proc_sum = [&] {
        ProcMem s;
        for (pid_t pid : workers.pids) {
            ProcMem m = proc_mem(pid);
            s.rss += m.rss;
            s.pss += m.pss;
            s.pss_anon += m.pss_anon;
            s.pss_shmem += m.pss_shmem;
        }
        return s;
    };
    std::vector<Report> reps;
    if (!phase(0, kReady, &reps)) return res;
    for (auto &r : reps) {
        res.fds_ready += r.fds;
        res.maps_ready += r.maps;
    }
    settle();
    res.ready = meminfo();
    res.p_ready = proc_sum();
    say(fmt("%d workers ready; connecting %lld VIs", res.workers, res.vis));

    double t0 = now_s();
    if (!phase(kGo, kConnected, &reps)) return res;
    res.setup_s = now_s() - t0;
    for (auto &r : reps) {
        res.connected += r.count;
        res.fds_connected += r.fds;
        res.maps_connected += r.maps;
    }
    res.connected_idle = meminfo();
    res.p_connected = proc_sum();
    say(fmt("%lld VIs connected in %.1f s", res.connected, res.setup_s));

    t0 = now_s();
    if (!phase(kExchange, kExchanged, &reps)) return res;
    res.exchange_s = now_s() - t0;
    for (auto &r : reps) {
        res.messages_checked += r.count;
        res.sends_completed += r.count2;
    }
    res.after_messages = meminfo();
    res.p_messages = proc_sum();
    say(fmt("%lld messages checked in %.1f s", res.messages_checked, res.exchange_s));

    if (p.wrap) {
        int waves = wrap_waves(ring_size());
        t0 = now_s();
        for (int w = 0; w < waves; ++w) {
            if (!phase(kWrapRecv, kWrapPosted, &reps)) return res;
            if (!phase(kWrapSend, kWrapped, &reps)) return res;
            for (auto &r : reps) res.wrap_messages += r.count;
        }
        res.wrap_s = now_s() - t0;
        res.after_wrap = meminfo();
        res.p_wrap = proc_sum();
        say(fmt("%lld more messages of %u bytes (every ring went round) in %.1f s",
                res.wrap_messages, kWrapMsg, res.wrap_s));
    }

    t0 = now_s();
    if (!phase(kDestroy, kDestroyed, &reps)) return res;
    res.teardown_s = now_s() - t0;
    for (auto &r : reps) {
        res.destroyed += r.count;
        res.conn_maps_left += r.conn_maps;
    }
    res.destroyed_vis = meminfo();
    if (!phase(kClose, kClosed, &reps)) return res;
    for (auto &r : reps) {
        res.clean_workers += r.clean;
        if (!r.clean && res.unclean.empty()) res.unclean = r.err;
    }
    std::vector<int> st = workers.wait_all(deadline + 10);
    for (size_t w = 0; w < st.size(); ++w)
        if (st[w] != 0) fail(fmt("worker %zu ended with status %#x", w, st[w]));
    res.exited = meminfo();
    for (int s = 0; s < p.servers; ++s)
        res.sockets_left += unix_socket_count(listener_socket(p.prefix + "s" + std::to_string(s)));
    say(fmt("torn down in %.1f s", res.teardown_s));
    return res;
}

} // namespace vt
