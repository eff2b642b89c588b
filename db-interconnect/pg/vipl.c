/*
 * vipl_connections(): the rows of pg_stat_vipl.  Every process of an interposed server
 * keeps a connection table (db-interconnect/src/stats_layout.h); this function reads the
 * postmaster's and those of all its children, found in /proc by their parent pid.  All
 * children rather than the pids of pg_stat_activity: a backend still authenticating, a
 * walsender, a walreceiver or a background worker holding a libpq connection is listed
 * too, and none of pg_stat_activity's locks are taken.  The tables belong to the server's
 * user, as the backend does, so the kernel lets it read them.
 *
 * A process without the interposer has no table: a server started without it shows no
 * rows.  Interposed connections that stayed on the kernel (a plain client, a fallback)
 * show as transport 'kernel'.
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "table.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(vipl_connections);

#define VIPL_COLUMNS 13

/* The pids of PostmasterPid's children, the postmaster first; *count set. */
static int *server_pids(size_t *count) {
    size_t cap = 256, n = 0;
    int *pids = palloc(sizeof(int) * (cap + 1));
    int round;

    /* The list can grow between two reads: try again with room for it, a few times. */
    for (round = 0; round < 4; ++round) {
        n = vipl_db_children(PostmasterPid, pids + 1, cap);
        if (n == (size_t)-1)
            ereport(ERROR, (errcode_for_file_access(), errmsg("could not list /proc: %m")));
        if (n <= cap) break;
        cap = n + 64;
        pids = repalloc(pids, sizeof(int) * (cap + 1));
    }
    pids[0] = PostmasterPid;
    *count = 1 + (n < cap ? n : cap);
    return pids;
}

static void put_row(ReturnSetInfo *rsinfo, const struct vipl_db_row *r) {
    Datum values[VIPL_COLUMNS];
    bool nulls[VIPL_COLUMNS];
    int i = 0;

    memset(nulls, 0, sizeof nulls);
    values[i++] = Int32GetDatum(r->pid);
    values[i++] = Int32GetDatum(r->fd);
    values[i++] = CStringGetTextDatum(r->server ? "server" : "client");
    values[i++] = CStringGetTextDatum(vipl_db_transport_name(r->transport));
    if (r->peer[0])
        values[i] = CStringGetTextDatum(r->peer);
    else
        nulls[i] = true;
    ++i;
    values[i++] = Int64GetDatum((int64)r->bytes_in);
    values[i++] = Int64GetDatum((int64)r->bytes_out);
    values[i++] = Int64GetDatum((int64)r->calls_in);
    values[i++] = Int64GetDatum((int64)r->calls_out);
    values[i++] = Int64GetDatum((int64)r->messages_in);
    values[i++] = Int64GetDatum((int64)r->messages_out);
    values[i++] = Int64GetDatum((int64)r->spins);
    values[i++] = Int64GetDatum((int64)r->sleeps);
    Assert(i == VIPL_COLUMNS);
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

Datum vipl_connections(PG_FUNCTION_ARGS) {
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
    struct vipl_db_row *rows;
    size_t npids, p;
    int *pids;

    InitMaterializedSRF(fcinfo, 0);
    pids = server_pids(&npids);
    rows = palloc(sizeof(struct vipl_db_row) * VIPL_DB_STAT_SLOTS);
    for (p = 0; p < npids; ++p) {
        size_t n = 0, k;
        int r = vipl_db_table_read(pids[p], rows, VIPL_DB_STAT_SLOTS, &n);

        /* Another user's process among the children cannot be: say so rather than hide it. */
        if (r < 0 && errno != ESRCH && errno != ENOENT)
            ereport(WARNING,
                    (errcode_for_file_access(),
                     errmsg("could not read the connection table of process %d: %m", pids[p])));
        for (k = 0; k < n; ++k) put_row(rsinfo, &rows[k]);
        CHECK_FOR_INTERRUPTS();
    }
    pfree(rows);
    pfree(pids);
    return (Datum)0;
}
