// The files of a test: a temporary directory removed with everything in it, random
// payloads, and byte-for-byte comparisons that also report SHA-256 sums.
//
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include <cstdint>
#include <string>

namespace dbt {

// mkdtemp under /tmp ("vipl-db-test-<pid>-XXXXXX"); mode 0755 so that another user can
// reach a socket file in it.  Removed with everything in it by the destructor; folders of
// test processes that are gone (killed before their destructors ran) are removed when a
// new one is made.
class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    const std::string &path() const { return path_; }
    std::string operator/(const std::string &name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

// `size` random bytes from a fixed seed (the same seed gives the same bytes).  The first
// byte is never 'V', so no payload starts like the interposer's messages.
std::string random_bytes(size_t size, uint64_t seed);
void write_file(const std::string &path, const std::string &data);
std::string read_file(const std::string &path);
size_t file_size(const std::string &path); // 0 when absent

// How many lines of a file contain `needle` (0 when absent).
int count_lines(const std::string &path, const std::string &needle);
// Requires that neither dir/server.err nor dir/client.err holds a line of the interposer
// ("libvipl-db["): the cases where it must have had nothing to report check both logs
// this one way (the message shows both).
void require_no_interposer_lines(const TempDir &dir);

// The SHA-256 of a file, as sha256sum(1) prints it (fails the test if it cannot run).
std::string sha256(const std::string &path);

// Fails the test unless the file `got` holds exactly `want`'s bytes (the message gives
// both sums, the sizes and the first differing offset).
void require_same_file(const std::string &want, const std::string &got);

} // namespace dbt
