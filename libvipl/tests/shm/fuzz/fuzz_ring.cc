// libFuzzer target: the fuzzer is the hostile peer of a shm connection.  The victim
// is a real VI (or, in stream mode, a common Stream, private or shareable) accepted
// in this process; its peer is a VI of this process too, whose library is never called
// again once connected: the harness writes that peer's side of the connection memory
// directly (records with any header and body, sequence words, the consumed counter,
// state and reason words, the shared header; torn writes racing the reader) and makes
// the victim run between writes (ring_input.h).
//
// Checked for every input, besides what ASan and UBSan see:
// - the victim's memory outside its receive segments, RDMA window and status words never
//   changes (guard pages around it, canary pages beside the window); a completed
//   receive holds at most its capacity and nothing past its length was written;
// - nothing of the canary pages (registered, no RDMA) ever shows in what the victim
//   writes to its out ring (an RDMA read answered from memory it may not give);
// - every call into the victim returns within kCallLimitMs; it ends Connected or in
//   Error (a stream: open, or failed with an error code);
// - its other connection, fed by an honest peer, still carries messages both ways.
//
// Every input gets a new connection, so a failure reproduces from its input alone.
#include "core/objects.h"
#include "prov/shm/shm.h"
#include "ring_input.h"

#include "vipl/stream.h"
#include <vipl.h>
#include <vipl_ext.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

using namespace vt;
using namespace vipl::shm;
using vipl::Segment;
using Clock = std::chrono::steady_clock;

constexpr int kCallLimitMs = 2000; // no call into the victim may take longer
constexpr uint64_t kPage = 4096;
enum Page : uint32_t {
    kDescPage,
    kRecvPage,
    kCanaryLo,
    kWindow,
    kCanaryHi,
    kReadOnly,
    kLocal,
    kPages
};
constexpr uint32_t kDescStride = 128, kRecvStride = 512;
constexpr uint32_t kOwnSend = 8; // then the RDMA write and the RDMA read
struct Seg {
    uint32_t offset, length;
};
constexpr Seg kSegs2[] = {{32, 160}, {256, 160}};
constexpr Seg kSegs3[] = {{32, 96}, {160, 96}, {288, 96}};
const uint8_t kSecret[16] = {0xde, 0xad, 0x5e, 0xc7, 0x37, 0x19, 0xa4, 0x02,
                             0x88, 0x7f, 0x3c, 0xe1, 0x55, 0x0b, 0xd6, 0x9a};

[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_ring: invariant broken: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

uint8_t pattern(uint64_t i) {
    return static_cast<uint8_t>((i * 151) ^ (i >> 7) ^ 0xa5);
}

// Reads the input's fields; zeros past its end.
struct Reader {
    const uint8_t *p;
    size_t n, off = 0;
    bool more() const { return off < n; }
    uint64_t get(int bytes) {
        uint64_t v = 0;
        for (int i = 0; i < bytes; ++i) v |= uint64_t(off < n ? p[off++] : 0) << (8 * i);
        return v;
    }
    uint8_t u8() { return static_cast<uint8_t>(get(1)); }
    uint16_t u16() { return static_cast<uint16_t>(get(2)); }
    uint32_t u32() { return static_cast<uint32_t>(get(4)); }
    uint64_t u64() { return get(8); }
};

// Runs one call into the victim and fails if it takes too long.
template <class F>
auto timed(const char *what, F &&f) {
    auto t0 = Clock::now();
    auto r = f();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    if (ms > kCallLimitMs) fail("%s took %lld ms", what, static_cast<long long>(ms));
    return r;
}

// libFuzzer's timer signal interrupts waits: the harness's own waits go on (bounded).
template <class F>
VIP_RETURN again(F &&f) {
    VIP_RETURN rc = VIP_INTERRUPTED;
    for (int i = 0; i < 100 && rc == VIP_INTERRUPTED; ++i) rc = f();
    return rc;
}
template <class F>
auto again_ec(std::error_code &ec, F &&f) {
    auto r = f();
    for (int i = 0; i < 100 && ec == std::errc::interrupted; ++i) r = f();
    return r;
}

// ------------------------------------------------------------------ connections

std::vector<uint8_t> address(VIP_NIC_HANDLE nic, const uint8_t *disc, uint16_t len) {
    std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 64);
    auto *na = reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
    char host[] = "localhost";
    if (VipNSGetHostByName(nic, host, na, 0) != VIP_SUCCESS) fail("no address for localhost");
    na->DiscriminatorLen = len;
    memcpy(na->HostAddress + na->HostAddressLen, disc, len);
    return a;
}

