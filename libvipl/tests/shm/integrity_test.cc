// Data integrity over every data path of the shm provider: random sizes up
// to 4 MiB (dense around COPY_THRESHOLD), random buffer offsets and segment
// splits on both sides, immediate data, in bursts both ways, in one process
// (two threads) and between two processes, under several configurations.
//
// Each configuration runs in a fresh process (the library reads VIPL_* once
// per address space); the two sides derive the same message schedule from a
// seed, so each side knows what it must receive.
#include "procs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <unistd.h>

namespace {

struct Flow {
    uint64_t seed = 1;
    int rounds = 50;
    int max_burst = 4;
    uint32_t max_size = 4u << 20;
    int max_segs = 1;
    bool offsets = true;
    VIP_RELIABILITY_LEVEL level = VIP_SERVICE_RELIABLE_DELIVERY;
};

struct Msg {
    uint32_t size = 0, seed = 0, imm = 0;
    bool has_imm = false;
    uint32_t soff = 0, roff = 0;
    std::vector<uint32_t> sseg, rseg, sgap, rgap;
};

uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
                 (c + 1) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 29);
}

// Lengths of up to max_segs non-empty segments adding up to total.
std::vector<uint32_t> split(std::mt19937_64 &rng, uint32_t total, int max_segs) {
    if (total == 0) return {};
    uint32_t n = 1 + static_cast<uint32_t>(rng() % std::min<uint64_t>(max_segs, total));
    std::vector<uint32_t> cuts;
    for (uint32_t i = 1; i < n; ++i) cuts.push_back(1 + static_cast<uint32_t>(rng() % (total - 1)));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<uint32_t> out;
    uint32_t prev = 0;
    for (uint32_t c : cuts) {
        out.push_back(c - prev);
        prev = c;
    }
    out.push_back(total - prev);
    return out;
}

// Message `index` of direction `dir` (0: server to client, 1: back).
Msg make_msg(const Flow &f, int dir, uint64_t index) {
    static const uint32_t special[] = {0,    1,    2,    63,   64,   65,    127,   128,   500,
                                       511,  512,  513,  514,  520,  1024,  4079,  4080,  4081,
                                       4095, 4096, 4097, 8192, 8193, 65535, 65536, 65537, 1u << 20};
    std::mt19937_64 rng(mix(f.seed, dir, index));
    Msg m;
    uint64_t r = rng() % 100;
    if (r < 25)
        m.size = 480 + static_cast<uint32_t>(rng() % 65); // both sides of the 512-byte switch
    else if (r < 40)
        m.size = static_cast<uint32_t>(rng() % 1101);
    else if (r < 55)
        m.size = special[rng() % (sizeof special / sizeof special[0])];
    else if (r < 85)
        m.size = static_cast<uint32_t>(1024.0 * std::pow(256.0, (rng() % 10000) / 10000.0));
    else if (r < 97)
        m.size = (256u << 10) + static_cast<uint32_t>(rng() % f.max_size);
    else
        m.size = f.max_size;
    m.size = std::min(m.size, f.max_size);
    m.seed = static_cast<uint32_t>(rng());
    m.has_imm = rng() & 1;
    m.imm = static_cast<uint32_t>(rng());
    if (f.offsets) {
        m.soff = static_cast<uint32_t>(rng() % 64);
        m.roff = static_cast<uint32_t>(rng() % 64);
        if (index % 4 == 0) m.soff &= ~7u; // keep a share of 8-aligned sends
    }
    uint32_t slack = (rng() % 4 == 0) ? static_cast<uint32_t>(rng() % 64) : 0;
    m.sseg = split(rng, m.size, f.max_segs);
    m.rseg = split(rng, m.size + slack, f.max_segs);
    for (size_t i = 0; i < m.sseg.size(); ++i) m.sgap.push_back(f.offsets ? rng() % 64 : 0);
    for (size_t i = 0; i < m.rseg.size(); ++i) m.rgap.push_back(f.offsets ? rng() % 64 : 0);
    return m;
}

