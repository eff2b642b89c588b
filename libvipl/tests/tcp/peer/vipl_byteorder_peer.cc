// vipl-byteorder-peer: one side of the byte-order check of the tcp provider.
//
//   vipl-byteorder-peer --server|--client --disc NAME [options]
//
// Both sides run the same script over one reliable VI.  Each in turn is the
// initiator and the other the target: sends with immediate data (0, 1, 7,
// 4096, 65537 bytes and 1 MiB), RDMA writes of 1, 7, 4096, 65537 bytes and
// 1 MiB (with immediate data for every other one) and RDMA reads of the same
// lengths, through descriptors of up to three local segments, scattered into
// receive buffers of two.  Every byte received, written into this side's
// memory by the peer or read from the peer's memory is checked, and so are
// the bytes around it, the immediate data, lengths and status words.  The
// data follow a pseudo-random stream seeded by operation, index and
// direction, so a misplaced, truncated or foreign byte shows up.
//
// Built for s390x (big-endian, run under qemu-user) and run against an
// x86-64 peer, it shows that the library keeps the wire in one byte order:
// only the program's own data (the control notes below, which this program
// encodes big-endian itself) may depend on how the program lays them out.
//
// Options: --device DEVICE (tcp:127.0.0.1)  --host HOST (127.0.0.1)
//          --timeout-ms N (30000; each wait)  --deadline-s N (300; the whole run)
//          --expect-peer big|little (the byte order the peer must report)
// Exit status: 0 every check passed, here and at the peer; 1 a check failed;
// 2 a VIPL call failed or timed out.
#include <vipl.h>
#include <vipl_ext.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

// ---------------------------------------------------------------- the script

constexpr uint32_t kSendLengths[] = {0, 1, 7, 4096, 65537, 1u << 20};
constexpr uint32_t kRdmaLengths[] = {1, 7, 4096, 65537, 1u << 20};
constexpr int kSends = 6, kRdmas = 5;
// RDMA writes with an even index carry immediate data (and take a receive).
constexpr int kWritesWithImm = 3;
// Not a round number, so that a field taken in the wrong order cannot match.
constexpr VIP_ULONG kMtu = 0x00135a97;

enum Kind : uint32_t { kSend = 1, kWrite, kRead, kNote };

// Control notes: application data, laid out big-endian by this program.
//   0 magic u32 | 4 type u8 | 5 byte order u8 ('B'/'L') | 6 role u8 ('S'/'C') | 7 zero
//   8 probe u32 | 12 region handle u32 | 16 write area u64 | 24 read area u64
//   32 failures u32 | 36 write area length u32 | 40 read area length u32
enum NoteType : uint8_t { kHello = 1, kWritesDone, kPhaseDone, kBye };
constexpr uint32_t kNoteMagic = 0x56424f50; // "VBOP"
constexpr uint32_t kProbe = 0x01020304;
constexpr uint32_t kNoteSize = 44;
constexpr uint32_t kNoteRoom = 64;

// Receives each side posts before connecting, in the order the peer's
// messages come: its hello, a phase as target (sends, writes with immediate
// data, two notes), its bye, and one that the end of the connection flushes.
constexpr int kPhaseRecvs = kSends + kWritesWithImm + 2;
constexpr int kRecvs = 1 + kPhaseRecvs + 1 + 1;

constexpr size_t kSlack = 16; // checked bytes after each receiving buffer
constexpr uint8_t kLocalFill = 0xee, kWriteFill = 0xa5, kReadFill = 0x5a;
constexpr size_t kDescSlot = 128; // room for a control segment and 6 segments
constexpr size_t kDescSlots = 64;

uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352d;
    x ^= x >> 15;
    x *= 0x846ca68b;
    x ^= x >> 16;
    return x;
}

// dir 0: the client initiates; dir 1: the server does.
uint32_t seed(int dir, Kind kind, int index) {
    return mix(0x42590000u ^ static_cast<uint32_t>(dir) << 12 ^ kind << 8 ^
               static_cast<uint32_t>(index));
}

uint32_t swapped(uint32_t v) {
    return v >> 24 | (v >> 8 & 0xff00) | (v << 8 & 0xff0000) | v << 24;
}

// Immediate data; never the same read in either byte order.
uint32_t imm(int dir, Kind kind, int index) {
    uint32_t v = mix(seed(dir, kind, index) ^ 0x1f2e3d4c);
    if (v == swapped(v)) v ^= 0x00ff0000;
    return v;
}

