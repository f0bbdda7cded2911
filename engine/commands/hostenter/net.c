/* What a run joins or is given before its view: its agent's network namespace (netkeep holds it, netns
   joins it), its agent's pids cgroup (join), and read-only cgroup hierarchies for a run without the host
   view (ro-cgroups). */

#include "hostenter.h"

int ro_cgroups_then(char **argv) {
    int root = geteuid() == 0;
    if (!root) own_user_namespace();
    if (unshare(CLONE_NEWNS) < 0) die("unshare(mnt)");
    /* slave: the host's later mounts still arrive; ours (the read-only remounts) never leave */
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) die("mount --make-rslave /");
    remount_ro_under("/sys/fs/cgroup", 0);
    if (!root) {
        own_user_namespace();
        if (unshare(CLONE_NEWNS) < 0) die("unshare(mnt)");
    }
    execvp(argv[0], argv);
    fprintf(stderr, "exechost: %s: %s\n", argv[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

/* `lo` up in this network namespace (a new one has it down: nothing, not even 127.0.0.1, would answer). */
static void loopback_up(void) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) die("socket");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) die("SIOCGIFFLAGS lo");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) die("SIOCSIFFLAGS lo");
    close(s);
}

int netkeep(char **argv) {
    const char *fwd = argv[0], *port = argv[1], *sock = argv[2];
    if (geteuid() != 0) own_user_namespace();
    if (unshare(CLONE_NEWNET) < 0) die("unshare(net)");
    loopback_up();
    pid_t child = -1;
    if (strcmp(fwd, "-")) {
        pid_t parent = getpid();
        child = fork();
        if (child < 0) die("fork");
        if (child == 0) {
            /* the forwarder ends with its holder, however the holder ends */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent) _exit(FAIL);
            int null = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (null < 0 || dup2(null, 0) < 0) _exit(FAIL);
            setpgid(0, 0); /* no group kill of the holder's reaches it but through its holder */
            execl(fwd, fwd, port, sock, (char *)NULL);
            _exit(127);
        }
    }
    int held = keep();
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    return held;
}

int netns_then(char **argv) {
    int userfd = optional_fd(argv[1]);
    int netfd = ns_fd(argv[0]);
    if (userfd >= 0 && setns(userfd, CLONE_NEWUSER) < 0) die("setns(user) of the agent's network");
    if (setns(netfd, CLONE_NEWNET) < 0) die("setns(net)");
    close(netfd);
    if (userfd >= 0) close(userfd);
    execvp(argv[3], argv + 3);
    fprintf(stderr, "exechost-hostenter: %s: %s\n", argv[3], strerror(errno));
    return 127;
}

int join_then(char **argv) {
    int fd = open(argv[0], O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) {
        fprintf(stderr, "exechost-hostenter: cannot join the pids cgroup %s: %s\n", argv[0], strerror(errno));
        return 126;
    }
    close(fd);
    execvp(argv[2], argv + 2);
    fprintf(stderr, "exechost-hostenter: %s: %s\n", argv[2], strerror(errno));
    return 127;
}