int burst(const Flow &f, int dir, int round) {
    std::mt19937_64 rng(mix(f.seed, 100 + dir, round));
    return 1 + static_cast<int>(rng() % f.max_burst);
}

struct Result {
    std::string err;
    uint64_t sent = 0, recvd = 0, bytes_sent = 0, bytes_recvd = 0;
    // SEND-GET: get_expected sends must take it, up to get_allowed may (a copy that
    // finds the ring full goes as SEND-GET where it can).
    uint64_t get_expected = 0, get_allowed = 0, above_threshold = 0, large = 0;
};

constexpr uint8_t kCanary = 0xA5;

bool all_eq(const uint8_t *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != v) return false;
    return true;
}

class Side {
public:
    Side(const Flow &f, int role) : f_(f), role_(role) {}

    Result run(const std::string &disc) {
        cma_ = vt::config_value("SHM_CMA") == "1";
        threshold_ = std::stoul(vt::config_value("SHM_COPY_THRESHOLD"));
        ring_ = std::stoul(vt::config_value("SHM_RING_SIZE"));
        align_ = std::stoul(vt::config_value("SHM_GET_ALIGN"));
        dslot_ = (32 + 16 * std::max(2, f_.max_segs) + 63) & ~63u;
        buf_ =
            (static_cast<size_t>(f_.max_size) + 64 + 64 * (f_.max_segs + 2) + 4095) & ~size_t(4095);
        descs_ = (2 * f_.max_burst * dslot_ + 4095) & ~size_t(4095);
        vt::Opts o;
        o.level = f_.level;
        pat_.resize(f_.max_size + 1);
        got_.resize(f_.max_size + 1);
        if (!ep_.open(descs_ + 2 * f_.max_burst * buf_, o)) return done();
        // The client's first receives are posted before it connects.
        if (role_ == 1 && !post_recvs(0, 0)) return done();
        if (!(role_ == 0 ? ep_.accept(disc) : ep_.connect(disc))) return done();
        for (int r = 0; r < f_.rounds && ep_.err.empty(); ++r) {
            if (role_ == 0) {
                if (!post_recvs(1, r) || !send_burst(0, r) || !recv_burst()) break;
            } else {
                if (!recv_burst()) break;
                if (r + 1 < f_.rounds && !post_recvs(0, r + 1)) break;
                if (!send_burst(1, r)) break;
            }
        }
        if (ep_.err.empty()) check_counters();
        return done();
    }

private:
    Result done() {
        res_.err = ep_.err;
        ep_.close();
        return res_;
    }

    // Puts what was being done in front of the error found below.
    bool context(const std::string &what) {
        ep_.err = what + ": " + ep_.err;
        return false;
    }

    VIP_DESCRIPTOR *desc(int slot) {
        return reinterpret_cast<VIP_DESCRIPTOR *>(ep_.mem + slot * dslot_);
    }
    uint8_t *buffer(int slot) { return ep_.mem + descs_ + slot * buf_; }

    // Lays segments out from base: offset, then each segment followed by its gap.
    static void fill_desc(VIP_DESCRIPTOR *d, size_t dslot, uint8_t *base, uint32_t off,
                          const std::vector<uint32_t> &segs, const std::vector<uint32_t> &gaps,
                          VIP_MEM_HANDLE mh) {
        memset(d, 0, dslot);
        d->CS.SegCount = static_cast<VIP_UINT16>(segs.size());
        uint8_t *p = base + off;
        for (size_t i = 0; i < segs.size(); ++i) {
            VIP_DATA_SEGMENT &s = (&d->DS[0] + i)->Local;
            s.Data.Address = p;
            s.Handle = mh;
            s.Length = segs[i];
            p += segs[i] + gaps[i];
        }
    }

