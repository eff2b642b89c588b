// The parts of netns.h that report through Catch2 (REQUIRE, FAIL): the
// constructor that must succeed, set_link, and the side processes.
#include "netns.h"

#include "support.h"

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <sstream>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace vt {

NetnsPair::NetnsPair() {
    std::string why;
    if (!make(&why)) {
        remove();
        FAIL(why);
    }
}

void NetnsPair::set_link(bool up) {
    std::string why;
    if (!set_link(up, &why)) {
        remove();
        FAIL(why);
    }
}

// ------------------------------------------------------------------ Side

Side::Side(const NetnsPair &net, int side, const std::string &test_name,
           const std::vector<std::string> &env)
    : label_("side " + std::to_string(side) + " (" + net.name(side) + ")") {
    int sv[2];
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    std::string path = net.path(side);
    int nsfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
        close(sv[0]);
        close(sv[1]);
        FAIL("open " << path << ": " << strerror(errno));
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE(n > 0);
    exe[n] = 0;
    // Everything is built before fork: the child only makes system calls.
    std::vector<std::string> vars = env;
    for (char **e = environ; *e; ++e) {
        std::string kv = *e;
        std::string key = kv.substr(0, kv.find('=') + 1);
        bool overridden = false;
        for (const std::string &x : env) overridden |= x.compare(0, key.size(), key) == 0;
        if (!overridden) vars.push_back(kv);
    }
    std::vector<char *> envp;
    for (std::string &v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string name = test_name;
    char a1[] = "-w", a2[] = "NoTests", a3[] = "-r", a4[] = "compact";
    char *argv[] = {exe, name.data(), a1, a2, a3, a4, nullptr};
    pid_t parent = getpid();
    fflush(nullptr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        // Never outlive the test, even if it is killed.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(96);
        if (setns(nsfd, CLONE_NEWNET) != 0) _exit(97);
        if (dup2(sv[1], kSideFd) < 0) _exit(98); // dup2 clears close-on-exec
        execve(exe, argv, envp.data());
        _exit(127);
    }
    close(nsfd);
    close(sv[1]);
    pid_ = pid;
    ch_ = LineChannel(sv[0]);
}

Side::~Side() {
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        int status;
        while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
    }
}

int Side::wait(int timeout_ms) {
    if (pid_ <= 0) return -1;
    int status = reap(pid_, mono_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ull);
    pid_ = -1;
    return status;
}

std::vector<int64_t> Side::expect(const std::string &word, int timeout_ms) {
    std::optional<std::string> line = ch_.hear(timeout_ms);
    if (!line) {
        int status = wait(2000);
        FAIL(label_ << ": no \"" << word << "\" within " << timeout_ms << " ms ("
                    << status_text(status) << ")");
    }
    std::istringstream in(*line);
    std::string first;
    in >> first;
    if (first != word) FAIL(label_ << " said \"" << *line << "\" instead of \"" << word << "\"");
    std::vector<int64_t> numbers;
    int64_t v;
    while (in >> v) numbers.push_back(v);
    return numbers;
}

} // namespace vt
