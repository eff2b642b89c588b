#include "process_util.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace vt {

// ------------------------------------------------------------ shared memory

SharedBlock::SharedBlock(size_t bytes) : size((bytes + 4095) & ~size_t(4095)) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
}

SharedBlock::~SharedBlock() {
    munmap(p, size);
}

void Board::fail(int slot, const std::string &msg) {
    if (slot < 0 || slot >= kSlots) slot = kSlots - 1;
    int expected = 0;
    if (!used[slot].compare_exchange_strong(expected, 1)) return;
    snprintf(text[slot], sizeof text[slot], "%s", msg.c_str());
    used[slot].store(2);
}

std::string Board::all() const {
    // A failure being written is worth waiting a moment for.
    wait_for(
        [&] {
            for (int i = 0; i < kSlots; ++i)
                if (used[i].load() == 1) return false;
            return true;
        },
        200);
    std::string s;
    for (int i = 0; i < kSlots; ++i)
        if (used[i].load() == 2) s += vt::fmt("[%d] %s\n", i, text[i]);
    return s.empty() ? "(no failure recorded)" : s;
}

bool Board::any() const {
    for (int i = 0; i < kSlots; ++i)
        if (used[i].load()) return true;
    return false;
}

// ------------------------------------------------------------ messages

void make_msg(uint8_t *buf, uint32_t sender, uint32_t seq) {
    uint32_t h[4] = {kMsgMagic, sender, seq, sender * 2654435761u ^ seq};
    memcpy(buf, h, sizeof h);
    vt::fill_pattern(buf + sizeof h, kMsgBytes - sizeof h, (sender << 20) ^ seq);
}

bool parse_msg(const uint8_t *buf, uint32_t len, uint32_t *sender, uint32_t *seq,
               std::string *why) {
    if (len != kMsgBytes) {
        *why = vt::fmt("length %u, expected %u", len, kMsgBytes);
        return false;
    }
    uint32_t h[4];
    memcpy(h, buf, sizeof h);
    if (h[0] != kMsgMagic || h[3] != (h[1] * 2654435761u ^ h[2]) || h[1] >= kMaxSenders) {
        *why = vt::fmt("corrupted header %08x %08x %08x %08x", h[0], h[1], h[2], h[3]);
        return false;
    }
    if (!vt::check_pattern(buf + sizeof h, kMsgBytes - sizeof h, (h[1] << 20) ^ h[2])) {
        *why = vt::fmt("corrupted payload of message %u/%u", h[1], h[2]);
        return false;
    }
    *sender = h[1];
    *seq = h[2];
    return true;
}

// ------------------------------------------------------------ the peer

ServerStats::ServerStats() {
    for (auto &c : end_code) c.store(-1);
}

void ServerStats::error(const std::string &what) {
    int expected = 0;
    if (first_error_set.compare_exchange_strong(expected, 1)) {
        snprintf(first_error, sizeof first_error, "%s", what.c_str());
        first_error_set.store(2);
    }
}

bool wait_for(const std::function<bool()> &pred, int timeout_ms) {
    double end = vt::now_ms() + timeout_ms;
    while (!pred()) {
        if (vt::now_ms() > end) return pred();
        vt::sleep_ms(0.5);
    }
    return true;
}

namespace {

std::atomic<int> g_server_error{-1};

void server_on_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *e) {
    g_server_error.store(static_cast<int>(e->ErrorCode));
}

struct Server {
    ServerStats *s;
    ServerOpts o;
    VIP_NIC_HANDLE nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr;
    uint8_t *mem = nullptr;
    size_t size = 0;
    VIP_MEM_HANDLE mh = 0;
    static constexpr int kSendSlots = 128;
    // Layout: receive descriptors, send descriptors, receive buffers, send buffers.
    VIP_DESCRIPTOR *rdesc(int i) { return reinterpret_cast<VIP_DESCRIPTOR *>(mem) + i; }
    VIP_DESCRIPTOR *sdesc(int i) {
        return reinterpret_cast<VIP_DESCRIPTOR *>(mem) + o.recvs + (i % kSendSlots);
    }
    VIP_DESCRIPTOR *rdma_desc() {
        return reinterpret_cast<VIP_DESCRIPTOR *>(mem) + o.recvs + kSendSlots;
    }
    uint8_t *rbuf(int i) { return mem + 64 * (o.recvs + kSendSlots + 1) + size_t(i) * kMsgBytes; }
    uint8_t *sbuf(int i) { return rbuf(o.recvs) + size_t(i % kSendSlots) * kMsgBytes; }
    uint8_t *rdma_buf() { return sbuf(0) + kSendSlots * kMsgBytes; }

