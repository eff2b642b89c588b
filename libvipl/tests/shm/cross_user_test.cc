// Two processes of different users: the unprivileged one may not read or
// write the other's memory (cross-memory attach refused one way), so every
// operation it cannot do directly must go through the ring.  Messages of all
// sizes both ways, RDMA write and RDMA read both ways, checked byte for byte.
#include "procs.h"

#include <cerrno>
#include <cstring>
#include <grp.h>
#include <sys/uio.h>
#include <unistd.h>

namespace {

constexpr uint32_t kMax = 4u << 20;
constexpr size_t kSlot = kMax + 4096;
constexpr int kRecvs = 4;
constexpr size_t kDescs = 64 << 10;
// Region layout: descriptors, receive slots, a send/RDMA-local buffer, the RDMA window.
constexpr size_t kSendBuf = kDescs + kRecvs * kSlot;
constexpr size_t kWindow = kSendBuf + kSlot;
constexpr size_t kTotal = kWindow + kSlot;

const uint32_t kSizes[] = {0,    1,    7,    63,   64,   65,   511,   512,   513,    1000,
                           2047, 4033, 4095, 4096, 4097, 8191, 65536, 65537, 300000, (1u << 20) + 3,
                           kMax};
const uint32_t kRdmaSizes[] = {1, 64, 513, 4097, 70000, (1u << 20) + 7, kMax};

// Read by the other process to learn whether cross-memory attach works.
volatile uint64_t g_probe = 0x70726f6265;

bool can_read(pid_t pid) {
    uint64_t got = 0;
    iovec l{&got, sizeof got}, r{const_cast<uint64_t *>(&g_probe), sizeof got};
    return process_vm_readv(pid, &l, 1, &r, 1, 0) == sizeof got && got == g_probe;
}

bool cma_on() {
    return vt::config_value("SHM_CMA") == "1";
}

// One side of the exchange; assertions run on the main thread of its process.
class Side {
public:
    explicit Side(int role) : role_(role) {}

    void run(const std::string &disc, bool peer_reads_me) {
        vt::Opts o;
        o.rdma_write = o.rdma_read = true;
        EP_REQUIRE(ep_, ep_.open(kTotal, o));
        for (int i = 0; i < kRecvs; ++i) post_recv(i);
        EP_REQUIRE(ep_, (role_ == 0 ? ep_.accept(disc) : ep_.connect(disc)));

        send_value(reinterpret_cast<uint64_t>(ep_.mem + kWindow), ep_.mh);
        uint64_t a, h;
        recv_value(&a, &h);
        peer_window_ = a;
        peer_mh_ = static_cast<VIP_MEM_HANDLE>(h);

        for (size_t i = 0; i < sizeof kSizes / sizeof *kSizes; ++i) {
            INFO("message " << i << " of " << kSizes[i] << " bytes");
            if (role_ == 0) {
                send(kSizes[i], 1000 + i, i % 64, i % 3 == 0);
                expect(kSizes[i], 2000 + i, i % 3 == 1);
            } else {
                expect(kSizes[i], 1000 + i, i % 3 == 0);
                send(kSizes[i], 2000 + i, (i * 7) % 64, i % 3 == 1);
            }
        }
        for (size_t i = 0; i < sizeof kRdmaSizes / sizeof *kRdmaSizes; ++i) {
            INFO("RDMA write " << i << " of " << kRdmaSizes[i] << " bytes");
            for (int writer = 0; writer < 2; ++writer) {
                uint32_t off = static_cast<uint32_t>((i * 13 + writer * 5) % 64),
                         seed = 3000 + 10 * i + writer;
                bool imm = i % 2 == 0;
                if (role_ == writer)
                    rdma_write(kRdmaSizes[i], off, seed, imm, static_cast<uint32_t>(i));
                else
                    written(kRdmaSizes[i], off, seed, imm, static_cast<uint32_t>(i));
            }
        }
        for (size_t i = 0; i < sizeof kRdmaSizes / sizeof *kRdmaSizes; ++i) {
            INFO("RDMA read " << i << " of " << kRdmaSizes[i] << " bytes");
            for (int reader = 0; reader < 2; ++reader) {
                uint32_t off = static_cast<uint32_t>((i * 11 + reader * 3) % 64),
                         seed = 5000 + 10 * i + reader;
                if (role_ == reader)
                    rdma_read(kRdmaSizes[i]);
                else
                    serve_read(kRdmaSizes[i], off, seed);
            }
        }

        VIP_VI_COUNTERS c = ep_.counters();
        INFO("role " << role_ << " counters: copy " << c.CopySends << ", get " << c.GetSends
                     << ", pipeline " << c.PipelineSends);
        printf("[measure] role %d (%s): CopySends %llu GetSends %llu PipelineSends %llu\n", role_,
               role_ == 0 ? "server" : "client", (unsigned long long)c.CopySends,
               (unsigned long long)c.GetSends, (unsigned long long)c.PipelineSends);
        if (peer_reads_me) {
            CHECK(c.GetSends > 0);
        } else {
            CHECK(c.GetSends == 0);
            CHECK(c.PipelineSends > 0);
        }
        // Both sides wait for the last exchange before closing.
        if (role_ == 0) {
            send_value(0, 0);
        } else {
            closing_ = true; // the server may be gone already: nothing to repost
            recv_value(&a, &h);
        }
    }

private:
    VIP_DESCRIPTOR *rdesc(int i) { return ep_.desc(i); }
    VIP_DESCRIPTOR *sdesc() { return ep_.desc(kRecvs); }
    uint8_t *rbuf(int i) { return ep_.mem + kDescs + i * kSlot; }
    uint8_t *sbuf() { return ep_.mem + kSendBuf; }
    uint8_t *window() { return ep_.mem + kWindow; }