    bool post_recvs(int dir, int round) {
        int n = burst(f_, dir, round);
        for (int k = 0; k < n; ++k) {
            Msg m = make_msg(f_, dir, recv_index_ + k);
            int slot = f_.max_burst + k;
            size_t extent = m.roff + 64;
            for (size_t i = 0; i < m.rseg.size(); ++i) extent += m.rseg[i] + m.rgap[i];
            memset(buffer(slot), kCanary, extent);
            fill_desc(desc(slot), dslot_, buffer(slot), m.roff, m.rseg, m.rgap, ep_.mh);
            desc(slot)->CS.ImmediateData = ~m.imm;
            if (!ep_.post_recv(desc(slot))) return false;
            pending_.push_back(m);
        }
        return true;
    }

    bool send_burst(int dir, int round) {
        int n = burst(f_, dir, round);
        for (int k = 0; k < n; ++k) {
            Msg m = make_msg(f_, dir, send_index_ + k);
            VIP_DESCRIPTOR *d = desc(k);
            fill_desc(d, dslot_, buffer(k), m.soff, m.sseg, m.sgap, ep_.mh);
            d->CS.Length = m.size;
            if (m.has_imm) {
                d->CS.Control = VIP_CONTROL_IMMEDIATE;
                d->CS.ImmediateData = m.imm;
            }
            vt::fill_pattern(pat_.data(), m.size, m.seed);
            const uint8_t *src = pat_.data();
            bool aligned = true;
            for (size_t i = 0; i < m.sseg.size(); ++i) {
                VIP_DATA_SEGMENT &s = (&d->DS[0] + i)->Local;
                memcpy(s.Data.Address, src, s.Length);
                src += s.Length;
                if (s.Data.AddressBits % align_) aligned = false;
            }
            if (!ep_.post_send(d))
                return context(
                    vt::fmt("posting message %d#%llu", dir, (unsigned long long)(send_index_ + k)));
            ++res_.sent;
            res_.bytes_sent += m.size;
            if (m.size > threshold_) ++res_.above_threshold;
            if (m.size >= 65536) ++res_.large;
            // Copied only what fits one record (half the ring), SEND-GET beyond that.
            bool copied = m.size <= threshold_ && m.size + kRecordHeader <= ring_ / 2;
            if (!copied && cma_ && aligned) ++res_.get_expected;
            if (cma_ && aligned) ++res_.get_allowed;
        }
        for (int k = 0; k < n; ++k) {
            if (!ep_.wait_send(desc(k), 20000)) {
                Msg m = make_msg(f_, dir, send_index_ + k);
                return context(vt::fmt("send of message %d#%llu (size %u, %zu segments)", dir,
                                       (unsigned long long)(send_index_ + k), m.size,
                                       m.sseg.size()));
            }
            if ((desc(k)->CS.Status & VIP_STATUS_OP_MASK) != VIP_STATUS_OP_SEND)
                return ep_.fail(vt::fmt("send status 0x%x", desc(k)->CS.Status));
        }
        send_index_ += n;
        return true;
    }

    bool recv_burst() {
        int dir = 1 - role_;
        for (size_t k = 0; k < pending_.size(); ++k) {
            const Msg &m = pending_[k];
            std::string what = vt::fmt("message %d#%llu (size %u, %zu+%zu segments, offsets %u/%u)",
                                       dir, (unsigned long long)(recv_index_ + k), m.size,
                                       m.sseg.size(), m.rseg.size(), m.soff, m.roff);
            int slot = f_.max_burst + static_cast<int>(k);
            VIP_DESCRIPTOR *d = desc(slot);
            if (!ep_.wait_recv(d, 20000)) return context("receiving " + what);
            uint32_t s = d->CS.Status;
            if ((s & VIP_STATUS_OP_MASK) != VIP_STATUS_OP_RECEIVE)
                return ep_.fail(vt::fmt("%s: status 0x%x", what.c_str(), s));
            if (d->CS.Length != m.size)
                return ep_.fail(vt::fmt("%s: Length %u", what.c_str(), d->CS.Length));
            if (m.has_imm && (!(s & VIP_STATUS_IMMEDIATE) || d->CS.ImmediateData != m.imm))
                return ep_.fail(vt::fmt("%s: immediate data 0x%x status 0x%x, sent 0x%x",
                                        what.c_str(), d->CS.ImmediateData, s, m.imm));
            if (!m.has_imm && (s & VIP_STATUS_IMMEDIATE))
                return ep_.fail(what + ": IMMEDIATE status without immediate data");
            if (!verify(m, buffer(slot), what)) return false;
            ++res_.recvd;
            res_.bytes_recvd += m.size;
        }
        recv_index_ += pending_.size();
        pending_.clear();
        return true;
    }

