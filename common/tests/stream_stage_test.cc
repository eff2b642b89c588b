// Staged writes: large copied writes go through a registered stage the reader
// RDMA-reads (shm, where the reader needs no call of the writer), in order with data
// messages and zero-copy regions; close, dying peers, and the way back to plain copies.
#include "helpers.h"

#include <signal.h>
#include <unistd.h>

#include <thread>

using namespace std::chrono_literals;
using vipl::deadline_in;

namespace {

bool on_shm(const std::string &base) {
    return base.starts_with("vipl+shm");
}

using Reader = vt::ReadHow;

// Reads until end of stream (or `total` bytes) checking pattern `seed`; bytes read.
uint64_t read_check(vipl::Stream &s, uint64_t total, uint32_t seed, Reader how,
                    std::error_code &ec) {
    return vt::read_checked(s, total, seed, how, 1300 * 1024, &ec);
}

// Writes that mix data messages, staged parts (from 64 KiB) and zero copy (1 MiB and
// up, no deadline): odd sizes so that parts end anywhere in a read.
const size_t kSizes[] = {100,         300 * 1024 + 1, 1536 * 1024, 700 * 1024 - 3,     10,
                         2048 * 1024, 64 * 1024 - 1,  256 * 1024,  5 * 1024 * 1024 + 7};

uint64_t write_mix(vipl::Stream &s, uint32_t seed, bool deadlines) {
    uint64_t off = 0;
    std::vector<std::byte> buf(6 << 20);
    for (size_t n : kSizes) {
        vt::fill(buf.data(), n, off, seed);
        std::error_code ec;
        size_t done = 0;
        while (done < n && !ec)
            done += deadlines ? s.write({buf.data() + done, n - done}, deadline_in(10s), ec)
                              : s.write({buf.data() + done, n - done}, ec);
        if (ec) return off + done;
        off += n;
    }
    return off;
}

} // namespace

TEST_CASE("stream: large copied writes are staged, in order with data and zero copy") {
    std::string base = CT_PROVIDER();
    Reader how = GENERATE(Reader::direct, Reader::deadline, Reader::random, Reader::polling);
    bool deadlines = GENERATE(false, true); // with deadlines nothing goes zero copy
    auto p = vt::connect_pair(base);
    uint64_t total = 0;
    for (size_t n : kSizes) total += n;
    // The writer waits for the first credit grant: it says whether the peer takes rts.
    std::error_code ec;
    CHECK(p.client.write(std::span<const std::byte>{}, ec) == 0);
    uint64_t wrote = 0;
    std::error_code closed;
    vipl::StreamCounters c;
    std::thread writer([&] {
        wrote = write_mix(p.client, 5, deadlines);
        // At most the last write's last parts wait for the reader to finish earlier ones.
        c = p.client.counters();
        // What flow control held back leaves while the writer calls the stream.
        closed = p.client.close(deadline_in(20s));
    });
    uint64_t got = read_check(p.server, total + 1, 5, how, ec);
    writer.join();
    CHECK(!ec);
    CHECK(!closed);
    CHECK(wrote == total);
    CHECK(got == total);
    if (on_shm(base)) {
        // 300K+1, 700K-3 (a part and 188K-3), 256K (and, with deadlines, the large
        // ones) went through the stage; 64K-1 is too little for it.
        CHECK(c.bytes_staged >= 300 * 1024 + 1 + 700 * 1024 - 3 + 256 * 1024);
        CHECK((c.bytes_zcopy > 0) == !deadlines);
    } else {
        // tcp: the writer's own calls would have to serve the reads of a staged part.
        CHECK(c.bytes_staged == 0);
    }
}

TEST_CASE("stream: stage_threshold 0 copies through the send buffers") {
    std::string base = CT_PROVIDER();
    vipl::StreamOptions o;
    o.stage_threshold = 0;
    o.zcopy_threshold = 0;
    auto p = vt::connect_pair(base, o);
    std::error_code ec;
    vipl::StreamCounters c;
    std::error_code closed;
    std::thread writer([&] {
        write_mix(p.client, 9, false);
        c = p.client.counters();
        closed = p.client.close(deadline_in(20s));
    });
    uint64_t total = 0;
    for (size_t n : kSizes) total += n;
    CHECK(read_check(p.server, total + 1, 9, Reader::direct, ec) == total);
    writer.join();
    CHECK(!closed);
    CHECK(c.bytes_staged == 0);
    CHECK(c.bytes_zcopy == 0);
    CHECK(c.bytes_out > 0);
}

TEST_CASE("stream: a staged write returns at once, and close waits for the reader") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    // Two parts on shm; on tcp as much as the send buffers take without the reader.
    constexpr size_t kBytes = (1 << 20) - 100;
    vt::Shared<uint64_t> staged;
    int pid = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        std::error_code ec;
        std::byte go[1];
        if (s.read(go, deadline_in(10s), ec) != 1) return 3; // the grant is in
        std::vector<std::byte> buf(kBytes);
        vt::fill(buf.data(), kBytes, 0, 21);
        // The reader sleeps 300 ms: a write that waited for it would be late.
        auto t0 = vipl::Clock::now();
        if (s.write(buf, deadline_in(10s), ec) != kBytes) return 4;
        if (vipl::Clock::now() - t0 > 200ms) return 5;
        *staged = s.counters().bytes_staged;
        // Staged parts stay ours until the reader is done with them.
        return s.close(deadline_in(20s)) ? 6 : 0;
    });
    auto s = vt::accept_one(l);
    std::error_code ec;
    std::byte go[1] = {std::byte{1}};
    CHECK(s.write(go, ec) == 1);
    std::this_thread::sleep_for(300ms);
    CHECK(read_check(s, kBytes + 1, 21, Reader::deadline, ec) == kBytes);
    CHECK(!ec);
    CHECK(vt::wait_child(pid) == 0);
    if (on_shm(base))
        CHECK(*staged == kBytes);
    else
        CHECK(*staged == 0);
}

TEST_CASE("stream: a writer dies with parts staged: the reader gets an error, no bad byte") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    vipl::StreamOptions o;
    o.zcopy_threshold = 0; // every write copied: staged on shm
    int pid = vt::spawn_client(
        l.uri(), o, [&](vipl::Stream &s) { return vt::write_pattern_until_error(s, 1 << 20, 33); });
    auto s = vt::accept_one(l);
    // No deadline: parts straight into the reader's buffer.
    vt::KilledWriter r = vt::read_killing_writer(s, pid, 8u << 20, 33, 256 * 1024);
    CHECK(r.killed);
    CHECK(r.ec == std::errc::connection_reset);
    vt::wait_child(pid);
}

TEST_CASE("stream: a reader dies with parts staged: the writer fails, never hangs") {
    std::string base = CT_PROVIDER();
    auto l = vt::bind_free(base);
    int pid = vt::spawn_client(l.uri(), {}, [&](vipl::Stream &s) {
        std::error_code ec;
        std::vector<std::byte> buf(700 * 1024);
        s.read(buf, ec); // part of the first part
        raise(SIGKILL);
        return 0;
    });
    auto s = vt::accept_one(l);
    std::vector<std::byte> buf(1 << 20);
    std::error_code ec;
    auto t0 = vipl::Clock::now();
    for (int i = 0; i < 200 && !ec; ++i) s.write(buf, deadline_in(10s), ec);
    CHECK((ec == std::errc::connection_reset || ec == std::errc::broken_pipe));
    CHECK(vipl::Clock::now() - t0 < 15s);
    vt::wait_child(pid);
}