    void post_recv(int i) {
        vt::set_desc(rdesc(i), rbuf(i), kMax, ep_.mh);
        EP_REQUIRE(ep_, ep_.post_recv(rdesc(i)));
    }

    // Takes the next receive and reposts its slot.
    VIP_DESCRIPTOR *take(uint32_t *status, uint32_t *len, uint32_t *imm,
                         std::vector<uint8_t> *data) {
        int i = next_ % kRecvs;
        ++next_;
        VIP_DESCRIPTOR *d = nullptr;
        VIP_RETURN rc = VipRecvWait(ep_.vi, 20000, &d);
        INFO("VipRecvWait: " << VipReturnString(rc));
        REQUIRE(rc == VIP_SUCCESS);
        REQUIRE(d == rdesc(i));
        *status = d->CS.Status;
        *len = d->CS.Length;
        *imm = d->CS.ImmediateData;
        if (data) data->assign(rbuf(i), rbuf(i) + std::min(*len, kMax));
        if (!closing_) post_recv(i);
        return d;
    }

    void send(uint32_t len, uint32_t seed, uint32_t off, bool imm) {
        vt::fill_pattern(sbuf() + off, len, seed);
        vt::set_desc(sdesc(), sbuf() + off, len, ep_.mh, imm ? VIP_CONTROL_IMMEDIATE : 0, seed);
        EP_REQUIRE(ep_, ep_.post_send(sdesc()));
        EP_REQUIRE(ep_, ep_.wait_send(sdesc(), 20000));
    }

