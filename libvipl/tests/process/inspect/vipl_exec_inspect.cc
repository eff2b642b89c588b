// Run by the exec tests in place of a forked child: reports what the new
// program inherited from the process that called exec().
//
//   vipl-exec-inspect <report-fd> [<linger-ms>]
//
// Writes to report-fd one line per open descriptor ("fd <n> <target>"), one
// per mapping ("map <line of /proc/self/maps>"), then "end", and stays alive
// linger-ms more (so that the caller can observe a live exec'd process).
// It links nothing of VIPL.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>
#include <unistd.h>

static void put(int fd, const std::string &s) {
    const char *p = s.data();
    size_t n = s.size();
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) exit(3);
        p += w;
        n -= static_cast<size_t>(w);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int out = atoi(argv[1]);
    long linger = argc > 2 ? atol(argv[2]) : 0;
    std::string report;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 4;
    int own = dirfd(d);
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == own) continue;
        char link[512];
        std::string path = std::string("/proc/self/fd/") + e->d_name;
        ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
        if (n < 0) n = 0;
        link[n] = 0;
        report += std::string("fd ") + e->d_name + " " + link + "\n";
    }
    closedir(d);
    FILE *m = fopen("/proc/self/maps", "re");
    if (!m) return 5;
    char line[1024];
    while (fgets(line, sizeof line, m)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[n - 1] = 0;
        report += std::string("map ") + line + "\n";
    }
    fclose(m);
    report += "end\n";
    put(out, report);
    close(out);
    if (linger > 0) usleep(static_cast<useconds_t>(linger) * 1000);
    return 0;
}