    uint64_t posted = 0, done = 0;

    bool take_send(VIP_RETURN rc, VIP_DESCRIPTOR *d) {
        if (d == rdma_desc()) {
            s->rdma_done.store(1000 + (rc == VIP_SUCCESS ? 0 : int(rc)));
            return true;
        }
        ++done;
        if (rc != VIP_SUCCESS) {
            s->error(vt::fmt("echo send completed with %s, status 0x%x", VipReturnString(rc),
                             d ? d->CS.Status : 0));
            return false;
        }
        return true;
    }

    // One connection, from accept to its end.  false: stop serving.
    bool serve(int c, double deadline) {
        VIP_VI_ATTRIBUTES va{};
        va.ReliabilityLevel = o.level;
        va.MaxTransferSize = o.mtu;
        va.Ptag = ptag;
        VIP_VI_HANDLE vi;
        if (VipCreateVi(nic, &va, nullptr, nullptr, &vi) != VIP_SUCCESS) {
            s->error("server: VipCreateVi failed");
            return false;
        }
        for (int i = 0; i < o.recvs; ++i) {
            vt::set_desc(rdesc(i), rbuf(i), kMsgBytes, mh);
            if (VipPostRecv(vi, rdesc(i), mh) != VIP_SUCCESS) {
                s->error("server: VipPostRecv failed");
                return false;
            }
        }
        std::vector<uint8_t> local = vt::address(nic, s_disc);
        std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 128);
        VIP_CONN_HANDLE conn = nullptr;
        s->listening.fetch_add(1);
        if (o.client) {
            // The other way round: this side requests, the test's VI accepts.
            std::vector<uint8_t> me = vt::address(nic, s_disc + "c");
            VIP_RETURN rc =
                vt::connect_request(vi, reinterpret_cast<VIP_NET_ADDRESS *>(me.data()),
                                    reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), 10000);
            if (rc != VIP_SUCCESS) {
                s->error(vt::fmt("client: VipConnectRequest: %s", VipReturnString(rc)));
                vt::destroy_vi(vi);
                return false;
            }
        }
        while (!o.client) {
            if (s->stop.load() || vt::now_ms() > deadline) {
                vt::destroy_vi(vi);
                return false;
            }
            VIP_VI_ATTRIBUTES ra;
            VIP_RETURN rc =
                VipConnectWait(nic, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), 50,
                               reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), &ra, &conn);
            if (rc == VIP_SUCCESS) {
                rc = VipConnectAccept(conn, vi);
                if (rc == VIP_SUCCESS) break;
                s->error(vt::fmt("server: VipConnectAccept: %s", VipReturnString(rc)));
                VipConnectReject(conn);
                continue;
            }
            if (rc != VIP_TIMEOUT) {
                s->error(vt::fmt("server: VipConnectWait: %s", VipReturnString(rc)));
                vt::destroy_vi(vi);
                return false;
            }
        }
        g_server_error.store(-1);
        s->connected.fetch_add(1);
        posted = done = 0;
        bool ended = false, rdma_pending = false;
        int rdma_seen = 0;
        while (!ended) {
            if (vt::now_ms() > deadline) {
                s->error("server: lifetime over");
                vt::destroy_vi(vi);
                return false;
            }
            if (s->stop.load()) break;
            int req = s->rdma_req.load();
            if (req != rdma_seen && !rdma_pending) {
                rdma_seen = req;
                uint32_t len = s->rdma_len.load();
                vt::fill_pattern(rdma_buf(), len, s->rdma_imm.load());
                vt::set_rdma(rdma_desc(), VIP_CONTROL_OP_RDMAWRITE, rdma_buf(), len, mh,
                             s->rdma_addr.load(), s->rdma_mh.load(), VIP_CONTROL_IMMEDIATE,
                             s->rdma_imm.load());
                VIP_RETURN rc = VipPostSend(vi, rdma_desc(), mh);
                if (rc != VIP_SUCCESS)
                    s->rdma_done.store(1000 + int(rc));
                else
                    rdma_pending = true;
            }
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc;
            while ((rc = VipSendDone(vi, &d)) != VIP_NOT_DONE) {
                if (d == rdma_desc()) rdma_pending = false;
                if (!take_send(rc, d)) break;
            }
            rc = VipRecvWait(vi, 20, &d);
            if (rc == VIP_SUCCESS) {
                int idx = static_cast<int>(d - rdesc(0));
                uint32_t sender, seq;
                std::string why;
                s->received.fetch_add(1);
                if (idx < 0 || idx >= o.recvs) {
                    s->bad.fetch_add(1);
                    s->error("server: foreign receive descriptor");
                } else if (!parse_msg(rbuf(idx), d->CS.Length, &sender, &seq, &why)) {
                    s->bad.fetch_add(1);
                    s->error("server: " + why);
                } else {
                    uint32_t want = s->next_seq[sender].load();
                    if (seq != want) {
                        s->bad.fetch_add(1);
                        s->error(vt::fmt("server: sender %u: message %u arrived, expected %u",
                                         sender, seq, want));
                    }
                    if (seq >= want) s->next_seq[sender].store(seq + 1);
                    if (o.echo) {
                        while (posted - done >= kSendSlots) {
                            VIP_DESCRIPTOR *sd;
                            VIP_RETURN src = VipSendWait(vi, 2000, &sd);
                            if (src == VIP_TIMEOUT) {
                                s->error("server: echo sends do not complete");
                                vt::destroy_vi(vi);
                                return false;
                            }
                            if (sd == rdma_desc()) rdma_pending = false;
                            if (!take_send(src, sd)) break;
                        }
                        memcpy(sbuf(int(posted)), rbuf(idx), kMsgBytes);
                        vt::set_desc(sdesc(int(posted)), sbuf(int(posted)), kMsgBytes, mh);
                        VIP_RETURN prc = VipPostSend(vi, sdesc(int(posted)), mh);
                        if (prc == VIP_SUCCESS) {
                            ++posted;
                            s->echoed.fetch_add(1);
                        } else if (prc != VIP_INVALID_STATE) {
                            s->error(vt::fmt("server: echo VipPostSend: %s", VipReturnString(prc)));
                        }
                    }
                }
                if (idx >= 0 && idx < o.recvs) {
                    vt::set_desc(d, rbuf(idx), kMsgBytes, mh);
                    VipPostRecv(vi, d, mh);
                }
            } else if (rc == VIP_TIMEOUT || rc == VIP_DESCRIPTOR_ERROR) {
                VIP_VI_STATE st = VIP_STATE_IDLE;
                VipQueryVi(vi, &st, nullptr, nullptr, nullptr);
                if (st == VIP_STATE_ERROR)
                    ended = true;
                else if (rc == VIP_DESCRIPTOR_ERROR)
                    s->error(vt::fmt("server: receive failed with status 0x%x on a live connection",
                                     d ? d->CS.Status : 0));
            } else if (rc != VIP_INTERRUPTED) {
                s->error(vt::fmt("server: VipRecvWait: %s", VipReturnString(rc)));
                ended = true;
            }
        }
        if (ended) {
            // The error callback runs on the notification thread: give it a moment.
            wait_for([] { return g_server_error.load() >= 0; }, 500);
            s->end_code[c].store(g_server_error.load());
            s->ended_ms[c].store(vt::now_ms());
            s->ended.fetch_add(1);
        }
        if (rdma_pending) s->rdma_done.store(1000 + int(VIP_DESCRIPTOR_ERROR));
        vt::destroy_vi(vi);
        return !s->stop.load();
    }

    std::string s_disc;
};

} // namespace