    void expect(uint32_t len, uint32_t seed, bool imm) {
        uint32_t status, got, immv;
        std::vector<uint8_t> data;
        take(&status, &got, &immv, &data);
        CHECK((status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_RECEIVE);
        REQUIRE(got == len);
        CHECK(bool(status & VIP_STATUS_IMMEDIATE) == imm);
        if (imm) CHECK(immv == seed);
        REQUIRE(vt::check_pattern(data.data(), len, seed));
    }

    void send_value(uint64_t a, uint64_t b) {
        memcpy(sbuf(), &a, 8);
        memcpy(sbuf() + 8, &b, 8);
        vt::set_desc(sdesc(), sbuf(), 16, ep_.mh);
        EP_REQUIRE(ep_, ep_.post_send(sdesc()));
        EP_REQUIRE(ep_, ep_.wait_send(sdesc(), 20000));
    }

    void recv_value(uint64_t *a, uint64_t *b) {
        uint32_t status, len, imm;
        std::vector<uint8_t> data;
        take(&status, &len, &imm, &data);
        REQUIRE(len == 16);
        memcpy(a, data.data(), 8);
        memcpy(b, data.data() + 8, 8);
    }

    void rdma_write(uint32_t len, uint32_t off, uint32_t seed, bool imm, uint32_t immv) {
        vt::fill_pattern(sbuf(), len, seed);
        vt::set_rdma(sdesc(), VIP_CONTROL_OP_RDMAWRITE, sbuf(), len, ep_.mh, peer_window_ + off,
                     peer_mh_, imm ? VIP_CONTROL_IMMEDIATE : 0, immv);
        EP_REQUIRE(ep_, ep_.post_send(sdesc()));
        EP_REQUIRE(ep_, ep_.wait_send(sdesc(), 20000));
        CHECK((sdesc()->CS.Status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_RDMA_WRITE);
        // Without immediate data the target learns of the write from a message behind it.
        if (!imm) send_value(len, seed);
    }

    void written(uint32_t len, uint32_t off, uint32_t seed, bool imm, uint32_t immv) {
        uint32_t status, got, imm_got;
        if (imm) {
            take(&status, &got, &imm_got, nullptr);
            CHECK((status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_REMOTE_RDMA_WRITE);
            CHECK((status & VIP_STATUS_IMMEDIATE));
            CHECK(imm_got == immv);
            CHECK(got == len);
        } else {
            uint64_t l, s;
            recv_value(&l, &s);
            CHECK(l == len);
            CHECK(s == seed);
        }
        REQUIRE(vt::check_pattern(window() + off, len, seed));
    }

    void serve_read(uint32_t len, uint32_t off, uint32_t seed) {
        vt::fill_pattern(window() + off, len, seed);
        send_value(off | (uint64_t(seed) << 32), len);
        uint64_t a, b;
        recv_value(&a, &b); // the reader is done
        CHECK(a == 0xd0e);
    }

    void rdma_read(uint32_t len) {
        uint64_t a, b;
        recv_value(&a, &b);
        uint32_t off = static_cast<uint32_t>(a), seed = static_cast<uint32_t>(a >> 32);
        REQUIRE(b == len);
        memset(sbuf(), 0, len + 64);
        vt::set_rdma(sdesc(), VIP_CONTROL_OP_RDMAREAD, sbuf() + 1, len, ep_.mh, peer_window_ + off,
                     peer_mh_);
        EP_REQUIRE(ep_, ep_.post_send(sdesc()));
        EP_REQUIRE(ep_, ep_.wait_send(sdesc(), 20000));
        CHECK((sdesc()->CS.Status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_RDMA_READ);
        CHECK(sdesc()->CS.Length == len);
        CHECK(sbuf()[0] == 0);
        CHECK(sbuf()[len + 1] == 0);
        REQUIRE(vt::check_pattern(sbuf() + 1, len, seed));
        send_value(0xd0e, 0);
    }

    int role_;
    vt::Ep ep_;
    int next_ = 0;
    bool closing_ = false;
    uint64_t peer_window_ = 0;
    VIP_MEM_HANDLE peer_mh_ = 0;
};

// Server in this process, client in a child that drops to nobody (or not).
void exchange(bool drop) {
    std::string disc = vt::unique_disc("u");
    vt::Channel ch;
    pid_t parent = getpid();
    pid_t pid = vt::spawn_checked([&] {
        ch.in_child();
        if (drop) {
            REQUIRE(setgroups(0, nullptr) == 0);
            REQUIRE(setgid(65534) == 0);
            REQUIRE(setuid(65534) == 0);
            REQUIRE(getuid() == 65534u);
        }
        uint64_t go;
        REQUIRE(ch.recv(&go, 10000));
        ch.send(can_read(parent) ? 1 : 0);
        uint64_t parent_reads_me = 2;
        REQUIRE(ch.recv(&parent_reads_me, 10000));
        Side(1).run(disc, cma_on() && parent_reads_me == 1);
        return 0;
    });
    ch.in_parent();
    vt::Child child(pid);
    ch.send(1);
    uint64_t child_reads_parent = 2;
    REQUIRE(ch.recv(&child_reads_parent, 10000));
    bool parent_reads_child = can_read(pid);
    ch.send(parent_reads_child ? 1 : 0);
    if (drop) {
        // The premise: the kernel refuses the unprivileged side.
        REQUIRE(child_reads_parent == 0);
        if (!parent_reads_child) WARN("this kernel refuses cross-memory attach both ways here");
    }
    Side(0).run(disc, cma_on() && child_reads_parent == 1);
    int status = child.wait(60);
    INFO("client process " << vt::status_text(status));
    REQUIRE(status == 0);
}

} // namespace

TEST_CASE("shm child: cross-user exchange", "[.]") {
    if (!getenv("VT_FRESH")) return; // started by the case below only
    REQUIRE(vt::config_value("SHM_CMA") == "0");
    exchange(false);
}

TEST_CASE("different users: everything works through the pipelined copy", "[shm][users]") {
    if (geteuid() == 0) {
        exchange(true);
    } else {
        WARN(
            "not root: the different-user case was NOT run; running both sides with VIPL_SHM_CMA=0 "
            "instead");
        int status =
            vt::run_fresh("shm child: cross-user exchange", {"VT_FRESH=1", "VIPL_SHM_CMA=0"}, 100);
        INFO("fresh process " << vt::status_text(status));
        REQUIRE(status == 0);
    }
}
