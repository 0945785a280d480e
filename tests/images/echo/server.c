/* A tiny static HTTP server for berth's tests, run FROM scratch.
 *
 *   GET /      -> "hello from <VERSION>\n"
 *   GET /env   -> the process environment, entries separated by NUL bytes
 *   anything   -> 404
 *
 * It listens on $PORT (default 3000). BERTH_TEST_MODE=exit exits at once with
 * status 3; BERTH_TEST_MODE=nolisten never opens its port. Both print a line
 * first so tests can see the container's last log lines. BERTH_TEST_DELAY=<s> waits
 * that many seconds before it opens its port (a slow start). It exits at once on
 * SIGTERM, as most apps do (it is PID 1: without a handler the signal would be ignored);
 * BERTH_TEST_IGNORE_TERM=1 ignores it, so only Docker's SIGKILL after the grace stops it.
 */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef VERSION
#define VERSION "v1"
#endif

extern char **environ;

static void on_term(int sig) {
    (void)sig;
    _exit(0);
}

static void write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n <= 0) return;
        buf += n;
        len -= (size_t)n;
    }
}

static void respond(int fd, const char *status, const char *body, size_t len) {
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %s\r\nContent-Type: application/octet-stream\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, len);
    write_all(fd, head, (size_t)n);
    write_all(fd, body, len);
}

static void serve_env(int fd) {
    size_t total = 0;
    for (char **e = environ; *e; e++) total += strlen(*e) + 1;
    char *buf = malloc(total + 1);
    if (!buf) { respond(fd, "500 Internal Server Error", "", 0); return; }
    size_t off = 0;
    for (char **e = environ; *e; e++) {
        size_t len = strlen(*e);
        memcpy(buf + off, *e, len);
        off += len;
        buf[off++] = '\0';
    }
    respond(fd, "200 OK", buf, off);
    free(buf);
}

int main(void) {
    const char *mode = getenv("BERTH_TEST_MODE");
    const char *port_env = getenv("PORT");
    int port = port_env ? atoi(port_env) : 3000;
    signal(SIGPIPE, SIG_IGN);
    const char *ignore_term = getenv("BERTH_TEST_IGNORE_TERM");
    if (!(ignore_term && strcmp(ignore_term, "1") == 0)) signal(SIGTERM, on_term);
    if (mode && strcmp(mode, "exit") == 0) {
        printf("echo %s: exiting at once as asked\n", VERSION);
        fflush(stdout);
        return 3;
    }
    if (mode && strcmp(mode, "nolisten") == 0) {
        printf("echo %s: not listening, as asked\n", VERSION);
        fflush(stdout);
        for (;;) pause();
    }
    const char *delay = getenv("BERTH_TEST_DELAY");
    if (delay && atoi(delay) > 0) {
        printf("echo %s: waiting %d s before listening\n", VERSION, atoi(delay));
        fflush(stdout);
        sleep((unsigned)atoi(delay));
    }
    int srv = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)port);
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(srv, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(srv, 64) != 0) {
        perror("bind/listen");
        return 1;
    }
    printf("echo %s: listening on %d\n", VERSION, port);
    fflush(stdout);
    for (;;) {
        int fd = accept(srv, NULL, NULL);
        if (fd < 0) continue;
        char req[8192];
        ssize_t n = read(fd, req, sizeof req - 1);
        if (n > 0) {
            req[n] = '\0';
            if (strncmp(req, "GET /env ", 9) == 0) {
                serve_env(fd);
            } else if (strncmp(req, "GET / ", 6) == 0) {
                const char *body = "hello from " VERSION "\n";
                respond(fd, "200 OK", body, strlen(body));
            } else {
                respond(fd, "404 Not Found", "", 0);
            }
        }
        close(fd);
    }
}