int run_server(ServerStats *s, const std::string &disc, const ServerOpts &o) {
    Server sv;
    sv.s = s;
    sv.o = o;
    sv.s_disc = disc;
    double deadline = vt::now_ms() + o.lifetime_ms;
    if (VipOpenNic(vt::device().c_str(), &sv.nic) != VIP_SUCCESS ||
        VipCreatePtag(sv.nic, &sv.ptag) != VIP_SUCCESS) {
        s->error("server: cannot open the NIC");
        return 10;
    }
    VipErrorCallback(sv.nic, nullptr, server_on_error);
    sv.size = 64 * (o.recvs + Server::kSendSlots + 1) +
              size_t(kMsgBytes) * (o.recvs + Server::kSendSlots) + o.mtu + 4096;
    sv.size = (sv.size + 4095) & ~size_t(4095);
    void *p = mmap(nullptr, sv.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 11;
    sv.mem = static_cast<uint8_t *>(p);
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = sv.ptag;
    ma.EnableRdmaWrite = VIP_TRUE;
    if (VipRegisterMem(sv.nic, sv.mem, sv.size, &ma, &sv.mh) != VIP_SUCCESS) {
        s->error("server: cannot register memory");
        return 12;
    }
    for (int c = 0; c < s->max_conns.load() && c < ServerStats::kMaxConns; ++c)
        if (!sv.serve(c, deadline)) break;
    VipCloseNic(sv.nic);
    return 0;
}

pid_t spawn_server(ServerStats *s, const std::string &disc, const ServerOpts &o) {
    pid_t parent = getpid();
    fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        _exit(run_server(s, disc, o));
    }
    return pid;
}

