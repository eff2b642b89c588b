#include "file_text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace vipl::db::tools {

bool read_file(const std::string &path, std::string *text) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    text->clear();
    char buf[8192];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int e = errno;
            close(fd);
            errno = e;
            return n == 0;
        }
        text->append(buf, static_cast<size_t>(n));
    }
}

bool replace_file(const std::string &path, const std::string &text, std::string *why) {
    char real[PATH_MAX];
    if (!realpath(path.c_str(), real)) {
        *why = path + ": " + std::strerror(errno);
        return false;
    }
    std::string target = real, tmp = target + ".vipl-pg-new";
    struct stat st;
    if (stat(real, &st) != 0) {
        *why = target + ": " + std::strerror(errno);
        return false;
    }
    auto fail = [&](const std::string &what, int fd) {
        *why = "cannot " + what + " " + tmp + ": " + std::strerror(errno);
        if (fd >= 0) close(fd);
        unlink(tmp.c_str());
        return false;
    };
    unlink(tmp.c_str()); // left by a run that died half way
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return fail("create", -1);
    for (size_t done = 0; done < text.size();) {
        ssize_t n = write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return fail("write", fd);
        done += static_cast<size_t>(n);
    }
    // The owner first: changing it may clear set-id bits that fchmod then restores.
    if ((st.st_uid != geteuid() || st.st_gid != getegid()) && fchown(fd, st.st_uid, st.st_gid) != 0)
        return fail("give the file's owner to", fd);
    if (fchmod(fd, st.st_mode & 07777) != 0) return fail("give the file's mode to", fd);
    if (fsync(fd) != 0) return fail("sync", fd);
    close(fd);
    if (rename(tmp.c_str(), real) != 0) return fail("rename", -1);
    std::string dir = target.substr(0, target.rfind('/'));
    if (int d = open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
        fsync(d); // the rename lasts across a crash
        close(d);
    }
    return true;
}

} // namespace vipl::db::tools
