/* exechost egress forwarder: runs inside a sandbox (no network but its own loopback). It listens on
 * 127.0.0.1:PORT and hands every accepted connection, as a file descriptor (SCM_RIGHTS), to the host's
 * egress proxy through the bind-mounted Unix socket SOCK; the proxy then reads and writes that TCP socket
 * itself, so no byte is copied in here. With "-- CMD ARGS", the listener is made first, a child keeps
 * the loop, and this process becomes CMD (the sandbox's supervisor).
 * Built static (engine/sandbox/egress/forwarder.py), so it runs in any image of this architecture. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char BUSY[] =
    "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 52\r\n\r\n"
    "exechost egress: the host's egress proxy is not up\r\n";

static int hand_over(int conn, const char *path) {
    int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (u < 0) return -1;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    strncpy(sa.sun_path, path, sizeof sa.sun_path - 1);
    if (connect(u, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(u);
        return -1;
    }
    char marker = 0;
    struct iovec iov = {.iov_base = &marker, .iov_len = 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &conn, sizeof(int));
    ssize_t n;
    do n = sendmsg(u, &msg, MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
    close(u);
    return n == 1 ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT SOCK [-- CMD ARGS...]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    const char *path = argv[2];
    signal(SIGPIPE, SIG_IGN);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(s, 1024) < 0) {
        perror("exechost egress forwarder: 127.0.0.1");
        if (argc > 4 && strcmp(argv[3], "--") == 0) execvp(argv[4], argv + 4);  /* the sandbox still runs */
        return 1;
    }
    if (argc > 4 && strcmp(argv[3], "--") == 0) {
        pid_t pid = fork();
        if (pid > 0) {
            close(s);
            execvp(argv[4], argv + 4);
            perror("exechost egress forwarder: exec");
            return 127;
        }
        if (pid < 0) return 1;
        /* the child: in its own process group, so a kill of a command's group never reaches it */
        setpgid(0, 0);
    }
    for (;;) {
        int conn = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                usleep(10000);
                continue;
            }
            return 1;
        }
        if (hand_over(conn, path) < 0) {
            ssize_t w = write(conn, BUSY, sizeof BUSY - 1);
            (void)w;
        }
        close(conn);
    }
}
