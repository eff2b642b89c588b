// vipl-run: runs a program, and everything it forks and execs, with the database
// interconnect preloaded; shows the configuration and the connections that ride it.
#include "config.h"
#include "library.h"
#include "table_print.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace vipl::db;

namespace {

void usage(FILE *out) {
    std::fprintf(out,
                 "usage: vipl-run [--] COMMAND [ARG...]  run COMMAND over the interconnect\n"
                 "       vipl-run --config               the VIPL_DB_* settings in effect\n"
                 "       vipl-run --stat [PID...]        connections that processes interpose\n"
                 "       vipl-run --library              where libvipl-db.so is\n");
}

int show_config() {
    std::printf("%-22s %-6s %-8s %-10s %s\n", "KEY", "TYPE", "DEFAULT", "VALUE", "HELP");
    for (const ConfigKey &k : config_table()) {
        std::string var = std::string("VIPL_") + k.name;
        std::printf("%-22s %-6s %-8s %-10s %s\n", var.c_str(), k.type, k.default_value,
                    config_value(k.name).c_str(), k.help);
    }
    for (const std::string &p : config_problems())
        std::fprintf(stderr, "vipl-run: %s\n", p.c_str());
    return config_problems().empty() ? 0 : 2;
}

// Prints the connections of every process named, or of every process this user may read.
int show_stat(int argc, char **argv) {
    tools::print_heading(stdout);
    std::vector<int> pids;
    for (int i = 0; i < argc; ++i) pids.push_back(std::atoi(argv[i]));
    if (pids.empty()) {
        DIR *d = opendir("/proc");
        if (!d) return 1;
        while (dirent *e = readdir(d))
            if (e->d_name[0] >= '1' && e->d_name[0] <= '9') pids.push_back(std::atoi(e->d_name));
        closedir(d);
    }
    std::vector<vipl_db_row> rows;
    for (int pid : pids)
        if (tools::read_rows(pid, &rows) > 0)
            for (const vipl_db_row &r : rows) tools::print_row(stdout, r);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    int i = 1;
    if (i < argc && std::strcmp(argv[i], "--config") == 0) return show_config();
    if (i < argc && std::strcmp(argv[i], "--stat") == 0) return show_stat(argc - 2, argv + 2);
    if (i < argc && std::strcmp(argv[i], "--library") == 0) {
        std::string lib = tools::library_path();
        if (lib.empty()) return 1;
        std::printf("%s\n", lib.c_str());
        return 0;
    }
    if (i < argc && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (i < argc && std::strcmp(argv[i], "--") == 0) ++i;
    if (i >= argc) {
        usage(stderr);
        return 2;
    }
    if (!config_problems().empty()) {
        for (const std::string &p : config_problems())
            std::fprintf(stderr, "vipl-run: %s\n", p.c_str());
        return 2;
    }
    std::string lib = tools::library_path();
    if (lib.empty()) {
        std::fprintf(stderr, "vipl-run: cannot find libvipl-db.so (set VIPL_RUN_LIBRARY)\n");
        return 2;
    }
    std::string preload = lib;
    if (const char *old = std::getenv("LD_PRELOAD"); old && *old) preload += ":" + std::string(old);
    setenv("LD_PRELOAD", preload.c_str(), 1);
    execvp(argv[i], argv + i);
    std::fprintf(stderr, "vipl-run: %s: %s\n", argv[i], std::strerror(errno));
    return 127;
}