// The data of one operation: a xorshift stream, byte i at position i.
struct Stream {
    uint32_t x;
    explicit Stream(uint32_t s) : x(s ? s : 1) {}
    uint8_t next() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        return static_cast<uint8_t>(x >> 11);
    }
};

// Where RDMA operation k lands in the target's write area (or reads from its
// read area): packed in order, odd gaps between them, so addresses are odd too.
uint64_t area_offset(int k, bool read) {
    uint64_t off = 0;
    for (int j = 0; j <= k; ++j) {
        off += read ? 5 + 4 * j : 3 + 2 * j;
        if (j < k) off += kRdmaLengths[j];
    }
    return off;
}
uint64_t area_size(bool read) {
    return area_offset(kRdmas - 1, read) + kRdmaLengths[kRdmas - 1] + 64;
}

void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | p[i];
    return v;
}
uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
    return v;
}

char host_order() {
    return std::endian::native == std::endian::big ? 'B' : 'L';
}

// ---------------------------------------------------------------- reporting

std::string g_name = "vipl-byteorder-peer";
int g_checks = 0, g_failures = 0;
std::atomic<bool> g_ending{false};
std::atomic<int> g_async_errors{0};

void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", g_name.c_str(), line);
}

[[noreturn]] void die(const char *what, VIP_RETURN rc) {
    say("%s: %s", what, VipReturnString(rc));
    exit(2);
}

void call(const char *what, VIP_RETURN rc) {
    if (rc != VIP_SUCCESS) die(what, rc);
}

bool check(bool ok, const char *fmt, ...) {
    ++g_checks;
    if (ok) return true;
    ++g_failures;
    va_list ap;
    va_start(ap, fmt);
    char line[400];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    say("FAILED: %s", line);
    return false;
}

void on_error(VIP_PVOID, VIP_ERROR_DESCRIPTOR *e) {
    if (g_ending.load()) return;
    ++g_async_errors;
    say("asynchronous error %d (resource %d, op %lu)", static_cast<int>(e->ErrorCode),
        static_cast<int>(e->ResourceCode), static_cast<unsigned long>(e->OpCode));
}

// ------------------------------------------------------------ memory, pieces

// A buffer one descriptor segment names.
struct Piece {
    uint8_t *p;
    uint32_t n;
};

// Fills pieces with the stream `s`, continuing from piece to piece.
void fill(const std::vector<Piece> &pieces, uint32_t s) {
    Stream st(s);
    for (const Piece &pc : pieces)
        for (uint32_t i = 0; i < pc.n; ++i) pc.p[i] = st.next();
}

// Checks that pieces hold the stream `s` and, unless `around` is negative,
// that the kSlack bytes after each still hold `around`.
void expect(const std::vector<Piece> &pieces, uint32_t s, int around, const char *what) {
    Stream st(s);
    uint64_t pos = 0, bad = 0, first = 0;
    uint8_t got = 0, want = 0;
    for (const Piece &pc : pieces)
        for (uint32_t i = 0; i < pc.n; ++i, ++pos) {
            uint8_t w = st.next();
            if (pc.p[i] != w && !bad++) first = pos, got = pc.p[i], want = w;
        }
    check(!bad, "%s: %llu of %llu bytes differ, the first at %llu (0x%02x, not 0x%02x)", what,
          static_cast<unsigned long long>(bad), static_cast<unsigned long long>(pos),
          static_cast<unsigned long long>(first), got, want);
    for (size_t j = 0; around >= 0 && j < pieces.size(); ++j) {
        const uint8_t *after = pieces[j].p + pieces[j].n;
        size_t n = 0;
        for (size_t i = 0; i < kSlack; ++i) n += after[i] != around;
        check(!n, "%s: %zu bytes after segment %zu were written", what, n, j);
    }
}

// One registered region and a bump allocator over it that leaves gaps of
// odd sizes between buffers, so they start at every alignment.
struct Region {
    uint8_t *base = nullptr;
    size_t size = 0, used = 0;
    VIP_MEM_HANDLE mh = 0;
    int count = 0;

