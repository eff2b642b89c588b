// vipl-pg: switches the database interconnect on or off for a Debian PostgreSQL cluster
// (its `environment` file, read by pg_ctlcluster and systemd's postgresql@ units at the
// next start), and tells whether a running server has it and how its connections ride.
//
// Exit status: 0 done (enable, disable) or the running server has the interposer
// (status); 1 the server is not running or does not have it (status); 2 refused, with a
// sentence saying why (usage, no such cluster, a file that cannot be read or written).
#include "file_text.h"
#include "library.h"
#include "pg_environment.h"
#include "pg_status.h"
#include "table_print.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace vipl::db::tools;

namespace {

void usage(FILE *out) {
    std::fprintf(
        out,
        "usage: vipl-pg enable VERSION CLUSTER [--conf-root DIR]   preload the interconnect\n"
        "                                    at the cluster's next start (its environment file)\n"
        "       vipl-pg disable VERSION CLUSTER [--conf-root DIR]  restore that file as it was\n"
        "       vipl-pg status VERSION CLUSTER [--conf-root DIR]   does the running server have\n"
        "       vipl-pg status -D DATADIR                          it, how do connections ride\n"
        "DIR defaults to $PG_CLUSTER_CONF_ROOT, else /etc/postgresql (as pg_ctlcluster's).\n"
        "exit: 0 done / the running server has it; 1 not running or without it; 2 refused.\n");
}

int refuse(const std::string &sentence) {
    std::fprintf(stderr, "vipl-pg: %s\n", sentence.c_str());
    return 2;
}

struct Args {
    std::string command, version, cluster, conf_root, data_dir;
};

bool plain_name(const std::string &s) {
    return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos;
}

// False, with *why, for anything but the forms usage() shows.
bool parse(int argc, char **argv, Args *a, std::string *why) {
    if (argc < 2) {
        *why = "a command is needed (enable, disable or status; --help)";
        return false;
    }
    a->command = argv[1];
    if (a->command != "enable" && a->command != "disable" && a->command != "status") {
        *why = "unknown command '" + a->command + "' (enable, disable or status; --help)";
        return false;
    }
    const char *root = std::getenv("PG_CLUSTER_CONF_ROOT");
    a->conf_root = root && *root ? root : "/etc/postgresql";
    std::vector<std::string> names;
    for (int i = 2; i < argc; ++i) {
        std::string s = argv[i];
        if ((s == "--conf-root" || s == "-D") && i + 1 < argc) {
            (s == "-D" ? a->data_dir : a->conf_root) = argv[++i];
        } else if (!s.empty() && s[0] == '-') {
            *why = "unknown option '" + s + "' (--help)";
            return false;
        } else {
            names.push_back(s);
        }
    }
    if (!a->data_dir.empty()) {
        if (a->command != "status" || !names.empty()) {
            *why = "-D DATADIR goes with status alone (vipl-pg status -D DATADIR)";
            return false;
        }
        return true;
    }
    if (names.size() != 2 || !plain_name(names[0]) || !plain_name(names[1])) {
        *why = "expected VERSION CLUSTER, as pg_lsclusters shows them (vipl-pg " + a->command +
               " 15 main)";
        return false;
    }
    a->version = names[0];
    a->cluster = names[1];
    return true;
}

std::string cluster_dir(const Args &a) {
    return a.conf_root + "/" + a.version + "/" + a.cluster;
}

bool is_dir(const std::string &p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The cluster's environment file, ready to be rewritten; "" after saying why not.
std::string writable_environment(const Args &a) {
    std::string dir = cluster_dir(a), file = dir + "/environment";
    if (!is_dir(dir)) {
        refuse("no cluster " + a.version + "/" + a.cluster + ": " + dir +
               " is not a directory (pg_lsclusters lists the clusters)");
        return "";
    }
    if (access(file.c_str(), F_OK) != 0) {
        refuse(file + " does not exist (pg_createcluster makes it; an empty file will do)");
        return "";
    }
    if (access(file.c_str(), R_OK | W_OK) != 0 || access(dir.c_str(), W_OK) != 0) {
        refuse("cannot write " + file + " (and its directory): " + std::strerror(errno) +
               "; run as root or as the cluster's owner");
        return "";
    }
    return file;
}

// The scheduler setting that decides how clients sharing a CPU with the server fare.
void print_scheduler(bool only_on) {
    int on = autogroups();
    if (on == 1)
        std::printf("scheduler: autogroups on: a client on a CPU it shares with its backend "
                    "cannot hand it the CPU, and sleeps (sysctl "
                    "kernel.sched_autogroup_enabled=0; db-interconnect/README.md, Pitfalls)\n");
    else if (only_on)
        return;
    else if (on == 0)
        std::printf("scheduler: autogroups off\n");
    else
        std::printf(
            "scheduler: autogroups unknown (no /proc/sys/kernel/sched_autogroup_enabled)\n");
}

void print_change(const std::string &file, const EnvEdit &e) {
    std::printf("%s:\n", file.c_str());
    for (const std::string &l : e.removed) std::printf("- %s\n", l.c_str());
    for (const std::string &l : e.added) std::printf("+ %s\n", l.c_str());
}

int edit(const Args &a) {
    std::string file = writable_environment(a);
    if (file.empty()) return 2;
    std::string text, why;
    if (!read_file(file, &text)) return refuse("cannot read " + file + ": " + std::strerror(errno));
    EnvEdit e;
    if (a.command == "enable") {
        std::string lib = library_path();
        char real[PATH_MAX];
        if (lib.empty() || !realpath(lib.c_str(), real))
            return refuse("cannot find libvipl-db.so (set VIPL_RUN_LIBRARY to its path)");
        if (!env_enable(text, real, &e, &why)) return refuse(file + ": " + why);
    } else if (!env_disable(text, &e, &why)) {
        return refuse(file + ": " + why);
    }
    if (!e.changed) {
        std::printf("%s: %s\n", file.c_str(), e.note.c_str());
        return 0;
    }
    if (!replace_file(file, e.text, &why)) return refuse(why);
    print_change(file, e);
    std::printf("%s; takes effect at the next start (pg_ctlcluster %s %s restart)\n",
                e.note.c_str(), a.version.c_str(), a.cluster.c_str());
    if (a.command == "enable") print_scheduler(true);
    return 0;
}

int status(const Args &a) {
    std::string data_dir = a.data_dir;
    bool file_enabled = false;
    if (data_dir.empty()) {
        std::string dir = cluster_dir(a), file = dir + "/environment", text, preload, entry;
        if (!is_dir(dir))
            return refuse("no cluster " + a.version + "/" + a.cluster + ": " + dir +
                          " is not a directory (pg_lsclusters lists the clusters)");
        if (!read_file(file, &text)) {
            std::printf("cluster %s/%s: %s: %s\n", a.version.c_str(), a.cluster.c_str(),
                        file.c_str(), std::strerror(errno));
        } else {
            file_enabled =
                env_ld_preload(text, &preload) && preload_names_interposer(preload, &entry);
            std::printf("cluster %s/%s: %s %s\n", a.version.c_str(), a.cluster.c_str(),
                        file.c_str(),
                        file_enabled ? ("enables it (LD_PRELOAD names " + entry + ")").c_str()
                                     : "does not enable it (vipl-pg enable)");
        }
        data_dir = cluster_data_dir(dir, a.version, a.cluster);
    }
    std::string why, lib;
    int pm = find_postmaster(data_dir, &why);
    if (pm == 0) {
        std::printf("server %s: %s\n", data_dir.c_str(), why.c_str());
        return 1;
    }
    bool replaced = false;
    int mapped = interposer_mapped(pm, &lib, &why, &replaced);
    if (mapped < 0) return refuse(why);
    std::string preload, entry;
    bool env = process_preload(pm, &preload) && preload_names_interposer(preload, &entry);
    if (!mapped) {
        std::printf("server %s: postmaster %d runs without the interposer%s\n", data_dir.c_str(),
                    pm, env ? " (its LD_PRELOAD names it, but it is not loaded)" : "");
        if (file_enabled)
            std::printf("the environment file enables it: restart the server "
                        "(pg_ctlcluster %s %s restart)\n",
                        a.version.c_str(), a.cluster.c_str());
        return 1;
    }
    std::printf("server %s: postmaster %d has the interposer (%s%s%s)\n", data_dir.c_str(), pm,
                lib.c_str(), env ? ", from LD_PRELOAD" : "",
                replaced ? ", replaced on disk since it started: a restart loads the new one" : "");
    ServerRows s = server_rows(pm);
    std::printf("connections: %d ride vipl (shm %d, tcp %d), %d on the kernel; tables of %d "
                "of %d server processes\n",
                s.shm + s.tcp, s.shm, s.tcp, s.kernel, s.tables, s.processes);
    if (s.refused)
        std::printf("%d processes could not be read (run as root or as the server's owner)\n",
                    s.refused);
    print_scheduler(false);
    if (!s.rows.empty()) {
        print_heading(stdout);
        for (const vipl_db_row &r : s.rows) print_row(stdout, r);
    }
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    Args a;
    std::string why;
    if (!parse(argc, argv, &a, &why)) return refuse(why);
    return a.command == "status" ? status(a) : edit(a);
}