// Connects `requester` (a VI of `rnic`) to `acceptor` (a VI of `anic` serving disc).
void connect_vis(VIP_NIC_HANDLE anic, VIP_VI_HANDLE acceptor, VIP_NIC_HANDLE rnic,
                 VIP_VI_HANDLE requester, const std::vector<uint8_t> &disc) {
    auto local = address(anic, disc.data(), static_cast<uint16_t>(disc.size()));
    uint8_t rdisc[] = {'h', 'o', 's', 't'};
    auto rlocal = address(rnic, rdisc, sizeof rdisc);
    VIP_RETURN rrc = VIP_SUCCESS;
    std::thread t([&] {
        // Until the acceptor listens, a request finds nobody: ask again (bounded).
        for (int i = 0; i < 500; ++i) {
            VIP_VI_ATTRIBUTES ra;
            rrc = VipConnectRequest(requester, reinterpret_cast<VIP_NET_ADDRESS *>(rlocal.data()),
                                    reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), 5000, &ra);
            if (rrc != VIP_NO_MATCH && rrc != VIP_INTERRUPTED) break;
            usleep(1000);
        }
    });
    std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 64);
    VIP_VI_ATTRIBUTES ra;
    VIP_CONN_HANDLE conn;
    VIP_RETURN rc = VIP_TIMEOUT;
    // A request its requester gave up on (a signal ended its wait) fails to be
    // accepted: the next one is the retry.
    for (int i = 0; i < 8 && rc != VIP_SUCCESS; ++i) {
        rc = again([&] {
            return VipConnectWait(anic, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()), 5000,
                                  reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), &ra, &conn);
        });
        if (rc != VIP_SUCCESS) break;
        rc = VipConnectAccept(conn, acceptor);
    }
    t.join();
    if (rc != VIP_SUCCESS || rrc != VIP_SUCCESS)
        fail("cannot connect: %s / %s", VipReturnString(rc), VipReturnString(rrc));
}

// A discriminator of this process's own: fuzzers running at once (ctest -j, a long
// run beside a short one) must not serve the same one.
std::vector<uint8_t> process_disc(char kind) {
    uint32_t pid = static_cast<uint32_t>(getpid());
    return {'f',
            'r',
            static_cast<uint8_t>(kind),
            static_cast<uint8_t>(pid >> 24),
            static_cast<uint8_t>(pid >> 16),
            static_cast<uint8_t>(pid >> 8),
            static_cast<uint8_t>(pid)};
}

Endpoint *endpoint_of(VIP_VI_HANDLE h) {
    vipl::Vi *vi = vipl::vis().lookup(h);
    if (!vi || !endpoint(vi) || !endpoint(vi)->up) fail("no shm endpoint behind a VI handle");
    return endpoint(vi);
}

// A pair of VIs on their own memory that exchange messages honestly.
struct HonestPair {
    VIP_VI_HANDLE srv = nullptr, cli = nullptr;
    uint8_t *mem = nullptr;
    VIP_MEM_HANDLE mh = 0;
    uint32_t round = 0;

    void open(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag) {
        mem = static_cast<uint8_t *>(aligned_alloc(4096, 4 * kPage));
        VIP_MEM_ATTRIBUTES ma{};
        ma.Ptag = ptag;
        if (VipRegisterMem(nic, mem, 4 * kPage, &ma, &mh) != VIP_SUCCESS) fail("honest memory");
        VIP_VI_ATTRIBUTES a{};
        a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
        a.MaxTransferSize = 1024;
        a.Ptag = ptag;
        if (VipCreateVi(nic, &a, nullptr, nullptr, &srv) != VIP_SUCCESS ||
            VipCreateVi(nic, &a, nullptr, nullptr, &cli) != VIP_SUCCESS)
            fail("honest VIs");
        connect_vis(nic, srv, nic, cli, process_disc('h'));
    }
    VIP_DESCRIPTOR *desc(int i) { return reinterpret_cast<VIP_DESCRIPTOR *>(mem + i * 128); }
    void one_way(VIP_VI_HANDLE from, VIP_VI_HANDLE to, uint32_t seed) {
        uint8_t *src = mem + kPage, *dst = mem + 2 * kPage;
        for (int i = 0; i < 64; ++i) src[i] = static_cast<uint8_t>(seed * 7 + i);
        memset(dst, 0, 64);
        auto set = [&](VIP_DESCRIPTOR *d, uint8_t *buf) {
            memset(d, 0, sizeof *d);
            d->CS.SegCount = 1;
            d->CS.Length = 64;
            d->DS[0].Local.Data.Address = buf;
            d->DS[0].Local.Handle = mh;
            d->DS[0].Local.Length = 64;
        };
        set(desc(0), dst);
        set(desc(1), src);
        if (VipPostRecv(to, desc(0), mh) != VIP_SUCCESS || VipPostSend(from, desc(1), mh))
            fail("the honest connection refused a post");
        VIP_DESCRIPTOR *d;
        if (again([&] { return VipRecvWait(to, 2000, &d); }) != VIP_SUCCESS || d != desc(0) ||
            d->CS.Length != 64 || memcmp(src, dst, 64) != 0)
            fail("the honest connection lost a message");
        if (again([&] { return VipSendWait(from, 2000, &d); }) != VIP_SUCCESS)
            fail("the honest send did not complete");
    }
    void exchange() {
        one_way(cli, srv, ++round);
        one_way(srv, cli, ++round);
    }
};

// ---------------------------------------------------------------- the harness

struct Harness {
    VIP_NIC_HANDLE nic = nullptr, hostile_nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr, hostile_ptag = nullptr;
    uint8_t *mem = nullptr; // kPages registered pages between two guard pages
    uint32_t handle[kPages] = {};
    std::vector<uint8_t> expect = std::vector<uint8_t>(kPages * kPage);
    std::vector<uint8_t> may_change = std::vector<uint8_t>(kPages * kPage);
    HonestPair honest;
    std::vector<uint8_t> vi_disc = process_disc('v');
    // Stream mode.
    std::optional<vipl::Listener> listener[2]; // private, shareable
    vipl::Stream honest_cli[2], honest_srv[2];
    uint32_t stream_round = 0;
};
Harness *h;