    void map(VIP_NIC_HANDLE nic, VIP_PROTECTION_HANDLE ptag, size_t bytes, bool rdma,
             uint8_t fill_byte) {
        size = bytes;
        void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            say("mmap of %zu bytes failed", size);
            exit(2);
        }
        base = static_cast<uint8_t *>(m);
        memset(base, fill_byte, size);
        VIP_MEM_ATTRIBUTES ma{};
        ma.Ptag = ptag;
        ma.EnableRdmaWrite = rdma ? VIP_TRUE : VIP_FALSE;
        ma.EnableRdmaRead = rdma ? VIP_TRUE : VIP_FALSE;
        call("VipRegisterMem", VipRegisterMem(nic, base, size, &ma, &mh));
    }
    uint8_t *take(size_t n) {
        used += kSlack + 1 + (count++ * 5) % 13;
        uint8_t *p = base + used;
        used += n;
        if (used + kSlack > size) {
            say("out of buffer room");
            exit(2);
        }
        return p;
    }
    // `n` bytes as `ways` buffers (fewer when n is small) apart from each other.
    std::vector<Piece> pieces(uint32_t n, int ways) {
        std::vector<uint32_t> lens;
        if (ways == 3 && n >= 3)
            lens = {n / 4 + 1, n / 2, n - (n / 4 + 1) - n / 2};
        else if (ways == 2 && n >= 2)
            lens = {n / 3 + 1, n - (n / 3 + 1)};
        else if (n)
            lens = {n};
        std::vector<Piece> v;
        for (uint32_t l : lens) v.push_back({take(l), l});
        return v;
    }
};

// ------------------------------------------------------------------- a side

struct Options {
    bool server = false, client = false;
    std::string disc, device = "tcp:127.0.0.1", host = "127.0.0.1";
    unsigned long timeout_ms = 30000;
    unsigned deadline_s = 300;
    char expect_peer = 0;
};

struct PeerInfo {
    uint32_t handle = 0;
    uint64_t write_area = 0, read_area = 0;
};

struct Side {
    Options o;
    VIP_NIC_HANDLE nic = nullptr;
    VIP_PROTECTION_HANDLE ptag = nullptr;
    VIP_VI_HANDLE vi = nullptr;
    Region local, rdma;
    uint8_t *write_area = nullptr, *read_area = nullptr;
    size_t next_desc = 0;
    // The receives posted up front: their descriptors and buffers.
    VIP_DESCRIPTOR *recv_desc[kRecvs] = {};
    std::vector<Piece> recv_pieces[kRecvs];
    int recv_next = 0;
    PeerInfo peer;
    int peer_failures = 0;

    VIP_DESCRIPTOR *new_desc() {
        if (next_desc == kDescSlots) {
            say("out of descriptor slots");
            exit(2);
        }
        return reinterpret_cast<VIP_DESCRIPTOR *>(local.base + kDescSlot * next_desc++);
    }
    int dir_as_initiator() const { return o.client ? 0 : 1; }

    void open();
    void post_receives();
    void connect();
    void note_send(NoteType type, uint32_t failures = 0);
    VIP_DESCRIPTOR *take_recv(const char *what);
    uint8_t note_take(NoteType type, const char *what);
    void send_wait(VIP_DESCRIPTOR *d, uint32_t op, const char *what);
    void initiate(int dir);
    void target(int dir);
};

// Segment i of a descriptor (DS[0] and DS[1] are in the struct, the rest follow).
VIP_DESCRIPTOR_SEGMENT *segment(VIP_DESCRIPTOR *d, size_t i) {
    return &d->DS[0] + i;
}

void set_local(VIP_DESCRIPTOR *d, size_t first, const std::vector<Piece> &pieces, VIP_MEM_HANDLE mh,
               uint32_t extra) {
    uint32_t total = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
        VIP_DATA_SEGMENT &s = segment(d, first + i)->Local;
        s.Data.AddressBits = 0;
        s.Data.Address = pieces[i].p;
        s.Handle = mh;
        s.Length = pieces[i].n + (i + 1 == pieces.size() ? extra : 0);
        total += s.Length;
    }
    d->CS.SegCount = static_cast<VIP_UINT16>(first + pieces.size());
    d->CS.Length = total;
}