// ------------------------------------------------------------ shareable VIs

bool ShVi::open(bool with_cq, VIP_RELIABILITY_LEVEL level, VIP_ULONG mtu) {
    if (!check(VipOpenNic(vt::device().c_str(), &nic), "VipOpenNic")) return false;
    if (!check(VipCreatePtag(nic, &ptag), "VipCreatePtag")) return false;
    void *p =
        mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return fail("mmap failed");
    mem = static_cast<uint8_t *>(p);
    VIP_MEM_ATTRIBUTES ma{};
    ma.Ptag = ptag;
    ma.EnableRdmaWrite = VIP_TRUE;
    ma.Shareable = VIP_TRUE;
    if (!check(VipRegisterMem(nic, mem, kRegionBytes, &ma, &mh), "VipRegisterMem(shareable)"))
        return false;
    if (with_cq && !check(VipCreateCQEx(nic, 4096, VIP_CQ_SHAREABLE, &cq), "VipCreateCQEx"))
        return false;
    VIP_VI_ATTRIBUTES va{};
    va.ReliabilityLevel = level;
    va.MaxTransferSize = mtu;
    va.Ptag = ptag;
    va.EnableRdmaWrite = VIP_TRUE;
    va.Shareable = VIP_TRUE;
    return check(VipCreateVi(nic, &va, cq, cq, &vi), "VipCreateVi(shareable)");
}

bool ShVi::post_recvs() {
    for (int i = 0; i < kRecvs; ++i) {
        vt::set_desc(recv_desc(i), recv_buf(i), kMsgBytes, mh);
        if (!check(VipPostRecv(vi, recv_desc(i), mh), "VipPostRecv")) return false;
    }
    return true;
}

bool ShVi::connect(const std::string &disc, int timeout_ms, VIP_NIC_HANDLE ns_nic) {
    return connect_through(ns_nic ? ns_nic : nic, vi, disc, timeout_ms);
}

bool ShVi::accept(const std::string &disc, int timeout_ms) {
    return accept_on(nic, vi, disc, timeout_ms);
}

bool ShVi::connect_to(std::vector<uint8_t> local, std::vector<uint8_t> remote, int timeout_ms) {
    if (local.empty() || remote.empty()) return fail("no address");
    return check(vt::connect_request(vi, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()),
                                     reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()),
                                     timeout_ms),
                 "VipConnectRequest");
}