uint8_t *at(uint32_t page, uint64_t off = 0) {
    return h->mem + page * kPage + off;
}
void mark(uint32_t page, uint64_t off, uint64_t len) {
    memset(h->may_change.data() + page * kPage + off, 1, len);
}
VIP_DESCRIPTOR *slot(uint32_t i) {
    return reinterpret_cast<VIP_DESCRIPTOR *>(at(kDescPage, i * kDescStride));
}
const Seg *segs_of(int i, int *n) {
    *n = i % 2 ? 3 : 2;
    return i % 2 ? kSegs3 : kSegs2;
}

vipl::StreamOptions stream_options(bool shareable) {
    vipl::StreamOptions o;
    o.buffer_size = 4096;
    o.recv_buffers = 4;
    o.send_buffers = 4;
    o.shareable = shareable;
    o.linger = std::chrono::milliseconds(0);
    return o;
}

void setup() {
    h = new Harness;
    setenv("VIPL_LOG_LEVEL", "error", 0);
    setenv("VIPL_SHM_RING_SIZE", "8192", 0); // laps come quickly
    // Processes of two users: no cross-memory attach, everything through the ring.
    setenv("VIPL_SHM_CMA", "0", 0);
    if (VipOpenNic("shm0", &h->nic) != VIP_SUCCESS || VipCreatePtag(h->nic, &h->ptag) ||
        VipOpenNic("shm0", &h->hostile_nic) != VIP_SUCCESS ||
        VipCreatePtag(h->hostile_nic, &h->hostile_ptag) != VIP_SUCCESS)
        fail("no shm NIC");
    size_t total = (kPages + 2) * kPage;
    void *p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("no memory");
    auto *base = static_cast<uint8_t *>(p);
    mprotect(base, kPage, PROT_NONE);
    mprotect(base + (kPages + 1) * kPage, kPage, PROT_NONE);
    h->mem = base + kPage;
    for (uint32_t page = 0; page < kPages; ++page) {
        VIP_MEM_ATTRIBUTES ma{};
        ma.Ptag = h->ptag;
        ma.EnableRdmaWrite = page == kWindow ? VIP_TRUE : VIP_FALSE;
        ma.EnableRdmaRead = page == kWindow || page == kReadOnly ? VIP_TRUE : VIP_FALSE;
        if (VipRegisterMem(h->nic, at(page), kPage, &ma, &h->handle[page]) != VIP_SUCCESS)
            fail("cannot register page %u", page);
    }
    h->honest.open(h->nic, h->ptag);
    for (int s = 0; s < 2; ++s) {
        std::error_code ec;
        h->listener[s].emplace(
            vipl::Listener::bind("vipl+shm://127.0.0.1:0", ec, stream_options(s == 1)));
        if (ec) fail("cannot bind a stream listener: %s", ec.message().c_str());
        std::thread t([&] {
            std::error_code cec;
            h->honest_cli[s] = again_ec(cec, [&] {
                return vipl::Stream::connect(h->listener[s]->uri(),
                                             vipl::deadline_in(std::chrono::seconds(5)), cec,
                                             stream_options(s == 1));
            });
        });
        h->honest_srv[s] = again_ec(ec, [&] {
            return h->listener[s]->accept(vipl::deadline_in(std::chrono::seconds(5)), ec);
        });
        t.join();
        if (ec || !h->honest_cli[s]) fail("no honest stream");
    }
}

// ------------------------------------------------------------- one input

struct Run {
    Reader in{nullptr, 0};
    bool stream = false, shareable = false;
    VIP_VI_HANDLE victim = nullptr, hostile = nullptr;
    vipl::Stream vs; // stream mode: the victim
    Endpoint *hep = nullptr;
    uint64_t hpos = 0;    // where the hostile peer writes its next record
    uint64_t drained = 0; // how far the hostile peer read the victim's out ring
    int recvs = 0;
    uint64_t mtu = 1024;
    bool posted[3] = {};
    std::vector<bool> done = std::vector<bool>(kPage / kDescStride);
    std::vector<uint32_t> status = std::vector<uint32_t>(kPage / kDescStride);
    std::vector<uint32_t> length = std::vector<uint32_t>(kPage / kDescStride);
    std::vector<uint8_t> readbuf = std::vector<uint8_t>(8192 + 64);
    std::error_code stream_error;
};

RecHdr *rec_at(Run &r, uint64_t pos) {
    return reinterpret_cast<RecHdr *>(r.hep->out + (pos & r.hep->mask));
}

