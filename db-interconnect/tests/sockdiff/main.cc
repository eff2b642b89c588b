// sockdiff: the differential socket-semantics suite of the interposer (README.md beside).
//
//   sockdiff run SCENARIO FAMILY [--expect-vipl]   the transcript on stdout; exit 0 when
//                                                  the scenario's own checks held
//   sockdiff compare SCENARIO FAMILY [--preload LIB] [-v]
//                                                  run plain and preloaded, compare
//   sockdiff list                                  the scenarios
// FAMILY: unix, tcp4, tcp6, netns (tcp across two network namespaces: compare only).
#include "compare.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef SOCKDIFF_PRELOAD
#define SOCKDIFF_PRELOAD ""
#endif

using namespace sockdiff;

namespace {

const Scenario kScenarios[] = {
    {"echo",
     "blocking echo 1 B .. 1 MiB through every send and receive call; partial reads, "
     "MSG_WAITALL, MSG_PEEK, MSG_DONTWAIT, FIONREAD",
     echo_scenario},
    {"nonblock", "non-blocking connect, EAGAIN, a send buffer filled and drained, timeouts",
     nonblock_scenario},
    {"fork-accept", "the postmaster pattern: accept, fork, the parent closes; 100 round trips",
     fork_accept_scenario},
    {"dup", "dup, dup2, dup3, F_DUPFD_CLOEXEC: every copy carries, the last close ends it",
     dup_scenario},
    {"exec", "exec with a close-on-exec copy and a kept one", exec_scenario},
    {"epoll", "epoll: data.ptr and fd, level, edge, one-shot, RDHUP, peer death, mixed sets",
     epoll_scenario},
    {"poll", "poll, ppoll, select, pselect over sockets and a pipe", poll_scenario},
    {"signals", "signals during blocking recv and send, SA_RESTART, signal(), sigaction()",
     signals_scenario},
    {"half-close", "shutdown(SHUT_WR), shutdown(SHUT_RD), shutdown(SHUT_RDWR)",
     half_close_scenario},
    {"peer-death", "a peer killed: EOF or reset within 100 ms, POLLHUP, EPIPE, SIGPIPE",
     peer_death_scenario},
    {"names", "SO_PEERCRED, getsockname, getpeername, socket options", names_scenario},
    {"fd-exhaustion", "RLIMIT_NOFILE reached: EMFILE as the kernel gives it, serving goes on",
     fd_exhaustion_scenario},
    {"high-fd", "connections at the highest descriptor numbers the limit allows", high_fd_scenario},
};

const Scenario *find(const std::string &name) {
    for (const Scenario &s : kScenarios)
        if (name == s.name) return &s;
    return nullptr;
}

int usage() {
    std::fprintf(stderr, "usage: sockdiff run SCENARIO FAMILY [--expect-vipl]\n"
                         "       sockdiff compare SCENARIO FAMILY [--preload LIB] [-v]\n"
                         "       sockdiff list\n"
                         "FAMILY: unix, tcp4, tcp6, netns\n");
    return 2;
}

std::string self_exe() {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "";
    buf[n] = '\0';
    return buf;
}

void remove_dir(const std::string &dir) {
    if (DIR *d = opendir(dir.c_str())) {
        while (dirent *e = readdir(d))
            if (e->d_name[0] != '.') unlink((dir + "/" + e->d_name).c_str());
        closedir(d);
    }
    rmdir(dir.c_str());
}

// Ends a run that takes too long (a wait the scenario thought bounded, a hang): kills
// the main process, whose peers die with it (PR_SET_PDEATHSIG).
void start_watchdog(int seconds) {
    pid_t main_pid = getpid();
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid != 0) return;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != main_pid) _exit(0);
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1); // the transcript's reader must not wait for us
    for (int i = 0; i < seconds * 10; ++i) {
        sleep_ms(100);
        if (getppid() != main_pid) _exit(0);
    }
    std::fprintf(stderr, "sockdiff: the run took over %d s: killed\n", seconds);
    kill(main_pid, SIGKILL);
    _exit(0);
}

int run_main(const Scenario &sc, Family family, bool expect_vipl) {
    Run &r = run();
    r.scenario = sc.name;
    r.family = family;
    r.expect_vipl = expect_vipl;
    r.exe = self_exe();
    register_main();
    if (family == Family::netns) {
        const char *spec = std::getenv("SOCKDIFF_NETNS");
        if (!spec) fatal("the netns family runs under sockdiff compare (SOCKDIFF_NETNS)");
        netns_enter_client(spec);
    }
    char tmpl[] = "/tmp/sockdiff.XXXXXX";
    if (!mkdtemp(tmpl)) fatal("mkdtemp: %s", strerror(errno));
    r.dir = tmpl;
    // As PostgreSQL does; the scenarios that watch SIGPIPE set it as they need.
    signal(SIGPIPE, SIG_IGN);
    start_watchdog(30);
    say("sockdiff %s %s", sc.name, family_name(family));
    sc.body();
    kill_peers();
    remove_dir(r.dir);
    return failures() ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    std::string mode = argv[1];
    if (mode == "list") {
        for (const Scenario &s : kScenarios) std::printf("%-14s %s\n", s.name, s.what);
        return 0;
    }
    if (mode == "exec-image") return exec_image_main(argc - 2, argv + 2);
    if ((mode != "run" && mode != "compare") || argc < 4) return usage();
    const Scenario *sc = find(argv[2]);
    Family family;
    if (!sc) {
        std::fprintf(stderr, "sockdiff: no scenario \"%s\" (sockdiff list)\n", argv[2]);
        return 2;
    }
    if (!family_from(argv[3], &family)) return usage();
    bool expect_vipl = false, verbose = false;
    std::string preload = SOCKDIFF_PRELOAD;
    for (int i = 4; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--expect-vipl" && mode == "run") {
            expect_vipl = true;
        } else if (a == "--preload" && mode == "compare" && i + 1 < argc) {
            preload = argv[++i];
        } else if (a == "-v" && mode == "compare") {
            verbose = true;
        } else {
            return usage();
        }
    }
    if (mode == "run") return run_main(*sc, family, expect_vipl);
    if (const char *e = std::getenv("SOCKDIFF_PRELOAD"); e && *e && preload.empty()) preload = e;
    return compare_main(self_exe(), sc->name, family, preload, verbose);
}
