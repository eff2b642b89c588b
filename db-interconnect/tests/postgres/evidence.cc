#include "evidence.h"

#include "program.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace pgt {

std::vector<StatRow> table(int pid) {
    std::vector<StatRow> rows;
    std::string why;
    if (!vipl::db::test::stat_rows(pid, &rows, &why))
        FAIL("no connection table in process " << pid << ": " << why);
    return rows;
}

bool has_table(int pid) {
    std::vector<StatRow> rows;
    return vipl::db::test::stat_rows(pid, &rows);
}

std::vector<StatRow> rows_of(const std::vector<StatRow> &rows, Role role, Carrier c) {
    std::vector<StatRow> out;
    for (const StatRow &r : rows)
        if (r.server == (role == Role::server) && r.carrier == c) out.push_back(r);
    return out;
}

std::string describe(int pid, const std::vector<StatRow> &rows) {
    std::ostringstream s;
    s << "connection table of process " << pid << " (" << rows.size() << " rows):\n";
    s << "  FD    ROLE   TRANS  PEER                                               BYTES_IN    "
         "BYTES_OUT\n";
    for (const StatRow &r : rows) {
        char line[256];
        std::snprintf(line, sizeof line, "  %-5d %-6s %-6s %-48s %10llu %12llu\n", r.fd,
                      r.server ? "server" : "client", vipl::db::test::carrier_name(r.carrier),
                      r.peer.c_str(), static_cast<unsigned long long>(r.bytes_in),
                      static_cast<unsigned long long>(r.bytes_out));
        s << line;
    }
    return s.str();
}

namespace {

// Whether the table of pid shows what require_carried asks; *text describes it.
bool carried(int pid, Role role, Carrier c, size_t n, uint64_t min_bytes, std::string *text) {
    std::vector<StatRow> rows;
    std::string why;
    if (!vipl::db::test::stat_rows(pid, &rows, &why)) {
        *text = why;
        return false;
    }
    *text = describe(pid, rows);
    size_t of_role = 0, good = 0;
    for (const StatRow &r : rows) {
        if (r.server != (role == Role::server)) continue;
        ++of_role;
        if (r.carrier == c && r.bytes_in >= min_bytes && r.bytes_out >= min_bytes) ++good;
    }
    return of_role == n && good == n;
}

const char *role_name(Role r) {
    return r == Role::server ? "server" : "client";
}

} // namespace

void require_carried(int pid, Role role, Carrier c, size_t n, uint64_t min_bytes) {
    std::string text;
    bool ok = carried(pid, role, c, n, min_bytes, &text);
    INFO("expected " << n << " " << role_name(role) << " row(s) carried by "
                     << vipl::db::test::carrier_name(c) << " with at least " << min_bytes
                     << " B each way; " << text);
    CHECK(ok);
    if (!ok) FAIL("the connection did not ride as expected");
}

void await_carried(int pid, Role role, Carrier c, size_t n, uint64_t min_bytes, int ms) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    std::string text;
    while (!carried(pid, role, c, n, min_bytes, &text) && now_ns() < deadline) sleep_ms(5);
    require_carried(pid, role, c, n, min_bytes);
}

void require_not_carried(int pid, Role role) {
    std::vector<StatRow> rows;
    if (!vipl::db::test::stat_rows(pid, &rows)) return;
    INFO(describe(pid, rows));
    CHECK(rows_of(rows, role, Carrier::shm).empty());
    CHECK(rows_of(rows, role, Carrier::tcp).empty());
}

StatRow row_to(int pid, Role role, const std::string &peer_suffix) {
    std::vector<StatRow> rows;
    vipl::db::test::stat_rows(pid, &rows);
    for (const StatRow &r : rows) {
        if (r.server != (role == Role::server)) continue;
        if (r.peer.size() >= peer_suffix.size() &&
            r.peer.compare(r.peer.size() - peer_suffix.size(), peer_suffix.size(), peer_suffix) ==
                0)
            return r;
    }
    return StatRow{};
}