bool ShVi::close_last() {
    VIP_VI_STATE state;
    if (!check(VipQueryVi(vi, &state, nullptr, nullptr, nullptr), "VipQueryVi")) return false;
    if (state != VIP_STATE_IDLE && !check(VipDisconnect(vi), "VipDisconnect")) return false;
    VIP_DESCRIPTOR *d;
    double end = vt::now_ms() + 2000;
    VIP_BOOLEAN sq_empty = VIP_FALSE, rq_empty = VIP_FALSE;
    while (vt::now_ms() < end) {
        while (VipSendDone(vi, &d) != VIP_NOT_DONE) {
        }
        while (VipRecvDone(vi, &d) != VIP_NOT_DONE) {
        }
        if (VipQueryVi(vi, nullptr, nullptr, &sq_empty, &rq_empty) != VIP_SUCCESS) break;
        if (sq_empty && rq_empty) break;
    }
    if (!sq_empty || !rq_empty) return fail("the queues do not empty after VipDisconnect");
    if (cq) {
        VIP_VI_HANDLE h;
        VIP_BOOLEAN r;
        while (VipCQDone(cq, &h, &r) == VIP_SUCCESS) {
        }
    }
    if (!check(VipDestroyVi(vi), "VipDestroyVi(last holder)")) return false;
    vi = nullptr;
    return true;
}

bool ShVi::close_nic() {
    if (nic && !check(VipCloseNic(nic), "VipCloseNic")) return false;
    nic = nullptr;
    ptag = nullptr;
    vi = nullptr;
    cq = nullptr;
    if (mem) munmap(mem, kRegionBytes);
    mem = nullptr;
    return true;
}

Traffic::Traffic() = default;