    // Payload byte for byte; everything around it in the receive area untouched.
    bool verify(const Msg &m, uint8_t *base, const std::string &what) {
        uint8_t *p = base;
        if (!all_eq(p, m.roff, kCanary))
            return ep_.fail(what + ": written before the first segment");
        p += m.roff;
        uint32_t left = m.size;
        uint8_t *out = got_.data();
        for (size_t i = 0; i < m.rseg.size(); ++i) {
            uint32_t take = std::min(left, m.rseg[i]);
            memcpy(out, p, take);
            out += take;
            left -= take;
            if (!all_eq(p + take, m.rseg[i] - take + m.rgap[i], kCanary))
                return ep_.fail(
                    vt::fmt("%s: written past the data in or after segment %zu", what.c_str(), i));
            p += m.rseg[i] + m.rgap[i];
        }
        if (!all_eq(p, 64, kCanary)) return ep_.fail(what + ": written after the last segment");
        vt::fill_pattern(pat_.data(), m.size, m.seed);
        if (memcmp(pat_.data(), got_.data(), m.size) != 0) {
            size_t i = 0;
            while (pat_[i] == got_[i]) ++i;
            return ep_.fail(vt::fmt(
                "%s: byte %zu is 0x%02x, sent 0x%02x (checksums %016llx/%016llx)", what.c_str(), i,
                got_[i], pat_[i], (unsigned long long)vt::checksum(got_.data(), m.size),
                (unsigned long long)vt::checksum(pat_.data(), m.size)));
        }
        return true;
    }

    void check_counters() {
        VIP_VI_COUNTERS c = ep_.counters();
        auto expect = [&](bool ok, const std::string &what) {
            if (!ok) ep_.fail("counters: " + what);
        };
        expect(c.SendsPosted == res_.sent,
               vt::fmt("SendsPosted %llu, posted %llu", (unsigned long long)c.SendsPosted,
                       (unsigned long long)res_.sent));
        expect(c.BytesSent == res_.bytes_sent,
               vt::fmt("BytesSent %llu, sent %llu", (unsigned long long)c.BytesSent,
                       (unsigned long long)res_.bytes_sent));
        expect(c.RecvsCompleted == res_.recvd,
               vt::fmt("RecvsCompleted %llu, received %llu", (unsigned long long)c.RecvsCompleted,
                       (unsigned long long)res_.recvd));
        expect(c.BytesReceived == res_.bytes_recvd,
               vt::fmt("BytesReceived %llu, received %llu", (unsigned long long)c.BytesReceived,
                       (unsigned long long)res_.bytes_recvd));
        expect(c.GetSends >= res_.get_expected && c.GetSends <= res_.get_allowed,
               vt::fmt("GetSends %llu; %llu sends were above COPY_THRESHOLD or half the ring, "
                       "%llu had every buffer GET_ALIGN-aligned",
                       (unsigned long long)c.GetSends, (unsigned long long)res_.get_expected,
                       (unsigned long long)res_.get_allowed));
        expect(c.CopySends + c.PipelineSends + c.GetSends == res_.sent,
               vt::fmt("Copy %llu + Pipeline %llu + Get %llu != %llu sends",
                       (unsigned long long)c.CopySends, (unsigned long long)c.PipelineSends,
                       (unsigned long long)c.GetSends, (unsigned long long)res_.sent));
        if (!cma_ && res_.large)
            expect(c.PipelineSends > 0, "no pipelined send without cross-memory attach");
    }