void Side::open() {
    call("VipOpenNic", VipOpenNic(o.device.c_str(), &nic));
    call("VipCreatePtag", VipCreatePtag(nic, &ptag));
    call("VipErrorCallback", VipErrorCallback(nic, nullptr, on_error));
    local.map(nic, ptag, 6u << 20, false, kLocalFill);
    local.used = kDescSlot * kDescSlots;
    rdma.map(nic, ptag, area_size(false) + area_size(true), true, kWriteFill);
    write_area = rdma.base;
    read_area = rdma.base + area_size(false);
    memset(read_area, kReadFill, area_size(true));
    // What the peer will read in its phase as initiator.
    int dir = 1 - dir_as_initiator();
    for (int k = 0; k < kRdmas; ++k)
        fill({{read_area + area_offset(k, true), kRdmaLengths[k]}}, seed(dir, kRead, k));

    VIP_VI_ATTRIBUTES va{};
    va.ReliabilityLevel = VIP_SERVICE_RELIABLE_DELIVERY;
    va.MaxTransferSize = kMtu;
    va.Ptag = ptag;
    va.EnableRdmaWrite = VIP_TRUE;
    va.EnableRdmaRead = VIP_TRUE;
    call("VipCreateVi", VipCreateVi(nic, &va, nullptr, nullptr, &vi));
}

void Side::post_receives() {
    int i = 0;
    auto add = [&](std::vector<Piece> pieces, uint32_t extra) {
        VIP_DESCRIPTOR *d = new_desc();
        memset(d, 0, sizeof *d);
        set_local(d, 0, pieces, local.mh, extra);
        recv_desc[i] = d;
        recv_pieces[i++] = std::move(pieces);
        call("VipPostRecv", VipPostRecv(vi, d, local.mh));
    };
    add(local.pieces(kNoteRoom, 1), 0);
    // kSlack bytes more room than the peer sends: the check sees they stay untouched.
    for (uint32_t len : kSendLengths)
        add(len ? local.pieces(len, 2) : std::vector<Piece>{{local.take(0), 0}}, kSlack);
    for (int k = 0; k < kWritesWithImm; ++k) add({}, 0);
    for (int k = 0; k < 4; ++k) add(local.pieces(kNoteRoom, 1), 0);
}

std::vector<uint8_t> make_address(VIP_NIC_HANDLE nic, const std::string &host,
                                  const std::string &disc) {
    std::vector<uint8_t> a(sizeof(VIP_NET_ADDRESS) + 64 + disc.size());
    auto *na = reinterpret_cast<VIP_NET_ADDRESS *>(a.data());
    call("VipNSGetHostByName", VipNSGetHostByName(nic, const_cast<char *>(host.c_str()), na, 0));
    na->DiscriminatorLen = static_cast<VIP_UINT16>(disc.size());
    memcpy(na->HostAddress + na->HostAddressLen, disc.data(), disc.size());
    return a;
}

void Side::connect() {
    VIP_VI_ATTRIBUTES ra{};
    std::string client_disc = o.disc + "-client";
    if (o.server) {
        auto local_addr = make_address(nic, o.host, o.disc);
        std::vector<uint8_t> remote(sizeof(VIP_NET_ADDRESS) + 256);
        auto *rn = reinterpret_cast<VIP_NET_ADDRESS *>(remote.data());
        VIP_CONN_HANDLE conn = nullptr;
        call("VipConnectWait",
             VipConnectWait(nic, reinterpret_cast<VIP_NET_ADDRESS *>(local_addr.data()),
                            o.timeout_ms, rn, &ra, &conn));
        std::string got(reinterpret_cast<const char *>(rn->HostAddress + rn->HostAddressLen),
                        rn->DiscriminatorLen);
        check(got == client_disc, "the client's discriminator arrived as \"%s\"", got.c_str());
        call("VipConnectAccept", VipConnectAccept(conn, vi));
    } else {
        auto local_addr = make_address(nic, o.host, client_disc);
        auto remote_addr = make_address(nic, o.host, o.disc);
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.timeout_ms);
        VIP_RETURN rc;
        for (;;) {
            rc = VipConnectRequest(vi, reinterpret_cast<VIP_NET_ADDRESS *>(local_addr.data()),
                                   reinterpret_cast<VIP_NET_ADDRESS *>(remote_addr.data()),
                                   o.timeout_ms, &ra);
            // Nobody waits on the discriminator yet: the server is still starting.
            if (rc != VIP_NO_MATCH || std::chrono::steady_clock::now() > end) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        call("VipConnectRequest", rc);
    }
    // The peer's VI attributes came in the handshake.
    check(ra.ReliabilityLevel == VIP_SERVICE_RELIABLE_DELIVERY,
          "the peer's reliability level arrived as %u", static_cast<unsigned>(ra.ReliabilityLevel));
    check(ra.MaxTransferSize == kMtu, "the peer's MaxTransferSize arrived as %#lx",
          static_cast<unsigned long>(ra.MaxTransferSize));
    check(ra.EnableRdmaWrite && ra.EnableRdmaRead, "the peer's RDMA flags arrived as %d/%d",
          ra.EnableRdmaWrite, ra.EnableRdmaRead);
}

