#include "vipl_stats.h"

#include "table.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vipl::db::test {

namespace {

Carrier carrier_from(uint8_t t) {
    switch (t) {
    case VIPL_DB_STAT_SHM:
        return Carrier::shm;
    case VIPL_DB_STAT_TCP:
        return Carrier::tcp;
    default:
        return Carrier::kernel;
    }
}

} // namespace

const char *carrier_name(Carrier c) {
    switch (c) {
    case Carrier::none:
        return "none";
    case Carrier::kernel:
        return "kernel";
    case Carrier::shm:
        return "shm";
    case Carrier::tcp:
        return "tcp";
    }
    return "?";
}

bool stat_rows(int pid, std::vector<StatRow> *rows, std::string *why) {
    rows->clear();
    std::vector<vipl_db_row> table(VIPL_DB_STAT_SLOTS);
    size_t n = 0;
    int r = vipl_db_table_read(pid, table.data(), table.size(), &n);
    if (r <= 0) {
        if (why)
            *why = "process " + std::to_string(pid == 0 ? getpid() : pid) +
                   (r < 0 ? std::string(": ") + std::strerror(errno)
                          : std::string(" has no ") + VIPL_DB_STAT_NAME + " table");
        return false;
    }
    for (size_t i = 0; i < n; ++i) {
        const vipl_db_row &t = table[i];
        StatRow row;
        row.fd = t.fd;
        row.server = t.server != 0;
        row.carrier = carrier_from(t.transport);
        row.peer = t.peer;
        row.bytes_in = t.bytes_in;
        row.bytes_out = t.bytes_out;
        row.calls_in = t.calls_in;
        row.calls_out = t.calls_out;
        rows->push_back(std::move(row));
    }
    return true;
}

Carrier carrier_of(int fd) {
    std::vector<StatRow> rows;
    if (!stat_rows(0, &rows)) return Carrier::none;
    for (const StatRow &r : rows)
        if (r.fd == fd) return r.carrier;
    return Carrier::none;
}

} // namespace vipl::db::test
