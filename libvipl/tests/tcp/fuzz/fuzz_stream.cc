// libFuzzer target: a real tcp VI (on tcp:127.0.0.1) against a peer this
// harness plays over a raw socket.  After the handshake the input is written
// as the peer's byte stream while the VI is driven (VipRecvDone,
// VipSendDone, VipQueryVi) until the stream is consumed or the VI fails.
//
// Checked for every input, besides what the sanitizers see:
// - the VI ends Connected, or in Error with an error reported and the
//   connection closed; a malformed header always ends in Error; it never
//   closes the connection yet stays Connected; nothing hangs (every loop is
//   bounded, a stuck stream aborts);
// - memory the peer may not write is unchanged: everything but the RDMA
//   window, the receive segments, the RDMA read destination and the status
//   words of posted descriptors; a receive is written only within its
//   segments and up to the length it completes with;
// - what the VI sends parses; acknowledgements never cover more than the
//   peer sent, nor credits more bytes; RDMA read answers carry data only for
//   reads inside a region that allows them, exactly as long as asked, with
//   the region's bytes.
//
// Every input gets a new VI and connection (the previous one disconnected
// and destroyed), so any failure reproduces from its input alone.
#include "../raw_peer.h"
#include "fuzz_layout.h"

#include <vipl.h>
#include <vipl_ext.h>

#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sys/mman.h>
#include <vector>

