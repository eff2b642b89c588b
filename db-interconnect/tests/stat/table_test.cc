// Reading another process's connection table (tools/table.h) where the kernel refuses:
// a zombie shows its /proc entries as root's, so even its own user cannot list its
// descriptors for the while before its parent reaps it.  Every reader (pg_stat_vipl,
// vipl-pg status) lists a server's children, backends that just ended among them: such a
// process has no table to show and must read as gone, not as refused.  A live process
// of another user must still read as refused (EACCES), which pg_stat_vipl warns about.
#include <catch2/catch.hpp>

#include "table.h"

#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

constexpr uid_t kNobody = 65534;

// The state letter of /proc/<pid>/stat, '?' when unreadable.
char state_of(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t end = s.rfind(')');
    return end != std::string::npos && end + 2 < s.size() ? s[end + 2] : '?';
}

// What the unprivileged reader saw, sent back whole through a pipe.
struct Seen {
    int ok = 0;             // the reader became nobody and made its zombie
    int zombie_listing = 0; // errno of opendir(/proc/<zombie>/fd): the kernel's refusal
    int zombie_read = -2;   // vipl_db_table_read of the zombie
    int zombie_errno = 0;
    int foreign_read = -2; // ... of a live process of another user (root's)
    int foreign_errno = 0;
};

// In a child: becomes nobody, makes a zombie child of its own, reads both tables.
[[noreturn]] void reader(int out, pid_t root_pid) {
    Seen s;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    alarm(30);
    if (setgroups(0, nullptr) == 0 && setresgid(kNobody, kNobody, kNobody) == 0 &&
        setresuid(kNobody, kNobody, kNobody) == 0) {
        // Credentials changed: this process is not dumpable until it execs; its child,
        // forked after the change, inherits that, so make the zombie dumpable first.
        prctl(PR_SET_DUMPABLE, 1);
        pid_t z = fork();
        if (z == 0) _exit(0);
        for (int i = 0; z > 0 && i < 500 && state_of(z) != 'Z'; ++i) usleep(10000);
        if (z > 0 && state_of(z) == 'Z') {
            s.ok = 1;
            std::string fds = "/proc/" + std::to_string(z) + "/fd";
            DIR *d = opendir(fds.c_str());
            s.zombie_listing = d ? 0 : errno;
            if (d) closedir(d);
            std::vector<vipl_db_row> rows(VIPL_DB_STAT_SLOTS);
            size_t n = 0;
            errno = 0;
            s.zombie_read = vipl_db_table_read(z, rows.data(), rows.size(), &n);
            s.zombie_errno = errno;
            errno = 0;
            s.foreign_read = vipl_db_table_read(root_pid, rows.data(), rows.size(), &n);
            s.foreign_errno = errno;
        }
        if (z > 0) waitpid(z, nullptr, 0);
    }
    ssize_t w = write(out, &s, sizeof s);
    _exit(w == static_cast<ssize_t>(sizeof s) ? 0 : 1);
}

} // namespace

TEST_CASE("connection tables: a process on its way out has none, another user's is refused",
          "[stat]") {
    INFO("changing users needs root");
    REQUIRE(geteuid() == 0);
    int p[2];
    REQUIRE(pipe(p) == 0);
    pid_t root_pid = getpid();
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        close(p[0]);
        reader(p[1], root_pid);
    }
    close(p[1]);
    Seen s;
    ssize_t got = read(p[0], &s, sizeof s);
    close(p[0]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(got == static_cast<ssize_t>(sizeof s));
    REQUIRE(s.ok == 1);
    // The case is real: the kernel refuses the zombie's own user its descriptors.
    CHECK(s.zombie_listing == EACCES);
    INFO("zombie: " << s.zombie_read << " errno " << s.zombie_errno
                    << "; root's: " << s.foreign_read << " errno " << s.foreign_errno);
    CHECK(s.zombie_read == 0);
    CHECK(s.foreign_read == -1);
    CHECK(s.foreign_errno == EACCES);
}

TEST_CASE("connection tables: a table still being made reads as none, without a fault, "
          "once sized and filled it is found",
          "[stat]") {
    // A process makes its table with memfd_create, then sizes it: for that moment a
    // reader finds the name on a file of 0 bytes, whose mapping faults (SIGBUS) at the
    // first read.  In a child, so that a fault ends the child, not the test.
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        alarm(30);
        std::vector<vipl_db_row> rows(4);
        size_t n = 99;
        int fd = memfd_create(VIPL_DB_STAT_NAME, MFD_CLOEXEC);
        if (fd < 0) _exit(20);
        if (vipl_db_table_read(getpid(), rows.data(), rows.size(), &n) != 0 || n != 0) _exit(21);
        size_t bytes = sizeof(vipl_db_stat_header) + sizeof(vipl_db_stat_slot) * VIPL_DB_STAT_SLOTS;
        if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) _exit(22);
        void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) _exit(23);
        auto *h = static_cast<vipl_db_stat_header *>(m);
        std::memcpy(h->magic, VIPL_DB_STAT_MAGIC, sizeof h->magic);
        h->slots = VIPL_DB_STAT_SLOTS;
        h->pid = getpid();
        _exit(vipl_db_table_read(getpid(), rows.data(), rows.size(), &n) == 1 && n == 0 ? 0 : 24);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    INFO("status " << status);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
}