std::string traffic(ShVi &v, Traffic *t, int me, bool use_cq, double timeout_ms) {
    double end = vt::now_ms() + timeout_ms;
    const int64_t total = int64_t(t->nproc) * t->per_proc;
    int i = 0;
    std::string err;
    auto on_send = [&](VIP_RETURN rc, VIP_DESCRIPTOR *d) {
        int idx = v.send_index(d);
        if (rc != VIP_SUCCESS)
            return err = vt::fmt("send completed with %s, status 0x%x", VipReturnString(rc),
                                 d ? d->CS.Status : 0u);
        if (idx < 0 || idx >= kProcs * kSlots) return err = "a send descriptor nobody posted";
        int proc = idx / kSlots, slot = idx % kSlots;
        uint32_t sender, seq;
        std::string why;
        if (!parse_msg(v.send_buf(proc, slot), kMsgBytes, &sender, &seq, &why))
            return err = "send buffer " + why;
        if (sender != uint32_t(proc) || seq >= uint32_t(t->per_proc))
            return err = vt::fmt("send slot of process %d holds message %u/%u", proc, sender, seq);
        if (t->busy[proc][slot].load() != 1)
            return err = vt::fmt("completion of send slot %d/%d, which is not in use", proc, slot);
        t->send_taken[sender * Traffic::kMaxPer + seq].fetch_add(1);
        t->by_proc_send[me].fetch_add(1);
        t->sends_done.fetch_add(1);
        t->busy[proc][slot].store(0);
        return err;
    };
    auto on_recv = [&](VIP_RETURN rc, VIP_DESCRIPTOR *d) {
        int idx = v.recv_index(d);
        if (rc != VIP_SUCCESS)
            return err = vt::fmt("receive completed with %s, status 0x%x", VipReturnString(rc),
                                 d ? d->CS.Status : 0u);
        if (idx < 0 || idx >= kRecvs) return err = "a receive descriptor nobody posted";
        uint32_t sender, seq;
        std::string why;
        if (!parse_msg(v.recv_buf(idx), d->CS.Length, &sender, &seq, &why))
            return err = "echo " + why;
        if (sender >= uint32_t(t->nproc) || seq >= uint32_t(t->per_proc))
            return err = vt::fmt("echo of a message never sent: %u/%u", sender, seq);
        t->recv_taken[sender * Traffic::kMaxPer + seq].fetch_add(1);
        t->by_proc_recv[me].fetch_add(1);
        vt::set_desc(d, v.recv_buf(idx), kMsgBytes, v.mh);
        VIP_RETURN prc = VipPostRecv(v.vi, d, v.mh);
        t->echoes.fetch_add(1);
        if (prc != VIP_SUCCESS) return err = vt::fmt("VipPostRecv: %s", VipReturnString(prc));
        return err;
    };
    for (;;) {
        bool busy = false;
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc;
        if (use_cq) {
            VIP_VI_HANDLE h = nullptr;
            VIP_BOOLEAN recv = VIP_FALSE;
            rc = VipCQWait(v.cq, 1, &h, &recv);
            if (rc == VIP_SUCCESS) {
                busy = true;
                t->cq_entries[me].fetch_add(1);
                if (h != v.vi) return vt::fmt("VipCQWait returned VI %p, not %p", h, v.vi);
                rc = recv ? VipRecvDone(v.vi, &d) : VipSendDone(v.vi, &d);
                if (rc == VIP_NOT_DONE)
                    return vt::fmt("a CQ entry for the %s queue, and %s found nothing",
                                   recv ? "receive" : "send", recv ? "VipRecvDone" : "VipSendDone");
                if (!(recv ? on_recv(rc, d) : on_send(rc, d)).empty()) return err;
            } else if (rc != VIP_TIMEOUT) {
                return vt::fmt("VipCQWait: %s", VipReturnString(rc));
            }
        } else {
            while ((rc = VipSendDone(v.vi, &d)) != VIP_NOT_DONE) {
                busy = true;
                if (!on_send(rc, d).empty()) return err;
            }
            while ((rc = VipRecvDone(v.vi, &d)) != VIP_NOT_DONE) {
                busy = true;
                if (!on_recv(rc, d).empty()) return err;
            }
        }
        if (i < t->per_proc) {
            int slot = i % kSlots;
            if (t->busy[me][slot].load() == 0 && t->sent.load() - t->echoes.load() < t->window) {
                make_msg(v.send_buf(me, slot), me, i);
                vt::set_desc(v.send_desc(me, slot), v.send_buf(me, slot), kMsgBytes, v.mh);
                t->busy[me][slot].store(1);
                t->sent.fetch_add(1);
                rc = VipPostSend(v.vi, v.send_desc(me, slot), v.mh);
                if (rc != VIP_SUCCESS) return vt::fmt("VipPostSend: %s", VipReturnString(rc));
                ++i;
                busy = true;
            }
        }
        if (i == t->per_proc && t->echoes.load() == total && t->sends_done.load() == total)
            return "";
        if (vt::now_ms() > end)
            return vt::fmt("timed out: posted %d of %d; in all %lld sent, %lld sends completed, "
                           "%lld echoes of %lld",
                           i, t->per_proc, (long long)t->sent.load(),
                           (long long)t->sends_done.load(), (long long)t->echoes.load(),
                           (long long)total);
        if (!busy) sched_yield();
    }
}

// Done in a loop until something is taken or timeout_ms pass (VIP_TIMEOUT then).
static VIP_RETURN poll_done(VIP_VI_HANDLE vi, bool recv, int timeout_ms, VIP_DESCRIPTOR **d) {
    double end = vt::now_ms() + timeout_ms;
    for (;;) {
        VIP_RETURN rc = recv ? VipRecvDone(vi, d) : VipSendDone(vi, d);
        if (rc != VIP_NOT_DONE) return rc;
        if (vt::now_ms() > end) return VIP_TIMEOUT;
        sched_yield();
    }
}

