// What the tests send through a connection and check on the way back: rows whose every
// byte the test knows, and COPY files of a given size with their checksum.
//
// Thread rules: one thread.  Not async-signal-safe.
#pragma once

#include "psql.h"

#include <cstdint>
#include <string>

namespace pgt {

// A session's round trips: a temporary table written and summed, then 50,000 rows
// (~1.9 MB) computed by the server and compared line by line with what the test
// computes.  Fails the test on the first difference.
void exercise(Psql &s);

// A COPY text file of at least `bytes`: "id<TAB>payload" lines, the payload pseudo-
// random letters and digits of varying length.  Returns its rows.
long write_copy_file(const std::string &path, uint64_t bytes);

// A file's size and FNV-1a 64 checksum.
struct Digest {
    uint64_t size = 0;
    uint64_t fnv = 14695981039346656037ull;
    bool operator==(const Digest &o) const = default;
};
Digest digest_of(const std::string &path);

} // namespace pgt
