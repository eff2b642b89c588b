// closefrom_check: opens a pipe, /dev/null and a TCP socket above descriptor 2, calls
// closefrom(3), and checks that every descriptor from 3 up is closed.  Exit 0 when so,
// 1 (naming what stayed open) when not.  Run under the interposer on a kernel without
// close_range (vipl-test-old-kernel): its closefrom must still close.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

int main(void) {
    int p[2];
    if (pipe(p) != 0 || open("/dev/null", O_RDONLY) < 0 || socket(AF_INET, SOCK_STREAM, 0) < 0) {
        perror("closefrom_check: setup");
        return 2;
    }
    closefrom(3);
    int open_left = 0;
    for (int fd = 3; fd < 64; ++fd)
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) {
            fprintf(stderr, "closefrom_check: descriptor %d is still open\n", fd);
            open_left = 1;
        }
    if (!open_left) printf("closefrom_check: every descriptor from 3 up is closed\n");
    return open_left;
}