void Side::send_wait(VIP_DESCRIPTOR *d, uint32_t op, const char *what) {
    VIP_DESCRIPTOR *got = nullptr;
    VIP_RETURN rc = VipSendWait(vi, o.timeout_ms, &got);
    if ((rc != VIP_SUCCESS && rc != VIP_DESCRIPTOR_ERROR) || !got) die(what, rc);
    check(got == d, "%s: another descriptor completed", what);
    check(got->CS.Status == (VIP_STATUS_DONE | op), "%s: status %#x", what, got->CS.Status);
}

VIP_DESCRIPTOR *Side::take_recv(const char *what) {
    VIP_DESCRIPTOR *got = nullptr;
    VIP_RETURN rc = VipRecvWait(vi, o.timeout_ms, &got);
    if ((rc != VIP_SUCCESS && rc != VIP_DESCRIPTOR_ERROR) || !got) die(what, rc);
    check(got == recv_desc[recv_next], "%s: another receive completed", what);
    ++recv_next;
    return got;
}

void Side::note_send(NoteType type, uint32_t failures) {
    std::vector<Piece> p = local.pieces(kNoteSize, 1);
    uint8_t *n = p[0].p;
    memset(n, 0, kNoteSize);
    put32(n, kNoteMagic);
    n[4] = type;
    n[5] = static_cast<uint8_t>(host_order());
    n[6] = o.server ? 'S' : 'C';
    put32(n + 8, kProbe);
    put32(n + 12, rdma.mh);
    put64(n + 16, reinterpret_cast<uintptr_t>(write_area));
    put64(n + 24, reinterpret_cast<uintptr_t>(read_area));
    put32(n + 32, failures);
    put32(n + 36, static_cast<uint32_t>(area_size(false)));
    put32(n + 40, static_cast<uint32_t>(area_size(true)));
    VIP_DESCRIPTOR *d = new_desc();
    memset(d, 0, sizeof *d);
    set_local(d, 0, p, local.mh, 0);
    d->CS.Control = VIP_CONTROL_IMMEDIATE;
    d->CS.ImmediateData = imm(0, kNote, type);
    call("VipPostSend", VipPostSend(vi, d, local.mh));
    send_wait(d, VIP_STATUS_OP_SEND, "a note");
}

// Takes the next receive, a note of `type`; returns the peer's byte order.
uint8_t Side::note_take(NoteType type, const char *what) {
    VIP_DESCRIPTOR *d = take_recv(what);
    const uint8_t *n = recv_pieces[recv_next - 1][0].p;
    check(d->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE),
          "%s: status %#x", what, d->CS.Status);
    check(d->CS.Length == kNoteSize, "%s: length %u", what, d->CS.Length);
    check(d->CS.ImmediateData == imm(0, kNote, type), "%s: immediate data %#x", what,
          d->CS.ImmediateData);
    check(get32(n) == kNoteMagic && n[4] == type && get32(n + 8) == kProbe,
          "%s: magic %#x, type %u, probe %#x", what, get32(n), n[4], get32(n + 8));
    check(n[6] == (o.server ? 'C' : 'S'), "%s: role byte %#x", what, n[6]);
    if (type == kHello) {
        peer.handle = get32(n + 12);
        peer.write_area = get64(n + 16);
        peer.read_area = get64(n + 24);
        check(get32(n + 36) == area_size(false) && get32(n + 40) == area_size(true),
              "%s: area sizes %u/%u", what, get32(n + 36), get32(n + 40));
    }
    if (type == kBye) peer_failures = static_cast<int>(get32(n + 32));
    return n[5];
}

