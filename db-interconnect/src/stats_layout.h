/* The connection table's bytes (stats.h) for readers that are not the interposer, in C:
 * the tools (tools/table.h) and the PostgreSQL extension (pg/) read a process's table
 * through /proc/<pid>/fd with these declarations.  stats.h checks at compile time that
 * StatHeader and StatSlot lay out exactly these fields; change both together.
 *
 * A reader maps the memfd read-only and loads `in_use` with acquire order, then the
 * counters with relaxed loads (__atomic_load_n): the owning process updates them with
 * relaxed atomic adds while it runs.  A slot may be reused while it is read: a reader that
 * wants a consistent row loads `in_use` again afterwards. */
#ifndef VIPL_DB_STATS_LAYOUT_H
#define VIPL_DB_STATS_LAYOUT_H

#include <stdint.h>

#define VIPL_DB_STAT_NAME "vipl-db-stats" /* the memfd's name: "/memfd:vipl-db-stats" */
#define VIPL_DB_STAT_MAGIC "VIPLDBS1"     /* the header's 8 bytes, without a terminator */
#define VIPL_DB_STAT_SLOTS 4096
#define VIPL_DB_STAT_PEER 72 /* bytes of the peer text, NUL-terminated when shorter */

/* Values of vipl_db_stat_slot.transport. */
#define VIPL_DB_STAT_KERNEL 0
#define VIPL_DB_STAT_SHM 1
#define VIPL_DB_STAT_TCP 2

struct vipl_db_stat_header {
    char magic[8];
    uint32_t slots;
    int32_t pid; /* the owning process */
};

struct vipl_db_stat_slot {
    uint32_t in_use;
    int32_t fd;
    uint8_t transport;
    uint8_t server; /* 1: accepted, 0: connected */
    uint8_t pad[2];
    char peer[VIPL_DB_STAT_PEER];
    uint64_t bytes_in, bytes_out, calls_in, calls_out;
    uint64_t messages_in, messages_out, spins, sleeps;
};

#endif