std::string round_trip(ShVi &v, int proc, uint32_t sender, uint32_t seq, int timeout_ms,
                       bool sleep) {
    int slot = static_cast<int>(seq % kSlots);
    VIP_DESCRIPTOR *sd = v.send_desc(proc, slot);
    make_msg(v.send_buf(proc, slot), sender, seq);
    vt::set_desc(sd, v.send_buf(proc, slot), kMsgBytes, v.mh);
    VIP_RETURN rc = VipPostSend(v.vi, sd, v.mh);
    if (rc != VIP_SUCCESS) return vt::fmt("VipPostSend: %s", VipReturnString(rc));
    VIP_DESCRIPTOR *d = nullptr;
    rc = sleep ? VipSendWait(v.vi, timeout_ms, &d) : poll_done(v.vi, false, timeout_ms, &d);
    if (rc != VIP_SUCCESS || d != sd)
        return vt::fmt("%s: %s, descriptor %p (expected %p)", sleep ? "VipSendWait" : "VipSendDone",
                       VipReturnString(rc), (void *)d, (void *)sd);
    rc = sleep ? VipRecvWait(v.vi, timeout_ms, &d) : poll_done(v.vi, true, timeout_ms, &d);
    if (rc != VIP_SUCCESS)
        return vt::fmt("%s for echo %u/%u: %s", sleep ? "VipRecvWait" : "VipRecvDone", sender, seq,
                       VipReturnString(rc));
    int idx = v.recv_index(d);
    if (idx < 0 || idx >= kRecvs) return "a receive descriptor nobody posted";
    uint32_t s2, q2;
    std::string why;
    if (!parse_msg(v.recv_buf(idx), d->CS.Length, &s2, &q2, &why)) return "echo " + why;
    if (s2 != sender || q2 != seq)
        return vt::fmt("echo of %u/%u arrived, expected %u/%u", s2, q2, sender, seq);
    vt::set_desc(d, v.recv_buf(idx), kMsgBytes, v.mh);
    rc = VipPostRecv(v.vi, d, v.mh);
    if (rc != VIP_SUCCESS) return vt::fmt("VipPostRecv: %s", VipReturnString(rc));
    return "";
}

vt::Opts ep_opts() {
    vt::Opts o;
    o.mtu = 4096;
    o.device = vt::device();
    return o;
}

bool PrivEp::setup(const std::string &disc, int timeout_ms) {
    if (!open(64 << 10, ep_opts())) return false;
    for (int i = 0; i < kRecvDescs; ++i) {
        vt::set_desc(desc(i), mem + 4096 + i * kMsgBytes, kMsgBytes, mh);
        if (!post_recv(desc(i))) return false;
    }
    return connect(disc, timeout_ms);
}

std::string PrivEp::round_trip(uint32_t sender, uint32_t seq, int timeout_ms) {
    VIP_DESCRIPTOR *sd = desc(kRecvDescs);
    uint8_t *sb = mem + 8192;
    make_msg(sb, sender, seq);
    vt::set_desc(sd, sb, kMsgBytes, mh);
    VIP_RETURN rc = VipPostSend(vi, sd, mh);
    if (rc != VIP_SUCCESS) return vt::fmt("VipPostSend: %s", VipReturnString(rc));
    VIP_DESCRIPTOR *d = nullptr;
    rc = VipSendWait(vi, timeout_ms, &d);
    if (rc != VIP_SUCCESS || d != sd) return vt::fmt("VipSendWait: %s", VipReturnString(rc));
    rc = VipRecvWait(vi, timeout_ms, &d);
    if (rc != VIP_SUCCESS) return vt::fmt("VipRecvWait: %s", VipReturnString(rc));
    int idx = static_cast<int>(d - desc(0));
    if (idx < 0 || idx >= kRecvDescs) return "a receive descriptor nobody posted";
    uint32_t s2, q2;
    std::string why;
    if (!parse_msg(mem + 4096 + idx * kMsgBytes, d->CS.Length, &s2, &q2, &why))
        return "echo " + why;
    if (s2 != sender || q2 != seq)
        return vt::fmt("echo of %u/%u arrived, expected %u/%u", s2, q2, sender, seq);
    vt::set_desc(d, mem + 4096 + idx * kMsgBytes, kMsgBytes, mh);
    rc = VipPostRecv(vi, d, mh);
    return rc == VIP_SUCCESS ? "" : vt::fmt("VipPostRecv: %s", VipReturnString(rc));
}

