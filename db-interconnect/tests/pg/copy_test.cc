// COPY of 100 MB into a table and back out through one psql session (psql's \copy:
// the file's bytes travel as COPY data on the connection), checked by checksum and size,
// with the 100 MB each way counted in the connection tables of psql and its backend.
#include "evidence.h"
#include "psql.h"

#include <catch2/catch.hpp>

#include <fstream>

using namespace pgt;

namespace {

constexpr uint64_t kFnvStart = 14695981039346656037ull;

uint64_t fnv(const char *p, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
    return h;
}

struct Digest {
    uint64_t size = 0;
    uint64_t fnv = kFnvStart;
};

Digest digest_of(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    Digest d;
    std::vector<char> buf(1 << 20);
    while (f) {
        f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        size_t n = static_cast<size_t>(f.gcount());
        d.size += n;
        d.fnv = fnv(buf.data(), n, d.fnv);
    }
    return d;
}

// A COPY text file of about `bytes`: "id<TAB>payload" lines, the payload pseudo-random
// letters and digits of varying length.  Returns its rows.
long write_copy_file(const std::string &path, uint64_t bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    static const char kAlphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = 0x9e3779b97f4a7c15ull, written = 0;
    long id = 0;
    std::string line;
    while (written < bytes) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        line = std::to_string(++id) + "\t";
        size_t len = 20 + x % 200;
        for (size_t i = 0; i < len; ++i) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            line += kAlphabet[x % 62];
        }
        line += '\n';
        f << line;
        written += line.size();
    }
    REQUIRE(f.good());
    return id;
}

} // namespace

TEST_CASE("COPY of 100 MB in and out, checksums equal, the bytes counted on the stream",
          "[pg][copy]") {
    PgCluster pg;
    const std::string in = pg.file("in.copy"), out = pg.file("out.copy");
    long rows = write_copy_file(in, 100ull << 20);
    Digest sent = digest_of(in);
    REQUIRE(sent.size >= (100ull << 20));
    write_file(out, "", "postgres", 0644);

    Psql s(pg, pg.tcp_conninfo());
    s.query("CREATE TABLE big(id int, payload text);");
    s.query("\\copy big FROM '" + in + "'", 120000);
    REQUIRE(s.query("SELECT count(*), max(id) FROM big;") ==
            std::to_string(rows) + "|" + std::to_string(rows));
    require_carried(s.pid(), Role::client, Carrier::shm);
    require_carried(s.backend_pid(), Role::server, Carrier::shm);
    const uint64_t after_in = table(s.pid())[0].bytes_out;
    CHECK(after_in >= sent.size);
    CHECK(table(s.backend_pid())[0].bytes_in >= sent.size);

    // Out in the order it went in (the heap keeps no order: COPY fills earlier pages'
    // free space with later short rows), sorted in memory.
    s.query("SET work_mem = '512MB';");
    s.query("\\copy (SELECT * FROM big ORDER BY id) TO '" + out + "'", 120000);
    Digest back = digest_of(out);
    CHECK(back.size == sent.size);
    CHECK(back.fnv == sent.fnv);
    require_carried(s.pid(), Role::client, Carrier::shm);
    CHECK(table(s.pid())[0].bytes_in >= sent.size);
    CHECK(table(s.backend_pid())[0].bytes_out >= sent.size);
    REQUIRE(s.quit() == 0);
}
