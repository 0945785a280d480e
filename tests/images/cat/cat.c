/* A tiny static program for berth's tests, run FROM scratch: it prints each file named
 * on its command line, then exits. What a hostile app would do with a volume it should
 * not have been given (issue 21, finding 2: berth's secret key through the logs).
 */
#include <fcntl.h>
#include <unistd.h>

int main(int argc, char **argv) {
    char buf[4096];
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        if (fd < 0) {
            (void)write(2, "cannot open\n", 12);
            continue;
        }
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0) (void)write(1, buf, (size_t)n);
        close(fd);
    }
    return 0;
}