std::string remote_write(ShVi &v, ServerStats *srv, uint32_t len, uint32_t imm, int timeout_ms) {
    uint8_t *target = v.mem + kFreeAt;
    memset(target, 0, len);
    srv->rdma_done = 0;
    srv->rdma_addr = reinterpret_cast<uint64_t>(target);
    srv->rdma_mh = v.mh;
    srv->rdma_len = len;
    srv->rdma_imm = imm;
    srv->rdma_req.fetch_add(1);
    VIP_DESCRIPTOR *d = nullptr;
    VIP_RETURN rc = poll_done(v.vi, true, timeout_ms, &d);
    if (!wait_for([&] { return srv->rdma_done.load() != 0; }, timeout_ms))
        return "the server's RDMA write did not complete";
    int done = srv->rdma_done.load() - 1000;
    if (done != VIP_SUCCESS)
        return vt::fmt("the server's RDMA write completed with %s",
                       VipReturnString(static_cast<VIP_RETURN>(done)));
    if (rc != VIP_SUCCESS)
        return vt::fmt("immediate data of the RDMA write: %s, status 0x%x", VipReturnString(rc),
                       d ? d->CS.Status : 0u);
    uint32_t want = VIP_STATUS_DONE | VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE;
    if (d->CS.Status != want || d->CS.ImmediateData != imm)
        return vt::fmt("RDMA write completion: status 0x%x immediate 0x%x", d->CS.Status,
                       d->CS.ImmediateData);
    if (!vt::check_pattern(target, len, imm)) return "the RDMA-written data is wrong";
    int idx = v.recv_index(d);
    if (idx < 0 || idx >= kRecvs) return "a receive descriptor nobody posted";
    vt::set_desc(d, v.recv_buf(idx), kMsgBytes, v.mh);
    rc = VipPostRecv(v.vi, d, v.mh);
    return rc == VIP_SUCCESS ? "" : vt::fmt("VipPostRecv: %s", VipReturnString(rc));
}

// ------------------------------------------------------------ /proc views

std::map<int, FdInfo> fds_of(pid_t pid) {
    std::map<int, FdInfo> out;
    std::string base = pid ? "/proc/" + std::to_string(pid) : std::string("/proc/self");
    DIR *d = opendir((base + "/fd").c_str());
    if (!d) return out;
    int own = pid ? -1 : dirfd(d);
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd == own) continue;
        char link[512];
        ssize_t n = readlink((base + "/fd/" + e->d_name).c_str(), link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = 0;
        FdInfo info;
        info.link = link;
        std::ifstream fi(base + "/fdinfo/" + e->d_name);
        std::string line;
        while (std::getline(fi, line))
            if (line.rfind("flags:", 0) == 0)
                info.cloexec = (strtoul(line.c_str() + 6, nullptr, 8) & 02000000) != 0;
        out[fd] = info;
    }
    closedir(d);
    return out;
}

std::vector<std::string> maps_of(pid_t pid) {
    std::string path = pid ? "/proc/" + std::to_string(pid) + "/maps" : "/proc/self/maps";
    std::vector<std::string> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
    return out;
}

std::set<std::string> shared_mapping_keys(const std::vector<std::string> &maps) {
    std::set<std::string> out;
    for (const std::string &line : maps) {
        std::istringstream is(line);
        std::string range, perms, offset, dev, inode, path;
        is >> range >> perms >> offset >> dev >> inode;
        std::getline(is, path);
        size_t b = path.find_first_not_of(' ');
        path = b == std::string::npos ? "" : path.substr(b);
        if (perms.size() == 4 && perms[3] == 's') out.insert(dev + " " + inode + " " + path);
    }
    return out;
}

std::string describe(const std::map<int, FdInfo> &fds) {
    std::string s;
    for (auto &[fd, info] : fds)
        s += vt::fmt("%d -> %s%s\n", fd, info.link.c_str(), info.cloexec ? " (cloexec)" : "");
    return s.empty() ? "(none)" : s;
}

void kill_wait(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    vt::wait_child(pid, 10);
}

} // namespace vt
