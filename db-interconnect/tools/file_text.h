// Whole files as bytes, for vipl-pg: read one, or replace one atomically.
//
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include <string>

namespace vipl::db::tools {

// Reads the whole file into *text; false with errno set.
bool read_file(const std::string &path, std::string *text);

// Replaces the file's bytes with text: a new file beside it (same directory, owner and
// mode) renamed over it once written and synced, so a reader (pg_ctlcluster) sees the old
// bytes or the new ones, never a mixture.  A symbolic link is followed (its target is
// replaced).  False, with *why (a sentence naming the file), on failure; the file is then
// as it was.
bool replace_file(const std::string &path, const std::string &text, std::string *why);

} // namespace vipl::db::tools
