// The text form of connection-table rows: the columns `vipl-run --stat` and
// `vipl-pg status` print, one connection a line.
//
// Thread rules: thread-safe (stdio locks the stream).  Not async-signal-safe.
#pragma once

#include "table.h"

#include <cstdio>
#include <vector>

namespace vipl::db::tools {

// The heading line: PID FD ROLE TRANS PEER BYTES_IN BYTES_OUT CALLS_IN CALLS_OUT MSGS_IN
// MSGS_OUT SPINS SLEEPS.
void print_heading(FILE *out);
// One row under that heading.
void print_row(FILE *out, const vipl_db_row &r);

// The rows of process pid's table (as vipl_db_table_read: 1 a table, 0 none, -1 errno).
int read_rows(int pid, std::vector<vipl_db_row> *rows);

} // namespace vipl::db::tools
