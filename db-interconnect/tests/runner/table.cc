#include "table.h"

#include "mode.h"
#include "process.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <thread>

namespace dbt {

std::vector<StatRow> stat_rows(const std::vector<int> &pids) {
    std::vector<std::string> argv{vipl_run(), "--stat"};
    for (int p : pids) argv.push_back(std::to_string(p));
    int st = -1;
    std::string out = capture(argv, 10000, &st);
    INFO("vipl-run --stat printed:\n" << out);
    REQUIRE(st == 0);
    std::vector<StatRow> rows;
    std::istringstream in(out);
    std::string line;
    bool header = true;
    while (std::getline(in, line)) {
        if (header) {
            REQUIRE(line.rfind("PID", 0) == 0);
            header = false;
            continue;
        }
        std::istringstream f(line);
        StatRow r;
        f >> r.pid >> r.fd >> r.role >> r.trans >> r.peer >> r.bytes_in >> r.bytes_out;
        INFO("line: " << line);
        REQUIRE(!f.fail());
        rows.push_back(r);
    }
    return rows;
}

std::vector<StatRow> stat_tree(int pid) {
    std::vector<int> pids = descendants(pid);
    pids.insert(pids.begin(), pid);
    return stat_rows(pids);
}

std::vector<StatRow> select(const std::vector<StatRow> &rows, const std::string &role,
                            const std::string &trans) {
    std::vector<StatRow> out;
    for (const StatRow &r : rows)
        if ((role.empty() || r.role == role) && (trans.empty() || r.trans == trans))
            out.push_back(r);
    return out;
}

std::vector<StatRow> when_riding(const std::function<std::vector<StatRow>()> &get,
                                 const std::string &role, size_t n, const std::string &trans,
                                 int ms) {
    auto dl = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    std::vector<StatRow> rows = get();
    while (preloaded() && select(rows, role, trans).size() < n &&
           std::chrono::steady_clock::now() < dl) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        rows = get();
    }
    return rows;
}

std::vector<StatRow> tree_when_riding(int pid, const std::string &role, size_t n,
                                      const std::string &trans) {
    return when_riding([pid] { return stat_tree(pid); }, role, n, trans);
}

void require_riding(const std::vector<StatRow> &rows, const std::string &role, size_t n,
                    uint64_t min_in, uint64_t min_out, const std::string &trans) {
    INFO("vipl-run --stat: " << describe(rows));
    if (!preloaded()) {
        REQUIRE(rows.empty());
        return;
    }
    REQUIRE(select(rows, role, "").size() == n);
    REQUIRE(select(rows, role, trans).size() == n);
    for (const StatRow &r : select(rows, role, "")) {
        CHECK(r.bytes_in >= min_in);
        CHECK(r.bytes_out >= min_out);
    }
}

void require_kernel(const std::vector<StatRow> &rows, const std::string &role, size_t n) {
    INFO("vipl-run --stat: " << describe(rows));
    if (!preloaded()) {
        REQUIRE(rows.empty());
        return;
    }
    REQUIRE(select(rows, role, "").size() == n);
    REQUIRE(select(rows, role, "kernel").size() == n);
}

std::string describe(const std::vector<StatRow> &rows) {
    std::ostringstream o;
    o << rows.size() << " row(s)";
    for (const StatRow &r : rows)
        o << "\n  pid " << r.pid << " fd " << r.fd << " " << r.role << " " << r.trans << " "
          << r.peer << " in " << r.bytes_in << " out " << r.bytes_out;
    return o.str();
}

} // namespace dbt