std::vector<Seen> watch(Program &p, int ms) {
    std::vector<Seen> seen;
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    while (p.running() && now_ns() < deadline) {
        std::vector<int> pids = descendants(p.pid());
        pids.push_back(p.pid());
        for (int pid : pids) {
            std::vector<StatRow> rows;
            if (!vipl::db::test::stat_rows(pid, &rows)) continue;
            for (const StatRow &r : rows) {
                Seen *slot = nullptr;
                for (Seen &s : seen)
                    if (s.pid == pid && s.row.fd == r.fd && s.row.server == r.server) slot = &s;
                if (!slot) {
                    seen.push_back(Seen{pid, r});
                    continue;
                }
                if (r.bytes_in + r.bytes_out >= slot->row.bytes_in + slot->row.bytes_out)
                    slot->row = r;
            }
        }
        p.wait(1); // reads its output meanwhile
    }
    return seen;
}

std::string describe(const std::vector<Seen> &seen) {
    std::ostringstream s;
    s << "rows seen while it ran (" << seen.size() << "):\n";
    for (const Seen &x : seen)
        s << "  pid " << x.pid << " fd " << x.row.fd << " " << (x.row.server ? "server" : "client")
          << " " << vipl::db::test::carrier_name(x.row.carrier) << " " << x.row.peer << " in "
          << x.row.bytes_in << " out " << x.row.bytes_out << "\n";
    return s.str();
}

namespace {

std::vector<std::string> fd_targets(int pid) {
    std::vector<std::string> out;
    std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR *d = opendir(dir.c_str());
    if (!d) return out;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        char t[512];
        ssize_t n = readlink((dir + "/" + e->d_name).c_str(), t, sizeof t - 1);
        if (n > 0) out.emplace_back(t, static_cast<size_t>(n));
    }
    closedir(d);
    return out;
}

int count_lines(const std::string &path) {
    std::ifstream f(path);
    std::string s;
    int n = 0;
    while (std::getline(f, s)) ++n;
    return n;
}

} // namespace

int fd_count(int pid) {
    return static_cast<int>(fd_targets(pid).size());
}

int memfd_count(int pid) {
    int n = 0;
    for (const std::string &t : fd_targets(pid))
        if (t.rfind("/memfd:", 0) == 0) ++n;
    return n;
}

int map_count(int pid) {
    return count_lines("/proc/" + std::to_string(pid) + "/maps");
}

int thread_count(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string s;
    while (std::getline(f, s))
        if (s.rfind("Threads:", 0) == 0) return std::atoi(s.c_str() + 8);
    return 0;
}

Footprint footprint(int pid) {
    Footprint f;
    f.fds = fd_count(pid);
    f.memfds = memfd_count(pid);
    f.maps = map_count(pid);
    f.threads = thread_count(pid);
    for (int d : descendants(pid)) f.children += alive(d); // not the zombies not reaped yet
    return f;
}

std::string describe(const Footprint &f) {
    std::ostringstream s;
    s << "fds " << f.fds << ", memfds " << f.memfds << ", mappings " << f.maps << ", threads "
      << f.threads << ", descendants " << f.children;
    return s.str();
}

void require_footprint(int pid, const Footprint &before, int ms) {
    uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    Footprint now = footprint(pid);
    while (!(now == before) && now_ns() < deadline) {
        sleep_ms(10);
        now = footprint(pid);
    }
    INFO("process " << pid << " before: " << describe(before)
                    << "\n            after: " << describe(now));
    REQUIRE(now == before);
}

int local_port_to(int pid, int remote_port) {
    std::set<std::string> inodes;
    for (const std::string &t : fd_targets(pid))
        if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
    for (const char *table : {"tcp", "tcp6"}) {
        std::ifstream f("/proc/" + std::to_string(pid) + "/net/" + table);
        std::string line;
        std::getline(f, line); // the header
        while (std::getline(f, line)) {
            std::istringstream s(line);
            std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
            if (!(s >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >>
                  inode))
                continue;
            if (!inodes.count(inode)) continue;
            int rport = std::stoi(remote.substr(remote.rfind(':') + 1), nullptr, 16);
            if (rport == remote_port)
                return std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16);
        }
    }
    return -1;
}

} // namespace pgt
