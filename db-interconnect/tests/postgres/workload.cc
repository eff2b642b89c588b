#include "workload.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <vector>

namespace pgt {

namespace {

// What `SELECT i, i::bigint * i % 1000003, repeat(chr(65 + i % 26), i % 50) FROM
// generate_series(1, n)` prints (unaligned, tuples only), computed here.
std::string expected_rows(int n) {
    std::ostringstream s;
    for (long i = 1; i <= n; ++i) {
        s << i << '|' << (i * i) % 1000003 << '|' << std::string(i % 50, char('A' + i % 26));
        if (i < n) s << '\n';
    }
    return s.str();
}

std::string rows_query(int n) {
    return "SELECT i, i::bigint * i % 1000003, repeat(chr(65 + i % 26), i % 50) FROM "
           "generate_series(1, " +
           std::to_string(n) + ") i;";
}

uint64_t xorshift(uint64_t &x) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
}

} // namespace

void exercise(Psql &s) {
    REQUIRE(s.query("CREATE TEMP TABLE IF NOT EXISTS t(a int, b text); TRUNCATE t;"
                    "INSERT INTO t SELECT i, repeat('x', i % 100) FROM generate_series(1, 5000) i;"
                    "SELECT count(*), sum(a), sum(length(b)) FROM t;") == "5000|12502500|247500");
    std::string rows = s.query(rows_query(50000));
    const std::string want = expected_rows(50000);
    INFO("psql printed " << rows.size() << " B, starting: " << rows.substr(0, 300));
    REQUIRE(rows.size() == want.size());
    REQUIRE(rows == want);
}

long write_copy_file(const std::string &path, uint64_t bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    static const char kAlphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = 0x9e3779b97f4a7c15ull, written = 0;
    long id = 0;
    std::string line;
    while (written < bytes) {
        line = std::to_string(++id) + "\t";
        size_t len = 20 + xorshift(x) % 200;
        for (size_t i = 0; i < len; ++i) line += kAlphabet[xorshift(x) % 62];
        line += '\n';
        f << line;
        written += line.size();
    }
    REQUIRE(f.good());
    return id;
}

Digest digest_of(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    Digest d;
    std::vector<char> buf(1 << 20);
    while (f) {
        f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        size_t n = static_cast<size_t>(f.gcount());
        d.size += n;
        for (size_t i = 0; i < n; ++i)
            d.fnv = (d.fnv ^ static_cast<uint8_t>(buf[i])) * 1099511628211ull;
    }
    return d;
}

} // namespace pgt
