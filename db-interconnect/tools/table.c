/* Reading connection tables: see table.h.  Written in C (declarations before statements)
 * so that PGXS compiles it into the extension with PostgreSQL's own flags. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* readlink, O_CLOEXEC under strict C */
#endif
#include "table.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TABLE_BYTES                                                                                \
    (sizeof(struct vipl_db_stat_header) +                                                          \
     sizeof(struct vipl_db_stat_slot) * (size_t)VIPL_DB_STAT_SLOTS)

/* The fields of /proc/<pid>/stat after the command name ("pid (comm) state ppid ..."; comm
 * may hold spaces and parentheses: the last ')' ends it), read into buf.  NULL when
 * unreadable, errno ENOENT or ESRCH when the process is gone. */
static const char *stat_fields(const char *pid, char *buf, size_t size) {
    char path[64];
    const char *p;
    int fd;
    ssize_t n;

    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0) {
        errno = ESRCH; /* the entry went away under the read */
        return NULL;
    }
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (!p) errno = EINVAL;
    return p ? p + 1 : NULL;
}

/* Whether process pid is on its way out: a zombie, or exiting (PF_EXITING in the flags),
 * or already gone.  Such a process has released its memory, and the kernel then shows its
 * /proc entries as root's: its descriptors refuse their own user (EACCES) for the short
 * while before the parent reaps it. */
static int leaving(int pid) {
    char name[16], buf[512];
    const char *f;
    char state;
    unsigned flags;

    snprintf(name, sizeof name, "%d", pid);
    f = stat_fields(name, buf, sizeof buf);
    if (!f) return errno == ENOENT || errno == ESRCH;
    /* state ppid pgrp session tty_nr tpgid flags */
    if (sscanf(f, " %c %*d %*d %*d %*d %*d %u", &state, &flags) != 2) return 0;
    return state == 'Z' || state == 'X' || (flags & 0x4u /* PF_EXITING */) != 0;
}

/* Maps the table among process pid's descriptors, read-only.  1 (and *out) when found,
 * 0 when none (or the process is leaving), -1 with errno when the descriptors cannot be
 * listed. */
static int map_table(int pid, const struct vipl_db_stat_header **out) {
    char dir[64], path[336], target[128];
    const char *name = "/memfd:" VIPL_DB_STAT_NAME;
    size_t name_len = strlen(name);
    int self = pid == 0 ? (int)getpid() : pid;
    DIR *d;
    struct dirent *e;
    int found = 0;

    snprintf(dir, sizeof dir, "/proc/%d/fd", self);
    d = opendir(dir);
    if (!d) {
        int err = errno;

        if (err == ENOENT || err == ESRCH || (err == EACCES && leaving(self))) return 0;
        errno = err;
        return -1;
    }
    while (!found && (e = readdir(d)) != NULL) {
        ssize_t n;
        int fd;
        void *p;
        struct stat st;
        const struct vipl_db_stat_header *h;

        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        n = readlink(path, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        /* "/memfd:vipl-db-stats (deleted)" */
        if (strncmp(target, name, name_len) != 0) continue;
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        /* A table being made has its name before its size: a mapping past the end of
         * the file would fault (SIGBUS) at the first read.  It never shrinks after. */
        if (fstat(fd, &st) != 0 || st.st_size < (off_t)TABLE_BYTES) {
            close(fd);
            continue;
        }
        p = mmap(NULL, TABLE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) continue;
        h = (const struct vipl_db_stat_header *)p;
        /* A table inherited across fork before the child made its own names the parent. */
        if (memcmp(h->magic, VIPL_DB_STAT_MAGIC, sizeof h->magic) == 0 && h->pid == self) {
            *out = h;
            found = 1;
        } else {
            munmap(p, TABLE_BYTES);
        }
    }
    closedir(d);
    return found;
}

int vipl_db_table_read(int pid, struct vipl_db_row *rows, size_t cap, size_t *count) {
    const struct vipl_db_stat_header *h = NULL;
    const struct vipl_db_stat_slot *slots;
    uint32_t i, n;
    size_t k = 0;
    int r = map_table(pid, &h);

    *count = 0;
    if (r <= 0) return r;
    slots = (const struct vipl_db_stat_slot *)(h + 1);
    n = h->slots < VIPL_DB_STAT_SLOTS ? h->slots : VIPL_DB_STAT_SLOTS;
    for (i = 0; i < n && k < cap; ++i) {
        const struct vipl_db_stat_slot *s = &slots[i];
        struct vipl_db_row *row = &rows[k];

        if (!__atomic_load_n(&s->in_use, __ATOMIC_ACQUIRE)) continue;
        row->pid = h->pid;
        row->fd = s->fd;
        row->transport = __atomic_load_n(&s->transport, __ATOMIC_RELAXED);
        row->server = s->server;
        memcpy(row->peer, s->peer, VIPL_DB_STAT_PEER);
        row->peer[VIPL_DB_STAT_PEER] = '\0';
        row->bytes_in = __atomic_load_n(&s->bytes_in, __ATOMIC_RELAXED);
        row->bytes_out = __atomic_load_n(&s->bytes_out, __ATOMIC_RELAXED);
        row->calls_in = __atomic_load_n(&s->calls_in, __ATOMIC_RELAXED);
        row->calls_out = __atomic_load_n(&s->calls_out, __ATOMIC_RELAXED);
        row->messages_in = __atomic_load_n(&s->messages_in, __ATOMIC_RELAXED);
        row->messages_out = __atomic_load_n(&s->messages_out, __ATOMIC_RELAXED);
        row->spins = __atomic_load_n(&s->spins, __ATOMIC_RELAXED);
        row->sleeps = __atomic_load_n(&s->sleeps, __ATOMIC_RELAXED);
        /* Closed while we copied it: the row may mix two connections; leave it out. */
        if (!__atomic_load_n(&s->in_use, __ATOMIC_ACQUIRE)) continue;
        ++k;
    }
    munmap((void *)h, TABLE_BYTES);
    *count = k;
    return 1;
}

const char *vipl_db_transport_name(unsigned transport) {
    switch (transport) {
    case VIPL_DB_STAT_KERNEL:
        return "kernel";
    case VIPL_DB_STAT_SHM:
        return "shm";
    case VIPL_DB_STAT_TCP:
        return "tcp";
    default:
        return "?";
    }
}

/* The parent pid in /proc/<pid>/stat, -1 when unreadable. */
static int parent_of(const char *pid) {
    char buf[512];
    const char *f = stat_fields(pid, buf, sizeof buf);
    int ppid;

    if (!f || sscanf(f, " %*c %d", &ppid) != 1) return -1;
    return ppid;
}

size_t vipl_db_children(int ppid, int *pids, size_t cap) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    size_t n = 0;

    if (!d) return (size_t)-1;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        if (parent_of(e->d_name) != ppid) continue;
        if (n < cap) pids[n] = atoi(e->d_name);
        ++n;
    }
    closedir(d);
    return n;
}