    Flow f_;
    int role_;
    vt::Ep ep_;
    Result res_;
    bool cma_ = true;
    static constexpr uint32_t kRecordHeader = 16; // a ring record's header (prov/shm/shm.h)
    uint32_t threshold_ = 512, ring_ = 8192, align_ = 1;
    size_t dslot_ = 0, buf_ = 0, descs_ = 0;
    uint64_t send_index_ = 0, recv_index_ = 0;
    std::vector<Msg> pending_;
    std::vector<uint8_t> pat_, got_;
};

Flow flow_from_env() {
    Flow f;
    f.seed = vt::env_long("VT_FLOW_SEED", 1);
    f.rounds = vt::env_long("VT_FLOW_ROUNDS", 50);
    f.max_burst = vt::env_long("VT_FLOW_BURST", 4);
    f.max_size = vt::env_long("VT_FLOW_MAX", 4 << 20);
    f.max_segs = vt::env_long("VT_FLOW_SEGS", 1);
    f.level = static_cast<VIP_RELIABILITY_LEVEL>(
        vt::env_long("VT_FLOW_LEVEL", VIP_SERVICE_RELIABLE_DELIVERY));
    return f;
}

// Every VIPL_* variable the parent set is the value in effect here.
void require_config_from_env() {
    for (char **e = environ; *e; ++e) {
        std::string kv = *e;
        if (kv.compare(0, 5, "VIPL_") != 0) continue;
        size_t eq = kv.find('=');
        std::string key = kv.substr(5, eq - 5), value = kv.substr(eq + 1);
        INFO("configuration key " << key);
        REQUIRE(vt::config_value(key.c_str()) == value);
    }
}

// Runs the flow in a fresh process with the given configuration.
void run_flow(const std::string &mode, std::vector<std::string> env) {
    env.push_back("VT_FRESH=1");
    env.push_back("VT_FLOW_MODE=" + mode);
    env.push_back("VT_DISC=" + vt::unique_disc("f"));
    std::string all;
    for (auto &e : env) all += e + " ";
    INFO("fresh process with " << all);
    int status = vt::run_fresh("shm child: integrity flow", env, 100);
    INFO("it ended with " << vt::status_text(status));
    REQUIRE(status == 0);
}

} // namespace

TEST_CASE("shm child: integrity flow", "[.]") {
    if (!getenv("VT_FRESH")) return; // started by the cases below only
    require_config_from_env();
    Flow f = flow_from_env();
    std::string disc = vt::env_str("VT_DISC");
    std::string mode = vt::env_str("VT_FLOW_MODE");
    Result server, client;
    if (mode == "procs") {
        int pid = vt::spawn_child([&] {
            Result r = Side(f, 1).run(disc);
            if (!r.err.empty()) fprintf(stderr, "client process: %s\n", r.err.c_str());
            return r.err.empty() ? 0 : 1;
        });
        vt::Child child(pid);
        server = Side(f, 0).run(disc);
        int status = child.wait(90);
        INFO("server: " << server.err);
        CHECK(server.err.empty());
        INFO("client process " << vt::status_text(status));
        CHECK(status == 0);
    } else {
        std::thread t([&] { client = Side(f, 1).run(disc); });
        server = Side(f, 0).run(disc);
        t.join();
        CHECK(server.err == "");
        CHECK(client.err == "");
        CHECK(client.recvd == server.sent);
        CHECK(server.recvd == client.sent);
    }
    CHECK(server.sent > 0);
    // The schedule itself must contain sends of each kind, or the case proves nothing.
    INFO("server sends: " << server.sent << ", " << server.above_threshold
                          << " above the threshold, " << server.get_expected << " single-copy");
    if (getenv("VT_FLOW_WANT_BOTH_PATHS")) {
        CHECK(server.get_expected > 0);
        CHECK(server.get_expected < server.sent);
    }
    if (getenv("VT_FLOW_WANT_UNALIGNED")) {
        CHECK(server.get_expected > 0);
        CHECK(server.get_expected < server.above_threshold);
    }
}

TEST_CASE("integrity: default configuration with single segments", "[shm][integrity]") {
    std::vector<std::string> env = {"VIPL_SHM_CMA=1", "VIPL_SHM_COPY_THRESHOLD=512",
                                    "VT_FLOW_SEED=11", "VT_FLOW_ROUNDS=60",
                                    "VT_FLOW_WANT_BOTH_PATHS=1"};
    SECTION("two processes") {
        run_flow("procs", env);
    }
    SECTION("one process") {
        run_flow("threads", env);
    }
}

