// sockdiff compare: runs a scenario twice, without the interposer and with it, each as a
// fresh process of this program, and compares the transcripts line by line.  The netns
// family makes its two namespaces here (vipl-test-netns) and runs both in them.
#include "compare.h"

#include "netns.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

extern char **environ;

namespace sockdiff {

namespace {

constexpr int kRunTimeoutMs = 60000;

struct Outcome {
    int status = -1;
    bool timed_out = false;
    std::string out, err;
};

std::vector<std::string> split_lines(const std::string &s) {
    std::vector<std::string> v;
    size_t p = 0;
    while (p < s.size()) {
        size_t q = s.find('\n', p);
        if (q == std::string::npos) q = s.size();
        v.push_back(s.substr(p, q - p));
        p = q + 1;
    }
    return v;
}

// Runs this program with args; env: ours without LD_PRELOAD, plus `add` ("K=V").
Outcome run_self(const std::string &exe, const std::vector<std::string> &args,
                 const std::vector<std::string> &add) {
    std::vector<std::string> env;
    for (char **e = environ; e && *e; ++e) {
        std::string kv = *e;
        if (kv.rfind("LD_PRELOAD=", 0) == 0) continue;
        bool replaced = false;
        for (const std::string &a : add)
            replaced |= kv.compare(0, kv.find('=') + 1, a, 0, a.find('=') + 1) == 0;
        if (!replaced) env.push_back(kv);
    }
    env.insert(env.end(), add.begin(), add.end());
    std::vector<std::string> argv = {exe};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char *> cenv, cargv;
    for (std::string &s : env) cenv.push_back(s.data());
    cenv.push_back(nullptr);
    for (std::string &s : argv) cargv.push_back(s.data());
    cargv.push_back(nullptr);

    Outcome o;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        o.err = std::string("pipe: ") + strerror(errno);
        return o;
    }
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
        o.err = std::string("fork: ") + strerror(errno);
        return o;
    }
    if (pid == 0) {
        setpgid(0, 0); // the run and its peers: one group to kill at the bound
        dup2(out[1], 1);
        dup2(err[1], 2);
        execve(exe.c_str(), cargv.data(), cenv.data());
        _exit(127);
    }
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    uint64_t end = now_ns() + static_cast<uint64_t>(kRunTimeoutMs) * 1000000ull;
    pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string *dst[2] = {&o.out, &o.err};
    int open_pipes = 2;
    while (open_pipes > 0) {
        uint64_t now = now_ns();
        if (now >= end) {
            o.timed_out = true;
            kill(-pid, SIGKILL);
            break;
        }
        int r = poll(p, 2, static_cast<int>((end - now) / 1000000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        for (int i = 0; i < 2; ++i) {
            if (p[i].fd < 0 || !p[i].revents) continue;
            char buf[4096];
            ssize_t n = read(p[i].fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
                --open_pipes;
                continue;
            }
            dst[i]->append(buf, static_cast<size_t>(n));
        }
    }
    for (auto &x : p)
        if (x.fd >= 0) close(x.fd);
    // Peers that outlived the run (they should not) go with its group.
    kill(-pid, SIGKILL);
    while (waitpid(pid, &o.status, 0) < 0 && errno == EINTR) {
    }
    return o;
}

// A line-by-line difference (longest common subsequence), with two lines of context.
void print_diff(const std::vector<std::string> &a, const std::vector<std::string> &b) {
    size_t n = a.size(), m = b.size();
    std::vector<std::vector<uint32_t>> l(n + 1, std::vector<uint32_t>(m + 1, 0));
    for (size_t i = n; i-- > 0;)
        for (size_t j = m; j-- > 0;)
            l[i][j] = a[i] == b[j] ? l[i + 1][j + 1] + 1 : std::max(l[i + 1][j], l[i][j + 1]);
    struct Op {
        char kind;
        size_t line; // 1-based line in a (' ', '-') or b ('+')
        const std::string *text;
    };
    std::vector<Op> ops;
    size_t i = 0, j = 0;
    while (i < n || j < m) {
        if (i < n && j < m && a[i] == b[j]) {
            ops.push_back({' ', i + 1, &a[i]});
            ++i, ++j;
        } else if (i < n && (j == m || l[i + 1][j] >= l[i][j + 1])) {
            ops.push_back({'-', i + 1, &a[i]});
            ++i;
        } else {
            ops.push_back({'+', j + 1, &b[j]});
            ++j;
        }
    }
    constexpr size_t kContext = 2;
    size_t last_shown = SIZE_MAX;
    for (size_t k = 0; k < ops.size(); ++k) {
        bool near = false;
        for (size_t d = (k >= kContext ? k - kContext : 0); d <= k + kContext && d < ops.size();
             ++d)
            near |= ops[d].kind != ' ';
        if (!near) continue;
        if (last_shown != SIZE_MAX && k > last_shown + 1) std::printf("   ...\n");
        const char *who = ops[k].kind == '-' ? "plain    " : ops[k].kind == '+' ? "preloaded" : "";
        std::printf("%c %4zu %-9s | %s\n", ops[k].kind, ops[k].line, who, ops[k].text->c_str());
        last_shown = k;
    }
}

void show_stderr(const char *label, const std::string &err) {
    for (const std::string &line : split_lines(err))
        std::printf("  [%s] %s\n", label, line.c_str());
}

} // namespace

int compare_main(const std::string &exe, const std::string &scenario, Family family,
                 const std::string &preload, bool verbose) {
    std::string title = "sockdiff compare " + scenario + " " + family_name(family);
    if (access(preload.c_str(), R_OK) != 0) {
        std::printf("%s: FAILED: no interposer library at %s (%s): build the vipl-db target\n",
                    title.c_str(), preload.c_str(), strerror(errno));
        return 1;
    }
    std::vector<std::string> both, preloaded = {"LD_PRELOAD=" + preload};
    std::unique_ptr<vt::NetnsPair> net;
    if (family == Family::netns) {
        std::string why = vt::netns_unavailable();
        if (!why.empty()) {
            std::printf("%s: FAILED: the netns family needs root and iproute2 (`ip`) to make two "
                        "network namespaces; here: %s\n",
                        title.c_str(), why.c_str());
            return 1;
        }
        net = std::make_unique<vt::NetnsPair>(&why);
        if (!net->ok()) {
            std::printf("%s: FAILED: cannot make the namespaces: %s\n", title.c_str(), why.c_str());
            return 1;
        }
        both.push_back("SOCKDIFF_NETNS=" + net->path(0) + "," + net->address(0) + "," +
                       net->path(1) + "," + net->address(1));
        preloaded.push_back("VIPL_DB_REMOTE=tcp:" + net->address(0) + ":*");
    }
    preloaded.insert(preloaded.end(), both.begin(), both.end());
    // Its fallbacks and warnings on standard error, shown when something fails.
    if (!std::getenv("VIPL_DB_LOG")) preloaded.push_back("VIPL_DB_LOG=1");
    std::vector<std::string> args = {"run", scenario, family_name(family)};
    Outcome plain = run_self(exe, args, both);
    args.push_back("--expect-vipl");
    Outcome pre = run_self(exe, args, preloaded);

    std::vector<std::string> a = split_lines(plain.out), b = split_lines(pre.out);
    bool plain_ok = !plain.timed_out && WIFEXITED(plain.status) && WEXITSTATUS(plain.status) == 0;
    bool pre_ok = !pre.timed_out && WIFEXITED(pre.status) && WEXITSTATUS(pre.status) == 0;
    auto outcome = [](const Outcome &o) {
        return o.timed_out ? std::string("killed after 60 s") : status_text(o.status);
    };
    if (a == b && plain_ok && pre_ok) {
        std::printf("%s: the %zu lines agree; both runs passed their checks\n", title.c_str(),
                    a.size());
        if (verbose) {
            for (const std::string &line : a) std::printf("  %s\n", line.c_str());
            show_stderr("preloaded", pre.err);
        }
        return 0;
    }
    std::printf("%s: FAILED: plain run %s (%zu lines), preloaded run %s (%zu lines)%s\n",
                title.c_str(), outcome(plain).c_str(), a.size(), outcome(pre).c_str(), b.size(),
                a == b ? "; the transcripts agree" : "; the transcripts differ:");
    if (a != b) print_diff(a, b);
    if (!plain_ok || verbose) show_stderr("plain", plain.err);
    show_stderr("preloaded", pre.err);
    return 1;
}

} // namespace sockdiff
