#include "pg_status.h"

#include "file_text.h"
#include "pg_environment.h"
#include "table_print.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace vipl::db::tools {

namespace {

std::string real_path(const std::string &p) {
    char buf[PATH_MAX];
    return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

} // namespace

std::string cluster_data_dir(const std::string &conf_dir, const std::string &version,
                             const std::string &cluster) {
    std::string text, dir;
    if (read_file(conf_dir + "/postgresql.conf", &text) &&
        conf_value(text, "data_directory", true, &dir) && !dir.empty())
        return dir;
    return "/var/lib/postgresql/" + version + "/" + cluster;
}

int find_postmaster(const std::string &data_dir, std::string *why) {
    std::string pidfile = data_dir + "/postmaster.pid", text;
    if (!read_file(pidfile, &text)) {
        *why = "not running (" + pidfile + ": " + std::strerror(errno) + ")";
        return 0;
    }
    int pid = std::atoi(text.c_str());
    if (pid <= 0) {
        *why = "not running (" + pidfile + " names no process)";
        return 0;
    }
    std::string proc = "/proc/" + std::to_string(pid);
    if (access(proc.c_str(), F_OK) != 0) {
        *why = "not running (" + pidfile + " names process " + std::to_string(pid) +
               ", which is gone: a stale file)";
        return 0;
    }
    // The postmaster works in its data directory: a pid reused by another process does not.
    char cwd[PATH_MAX];
    ssize_t n = readlink((proc + "/cwd").c_str(), cwd, sizeof cwd - 1);
    if (n > 0) {
        cwd[n] = '\0';
        if (real_path(data_dir) != cwd) {
            *why = "not running (" + pidfile + " names process " + std::to_string(pid) +
                   ", which works in " + cwd + ": a stale file)";
            return 0;
        }
    }
    return pid;
}

int interposer_mapped(int pid, std::string *library, std::string *why, bool *replaced) {
    std::string path = "/proc/" + std::to_string(pid) + "/maps";
    std::ifstream f(path);
    if (!f) {
        *why = "cannot read " + path + ": " + std::strerror(errno) +
               " (run as root or as the server's owner)";
        return -1;
    }
    // The kernel marks a mapping whose file was unlinked (replaced by a new one) so.
    static const std::string kDeleted = " (deleted)";
    *replaced = false;
    for (std::string line; std::getline(f, line);) {
        size_t slash = line.find('/');
        if (slash == std::string::npos) continue;
        std::string file = line.substr(slash);
        bool gone = file.size() > kDeleted.size() &&
                    file.compare(file.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0;
        if (gone) file.resize(file.size() - kDeleted.size());
        if (file.size() >= 14 && file.compare(file.size() - 14, 14, "/libvipl-db.so") == 0) {
            *library = file;
            *replaced = gone;
            return 1;
        }
    }
    return 0;
}

bool process_preload(int pid, std::string *value) {
    std::string env;
    if (!read_file("/proc/" + std::to_string(pid) + "/environ", &env)) return false;
    for (size_t p = 0; p < env.size();) {
        size_t q = env.find('\0', p);
        if (q == std::string::npos) q = env.size();
        if (env.compare(p, 11, "LD_PRELOAD=") == 0) {
            *value = env.substr(p + 11, q - p - 11);
            return true;
        }
        p = q + 1;
    }
    return false;
}

ServerRows server_rows(int postmaster) {
    ServerRows s;
    std::vector<int> pids(256);
    size_t n = 0;
    for (int round = 0; round < 4; ++round) {
        n = vipl_db_children(postmaster, pids.data(), pids.size());
        if (n == static_cast<size_t>(-1)) n = 0;
        if (n <= pids.size()) break;
        pids.resize(n + 64); // more children than room: list again
    }
    pids.resize(std::min(n, pids.size()));
    pids.insert(pids.begin(), postmaster);
    std::vector<vipl_db_row> rows;
    for (int pid : pids) {
        ++s.processes;
        int r = read_rows(pid, &rows);
        if (r < 0) ++s.refused;
        if (r <= 0) continue;
        ++s.tables;
        for (const vipl_db_row &row : rows) {
            if (row.transport == VIPL_DB_STAT_SHM)
                ++s.shm;
            else if (row.transport == VIPL_DB_STAT_TCP)
                ++s.tcp;
            else
                ++s.kernel;
            s.rows.push_back(row);
        }
    }
    return s;
}

int autogroups() {
    std::string text;
    if (!read_file("/proc/sys/kernel/sched_autogroup_enabled", &text)) return -1;
    if (text.rfind("1", 0) == 0) return 1;
    if (text.rfind("0", 0) == 0) return 0;
    return -1;
}

} // namespace vipl::db::tools