TEST_CASE("integrity: scatter/gather with random segment splits", "[shm][integrity]") {
    std::vector<std::string> env = {"VIPL_SHM_CMA=1", "VT_FLOW_SEED=22", "VT_FLOW_ROUNDS=50",
                                    "VT_FLOW_SEGS=64"};
    SECTION("two processes") {
        run_flow("procs", env);
    }
    SECTION("one process") {
        run_flow("threads", env);
    }
}

TEST_CASE("integrity: pipelined copy forced with VIPL_SHM_CMA=0", "[shm][integrity]") {
    std::vector<std::string> env = {"VIPL_SHM_CMA=0", "VT_FLOW_SEED=33", "VT_FLOW_ROUNDS=50",
                                    "VT_FLOW_SEGS=4"};
    SECTION("two processes") {
        run_flow("procs", env);
    }
    SECTION("one process") {
        run_flow("threads", env);
    }
}

TEST_CASE("integrity: VIPL_SHM_GET_ALIGN=8 with unaligned buffers", "[shm][integrity]") {
    run_flow("procs", {"VIPL_SHM_GET_ALIGN=8", "VIPL_SHM_CMA=1", "VT_FLOW_SEED=44",
                       "VT_FLOW_ROUNDS=50", "VT_FLOW_WANT_UNALIGNED=1"});
}

// A small-ring configuration in two processes, in one, and in two without cross-memory
// attach (every piece then goes through the ring).
static void small_ring_flows(std::vector<std::string> env) {
    SECTION("two processes") {
        run_flow("procs", env);
    }
    SECTION("one process") {
        run_flow("threads", env);
    }
    SECTION("two processes without cross-memory attach") {
        env.push_back("VIPL_SHM_CMA=0");
        run_flow("procs", env);
    }
}

TEST_CASE("integrity: VIPL_SHM_RING_SIZE=2048 with large messages", "[shm][integrity]") {
    small_ring_flows(
        {"VIPL_SHM_RING_SIZE=2048", "VT_FLOW_SEED=55", "VT_FLOW_ROUNDS=30", "VT_FLOW_SEGS=8"});
}

// 64 KiB rings: a sender that finds the ring empty past its first 32 KiB goes back to
// its start (shm_send.cc: rewind_now), so rewinds come between every kind of record.
TEST_CASE("integrity: VIPL_SHM_RING_SIZE=65536, rewinds among every kind of record",
          "[shm][integrity]") {
    small_ring_flows({"VIPL_SHM_RING_SIZE=65536", "VT_FLOW_SEED=58", "VT_FLOW_ROUNDS=300",
                      "VT_FLOW_MAX=40000", "VT_FLOW_SEGS=8", "VIPL_SHM_COPY_THRESHOLD=8192"});
}

TEST_CASE("integrity: other reliability levels", "[shm][integrity]") {
    SECTION("reliable reception") {
        run_flow("procs", {"VT_FLOW_SEED=66", "VT_FLOW_ROUNDS=30", "VT_FLOW_SEGS=3",
                           "VT_FLOW_LEVEL=" + std::to_string(VIP_SERVICE_RELIABLE_RECEPTION)});
    }
    SECTION("unreliable") {
        run_flow("procs", {"VT_FLOW_SEED=77", "VT_FLOW_ROUNDS=30", "VT_FLOW_SEGS=3",
                           "VT_FLOW_LEVEL=" + std::to_string(VIP_SERVICE_UNRELIABLE)});
    }
}

