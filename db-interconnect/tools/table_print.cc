#include "table_print.h"

namespace vipl::db::tools {

void print_heading(FILE *out) {
    std::fprintf(out, "%-8s %-5s %-6s %-6s %-28s %12s %12s %10s %10s %10s %10s %10s %10s\n", "PID",
                 "FD", "ROLE", "TRANS", "PEER", "BYTES_IN", "BYTES_OUT", "CALLS_IN", "CALLS_OUT",
                 "MSGS_IN", "MSGS_OUT", "SPINS", "SLEEPS");
}

void print_row(FILE *out, const vipl_db_row &r) {
    using ull = unsigned long long;
    std::fprintf(out,
                 "%-8d %-5d %-6s %-6s %-28s %12llu %12llu %10llu %10llu %10llu %10llu %10llu "
                 "%10llu\n",
                 r.pid, r.fd, r.server ? "server" : "client", vipl_db_transport_name(r.transport),
                 r.peer[0] ? r.peer : "-", ull(r.bytes_in), ull(r.bytes_out), ull(r.calls_in),
                 ull(r.calls_out), ull(r.messages_in), ull(r.messages_out), ull(r.spins),
                 ull(r.sleeps));
}

int read_rows(int pid, std::vector<vipl_db_row> *rows) {
    rows->resize(VIPL_DB_STAT_SLOTS);
    size_t n = 0;
    int r = vipl_db_table_read(pid, rows->data(), rows->size(), &n);
    rows->resize(n);
    return r;
}

} // namespace vipl::db::tools
