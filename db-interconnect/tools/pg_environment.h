// The text of a Debian cluster's `environment` file (/etc/postgresql/<version>/<cluster>/
// environment), which pg_ctlcluster (and through it systemd's postgresql@ units) reads
// into the environment of pg_ctl and the server: `NAME = 'value'` or `NAME = simple`
// lines, `#` comments.  What `vipl-pg enable` and `disable` make of it, as pure functions
// on the file's bytes; the caller reads and writes the file.
//
// How enable remembers what was there: a marked comment line right above the LD_PRELOAD
// line it writes, so the file itself says what vipl-pg did and later edits elsewhere in
// it survive disable.
//   # vipl-pg enable; disable restores: <the original LD_PRELOAD line, byte for byte>
//   # vipl-pg enable added the next line; disable removes both
//   # vipl-pg enable added the next line and the line break above; disable removes them
// (the last when the file did not end with a line break).  disable turns each marker and
// the LD_PRELOAD line under it back into exactly the bytes that were there.
//
// Thread rules: thread-safe (pure functions).  Not async-signal-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vipl::db::tools {

struct EnvEdit {
    std::string text;                 // the file's bytes after the edit
    bool changed = false;             // text differs from the input
    std::vector<std::string> removed; // lines taken out (for a diff-like summary)
    std::vector<std::string> added;   // lines put in
    std::string note;                 // one sentence on what was found or done
};

// Makes LD_PRELOAD name `library` (an absolute path) first, keeping every entry it had.
// Nothing changes when LD_PRELOAD already names a libvipl-db.so: vipl-pg's own line
// with `library` (idempotent), or a line set by hand (left alone).  A vipl-pg line naming
// another libvipl-db.so gets `library` instead.  False, with *why, when the file cannot
// be read as pg_ctlcluster reads it (an LD_PRELOAD line it would refuse).
bool env_enable(const std::string &text, const std::string &library, EnvEdit *out,
                std::string *why);

// Restores what enable replaced or removes what it added.  Unchanged when enable's
// marker is not there (the note then says so, and whether LD_PRELOAD names the
// interposer by hand).  False, with *why, for a marker this version does not know.
bool env_disable(const std::string &text, EnvEdit *out, std::string *why);

// The LD_PRELOAD value in effect in text (its last assignment, decoded as pg_ctlcluster
// decodes it); false when there is none.
bool env_ld_preload(const std::string &text, std::string *value);

// The value of the last line of a configuration file's text that assigns key (compared
// ignoring case when asked: pg_ctlcluster does so for *.conf files); false when none.
bool conf_value(const std::string &text, std::string_view key, bool ignore_case,
                std::string *value);

// The entry of a preload list (':' or blank separated) whose file is libvipl-db.so;
// false when there is none.
bool preload_names_interposer(const std::string &preload, std::string *entry);

} // namespace vipl::db::tools