TEST_CASE("shm child: imitated record", "[.]") {
    if (!getenv("VT_FRESH")) return; // started by the case below only
    REQUIRE(vt::config_value("SHM_RING_SIZE") == "8192");
    REQUIRE(vt::config_value("SHM_COPY_THRESHOLD") == "512");
    vt::Nic na("shm0"), nb("shm0");
    vt::Memory ma(na, 1 << 20), mb(nb, 1 << 20);
    vt::Pair p = vt::connect_pair(na, nb, vt::vi_attrs(na), vt::vi_attrs(nb));
    // One receive more than messages sent is always posted, so that anything
    // the receiver takes for a message can be seen.
    int posted = 0;
    auto post_recv = [&] {
        int i = posted++ % 4;
        vt::set_desc(mb.desc(i), mb.base + 65536 + i * 512, 512, mb.mh);
        REQUIRE(VipPostRecv(p.b, mb.desc(i), mb.mh) == VIP_SUCCESS);
    };
    post_recv();
    uint32_t sent = 0;
    auto send = [&](uint32_t len) {
        post_recv();
        vt::set_desc(ma.desc(0), ma.base + 65536, len, ma.mh);
        REQUIRE(VipPostSend(p.a, ma.desc(0), ma.mh) == VIP_SUCCESS);
        VIP_DESCRIPTOR *d = nullptr;
        double end = vt::now_ms() + 5000;
        VIP_RETURN rc;
        while ((rc = VipRecvDone(p.b, &d)) == VIP_NOT_DONE && vt::now_ms() < end)
            VipSendDone(p.a, &d);
        INFO("message " << sent << " of " << len << " bytes");
        REQUIRE(rc == VIP_SUCCESS);
        CHECK(d->CS.Length == len);
        CHECK(memcmp(d->DS[0].Local.Data.Address, ma.base + 65536, len) == 0);
        while (VipSendDone(p.a, &d) == VIP_SUCCESS) {
        }
        ++sent;
    };
    // The first message, copied into the ring at position 0, carries on each
    // 64-byte line what a record published there one lap later would look like
    // (sequence word pos/64 + 1, a 5-byte send, its payload).  Application data
    // may hold any bytes; the receiver must never take them for a record.
    uint8_t *payload = ma.base + 65536;
    memset(payload, 0, 512);
    for (uint32_t line = 64; line + 64 <= 448; line += 64) {
        uint8_t *rec = payload + line - 16; // the ring record header precedes the payload
        uint32_t seq = (line + 8192) / 64 + 1, len = 5;
        uint16_t type = 2, flags = 0;
        memcpy(rec, &seq, 4);
        memcpy(rec + 4, &type, 2);
        memcpy(rec + 6, &flags, 2);
        memcpy(rec + 8, &len, 4);
        memcpy(rec + 16, "FAKE!", 5);
    }
    send(400); // occupies [0, 448)
    memset(payload, 0x11, 512);
    for (int i = 0; i < 15; ++i) send(496); // 512 each: up to 8128
    send(32);                               // up to 8192
    send(48);                               // one line into the next lap: 8256
    // Nothing else was sent, although the receiver now looks at a line the first message left.
    VIP_DESCRIPTOR *d = nullptr;
    VIP_RETURN rc = VipRecvDone(p.b, &d);
    std::string got =
        rc == VIP_SUCCESS
            ? std::string(static_cast<char *>(d->DS[0].Local.Data.Address), d->CS.Length)
            : "";
    INFO("after " << sent << " messages, one more receive returned " << VipReturnString(rc) << " \""
                  << got << "\"");
    CHECK(rc == VIP_NOT_DONE);
    VIP_VI_STATE st;
    REQUIRE(VipQueryVi(p.b, &st, nullptr, nullptr, nullptr) == VIP_SUCCESS);
    CHECK(st == VIP_STATE_CONNECTED);
    vt::destroy_vi(p.a);
    vt::destroy_vi(p.b);
}

TEST_CASE("integrity: payload bytes that imitate a ring record are never taken for one",
          "[shm][integrity]") {
    int status =
        vt::run_fresh("shm child: imitated record",
                      {"VT_FRESH=1", "VIPL_SHM_RING_SIZE=8192", "VIPL_SHM_COPY_THRESHOLD=512"}, 60);
    INFO("fresh process " << vt::status_text(status));
    REQUIRE(status == 0);
}
