#include "files.h"

#include "process.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace dbt {

TempDir::TempDir() {
    char tmpl[] = "/tmp/vipl-db-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl));
    path_ = tmpl;
    chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
    nftw(
        path_.c_str(), [](const char *p, const struct stat *, int, FTW *) { return ::remove(p); },
        16, FTW_DEPTH | FTW_PHYS);
}

std::string random_bytes(size_t size, uint64_t seed) {
    std::string s(size, '\0');
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < size; ++i) {
        // xorshift64*: cheap and good enough to make every payload unique.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s[i] = static_cast<char>((x * 0x2545F4914F6CDD1Dull) >> 56);
    }
    if (!s.empty() && s[0] == 'V') s[0] = 'v';
    return s;
}

void write_file(const std::string &path, const std::string &data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    REQUIRE(f.good());
}

std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream o;
    o << f.rdbuf();
    return o.str();
}

size_t file_size(const std::string &path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

int count_lines(const std::string &path, const std::string &needle) {
    std::ifstream f(path);
    std::string line;
    int n = 0;
    while (std::getline(f, line))
        if (line.find(needle) != std::string::npos) ++n;
    return n;
}

void require_no_interposer_lines(const TempDir &dir) {
    INFO("server stderr: " << read_file(dir / "server.err"));
    INFO("client stderr: " << read_file(dir / "client.err"));
    REQUIRE(count_lines(dir / "server.err", "libvipl-db[") == 0);
    REQUIRE(count_lines(dir / "client.err", "libvipl-db[") == 0);
}

std::string sha256(const std::string &path) {
    int st = -1;
    std::string out = capture({"sha256sum", "-b", path}, 30000, &st);
    INFO("sha256sum " << path << ": " << out);
    REQUIRE(st == 0);
    REQUIRE(out.size() >= 64);
    return out.substr(0, 64);
}

void require_same_file(const std::string &want, const std::string &got) {
    std::string a = sha256(want), b = sha256(got);
    if (a == b) return;
    std::string x = read_file(want), y = read_file(got);
    size_t i = 0;
    while (i < x.size() && i < y.size() && x[i] == y[i]) ++i;
    FAIL(got << " differs from " << want << ": sha256 " << b << " vs " << a << ", " << y.size()
             << " bytes vs " << x.size() << ", first difference at offset " << i);
}

} // namespace dbt