// Writes a record at the hostile position: body first, then the header, then (last)
// the sequence word, as an honest sender does.  Returns false if it does not fit
// before the end of the ring (a pad comes first then).
bool put_record(Run &r, uint16_t type, uint16_t flags, uint32_t len, uint32_t imm, const void *body,
                uint64_t body_len, const uint8_t *extra = nullptr, uint64_t extra_len = 0) {
    uint64_t off = r.hpos & r.hep->mask;
    uint64_t bytes = round_line(sizeof(RecHdr) + body_len + extra_len);
    if (bytes > r.hep->ring_size / 2) return false;
    if (off + bytes > r.hep->ring_size) {
        RecHdr *p = rec_at(r, r.hpos);
        p->type = kPad;
        p->flags = 0;
        p->len = static_cast<uint32_t>(r.hep->ring_size - off);
        p->seq.store(seq_of(r.hpos), std::memory_order_release);
        r.hpos += r.hep->ring_size - off;
    }
    RecHdr *p = rec_at(r, r.hpos);
    auto *b = reinterpret_cast<uint8_t *>(p + 1);
    if (body_len) memcpy(b, body, body_len);
    if (extra_len) memcpy(b + body_len, extra, extra_len);
    p->type = type;
    p->flags = flags;
    p->len = len;
    p->imm = imm;
    p->seq.store(seq_of(r.hpos), std::memory_order_release);
    r.hpos += bytes;
    return true;
}