namespace {

using namespace vipl::tcp;
using namespace vt;
using Clock = std::chrono::steady_clock;

constexpr int kStreamSeconds = 10; // the whole input must go through by then
constexpr int kSettleMs = 2000;    // for an expected failure, report or close to show up

[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_stream: invariant broken: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

uint8_t pattern(uint64_t i) {
    return static_cast<uint8_t>((i * 131) ^ (i >> 9) ^ 0x5a);
}

// Errors the NIC's callback reported, by VI.
struct Errors {
    std::mutex m;
    std::condition_variable cv;
    std::vector<VIP_VI_HANDLE> vis;
    static void handler(VIP_PVOID ctx, VIP_ERROR_DESCRIPTOR *err) {
        auto *e = static_cast<Errors *>(ctx);
        std::lock_guard<std::mutex> g(e->m);
        e->vis.push_back(err->ViHandle);
        e->cv.notify_all();
    }
    bool wait_for(VIP_VI_HANDLE vi, int ms) {
        std::unique_lock<std::mutex> g(m);
        return cv.wait_for(g, std::chrono::milliseconds(ms), [&] {
            for (VIP_VI_HANDLE v : vis)
                if (v == vi) return true;
            return false;
        });
    }
    void clear() {
        std::lock_guard<std::mutex> g(m);
        vis.clear();
    }
};

struct Harness {
    VIP_NIC_HANDLE nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr;
    uint8_t *mem = nullptr;
    uint16_t port = 0;
    Errors errors;
    std::vector<uint8_t> expect = std::vector<uint8_t>(kPageCount * kPage);
    std::vector<uint8_t> may_change = std::vector<uint8_t>(kPageCount * kPage);
    bool trace = false;
};
Harness *h;

uint8_t *at(uint32_t page, uint64_t offset = 0) {
    return h->mem + page * kPage + offset;
}
VIP_DESCRIPTOR *slot(uint32_t i) {
    return reinterpret_cast<VIP_DESCRIPTOR *>(at(kDescPage, i * kDescStride));
}
void mark(uint32_t page, uint64_t offset, uint64_t len) {
    memset(h->may_change.data() + page * kPage + offset, 1, len);
}

// What the VI sees of the input, frame by frame, up to the first header
// that does not decode.
struct Model {
    std::vector<Frame> reads; // RDMA read requests, in order
    uint64_t acked = 0;       // messages the VI may acknowledge (sends asking, RDMA writes)
    bool malformed = false;   // a complete header does not decode
};

Model model(const uint8_t *p, size_t n, uint64_t mtu) {
    Model m;
    size_t off = 0;
    while (n - off >= kFrameHeader) {
        Frame f;
        if (decode_frame(p + off, mtu, &f) != Decode::ok) {
            m.malformed = true;
            break;
        }
        if (n - off - kFrameHeader < f.length) break;
        off += kFrameHeader + f.length;
        if (f.type == kRdmaReadReq) m.reads.push_back(f);
        if (f.type == kRdmaWrite || (f.type == kSend && (f.flags & kAckReq))) ++m.acked;
    }
    return m;
}

struct Config {
    VIP_RELIABILITY_LEVEL level;
    int recvs;
    bool own_ops, imm;
    uint64_t mtu;
    uint32_t window;
};

Config config_of(uint8_t b, uint8_t b2) {
    static const VIP_RELIABILITY_LEVEL levels[] = {
        VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION,
        VIP_SERVICE_RELIABLE_DELIVERY};
    return Config{levels[b & kCfgReliability],
                  (b & kCfgRecvMask) >> kCfgRecvShift,
                  (b & kCfgOwnOps) != 0,
                  (b & kCfgImm) != 0,
                  (b & kCfgLargeMtu) ? kMtuLarge : kMtuSmall,
                  (b2 & kCfgSmallWindow) ? kMinWindow : vt::RawPeer::kLargeWindow};
}

std::vector<Seg> recv_segs(int i) {
    if (i % 2 == 0) return {std::begin(kRecvSegs2), std::end(kRecvSegs2)};
    return {std::begin(kRecvSegs3), std::end(kRecvSegs3)};
}

void set_segment(VIP_DESCRIPTOR *d, uint32_t i, uint64_t addr, uint32_t len, uint32_t handle) {
    VIP_DATA_SEGMENT &s = (&d->DS[0] + i)->Local;
    s.Data.AddressBits = addr;
    s.Handle = handle;
    s.Length = len;
}

void write_recv(int i) {
    VIP_DESCRIPTOR *d = slot(i);
    memset(d, 0, kDescStride);
    std::vector<Seg> segs = recv_segs(i);
    uint32_t total = 0;
    for (size_t k = 0; k < segs.size(); ++k) {
        uint64_t off = i * kRecvStride + segs[k].offset;
        set_segment(d, k, page_addr(kRecvPage) + off, segs[k].length, page_handle(kRecvPage));
        mark(kRecvPage, off, segs[k].length);
        total += segs[k].length;
    }
    d->CS.SegCount = static_cast<uint16_t>(segs.size());
    d->CS.Length = total;
}

void write_own(uint32_t s, uint16_t control, uint64_t local_off) {
    VIP_DESCRIPTOR *d = slot(s);
    memset(d, 0, kDescStride);
    d->CS.Control = control;
    d->CS.Length = kOwnLength;
    uint32_t first = 0;
    if ((control & VIP_CONTROL_OP_MASK) != VIP_CONTROL_OP_SENDRECV) {
        d->DS[0].Remote.Data.AddressBits = kPeerAddr;
        d->DS[0].Remote.Handle = kPeerHandle;
        first = 1;
    }
    if (control & VIP_CONTROL_IMMEDIATE) d->CS.ImmediateData = kOwnImm;
    set_segment(d, first, page_addr(kLocalPage) + local_off, kOwnLength, page_handle(kLocalPage));
    d->CS.SegCount = static_cast<uint16_t>(first + 1);
}

// Status, length and immediate data of a posted descriptor are the library's to write.
void mark_status(uint32_t s) {
    mark(kDescPage, s * kDescStride + offsetof(VIP_CONTROL_SEGMENT, ImmediateData),
         sizeof(VIP_CONTROL_SEGMENT) - offsetof(VIP_CONTROL_SEGMENT, ImmediateData));
}

struct Completion {
    bool done = false;
    uint32_t status = 0, length = 0;
};

// Takes every completed descriptor off both queues.
void reap(VIP_VI_HANDLE vi, std::vector<Completion> &done) {
    for (bool recv : {true, false})
        for (int i = 0; i < 64; ++i) {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = recv ? VipRecvDone(vi, &d) : VipSendDone(vi, &d);
            if (rc == VIP_NOT_DONE) break;
            if (rc != VIP_SUCCESS && rc != VIP_DESCRIPTOR_ERROR)
                fail("Vip%sDone returned %s", recv ? "Recv" : "Send", VipReturnString(rc));
            uint64_t off = reinterpret_cast<uint8_t *>(d) - at(kDescPage);
            if (off >= kPage || off % kDescStride) fail("a descriptor nobody posted completed");
            Completion &c = done[off / kDescStride];
            if (c.done)
                fail("descriptor %llu completed twice", static_cast<unsigned long long>(off));
            c = Completion{true, d->CS.Status, d->CS.Length};
            bool ok = !(c.status & VIP_STATUS_ERROR_MASK);
            if ((rc == VIP_SUCCESS) != ok) fail("return code and status disagree");
        }
}

void check_memory(const std::vector<Completion> &done, int recvs) {
    for (size_t i = 0; i < h->expect.size(); ++i)
        if (!h->may_change[i] && h->mem[i] != h->expect[i])
            fail("byte %zu of page %zu changed (0x%02x, was 0x%02x)", i % kPage, i / kPage,
                 h->mem[i], h->expect[i]);
    // A receive that completed holds no more than its length.
    for (int i = 0; i < recvs; ++i) {
        const Completion &c = done[i];
        if (!c.done || (c.status & VIP_STATUS_ERROR_MASK)) continue;
        // An RDMA write's immediate data: Length is the bytes written to the window
        // (semantics.md, conformance rdma_test), and the receive buffer stays as it was.
        if ((c.status & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_REMOTE_RDMA_WRITE) {
            if (c.length > kPage) fail("an RDMA write notice of %u bytes", c.length);
            for (const Seg &s : recv_segs(i))
                for (uint32_t k = 0; k < s.length; ++k) {
                    size_t off = kRecvPage * kPage + i * kRecvStride + s.offset + k;
                    if (h->mem[off] != h->expect[off])
                        fail("receive %d written by an RDMA write's notice", i);
                }
            continue;
        }
        uint64_t logical = 0;
        for (const Seg &s : recv_segs(i))
            for (uint32_t k = 0; k < s.length; ++k, ++logical) {
                size_t off = kRecvPage * kPage + i * kRecvStride + s.offset + k;
                if (logical >= c.length && h->mem[off] != h->expect[off])
                    fail("receive %d written past its length %u", i, c.length);
            }
        uint64_t capacity = logical;
        if (c.length > capacity) fail("receive %d completed with %u bytes", i, c.length);
    }
}

// What the VI sent.
void check_output(const std::vector<uint8_t> &out, const Model &m, const Config &cfg,
                  size_t stream_bytes) {
    std::vector<vt::Received> frames;
    if (!vt::split_frames(out, cfg.mtu, &frames)) fail("the VI sent a malformed frame");
    uint64_t last_ack = 0, last_credit = 0;
    size_t next_read = 0;
    bool reliable = cfg.level != VIP_SERVICE_UNRELIABLE;
    for (const vt::Received &r : frames) {
        if (r.f.type == kAck) {
            if (r.f.addr < last_ack || r.f.addr > m.acked)
                fail("acknowledgement of %llu (before %llu, %llu acknowledgeable)",
                     static_cast<unsigned long long>(r.f.addr),
                     static_cast<unsigned long long>(last_ack),
                     static_cast<unsigned long long>(m.acked));
            last_ack = r.f.addr;
        }
        if (r.f.type == kCredit) {
            if (r.f.addr < last_credit || r.f.addr > stream_bytes)
                fail("credit for %llu bytes (before %llu, %zu sent)",
                     static_cast<unsigned long long>(r.f.addr),
                     static_cast<unsigned long long>(last_credit), stream_bytes);
            last_credit = r.f.addr;
        }
        if (r.f.type != kRdmaReadResp) continue;
        if (next_read >= m.reads.size()) fail("an RDMA read answer nobody asked for");
        const Frame &q = m.reads[next_read++];
        auto inside = [&](uint32_t page) {
            return q.handle == page_handle(page) && q.addr >= page_addr(page) &&
                   q.addr + q.imm <= page_addr(page) + kPage;
        };
        bool allowed = reliable && (inside(kWindowPage) || inside(kReadOnlyPage));
        if (r.f.handle == kReadRefused) {
            if (allowed) fail("an allowed RDMA read was refused");
            continue;
        }
        if (!allowed)
            fail("RDMA read of %u bytes at 0x%llx handle 0x%x answered with data", q.imm,
                 static_cast<unsigned long long>(q.addr), q.handle);
        if (r.f.length != q.imm) fail("RDMA read answered with %u of %u bytes", r.f.length, q.imm);
        if (inside(kReadOnlyPage) && q.imm &&
            memcmp(r.payload.data(), reinterpret_cast<const void *>(q.addr), q.imm) != 0)
            fail("RDMA read answered with other bytes than the region's");
    }
}

// FUZZ_STREAM_TRACE=1: one line per input on how it ended, to check what a
// seed does.
void trace(const Config &cfg, size_t n, VIP_VI_STATE st, const std::vector<Completion> &done,
           const std::vector<uint8_t> &out) {
    static const char *const types[] = {"?",      "send", "write", "read",
                                        "answer", "ack",  "error", "credit"};
    fprintf(stderr, "level %d recvs %d own %d mtu %llu window %u: %zu bytes -> %s;", cfg.level,
            cfg.recvs, cfg.own_ops, static_cast<unsigned long long>(cfg.mtu), cfg.window, n,
            st == VIP_STATE_ERROR ? "Error" : "Connected");
    for (size_t i = 0; i < done.size(); ++i)
        if (done[i].done) fprintf(stderr, " d%zu:%x/%u", i, done[i].status, done[i].length);
    std::vector<vt::Received> frames;
    vt::split_frames(out, cfg.mtu, &frames);
    fprintf(stderr, "; VI sent");
    for (const vt::Received &r : frames)
        fprintf(stderr, " %s(%u,%x,%llx)", r.f.type < kFrameTypeEnd ? types[r.f.type] : "?",
                r.f.length, r.f.handle, static_cast<unsigned long long>(r.f.addr));
    fprintf(stderr, "\n");
}

VIP_VI_STATE state_of(VIP_VI_HANDLE vi) {
    VIP_VI_STATE st;
    if (VipQueryVi(vi, &st, nullptr, nullptr, nullptr) != VIP_SUCCESS) fail("VipQueryVi refused");
    return st;
}

void setup() {
    h = new Harness;
    setenv("VIPL_LOG_LEVEL", "error", 0); // protocol errors are the point here, not news
    // A partial frame at the end of an input is the rule here: wait for its
    // rest (the code path runs) but not 2 ms per call.
    setenv("VIPL_TCP_FRAME_WAIT_US", "1", 0);
    if (VipOpenNic("tcp:127.0.0.1", &h->nic) != VIP_SUCCESS ||
        VipCreatePtag(h->nic, &h->ptag) != VIP_SUCCESS)
        fail("no tcp NIC on 127.0.0.1");
    void *p = mmap(reinterpret_cast<void *>(kBase), kPageCount * kPage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != reinterpret_cast<void *>(kBase))
        fail("cannot map memory at 0x%llx", static_cast<unsigned long long>(kBase));
    h->mem = static_cast<uint8_t *>(p);
    for (uint32_t page = 0; page < kRegisteredPages; ++page) {
        VIP_MEM_ATTRIBUTES ma{};
        ma.Ptag = h->ptag;
        ma.EnableRdmaWrite = page == kWindowPage ? VIP_TRUE : VIP_FALSE;
        ma.EnableRdmaRead = page == kWindowPage || page == kReadOnlyPage ? VIP_TRUE : VIP_FALSE;
        VIP_MEM_HANDLE mh;
        if (VipRegisterMem(h->nic, at(page), kPage, &ma, &mh) != VIP_SUCCESS)
            fail("cannot register page %u", page);
        if (mh != page_handle(page))
            fail("page %u got handle 0x%x, fuzz_layout.h says 0x%x", page, mh, page_handle(page));
    }
    h->trace = getenv("FUZZ_STREAM_TRACE") != nullptr;
    h->port = vt::raw_listen(h->nic);
    if (!h->port) fail("no port to listen on");
    if (VipErrorCallback(h->nic, &h->errors, &Errors::handler) != VIP_SUCCESS)
        fail("VipErrorCallback refused");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setup();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    Config cfg = config_of(data[0], data[1]);
    const uint8_t *stream = data + 2;
    size_t n = size - 2;
    bool reliable = cfg.level != VIP_SERVICE_UNRELIABLE;
    h->errors.clear();

    for (size_t i = 0; i < h->expect.size(); ++i) h->mem[i] = pattern(i);
    memset(h->may_change.data(), 0, h->may_change.size());
    mark(kWindowPage, 0, kPage);
    for (int i = 0; i < cfg.recvs; ++i) write_recv(i);
    uint16_t imm = cfg.imm ? VIP_CONTROL_IMMEDIATE : 0;
    write_own(kSendSlot, VIP_CONTROL_OP_SENDRECV | imm, kSendSource);
    write_own(kWriteSlot, VIP_CONTROL_OP_RDMAWRITE | imm, kSendSource);
    write_own(kReadSlot, VIP_CONTROL_OP_RDMAREAD, kReadDest);
    if (cfg.own_ops && reliable) mark(kLocalPage, kReadDest, kOwnLength);

    VIP_VI_ATTRIBUTES a{};
    a.ReliabilityLevel = cfg.level;
    a.MaxTransferSize = cfg.mtu;
    a.Ptag = h->ptag;
    a.EnableRdmaWrite = VIP_TRUE;
    a.EnableRdmaRead = reliable ? VIP_TRUE : VIP_FALSE;
    VIP_VI_HANDLE vi;
    if (VipCreateVi(h->nic, &a, nullptr, nullptr, &vi) != VIP_SUCCESS) fail("VipCreateVi failed");
    for (int i = 0; i < cfg.recvs; ++i) {
        mark_status(i);
        if (VipPostRecv(vi, slot(i), page_handle(kDescPage)) != VIP_SUCCESS)
            fail("VipPostRecv failed");
    }
    vt::RawPeer peer;
    std::string why = peer.connect(h->nic, vi, h->port, 5000, cfg.window);
    if (!why.empty()) fail("cannot connect: %s", why.c_str());
    if (cfg.own_ops) {
        uint32_t own[] = {kSendSlot, kWriteSlot, kReadSlot};
        for (uint32_t s : own) {
            if (s == kReadSlot && !reliable) continue;
            mark_status(s);
            if (VipPostSend(vi, slot(s), page_handle(kDescPage)) != VIP_SUCCESS)
                fail("VipPostSend failed");
        }
    }
    memcpy(h->expect.data(), h->mem, h->expect.size());

    Model m = model(stream, n, cfg.mtu);
    std::vector<Completion> done(kPage / kDescStride);
    std::vector<uint8_t> out;
    size_t off = 0;
    bool writable = true, ended = false;
    // After the last byte went out, each round makes the VI read up to 256
    // frames at least twice over: this many rounds see the whole stream.
    int quiet = 0, enough = 4 + static_cast<int>(n / (kFrameHeader * 256));
    auto deadline = Clock::now() + std::chrono::seconds(kStreamSeconds);
    VIP_VI_STATE st = VIP_STATE_CONNECTED;
    for (;;) {
        if (writable && off < n) {
            size_t sent = 0;
            writable = peer.send_some(stream + off, n - off, &sent);
            off += sent;
        }
        reap(vi, done);
        if (!ended) ended = !peer.drain(&out);
        st = state_of(vi);
        if (st != VIP_STATE_CONNECTED) break;
        if ((off == n || !writable) && ++quiet >= enough) break;
        if (Clock::now() > deadline)
            fail("the VI stays Connected but took only %zu of %zu bytes in %d s", off, n,
                 kStreamSeconds);
    }
    if (st == VIP_STATE_CONNECTED && (ended || !writable))
        fail("the connection is closed but the VI stays Connected");
    if (st == VIP_STATE_CONNECTED && m.malformed) {
        auto end = Clock::now() + std::chrono::milliseconds(kSettleMs);
        while (st == VIP_STATE_CONNECTED && Clock::now() < end) {
            reap(vi, done);
            peer.drain(&out);
            st = state_of(vi);
        }
        if (st == VIP_STATE_CONNECTED) fail("a malformed header left the VI Connected");
    }
    if (st != VIP_STATE_CONNECTED && st != VIP_STATE_ERROR)
        fail("the VI went to state %d", static_cast<int>(st));
    if (st == VIP_STATE_ERROR) {
        if (!h->errors.wait_for(vi, kSettleMs)) fail("the VI failed without reporting an error");
        if (!peer.wait_closed(kSettleMs, &out)) fail("the VI failed but kept the connection");
    }
    reap(vi, done);
    peer.drain(&out);

    check_output(out, m, cfg, n);
    check_memory(done, cfg.recvs);
    if (h->trace) trace(cfg, n, st, done, out);

    VipDisconnect(vi);
    reap(vi, done);
    if (VipDestroyVi(vi) != VIP_SUCCESS) fail("VipDestroyVi failed");
    peer.close();
    return 0;
}
