/* exechost landlock helper: runs first inside a bwrap sandbox, once bwrap has built its mounts (a landlock
 * domain forbids mount, so it cannot come before), restricts itself and everything it will start to the
 * sandbox's ruleset, then becomes CMD (the sandbox's supervisor, or a terminal's shell).
 *
 *   exechost-landlock [-n] [bind=PORT]... [connect=PORT]... RIGHTS:PATH... -- CMD ARGS...
 *
 * RIGHTS: r read files and dirs, x execute, w write (create, remove, rename, truncate), d a device's
 * write and ioctl, f write an existing file (/proc). Everything not granted by some rule on a path or one
 * of its parents is refused. -n: TCP bind and connect are handled too (kernel ABI >= 4), allowed only to
 * the ports listed. With ABI >= 6 the domain also keeps its signals and abstract Unix sockets to itself.
 * A path that does not exist inside is skipped; anything else that fails ends the helper (exit 126): the
 * host offered landlock, so a sandbox never starts without it. Built static by engine/sandbox/landlock.py.
 * The ABI is defined here rather than taken from <linux/landlock.h>: a build host's headers may be older
 * than the kernel the sandbox runs on. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

struct ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net; /* ABI 4 */
    uint64_t scoped;             /* ABI 6 */
};
struct path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));
struct net_port_attr {
    uint64_t allowed_access;
    uint64_t port;
};

#define RULE_PATH_BENEATH 1
#define RULE_NET_PORT 2
#define CREATE_RULESET_VERSION 1u

#define FS_EXECUTE (1ULL << 0)
#define FS_WRITE_FILE (1ULL << 1)
#define FS_READ_FILE (1ULL << 2)
#define FS_READ_DIR (1ULL << 3)
#define FS_REMOVE_DIR (1ULL << 4)
#define FS_REMOVE_FILE (1ULL << 5)
#define FS_MAKE_CHAR (1ULL << 6)
#define FS_MAKE_DIR (1ULL << 7)
#define FS_MAKE_REG (1ULL << 8)
#define FS_MAKE_SOCK (1ULL << 9)
#define FS_MAKE_FIFO (1ULL << 10)
#define FS_MAKE_BLOCK (1ULL << 11)
#define FS_MAKE_SYM (1ULL << 12)
#define FS_REFER (1ULL << 13)    /* ABI 2 */
#define FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#define FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#define NET_BIND_TCP (1ULL << 0)
#define NET_CONNECT_TCP (1ULL << 1)
#define SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define SCOPE_SIGNAL (1ULL << 1)

/* What a rule on a file (not a dir) may grant: the kernel refuses dir-only rights there. */
#define FS_FILE_RIGHTS (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV)
#define FS_WRITE_SET                                                                                   \
    (FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK |      \
     FS_MAKE_FIFO | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE)

static int fail(const char *what, const char *arg) {
    fprintf(stderr, "exechost landlock: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(errno));
    return 126;
}

static uint64_t rights(const char *letters, const char *end) {
    uint64_t out = 0;
    for (const char *c = letters; c < end; c++) {
        switch (*c) {
        case 'r': out |= FS_READ_FILE | FS_READ_DIR; break;
        case 'x': out |= FS_EXECUTE; break;
        case 'w': out |= FS_WRITE_SET; break;
        case 'd': out |= FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV; break;
        case 'f': out |= FS_WRITE_FILE | FS_TRUNCATE; break;
        default: return 0;
        }
    }
    return out;
}

int main(int argc, char **argv) {
    int cmd = 1;
    while (cmd < argc && strcmp(argv[cmd], "--") != 0) cmd++;
    if (cmd + 1 >= argc) {
        fprintf(stderr, "usage: %s [-n] [bind=PORT]... [connect=PORT]... RIGHTS:PATH... -- CMD ARGS...\n",
                argv[0]);
        return 2;
    }
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, CREATE_RULESET_VERSION);
    if (abi < 1) return fail("the kernel offers no landlock", NULL);
    struct ruleset_attr attr = {0};
    attr.handled_access_fs = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_REMOVE_DIR |
                             FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK |
                             FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM;
    if (abi >= 2) attr.handled_access_fs |= FS_REFER;
    if (abi >= 3) attr.handled_access_fs |= FS_TRUNCATE;
    if (abi >= 5) attr.handled_access_fs |= FS_IOCTL_DEV;
    if (abi >= 6) attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
    for (int i = 1; i < cmd; i++)
        if (strcmp(argv[i], "-n") == 0 && abi >= 4) attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP;
    /* The struct's size for this ABI: an older kernel refuses fields it does not know, even zero ones. */
    size_t size = abi >= 6 ? sizeof attr : abi >= 4 ? 2 * sizeof(uint64_t) : sizeof(uint64_t);
    int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (ruleset < 0) return fail("create_ruleset", NULL);

    for (int i = 1; i < cmd; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-n") == 0) continue;
        int bind = strncmp(arg, "bind=", 5) == 0, connect = strncmp(arg, "connect=", 8) == 0;
        if (bind || connect) {
            if (!attr.handled_access_net) continue;
            char *end;
            unsigned long port = strtoul(arg + (bind ? 5 : 8), &end, 10);
            if (*end || port > 65535) {
                errno = EINVAL;
                return fail("bad port", arg);
            }
            struct net_port_attr net = {bind ? NET_BIND_TCP : NET_CONNECT_TCP, port};
            if (syscall(SYS_landlock_add_rule, ruleset, RULE_NET_PORT, &net, 0) < 0) return fail("add_rule", arg);
            continue;
        }
        const char *colon = strchr(arg, ':');
        uint64_t want = colon ? rights(arg, colon) : 0;
        if (!want || colon[1] != '/') {
            errno = EINVAL;
            return fail("bad rule", arg);
        }
        int fd = open(colon + 1, O_PATH | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT) continue;
            return fail("open", colon + 1);
        }
        struct stat st;
        if (fstat(fd, &st) < 0) return fail("stat", colon + 1);
        struct path_beneath_attr rule = {want & attr.handled_access_fs, fd};
        if (!S_ISDIR(st.st_mode)) rule.allowed_access &= FS_FILE_RIGHTS;
        if (rule.allowed_access && syscall(SYS_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &rule, 0) < 0)
            return fail("add_rule", colon + 1);
        close(fd);
    }
    /* A terminal handed in (a PTY session's) lives on the host's devpts, outside every rule: this one
     * file may be reopened (/dev/stdout, /dev/stderr), as it could be without the layer. */
    for (int fd = 0; fd <= 2; fd++) {
        if (!isatty(fd)) continue;
        char link[32];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        int tty = open(link, O_PATH | O_CLOEXEC);
        if (tty < 0) continue;
        struct path_beneath_attr rule = {
            (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV) & attr.handled_access_fs, tty};
        if (syscall(SYS_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &rule, 0) < 0) return fail("add_rule", link);
        close(tty);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return fail("no_new_privs", NULL);
    if (syscall(SYS_landlock_restrict_self, ruleset, 0) < 0) return fail("restrict_self", NULL);
    close(ruleset);
    execvp(argv[cmd + 1], argv + cmd + 1);
    return fail("exec", argv[cmd + 1]);
}