std::vector<uint8_t> payload(uint64_t n, uint64_t seed) {
    std::vector<uint8_t> v(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = pattern(i + seed);
    return v;
}

uint64_t target_addr(Target t, uint32_t raddr) {
    switch (t) {
    case kTargetWindow:
        return reinterpret_cast<uint64_t>(at(kWindow)) + raddr % kPage;
    case kTargetReadOnly:
        return reinterpret_cast<uint64_t>(at(kReadOnly)) + raddr % kPage;
    case kTargetCanary:
        return reinterpret_cast<uint64_t>(at(kCanaryHi)) + raddr % kPage;
    default:
        return raddr | (uint64_t(raddr) << 32);
    }
}
uint32_t target_handle(Target t) {
    switch (t) {
    case kTargetWindow:
    case kTargetRaw:
        return h->handle[kWindow];
    case kTargetReadOnly:
        return h->handle[kReadOnly];
    default:
        return h->handle[kCanaryHi];
    }
}

// The hostile peer reads what the victim wrote to it (the victim's out ring), the
// way an honest receiver walks it, and looks for the canary pages' secret there.
void drain_out(Run &r) {
    for (int n = 0; n < 4096; ++n) {
        auto *p = reinterpret_cast<const RecHdr *>(r.hep->in + (r.drained & r.hep->mask));
        if (p->seq.load(std::memory_order_acquire) != seq_of(r.drained)) break;
        uint64_t off = r.drained & r.hep->mask;
        uint64_t size = p->type == kPad ? r.hep->ring_size - off : kLine;
        if (p->type == kSend || p->type == kSendFrag || p->type == kRdmaWriteFrag ||
            p->type == kRdmaReadResp)
            size = round_line(sizeof(RecHdr) + 24 + p->len);
        if (p->type == kSend) size = round_line(sizeof(RecHdr) + p->len);
        if (p->type == kRdmaReadReq) size = round_line(sizeof(RecHdr) + sizeof(ReadReqBody));
        if (p->type == kSendGet) fail("the victim sent a SEND-GET without cross-memory attach");
        if (off + size > r.hep->ring_size) fail("the victim wrote a record past its ring");
        const uint8_t *b = reinterpret_cast<const uint8_t *>(p);
        for (uint64_t i = 0; p->type != kPad && i + sizeof kSecret <= size; ++i)
            if (memcmp(b + i, kSecret, sizeof kSecret) == 0)
                fail("memory without RDMA read left the victim (record type %u)", p->type);
        for (uint64_t line = kLine; p->type != kPad && line < size; line += kLine)
            reinterpret_cast<RecHdr *>(r.hep->in + ((r.drained + line) & r.hep->mask))
                ->seq.store(0, std::memory_order_relaxed);
        r.drained += size;
    }
}

void reap(Run &r) {
    if (r.stream) return;
    for (bool recv : {true, false})
        for (int i = 0; i < 64; ++i) {
            VIP_DESCRIPTOR *d = nullptr;
            VIP_RETURN rc = timed("Done", [&] {
                return recv ? VipRecvDone(r.victim, &d) : VipSendDone(r.victim, &d);
            });
            if (rc == VIP_NOT_DONE) break;
            if (rc != VIP_SUCCESS && rc != VIP_DESCRIPTOR_ERROR)
                fail("Done returned %s", VipReturnString(rc));
            uint64_t off = reinterpret_cast<uint8_t *>(d) - at(kDescPage);
            if (off >= kPage || off % kDescStride) fail("a descriptor nobody posted completed");
            size_t k = off / kDescStride;
            if (r.done[k]) fail("descriptor %zu completed twice", k);
            r.done[k] = true;
            r.status[k] = d->CS.Status;
            r.length[k] = d->CS.Length;
        }
}

void progress(Run &r, int calls) {
    for (int i = 0; i < calls; ++i) {
        if (!r.stream) {
            reap(r);
            continue;
        }
        std::error_code ec;
        size_t n = timed("read", [&] {
            return r.vs.read(std::as_writable_bytes(std::span(r.readbuf.data(), 8192)), ec);
        });
        if (n > 8192) fail("a read returned %zu bytes into 8192", n);
        for (size_t k = 8192; k < r.readbuf.size(); ++k)
            if (r.readbuf[k] != 0xee) fail("a read wrote past its buffer");
        if (ec && ec != std::errc::operation_would_block) r.stream_error = ec;
        timed("events", [&] { return r.vs.events(); });
    }
    drain_out(r);
}

void post_own(Run &r, uint8_t what, uint16_t len) {
    if (r.stream) {
        std::vector<uint8_t> v = payload(len % 9000, len);
        std::error_code ec;
        timed("write", [&] { return r.vs.write(std::as_bytes(std::span(v)), ec); });
        return;
    }
    int k = what % 3;
    if (r.posted[k]) return;
    uint32_t s = kOwnSend + k;
    VIP_DESCRIPTOR *d = slot(s);
    memset(d, 0, kDescStride);
    uint32_t n = 1 + len % 2048;
    uint16_t op = k == 0   ? VIP_CONTROL_OP_SENDRECV
                  : k == 1 ? VIP_CONTROL_OP_RDMAWRITE
                           : VIP_CONTROL_OP_RDMAREAD;
    d->CS.Control = op;
    d->CS.Length = n;
    uint32_t first = 0;
    if (k) {
        d->DS[0].Remote.Data.AddressBits = 0x10000;
        d->DS[0].Remote.Handle = 0x55;
        first = 1;
    }
    VIP_DATA_SEGMENT &l = (&d->DS[0] + first)->Local;
    l.Data.Address = at(kLocal);
    l.Handle = h->handle[kLocal];
    l.Length = n;
    d->CS.SegCount = static_cast<uint16_t>(first + 1);
    mark(kDescPage, s * kDescStride, kDescStride);
    if (k == 2) mark(kLocal, 0, n);
    VIP_RETURN rc = timed("post", [&] { return VipPostSend(r.victim, d, h->handle[kDescPage]); });
    r.posted[k] = rc == VIP_SUCCESS;
}

// A thread rewrites one field of a published record while the victim reads it.
void race(Run &r, RaceField f, uint16_t rounds) {
    uint64_t pos = r.hpos;
    std::vector<uint8_t> body(64, 0x11);
    if (f == kRaceNseg) {
        SendGetBody g{static_cast<uint32_t>(getpid()), 1};
        Segment s{reinterpret_cast<uint64_t>(at(kCanaryLo)), 64};
        memcpy(body.data(), &g, sizeof g);
        memcpy(body.data() + sizeof g, &s, sizeof s);
        if (!put_record(r, kSendGet, 0, 64, 0, body.data(), sizeof g + sizeof s)) return;
    } else if (!put_record(r, kSend, 0, 40, 0, body.data(), 40)) {
        return;
    }
    if (rec_at(r, pos)->type == kPad) pos += r.hep->ring_size - (pos & r.hep->mask);
    RecHdr *p = rec_at(r, pos);
    std::atomic<bool> stop{false};
    int n = 1 + rounds % 4096;
    std::thread t([&] {
        auto *len = reinterpret_cast<volatile uint32_t *>(&p->len);
        auto *type = reinterpret_cast<volatile uint16_t *>(&p->type);
        auto *nseg = reinterpret_cast<volatile uint32_t *>(reinterpret_cast<uint8_t *>(p + 1) + 4);
        for (int i = 0; i < 1000000 && !stop.load(std::memory_order_relaxed); ++i) {
            if (f == kRaceLen) *len = i % 2 ? 0xffffffffu : 40u;
            if (f == kRaceType) *type = static_cast<uint16_t>(i % 2 ? kSend : 1 + i % 9);
            if (f == kRaceNseg) *nseg = i % 2 ? 0xffffffffu : 1u;
        }
    });
    progress(r, 1 + n / 64);
    stop.store(true);
    t.join();
}

void op(Run &r) {
    Reader &in = r.in;
    auto o = static_cast<Op>(in.u8() % kOpCount);
    switch (o) {
    case kOpSend: {
        uint16_t len = in.u16() % 2048;
        uint8_t flags = in.u8();
        uint32_t imm = in.u32();
        auto v = payload(len, r.hpos);
        put_record(r, kSend, flags & kRecImm, len, imm, v.data(), v.size());
        break;
    }
    case kOpRaw: {
        uint8_t type = in.u8();
        uint16_t flags = in.u16();
        uint32_t len = in.u32(), imm = in.u32();
        uint32_t words = in.u8();
        std::vector<uint8_t> body(words * 4);
        for (auto &b : body) b = in.u8();
        put_record(r, type, flags, len, imm, body.data(), body.size());
        break;
    }
    case kOpFrag: {
        uint8_t kind = in.u8(), flags = in.u8();
        uint32_t offset = in.u32(), total = in.u32();
        auto t = static_cast<Target>(in.u8() % kTargetCount);
        uint32_t raddr = in.u32();
        uint16_t chunk = in.u16() % 2048;
        FragBody b{offset, total, target_addr(t, raddr), target_handle(t), 0};
        auto v = payload(chunk, offset);
        put_record(r, kind % 2 ? kRdmaWriteFrag : kSendFrag, flags & 7, chunk, in.u32(), &b,
                   sizeof b, v.data(), v.size());
        break;
    }
    case kOpSendGet: {
        uint16_t nseg = in.u16();
        uint32_t pid = in.u32(), len = in.u32();
        SendGetBody b{pid, nseg};
        std::vector<Segment> segs;
        for (uint32_t i = 0; i < std::min<uint32_t>(nseg, 8); ++i) {
            uint64_t a = in.u64(), l = in.u64();
            segs.push_back(Segment{a, l});
        }
        put_record(r, kSendGet, 0, len, 0, &b, sizeof b,
                   reinterpret_cast<const uint8_t *>(segs.data()), segs.size() * sizeof(Segment));
        break;
    }
    case kOpReadReq: {
        auto t = static_cast<Target>(in.u8() % kTargetCount);
        uint32_t raddr = in.u32(), total = in.u32();
        ReadReqBody b{target_addr(t, raddr), target_handle(t), total, in.u64()};
        put_record(r, kRdmaReadReq, 0, 0, 0, &b, sizeof b);
        break;
    }
    case kOpReadResp: {
        ReadRespBody b{};
        b.req = in.u64();
        b.offset = in.u32();
        b.total = in.u32();
        b.status = in.u32();
        uint16_t chunk = in.u16() % 2048;
        auto v = payload(chunk, b.offset);
        put_record(r, kRdmaReadResp, in.u8() & kRecLast, chunk, 0, &b, sizeof b, v.data(),
                   v.size());
        break;
    }
    case kOpError: {
        ErrorBody b{in.u32()};
        put_record(r, kError, 0, 0, 0, &b, sizeof b);
        break;
    }
    case kOpPad: {
        uint64_t off = r.hpos & r.hep->mask;
        RecHdr *p = rec_at(r, r.hpos);
        p->type = kPad;
        p->flags = 0;
        p->len = static_cast<uint32_t>(r.hep->ring_size - off);
        p->seq.store(seq_of(r.hpos), std::memory_order_release);
        r.hpos += r.hep->ring_size - off;
        break;
    }
    case kOpRewound: {
        bool honest = in.u8() % 2 == 0;
        uint64_t v = in.u64();
        if (honest) {
            r.hep->me->rewound_at.store(r.hpos, std::memory_order_release);
            r.hpos += r.hep->ring_size - (r.hpos & r.hep->mask);
        } else {
            r.hep->me->rewound_at.store(v, std::memory_order_release);
        }
        break;
    }
    case kOpSeq: {
        auto mode = static_cast<SeqMode>(in.u8() % kSeqCount);
        uint32_t v = in.u32();
        uint32_t seq = mode == kSeqRight     ? seq_of(r.hpos)
                       : mode == kSeqNextLap ? seq_of(r.hpos + r.hep->ring_size)
                                             : v;
        rec_at(r, r.hpos)->seq.store(seq, std::memory_order_release);
        break;
    }
    case kOpPoke: {
        uint32_t off = in.u32() & static_cast<uint32_t>(r.hep->mask & ~3ull);
        uint32_t v = in.u32();
        memcpy(r.hep->out + off, &v, sizeof v);
        break;
    }
    case kOpConsumed: {
        auto mode = static_cast<ConsumedMode>(in.u8() % kConsumedCount);
        uint64_t v = in.u64();
        drain_out(r);
        uint64_t c = mode == kConsumedHonest  ? r.drained
                     : mode == kConsumedAhead ? r.drained + v
                     : mode == kConsumedBack  ? r.drained - v
                                              : v;
        r.hep->me->consumed.store(c, std::memory_order_release);
        break;
    }
    case kOpState: {
        uint32_t state = in.u32(), reason = in.u32();
        uint64_t at_pos = in.u64();
        r.hep->me->reason.store(reason);
        r.hep->me->broken_at.store(at_pos);
        r.hep->me->state.store(state);
        break;
    }
    case kOpWaiter: {
        uint64_t w = in.u64();
        uint32_t cpu = in.u32();
        r.hep->me->waiter.store(w);
        r.hep->me->cpu.store(static_cast<int32_t>(cpu));
        break;
    }
    case kOpHeader: {
        auto f = static_cast<HeaderField>(in.u8() % kHdrCount);
        uint32_t v = in.u32();
        ConnHeader *hd = r.hep->hdr;
        EndCtl *me = r.hep->me;
        uint32_t *w[] = {&hd->magic, &hd->ring_size, &hd->header_size, &me->pid,
                         &me->ptag,  &me->rdma,      &me->can_access,  &me->shareable};
        *w[f] = v;
        break;
    }
    case kOpProgress:
        progress(r, 1 + in.u8() % 16);
        break;
    case kOpPost: {
        uint8_t what = in.u8();
        post_own(r, what, in.u16());
        break;
    }
    case kOpRace: {
        auto f = static_cast<RaceField>(in.u8() % kRaceCount);
        race(r, f, in.u16());
        break;
    }
    case kOpHonest:
        if (r.stream) {
            // The honest streams are checked after every input.
        } else {
            h->honest.exchange();
        }
        break;
    case kOpFrame: {
        uint8_t kind = in.u8(), flags = in.u8();
        uint16_t credits = in.u16();
        uint32_t length = in.u32();
        uint16_t data = in.u16() % 4200;
        uint8_t hdr[8] = {kind,
                          flags,
                          static_cast<uint8_t>(credits >> 8),
                          static_cast<uint8_t>(credits),
                          static_cast<uint8_t>(length >> 24),
                          static_cast<uint8_t>(length >> 16),
                          static_cast<uint8_t>(length >> 8),
                          static_cast<uint8_t>(length)};
        auto v = payload(data, r.hpos);
        put_record(r, kSend, 0, 8 + data, 0, hdr, 8, v.data(), v.size());
        break;
    }
    case kOpCount:
        break;
    }
}

void check_memory(Run &r) {
    for (size_t i = 0; i < h->expect.size(); ++i)
        if (!h->may_change[i] && h->mem[i] != h->expect[i])
            fail("byte %zu of page %zu changed (0x%02x, was 0x%02x)", i % kPage, i / kPage,
                 h->mem[i], h->expect[i]);
    for (int i = 0; i < r.recvs; ++i) {
        if (!r.done[i] || (r.status[i] & VIP_STATUS_ERROR_MASK)) continue;
        if ((r.status[i] & VIP_STATUS_OP_MASK) == VIP_STATUS_OP_REMOTE_RDMA_WRITE) {
            if (r.length[i] > r.mtu) fail("an RDMA write notice of %u bytes", r.length[i]);
            continue;
        }
        int n;
        const Seg *segs = segs_of(i, &n);
        uint64_t logical = 0;
        for (int s = 0; s < n; ++s)
            for (uint32_t k = 0; k < segs[s].length; ++k, ++logical) {
                size_t off = kRecvPage * kPage + i * kRecvStride + segs[s].offset + k;
                if (logical >= r.length[i] && h->mem[off] != h->expect[off])
                    fail("receive %d written past its length %u", i, r.length[i]);
            }
        if (r.length[i] > logical) fail("receive %d completed with %u bytes", i, r.length[i]);
    }
}

void honest_streams() {
    for (int s = 0; s < 2; ++s) {
        uint8_t out[64], in[64] = {};
        for (int i = 0; i < 64; ++i) out[i] = static_cast<uint8_t>(h->stream_round * 3 + i);
        ++h->stream_round;
        std::error_code ec;
        vipl::Stream &a = h->stream_round % 2 ? h->honest_cli[s] : h->honest_srv[s];
        vipl::Stream &b = h->stream_round % 2 ? h->honest_srv[s] : h->honest_cli[s];
        size_t put = 0;
        for (int i = 0; i < 100 && put < 64; ++i) {
            put += a.write(std::as_bytes(std::span(out + put, 64 - put)),
                           vipl::deadline_in(std::chrono::seconds(2)), ec);
            if (ec && ec != std::errc::interrupted)
                fail("the honest stream refused a write: %s", ec.message().c_str());
        }
        size_t got = 0;
        for (int i = 0; i < 100 && got < 64; ++i) {
            size_t n = b.read(std::as_writable_bytes(std::span(in + got, 64 - got)),
                              vipl::deadline_in(std::chrono::seconds(2)), ec);
            if ((ec && ec != std::errc::interrupted) || (!ec && n == 0))
                fail("the honest stream lost a message: %s", ec.message().c_str());
            got += n;
        }
        if (put < 64 || got < 64) fail("the honest stream took too many signals");
        if (memcmp(in, out, 64) != 0) fail("the honest stream changed a message");
    }
}

void start_vi(Run &r, uint8_t cfg) {
    static const VIP_RELIABILITY_LEVEL levels[] = {
        VIP_SERVICE_UNRELIABLE, VIP_SERVICE_RELIABLE_DELIVERY, VIP_SERVICE_RELIABLE_RECEPTION,
        VIP_SERVICE_RELIABLE_DELIVERY};
    VIP_VI_ATTRIBUTES a{};
    a.ReliabilityLevel = levels[cfg & kCfgReliability];
    r.mtu = (cfg & kCfgLargeMtu) ? 65536 : 1024;
    a.MaxTransferSize = r.mtu;
    a.Ptag = h->ptag;
    bool rdma = cfg & kCfgShareable;
    a.EnableRdmaWrite = rdma ? VIP_TRUE : VIP_FALSE;
    a.EnableRdmaRead = rdma && a.ReliabilityLevel != VIP_SERVICE_UNRELIABLE ? VIP_TRUE : VIP_FALSE;
    if (VipCreateVi(h->nic, &a, nullptr, nullptr, &r.victim) != VIP_SUCCESS) fail("VipCreateVi");
    r.recvs = (cfg & kCfgRecvMask) >> kCfgRecvShift;
    for (int i = 0; i < r.recvs; ++i) {
        VIP_DESCRIPTOR *d = slot(i);
        memset(d, 0, kDescStride);
        int n;
        const Seg *segs = segs_of(i, &n);
        uint32_t total = 0;
        for (int s = 0; s < n; ++s) {
            VIP_DATA_SEGMENT &l = (&d->DS[0] + s)->Local;
            l.Data.Address = at(kRecvPage, i * kRecvStride + segs[s].offset);
            l.Handle = h->handle[kRecvPage];
            l.Length = segs[s].length;
            mark(kRecvPage, i * kRecvStride + segs[s].offset, segs[s].length);
            total += segs[s].length;
        }
        d->CS.SegCount = static_cast<uint16_t>(n);
        d->CS.Length = total;
        mark(kDescPage, i * kDescStride, kDescStride);
        if (VipPostRecv(r.victim, d, h->handle[kDescPage]) != VIP_SUCCESS) fail("VipPostRecv");
    }
    a.Ptag = h->hostile_ptag;
    if (VipCreateVi(h->hostile_nic, &a, nullptr, nullptr, &r.hostile) != VIP_SUCCESS)
        fail("VipCreateVi (peer)");
    connect_vis(h->nic, r.victim, h->hostile_nic, r.hostile, h->vi_disc);
}

void start_stream(Run &r) {
    VIP_VI_ATTRIBUTES a{};
    a.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    a.MaxTransferSize = 8 + 4096;
    a.Ptag = h->hostile_ptag;
    if (VipCreateVi(h->hostile_nic, &a, nullptr, nullptr, &r.hostile) != VIP_SUCCESS)
        fail("VipCreateVi (peer)");
    int s = r.shareable ? 1 : 0;
    uint16_t port = h->listener[s]->uri().port;
    uint8_t disc[2] = {static_cast<uint8_t>(port >> 8), static_cast<uint8_t>(port)};
    auto remote = address(h->hostile_nic, disc, 2);
    uint8_t ldisc[] = {'h', 's'};
    auto local = address(h->hostile_nic, ldisc, 2);
    VIP_RETURN rrc = VIP_SUCCESS;
    std::thread t([&] {
        VIP_VI_ATTRIBUTES ra;
        rrc = again([&] {
            return VipConnectRequest(r.hostile, reinterpret_cast<VIP_NET_ADDRESS *>(local.data()),
                                     reinterpret_cast<VIP_NET_ADDRESS *>(remote.data()), 5000, &ra);
        });
    });
    std::error_code ec;
    r.vs = again_ec(
        ec, [&] { return h->listener[s]->accept(vipl::deadline_in(std::chrono::seconds(5)), ec); });
    t.join();
    if (ec || rrc != VIP_SUCCESS) fail("cannot connect the stream: %s", ec.message().c_str());
    r.vs.set_nonblocking(true);
}

// FUZZ_RING_TRACE=1: one line per input on how it ended, to check what a seed does.
void trace(Run &r) {
    if (r.stream) {
        fprintf(stderr, "%s stream: %s\n", r.shareable ? "shareable" : "private",
                r.stream_error ? r.stream_error.message().c_str() : "open");
        return;
    }
    VIP_VI_STATE st = VIP_STATE_IDLE;
    VipQueryVi(r.victim, &st, nullptr, nullptr, nullptr);
    fprintf(stderr, "VI: %s;", st == VIP_STATE_CONNECTED ? "Connected" : "Error");
    for (size_t i = 0; i < r.done.size(); ++i)
        if (r.done[i]) fprintf(stderr, " d%zu:%x/%u", i, r.status[i], r.length[i]);
    fprintf(stderr, "\n");
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setup();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    Run r;
    r.in = Reader{data + 1, size - 1};
    uint8_t cfg = data[0];
    r.stream = cfg & kCfgStream;
    r.shareable = r.stream && (cfg & kCfgShareable);
    for (uint32_t page = 0; page < kPages; ++page)
        for (uint64_t i = 0; i < kPage; ++i)
            *at(page, i) = (page == kCanaryLo || page == kCanaryHi) ? kSecret[i % 16]
                                                                    : pattern(page * kPage + i);
    memset(h->may_change.data(), 0, h->may_change.size());
    mark(kWindow, 0, kPage);
    memset(r.readbuf.data(), 0xee, r.readbuf.size());
    if (r.stream)
        start_stream(r);
    else
        start_vi(r, cfg);
    memcpy(h->expect.data(), h->mem, h->expect.size());
    r.hep = endpoint_of(r.hostile);

    for (int n = 0; n < 256 && r.in.more(); ++n) op(r);
    progress(r, 8);

    if (getenv("FUZZ_RING_TRACE")) trace(r);
    if (r.stream) {
        if (r.stream_error && r.stream_error != std::errc::connection_reset &&
            r.stream_error != std::errc::protocol_error && r.stream_error != std::errc::broken_pipe)
            fail("the stream failed with %s", r.stream_error.message().c_str());
        r.vs.abort();
        r.vs = vipl::Stream();
        honest_streams();
    } else {
        VIP_VI_STATE st;
        if (VipQueryVi(r.victim, &st, nullptr, nullptr, nullptr) != VIP_SUCCESS)
            fail("VipQueryVi refused");
        if (st != VIP_STATE_CONNECTED && st != VIP_STATE_ERROR)
            fail("the victim went to state %d", static_cast<int>(st));
        reap(r);
        check_memory(r);
        VipDisconnect(r.victim);
        reap(r);
        if (VipDestroyVi(r.victim) != VIP_SUCCESS) fail("VipDestroyVi failed");
        h->honest.exchange();
    }
    VipDisconnect(r.hostile);
    if (VipDestroyVi(r.hostile) != VIP_SUCCESS) fail("VipDestroyVi (peer) failed");
    return 0;
}
