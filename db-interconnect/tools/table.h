/* Reading the connection tables of running processes (src/stats_layout.h), in C, for
 * every reader: vipl-run --stat, vipl-pg status, the tests' support library and the
 * PostgreSQL extension (pg/, built by PGXS).  It allocates only through opendir and
 * calls nothing that throws or jumps, so a PostgreSQL backend may call it between its
 * own allocations.
 *
 * Permissions: a table is read through /proc/<pid>/fd, which the kernel opens to the
 * process's own user and to root (ptrace read access).
 *
 * Thread rules: thread-safe (no shared state).  Not async-signal-safe (opendir).
 * Fork: nothing to do. */
#ifndef VIPL_DB_TOOLS_TABLE_H
#define VIPL_DB_TOOLS_TABLE_H

#include "stats_layout.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One connection, copied out of a table. */
struct vipl_db_row {
    int32_t pid, fd;
    uint8_t transport; /* VIPL_DB_STAT_KERNEL, _SHM or _TCP */
    uint8_t server;    /* 1: accepted (the server's end), 0: connected (a client's) */
    char peer[VIPL_DB_STAT_PEER + 1]; /* "" when the table has none */
    uint64_t bytes_in, bytes_out, calls_in, calls_out;
    uint64_t messages_in, messages_out, spins, sleeps;
};

/* Copies the connections of process pid's table (0: the calling process) into
 * rows[0 .. cap) and sets *count to how many it copied (a table holds at most
 * VIPL_DB_STAT_SLOTS, so such a cap never truncates).  Returns 1 when the process has a
 * table, 0 when it has none (it is not interposed, or has no connection yet, or is
 * gone or exiting: a zombie's descriptors refuse even its own user), -1 with errno set
 * when its descriptors cannot be read (EACCES: another user's process). */
int vipl_db_table_read(int pid, struct vipl_db_row *rows, size_t cap, size_t *count);

/* "kernel", "shm" or "tcp" ("?" for a value this build does not know). */
const char *vipl_db_transport_name(unsigned transport);

/* Stores the pids of ppid's children (from /proc/<pid>/stat) in pids[0 .. cap) and
 * returns how many there are, which may exceed cap (call again with more room);
 * (size_t)-1 with errno when /proc cannot be listed. */
size_t vipl_db_children(int ppid, int *pids, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