// This side's phase as initiator: sends, RDMA writes, RDMA reads into the peer.
void Side::initiate(int dir) {
    char what[96];
    VIP_DESCRIPTOR *d[kSends];
    for (int k = 0; k < kSends; ++k) {
        std::vector<Piece> p = local.pieces(kSendLengths[k], 3);
        fill(p, seed(dir, kSend, k));
        d[k] = new_desc();
        memset(d[k], 0, sizeof *d[k]);
        set_local(d[k], 0, p, local.mh, 0);
        d[k]->CS.Control = VIP_CONTROL_IMMEDIATE;
        d[k]->CS.ImmediateData = imm(dir, kSend, k);
        call("VipPostSend", VipPostSend(vi, d[k], local.mh));
    }
    for (int k = 0; k < kSends; ++k) {
        snprintf(what, sizeof what, "send %d (%u bytes)", k, kSendLengths[k]);
        send_wait(d[k], VIP_STATUS_OP_SEND, what);
    }

    for (int k = 0; k < kRdmas; ++k) {
        std::vector<Piece> p = local.pieces(kRdmaLengths[k], 3);
        fill(p, seed(dir, kWrite, k));
        d[k] = new_desc();
        memset(d[k], 0, sizeof *d[k]);
        d[k]->DS[0].Remote.Data.AddressBits = peer.write_area + area_offset(k, false);
        d[k]->DS[0].Remote.Handle = peer.handle;
        set_local(d[k], 1, p, local.mh, 0);
        d[k]->CS.Control = VIP_CONTROL_OP_RDMAWRITE;
        if (k % 2 == 0) {
            d[k]->CS.Control |= VIP_CONTROL_IMMEDIATE;
            d[k]->CS.ImmediateData = imm(dir, kWrite, k);
        }
        call("VipPostSend", VipPostSend(vi, d[k], local.mh));
    }
    for (int k = 0; k < kRdmas; ++k) {
        snprintf(what, sizeof what, "RDMA write %d (%u bytes)", k, kRdmaLengths[k]);
        send_wait(d[k], VIP_STATUS_OP_RDMA_WRITE, what);
    }
    note_send(kWritesDone);

    std::vector<Piece> dst[kRdmas];
    for (int k = 0; k < kRdmas; ++k) {
        dst[k] = local.pieces(kRdmaLengths[k], 2);
        d[k] = new_desc();
        memset(d[k], 0, sizeof *d[k]);
        d[k]->DS[0].Remote.Data.AddressBits = peer.read_area + area_offset(k, true);
        d[k]->DS[0].Remote.Handle = peer.handle;
        set_local(d[k], 1, dst[k], local.mh, 0);
        d[k]->CS.Control = VIP_CONTROL_OP_RDMAREAD;
        call("VipPostSend", VipPostSend(vi, d[k], local.mh));
    }
    for (int k = 0; k < kRdmas; ++k) {
        snprintf(what, sizeof what, "RDMA read %d (%u bytes)", k, kRdmaLengths[k]);
        send_wait(d[k], VIP_STATUS_OP_RDMA_READ, what);
        expect(dst[k], seed(dir, kRead, k), kLocalFill, what);
    }
    note_send(kPhaseDone);
}

// The peer's phase as initiator: check what arrives and what it writes here.
void Side::target(int dir) {
    char what[96];
    for (int k = 0; k < kSends; ++k) {
        snprintf(what, sizeof what, "received send %d (%u bytes)", k, kSendLengths[k]);
        VIP_DESCRIPTOR *r = take_recv(what);
        check(r->CS.Status == (VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE),
              "%s: status %#x", what, r->CS.Status);
        check(r->CS.Length == kSendLengths[k], "%s: length %u", what, r->CS.Length);
        check(r->CS.ImmediateData == imm(dir, kSend, k), "%s: immediate data %#x, not %#x", what,
              r->CS.ImmediateData, imm(dir, kSend, k));
        expect(recv_pieces[recv_next - 1], seed(dir, kSend, k), kLocalFill, what);
    }
    for (int k = 0; k < kRdmas; k += 2) {
        snprintf(what, sizeof what, "RDMA write %d (%u bytes) with immediate data", k,
                 kRdmaLengths[k]);
        VIP_DESCRIPTOR *r = take_recv(what);
        check(r->CS.Status ==
                  (VIP_STATUS_DONE | VIP_STATUS_OP_REMOTE_RDMA_WRITE | VIP_STATUS_IMMEDIATE),
              "%s: status %#x", what, r->CS.Status);
        check(r->CS.Length == kRdmaLengths[k], "%s: length %u", what, r->CS.Length);
        check(r->CS.ImmediateData == imm(dir, kWrite, k), "%s: immediate data %#x, not %#x", what,
              r->CS.ImmediateData, imm(dir, kWrite, k));
    }
    note_take(kWritesDone, "the writes-done note");
    // Every write landed where it was aimed and nowhere else.
    uint64_t at = 0;
    for (int k = 0; k < kRdmas; ++k) {
        uint64_t off = area_offset(k, false);
        size_t stray = 0;
        for (; at < off; ++at) stray += write_area[at] != kWriteFill;
        check(!stray, "%zu bytes before the target of RDMA write %d changed", stray, k);
        snprintf(what, sizeof what, "RDMA write %d (%u bytes) in this memory", k, kRdmaLengths[k]);
        expect({{write_area + off, kRdmaLengths[k]}}, seed(dir, kWrite, k), -1, what);
        at = off + kRdmaLengths[k];
    }
    size_t stray = 0;
    for (; at < area_size(false); ++at) stray += write_area[at] != kWriteFill;
    check(!stray, "%zu bytes after the last RDMA write target changed", stray);
    note_take(kPhaseDone, "the phase-done note");
}

