// What `vipl-pg status` looks at: a data directory's running postmaster, whether it has
// the interposer, and the connections of its processes (their connection tables).
//
// Permissions: /proc/<pid>/maps, environ and fd of the server's processes are open to
// root and to the server's owner only; the functions say so when they are refused.
// Thread rules: thread-safe.  Not async-signal-safe.
#pragma once

#include "table.h"

#include <string>
#include <vector>

namespace vipl::db::tools {

// The data directory of a Debian cluster whose configuration directory is conf_dir:
// postgresql.conf's data_directory, else /var/lib/postgresql/<version>/<cluster> (what
// pg_createcluster makes).
std::string cluster_data_dir(const std::string &conf_dir, const std::string &version,
                             const std::string &cluster);

// The pid of data_dir's running postmaster (the first line of its postmaster.pid, a live
// process whose working directory is data_dir when that can be read); 0, with *why, when
// none runs.
int find_postmaster(const std::string &data_dir, std::string *why);

// Whether process pid has a libvipl-db.so mapped (its path in *library): 1 yes, 0 no,
// -1 with *why when /proc/<pid>/maps cannot be read.  *replaced: the file it mapped was
// since removed or replaced on disk (an upgrade while the server ran): the process still
// runs the old one.
int interposer_mapped(int pid, std::string *library, std::string *why, bool *replaced);

// The LD_PRELOAD in process pid's initial environment; false when absent or unreadable.
bool process_preload(int pid, std::string *value);

// The connections of a server: the postmaster's own table and those of its children.
struct ServerRows {
    std::vector<vipl_db_row> rows;
    int processes = 0; // the postmaster and its children
    int tables = 0;    // of which had a table
    int refused = 0;   // of which could not be read (another user's)
    int shm = 0, tcp = 0, kernel = 0;
};
ServerRows server_rows(int postmaster);

// The scheduler's autogroups (/proc/sys/kernel/sched_autogroup_enabled): 1 on, 0 off, -1
// unknown.  On, a waiter on a CPU it shares with its peer in another session cannot hand
// that peer the CPU (README.md, Pitfalls).
int autogroups();

} // namespace vipl::db::tools