bool parse(int argc, char **argv, Options *o) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        bool more = i + 1 < argc;
        if (a == "--server")
            o->server = true;
        else if (a == "--client")
            o->client = true;
        else if (a == "--disc" && more)
            o->disc = argv[++i];
        else if (a == "--device" && more)
            o->device = argv[++i];
        else if (a == "--host" && more)
            o->host = argv[++i];
        else if (a == "--timeout-ms" && more)
            o->timeout_ms = strtoul(argv[++i], nullptr, 10);
        else if (a == "--deadline-s" && more)
            o->deadline_s = static_cast<unsigned>(strtoul(argv[++i], nullptr, 10));
        else if (a == "--expect-peer" && more) {
            std::string v = argv[++i];
            if (v != "big" && v != "little") return false;
            o->expect_peer = v == "big" ? 'B' : 'L';
        } else
            return false;
    }
    return o->server != o->client && !o->disc.empty() && o->timeout_ms > 0;
}

} // namespace

int main(int argc, char **argv) {
    Side s;
    if (!parse(argc, argv, &s.o)) {
        fprintf(stderr,
                "usage: %s --server|--client --disc NAME [--device DEVICE] [--host HOST]\n"
                "       [--timeout-ms N] [--deadline-s N] [--expect-peer big|little]\n",
                argv[0]);
        return 2;
    }
    g_name = std::string(s.o.server ? "server" : "client") + " (" +
             (host_order() == 'B' ? "big" : "little") + "-endian)";
    // Whatever goes wrong, the run ends: SIGALRM's default action kills us.
    alarm(s.o.deadline_s);

    s.open();
    s.post_receives();
    s.connect();
    s.note_send(kHello);
    uint8_t order = s.note_take(kHello, "the peer's hello");
    check(order == 'B' || order == 'L', "the peer's byte order arrived as %#x", order);
    if (s.o.expect_peer)
        check(order == s.o.expect_peer, "the peer is %s-endian", order == 'B' ? "big" : "little");
    say("connected to a %s-endian peer", order == 'B' ? "big" : "little");

    if (s.o.client) {
        s.initiate(0);
        s.target(1);
        s.note_send(kBye, static_cast<uint32_t>(g_failures + g_async_errors.load()));
        s.note_take(kBye, "the server's bye");
        g_ending = true;
        VipDisconnect(s.vi);
    } else {
        s.target(0);
        s.initiate(1);
        s.note_take(kBye, "the client's bye");
        // The client disconnects once it has our bye: from here on that is
        // expected.  Wait for it (the spare receive is flushed), so that the
        // client is not cut off before.
        g_ending = true;
        s.note_send(kBye, static_cast<uint32_t>(g_failures + g_async_errors.load()));
        VIP_DESCRIPTOR *d = nullptr;
        VipRecvWait(s.vi, s.o.timeout_ms, &d);
    }
    int failures = g_failures + g_async_errors.load();
    say("%d checks, %d failed here, %d asynchronous errors, %d failed at the peer", g_checks,
        g_failures, g_async_errors.load(), s.peer_failures);
    VipCloseNic(s.nic);
    return failures || s.peer_failures ? 1 : 0;
}
