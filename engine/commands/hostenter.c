/* exechost-hostenter: a gateway-host command enters the kept host view (engine.commands.hostkeeper).

   keep                       the keeper's program, run by bwrap inside the prepared view: prints its pid,
                              then holds the namespaces until its stdin closes (the gateway that made it is
                              gone, or made a new one).
   seal MNT USER              make the kept mount namespace (fd MNT; USER as for enter) private, once,
                              when the keeper is made: no mount the host makes later arrives in it.
   enter MNT USER CWD PTY [DIR]... -- ARGV
                              run ARGV in the kept mount namespace, open at fd MNT (the kept user namespace
                              at fd USER first, unless "-"), in a mount, PID and IPC namespace of its own with
                              its own /proc and its own /dev/pts: the gateway's and the session hosts'
                              /proc/<pid>/root, cwd and fd are not there to follow, nor any terminal but its
                              own. By fd, not by the keeper's pid: a pid can be reused, and a run prepared
                              just before a keeper is replaced still enters the view it got. Each DIR
                              (absolute) is shown through an overlay made for this run (fresh_layers): no
                              Unix socket in it is connectable.
   own-pts PTY [DIR]... [+PATH]... -- ARGV
                              (before a run's own bwrap) a mount namespace whose /dev/pts is its own, each
                              DIR an overlay made for this run with every mount below it read-only, each
                              PATH in one (a source bwrap binds at its own place, checked by its fd) put
                              back over it as it is, then ARGV (bwrap, which copies it into the view it
                              builds). A bwrap whose setup failed before the run's pid 1 started (nothing
                              of the run ran: the host's mount table changed under it) is started again,
                              up to SETUP_ATTEMPTS times, when the run has a `status` slot (setup_retried).
   check-cwd CWD -- ARGV      (after bwrap's `--`) restore the terminal's signals, check the cwd, run ARGV.
                              CWD may be @DEV:INO: the identity own-pts found for it in its layers.
   netkeep FWD PORT SOCK      the holder of an agent's own network namespace (engine.commands.hostnet): a
                              user namespace of its own first when not root, then a network namespace with
                              only `lo`, up; FWD ("-": none) is started in it as a child (the egress
                              forwarder, listening on its loopback's PORT and handing each connection to the
                              gateway's egress proxy at SOCK), dying with this process; prints its pid,
                              holds the namespace until its stdin closes.
   netns NET USER -- ARGV     (first of the view's words) join the agent's kept network namespace (fd NET;
                              its user namespace at fd USER first, unless "-"), close both, then ARGV: the
                              run's loopback is its agent's, never the host's.
   join TASKS -- ARGV         (first of all) move this process into the pids cgroup whose `tasks` file
                              is TASKS (its agent's share of the host's processes: engine.sandbox.
                              bwraplimits.host_pids_group), then ARGV: everything the run forks is counted
                              there from its first fork; 126 when it cannot join (nothing runs uncapped).
   ro-cgroups -- ARGV         (after `join`, for a run without the host view: hostView = "none") a mount
                              namespace of its own whose cgroup hierarchies (every mount at or under
                              /sys/fs/cgroup) are read-only, then ARGV: every group's `tasks` and pids.max
                              are the gateway uid's files, and a run without the view would otherwise leave
                              its group, fill another agent's or lift the caps. Not root: in a user namespace
                              of its own, and then one more, in which the read-only flag is locked (a mount
                              copied read-only into a less privileged namespace cannot be made writable).
                              Root keeps root's capabilities, and could remount (SECURITY.md says so).
   status FD -- ARGV          (after bwrap's `--`, as its pid 1) run ARGV as a child and write its wait
                              status ("%d\n") to FD ("-": none) before telling it as it was: bwrap tells a
                              signal n as exit 128+n, which a command can exit with itself, so the spawner
                              reads the command's own status from the pipe FD is (engine.sessions.host_io).
                              FD:ERR (own-pts' words): first a NUL on stderr (bwrap's setup is done), then
                              the real stderr back from fd ERR.

   CWD ("-": none) is an fd of the directory the decision was made in, opened in the gateway, in the host's
   mount namespace: the command runs only if its working directory in the view is that directory (device
   and inode), and the fd is closed first. Left open, /proc/self/fd/CWD/.. would walk the host's mounts,
   where the state dir is not covered.

   Every run's /dev/pts is a devpts instance of its own, of at most RUN_PTYS terminals (issue 27: host commands shared the host's, so one
   agent's `tee /dev/pts/N` wrote into another agent's terminal session, or the operator's). /dev/ptmx
   allocates from the devpts at its sibling `pts`, so a terminal made in the run is the run's. PTY ("-":
   none) is the fd of a socket to the session host when the run is a terminal session: its terminal is
   made here, in the run's own devpts (so ttyname(), `tty`, ssh -t and script find it in the view), the
   master sent back over the socket (SCM_RIGHTS), and the slave becomes this process's controlling
   terminal and the command's stdin, stdout and stderr once the host has sized it and said go.

   Three processes, as bwrap has them: this one (in the caller's PID namespace, the one its spawner waits
   for and signals), pid 1 of the new namespace (reaps; it stays, holding no output open, while anything
   the command left behind runs, so `nohup server &` outlives the command as it did without the view),
   and the command as pid 2 (a pid 1 would ignore ^C). This process and pid 1 ignore the
   terminal's INT/QUIT/TSTP so they reach the command and leave its parents waiting; the command gets them
   back at their defaults, no_new_privs set, in a landlock domain scoped from abstract sockets (ABI >= 6),
   in a session keyring of its own (empty: the gateway's may hold the operator's login credentials).
   The command's exit is told as it was: its code as the code, its signal by dying of that signal (never
   128+n, which a command can exit with itself). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <net/if.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define FAIL 126 /* the host view could not be entered: nothing of the command ran */

static void die(const char *what) {
    fprintf(stderr, "exechost: host view: %s: %s\n", what, strerror(errno));
    _exit(FAIL);
}

static void terminal_signals(void (*how)(int)) {
    signal(SIGINT, how);
    signal(SIGQUIT, how);
    signal(SIGTSTP, how);
}

static int ns_fd(const char *number) {
    char *end;
    long fd = strtol(number, &end, 10);
    if (*number == '\0' || *end != '\0' || fd < 0 || fd > INT_MAX) {
        errno = EBADF;
        die("not a namespace fd");
    }
    return (int)fd;
}

static int optional_fd(const char *number) { return strcmp(number, "-") ? ns_fd(number) : -1; }

/* The session host's side of a terminal made here: the master, then wait for its go (it sizes the
   terminal first, so the command's first TIOCGWINSZ reads the session's size). */
static void hand_over(int sock, int master) {
    char byte = 'T';
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = sizeof control.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &master, sizeof(int));
    while (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0)
        if (errno != EINTR) die("sending the terminal");
    ssize_t n;
    while ((n = read(sock, &byte, 1)) < 0 && errno == EINTR) {}
    if (n != 1) {
        errno = n < 0 ? errno : EPIPE;
        die("the session host's go");
    }
}

/* A run's terminals: every devpts instance but the host's own takes from one count, kernel.pty.max less
   kernel.pty.reserve (3072 by default), so an instance with no max= of its own let one run open them all
   and no other run, of any agent, or bwrap sandbox could make a terminal (fresh round 10 b). */
#define RUN_PTYS "256"
#define PTS_OPTIONS "newinstance,ptmxmode=0666,mode=620,max=" RUN_PTYS

/* This mount namespace private (mounts made here stay here, and none made on the host later arrives: a
   mount propagated in keeps its own flags, so the operator's later mount under the read-only home was
   writable in a running view; fresh round 10 a), its /dev/pts a devpts of its own, and, with PTY, the
   run's terminal made in it: its slave this process's controlling terminal and stdio. Before a run's own
   bwrap too: the view bwrap builds from this namespace's mounts is private with them. */
static void own_pts(const char *pty) {
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("mount --make-rprivate /");
    if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, PTS_OPTIONS) < 0) die("mount /dev/pts");
    int sock = optional_fd(pty);
    if (sock < 0) return;
    int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) die("/dev/ptmx");
    int unlock = 0;
    if (ioctl(master, TIOCSPTLCK, &unlock) < 0) die("unlockpt");
    int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY);
    if (slave < 0) die("the terminal's slave");
    hand_over(sock, master);
    close(master);
    if (getsid(0) != getpid() && setsid() < 0) die("setsid");
    for (int fd = 0; fd < 3; fd++)
        if (dup2(slave, fd) < 0) die("dup2");
    if (slave > 2) close(slave);
    if (sock > 2) close(sock);
    if (ioctl(0, TIOCSCTTY, 0) < 0) die("TIOCSCTTY");
}

/* A user namespace of our own, mapping only ourselves, when we are not root: the mount namespace it owns
   is ours to mount a devpts in. bwrap, run next, makes its own below it as it would have. */
static void own_user_namespace(void) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER) < 0) die("unshare(user)");
    char map[64];
    struct { const char *path, *text; } files[] = {{"/proc/self/setgroups", "deny"}, {"/proc/self/uid_map", NULL},
                                                   {"/proc/self/gid_map", NULL}};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        const char *text = files[i].text;
        if (!text) {
            snprintf(map, sizeof map, "%u %u 1\n", i == 1 ? (unsigned)uid : (unsigned)gid,
                     i == 1 ? (unsigned)uid : (unsigned)gid);
            text = map;
        }
        int fd = open(files[i].path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die(files[i].path);
        close(fd);
    }
}

/* mountinfo's fifth field (the mount point) into `out`, octal escapes (\040) decoded. */
static void mountinfo_point(char *line, char *out, size_t size) {
    char *field = line;
    for (int i = 0; i < 4 && field; i++) {
        field = strchr(field, ' ');
        if (field) field++;
    }
    size_t len = 0;
    for (char *c = field; c && *c && *c != ' ' && len < size - 1; c++) {
        if (c[0] == '\\' && c[1] >= '0' && c[1] <= '7' && c[2] && c[3]) {
            out[len++] = (char)((c[1] - '0') * 64 + (c[2] - '0') * 8 + (c[3] - '0'));
            c += 3;
        } else {
            out[len++] = *c;
        }
    }
    out[len] = 0;
}

/* Whether the mount `id` is what `path` reaches (not one under another, nor on a name since removed). */
static int topmost(const char *path, int id) {
    struct statx sx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_MNT_ID, &sx) < 0) return 0;
    return (sx.stx_mask & STATX_MNT_ID) && sx.stx_mnt_id == (uint64_t)id;
}

/* Every mount at or under `top`, remounted read-only in place, its other flags kept (in a user namespace a
   remount that dropped a locked nosuid/nodev/noexec would be refused). */
static void remount_ro_under(const char *top, int visible_only) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) die("/proc/self/mountinfo");
    size_t n = strlen(top);
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        char path[PATH_MAX];
        mountinfo_point(line, path, sizeof path);
        if (strncmp(path, top, n) || (path[n] && path[n] != '/')) continue;
        /* a mount under another (or on a name since removed) is not in the view: nothing to remount */
        if (visible_only && !topmost(path, atoi(line))) continue;
        struct statvfs st;
        if (statvfs(path, &st) < 0) die(path);
        unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
        if (st.f_flag & ST_NOSUID) flags |= MS_NOSUID;
        if (st.f_flag & ST_NODEV) flags |= MS_NODEV;
        if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
        if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
        if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
        if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
        if (mount(NULL, path, NULL, flags, NULL) < 0) die(path);
    }
    fclose(f);
}

/* ---- The read-only layer of the home, fresh for every run (issue 27 §1, fresh round 11 a) ----
   connect(2) on a Unix socket resolves the name to an inode and finds the socket registered on it: in an
   overlayfs the inode a name resolves to is the overlay's own, on which nothing is ever bound, so every
   socket of a directory shown through an overlay answers ECONNREFUSED, whoever bound it, by whatever name,
   in whichever network namespace, while every file reads as it is. Each DIR (the home, and the directories
   outside it that the home's links lead to: engine.commands.homelayer) gets a new overlay superblock per
   run, its only layers DIR as the kept view shows it and an empty read-only tmpfs (an overlay without an
   upper layer needs two), mounted over DIR; every mount the kept view has below DIR (the hostWritable
   binds, the covers and read-only binds, the private dirs), cloned before and put back on top after, in
   their order, so the view is the kept one but for the layer under them. Per run, never kept: an overlay
   caches what it looked up, a name missing once stays missing in it (a file the operator makes later
   would read as absent in every later run of a kept one). */
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define MAX_LAYERED 64 /* directories made an overlay per run */

struct mount_entry {
    int id;
    char *point;
};


static struct mount_entry *read_mounts(size_t *count) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) die("/proc/self/mountinfo");
    size_t n = 0, cap = 64;
    struct mount_entry *m = malloc(cap * sizeof *m);
    char line[8192], point[PATH_MAX];
    while (m && fgets(line, sizeof line, f)) {
        if (n == cap && !(m = realloc(m, (cap *= 2) * sizeof *m))) break;
        mountinfo_point(line, point, sizeof point);
        m[n].id = atoi(line);
        if (!(m[n].point = strdup(point))) die("strdup");
        n++;
    }
    fclose(f);
    if (!m) die("malloc");
    *count = n;
    return m;
}

static int below(const char *path, const char *top) {
    size_t n = strlen(top);
    if (n == 1) return path[0] == '/' && path[1] != 0; /* never `/`: refused by the caller anyway */
    return !strncmp(path, top, n) && path[n] == '/';
}

static int depth(const char *path) {
    int d = 0;
    for (; *path; path++) d += *path == '/';
    return d;
}

/* The topmost mount at `point` is one mounted there (not a directory inside another mount covering it). */
static int visible(const char *point, const struct mount_entry *m, size_t n) {
    struct statx sx;
    if (statx(AT_FDCWD, point, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_MNT_ID, &sx) < 0) return 0;
    if (!(sx.stx_mask & STATX_MNT_ID)) return 0;
    for (size_t i = 0; i < n; i++)
        if ((uint64_t)m[i].id == sx.stx_mnt_id) return !strcmp(m[i].point, point);
    return 0;
}

static unsigned long mount_attrs(const char *dir) {
    struct statvfs st;
    if (statvfs(dir, &st) < 0) die(dir);
    unsigned long attrs = MOUNT_ATTR_RDONLY;
    if (st.f_flag & ST_NOSUID) attrs |= MOUNT_ATTR_NOSUID;
    if (st.f_flag & ST_NODEV) attrs |= MOUNT_ATTR_NODEV;
    if (st.f_flag & ST_NOEXEC) attrs |= MOUNT_ATTR_NOEXEC;
    return attrs;
}

static void layered(const char *dir, int empty, const struct mount_entry *m, size_t n) {
    if (dir[0] != '/' || dir[1] == 0) {
        errno = EINVAL;
        die(dir);
    }
    struct stat st;
    if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) return; /* not in the view: nothing there to reach */
    /* the mounts below, outermost first: each cloned with everything on it */
    size_t *order = malloc((n + 1) * sizeof *order), k = 0;
    int *trees = malloc((n + 1) * sizeof *trees);
    const char **points = malloc((n + 1) * sizeof *points);
    if (!order || !trees || !points) die("malloc");
    for (size_t i = 0; i < n; i++)
        if (below(m[i].point, dir)) order[k++] = i;
    for (size_t a = 1; a < k; a++) /* by depth, stable (insertion sort: tens of entries) */
        for (size_t b = a; b > 0 && depth(m[order[b - 1]].point) > depth(m[order[b]].point); b--) {
            size_t t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    size_t kept = 0;
    for (size_t a = 0; a < k; a++) {
        const char *point = m[order[a]].point;
        int inside = 0;
        for (size_t b = 0; b < kept && !inside; b++)
            inside = !strcmp(points[b], point) || below(point, points[b]);
        if (inside || !visible(point, m, n)) continue;
        int tree = (int)open_tree(AT_FDCWD, point, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
                                                        AT_SYMLINK_NOFOLLOW);
        if (tree < 0) die(point);
        trees[kept] = tree;
        points[kept++] = point;
    }
    int fs = fsopen("overlay", FSOPEN_CLOEXEC);
    if (fs < 0) die("fsopen(overlay)");
    if (fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir+", dir, 0) < 0) die("overlay lowerdir");
    if (fsconfig(fs, FSCONFIG_SET_FD, "lowerdir+", NULL, empty) < 0) die("overlay's empty layer");
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) die("overlay");
    int layer = fsmount(fs, FSMOUNT_CLOEXEC, (unsigned)mount_attrs(dir));
    if (layer < 0) die("fsmount(overlay)");
    close(fs);
    if (move_mount(layer, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0) die(dir);
    close(layer);
    for (size_t b = 0; b < kept; b++) {
        if (move_mount(trees[b], "", AT_FDCWD, points[b], MOVE_MOUNT_F_EMPTY_PATH) < 0) die(points[b]);
        close(trees[b]);
    }
    free(order);
    free(trees);
    free(points);
}

/* Each of `dirs` (NULL-ended) an overlay of its own, fresh (see above); in this process's own mount
   namespace, private already (own_pts). */
static void fresh_layers(char **dirs) {
    if (!dirs[0]) return;
    int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "size", "4k", 0) < 0 ||
        fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        die("the overlay's empty layer");
    int empty = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                                 MOUNT_ATTR_NOEXEC);
    if (empty < 0) die("the overlay's empty layer");
    close(fs);
    size_t n;
    struct mount_entry *m = read_mounts(&n);
    for (char **d = dirs; *d; d++) {
        layered(*d, empty, m, n);
        if (d[1]) { /* the next one's mounts as they are now */
            for (size_t i = 0; i < n; i++) free(m[i].point);
            free(m);
            m = read_mounts(&n);
        }
    }
    for (size_t i = 0; i < n; i++) free(m[i].point);
    free(m);
    close(empty);
}

/* The decided directory (fd CWDFD, "-": none) as the run will see it: a layer's directory is the
   overlay's, of another device and inode than the host's. When the path the run will start in (`cwd`)
   is that directory just before the layers are made, its identity in them is the one the run's cwd is
   checked against (decided); only the host could rename in a read-only layer between the two, never a
   run. Otherwise the host's, which the run's cwd then cannot match: refused as stale, as before. */
static int cwd_layered;
static struct stat cwd_in_layers;
static int cwd_is_decided(int cwdfd, const char *cwd) {
    struct stat want, there;
    if (cwdfd < 0) return 0;
    if (fstat(cwdfd, &want) < 0) die("the decided directory's fd");
    return stat(cwd, &there) == 0 && there.st_dev == want.st_dev && there.st_ino == want.st_ino;
}

static void layers_at_cwd(char **layers, int cwdfd, const char *cwd) {
    int same = layers[0] && cwd_is_decided(cwdfd, cwd);
    fresh_layers(layers);
    if (same && stat(cwd, &cwd_in_layers) == 0) cwd_layered = 1;
}

static int ro_cgroups_then(char **argv) {
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

/* The run's `status FD` words right after bwrap's `--`, before its check-cwd (as engine.sessions.host_io
   finds them): the slot of FD, or NULL (no status helper: bwrap is run as it is, never again). */
static char **status_slot(char **command) {
    for (char **w = command; *w; w++)
        if (w - command >= 2 && !strcmp(w[-2], "--") && !strcmp(w[0], "status") && w[1] && w[2] &&
            !strcmp(w[2], "--") && w[3] && !strcmp(w[3], w[-1]) && w[4] && !strcmp(w[4], "check-cwd"))
            return w + 1;
    return NULL;
}

static int setup_retried(char **command, char **slot);

static int own_pts_then(char **argv) {
    const char *pty = argv[0];
    char **words = argv + 1, **command = words;
    while (strcmp(*command, "--")) command++;
    *command++ = NULL; /* the words between PTY and `--`: DIR (a layer) or +PATH (carried over them) */
    size_t n = (size_t)(command - words);
    char **layers = calloc(n, sizeof *layers), **carried = calloc(n, sizeof *carried);
    int *trees = calloc(n, sizeof *trees);
    if (!layers || !carried || !trees) die("calloc");
    size_t nl = 0, nc = 0;
    for (char **w = words; *w; w++) {
        if ((*w)[0] == '+') carried[nc++] = *w + 1;
        else layers[nl++] = *w;
    }
    if (geteuid() != 0) own_user_namespace();
    if (unshare(CLONE_NEWNS) < 0) die("unshare(mnt)");
    own_pts(pty);
    /* the run's check-cwd (after bwrap's `--`): its fd's identity in the layers, passed on as @DEV:INO */
    char **check = NULL, identity[64];
    for (char **w = command; *w && !check; w++)
        if (!strcmp(*w, "check-cwd") && w[1] && w[2] && !strcmp(w[2], "--") && strcmp(w[1], "-")) check = w + 1;
    int cwdfd = nl && check && (*check)[0] != '@' ? ns_fd(*check) : -1;
    char cwd[PATH_MAX];
    if (cwdfd >= 0 && !getcwd(cwd, sizeof cwd)) die("getcwd");
    int same = cwd_is_decided(cwdfd, cwd);
    /* bwrap binds each of its sources by path and checks it is the file its fd is: a source in a layer
       would be the overlay's. Each (bound by bwrap at its own place, over this) is carried as it is. */
    for (size_t i = 0; i < nc; i++) {
        trees[i] = (int)open_tree(AT_FDCWD, carried[i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
                                                            AT_SYMLINK_NOFOLLOW);
        if (trees[i] < 0) die(carried[i]);
    }
    fresh_layers(layers);
    /* the host's mounts below each read-only with it, as bwrap's --ro-bind of the home made them */
    for (size_t i = 0; i < nl; i++) remount_ro_under(layers[i], 1);
    for (size_t i = 0; i < nc; i++) {
        if (move_mount(trees[i], "", AT_FDCWD, carried[i], MOVE_MOUNT_F_EMPTY_PATH) < 0) die(carried[i]);
        close(trees[i]);
    }
    if (same && stat(cwd, &cwd_in_layers) == 0) {
        snprintf(identity, sizeof identity, "@%llu:%llu", (unsigned long long)cwd_in_layers.st_dev,
                 (unsigned long long)cwd_in_layers.st_ino);
        *check = identity;
        close(cwdfd); /* never into the view: a way back to the host's mounts */
    }
    char **slot = status_slot(command);
    if (slot) return setup_retried(command, slot);
    execvp(command[0], command);
    fprintf(stderr, "exechost: %s: %s\n", command[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

/* The decided directory's identity, and its fd closed (-1: none, false). */
static int decided(int cwdfd, struct stat *want) {
    if (cwdfd < 0) return 0;
    if (fstat(cwdfd, want) < 0) die("the decided directory's fd");
    close(cwdfd);
    if (cwd_layered) *want = cwd_in_layers;
    return 1;
}

/* CWD as check-cwd takes it: an fd, "-", or "@DEV:INO", the identity own-pts found (layers_at_cwd). */
static int decided_word(const char *word, struct stat *want) {
    unsigned long long dev, ino;
    char end;
    if (word[0] != '@') return decided(optional_fd(word), want);
    if (sscanf(word, "@%llu:%llu%c", &dev, &ino, &end) != 2) {
        errno = EINVAL;
        die("the decided directory's identity");
    }
    want->st_dev = (dev_t)dev;
    want->st_ino = (ino_t)ino;
    return 1;
}

/* Landlock's ABI 6 scope, defined here (a build host's <linux/landlock.h> may be older): the command and
   what it starts connect to no abstract Unix socket made outside them (the operator's X server's, a session
   bus's, an editor's): an abstract name is in no directory, so no mount covers it (issue 27 class 1).
   A kernel without the scope (ABI < 6) leaves them reachable: docs/SECURITY.md. */
struct scoped_ruleset {
    uint64_t handled_access_fs, handled_access_net, scoped;
};
#define SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LANDLOCK_CREATE_RULESET 444
#define LANDLOCK_RESTRICT_SELF 446

static void scope_abstract_sockets(void) {
    if (syscall(LANDLOCK_CREATE_RULESET, NULL, (size_t)0, 1U) < 6) return;
    struct scoped_ruleset attr = {0, 0, SCOPE_ABSTRACT_UNIX_SOCKET};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
    int ruleset = (int)syscall(LANDLOCK_CREATE_RULESET, &attr, sizeof attr, 0U);
    if (ruleset < 0) die("landlock_create_ruleset");
    if (syscall(LANDLOCK_RESTRICT_SELF, ruleset, 0U) < 0) die("landlock_restrict_self");
    close(ruleset);
}

/* A fresh anonymous session keyring (keyctl JOIN_SESSION_KEYRING, no name): the gateway's, inherited across
   fork, exec and every namespace, may be the operator's login session's, holding a Kerberos ticket (KEYRING:
   ccache), an eCryptfs or AFS key (fresh round 10 a). The new one holds nothing and links nothing: the
   command cannot reach the old one by KEY_SPEC_SESSION_KEYRING; the user keyring (@u) stays the account's,
   as the account's files are. */
#define KEYCTL_JOIN_SESSION_KEYRING 1
static void own_session_keyring(void) {
    if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS) die("keyctl join");
}

/* A seccomp filter installed after the fresh session keyring is joined, refusing what reaches past the
   run's namespaces; every other syscall is allowed. keyctl(KEYCTL_GET_PERSISTENT) hands the caller the
   account's persistent keyring (where a Kerberos KEYRING: ccache lives), whatever its session keyring is
   (fresh round 11 a): EPERM, keyctl's other operations allowed. socket() opens only the families a network
   namespace confines (the sandboxes' list, engine.sandbox.seccomprules.SOCKET_FAMILIES: unix, inet,
   inet6, netlink), others EAFNOSUPPORT: AF_VSOCK ignores the agent's own network namespace and listened
   on, and reached, the hypervisor's side with no proxy and no ask (fresh round 13 b). io_uring_setup is
   refused (EPERM, as Docker refuses it): its socket operation makes a socket no filter sees. A syscall of
   another architecture (x32, i386 on x86-64) is refused outright. */
#define KEYCTL_GET_PERSISTENT 22
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#if defined(__x86_64__)
#define HOST_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define HOST_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
static void refuse_beyond_namespaces(void) {
#ifdef HOST_AUDIT_ARCH
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, HOST_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
#endif
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_keyctl, 0, 4),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, KEYCTL_GET_PERSISTENT, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 6),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])), /* the int's low word */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) die("seccomp");
#endif
}

/* The command's last step: its cwd is the decided directory (`want`, NULL: no check), the terminal's
   signals are its own again; then ARGV. */
static void run_checked(const struct stat *want, char **command) {
    if (want) {
        struct stat here;
        if (stat(".", &here) < 0 || here.st_dev != want->st_dev || here.st_ino != want->st_ino) {
            fprintf(stderr, "exechost: approval-stale: the working directory changed since it was approved\n");
            _exit(FAIL);
        }
    }
    own_session_keyring();
    refuse_beyond_namespaces();
    scope_abstract_sockets();
    terminal_signals(SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvp(command[0], command);
    fprintf(stderr, "exechost: %s: %s\n", command[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
}

static int keep(void) {
    char buf[256];
    printf("%d\n", (int)getpid());
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0 || errno == EINTR) errno = 0;
    return 0;
}

static void report(int status) {
    if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none); /* the command's core (if any) was its own; ours is nobody's */
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    _exit(128 + sig); /* a signal that does not end a process */
}

/* The signals a session's group gets (a terminal's, a kill's first step): the command's to die of; this
   process waits on, to tell how the command ended. */
static const int passed_on[] = {SIGINT, SIGQUIT, SIGTSTP, SIGTERM, SIGHUP};
#define PASSED_ON (sizeof passed_on / sizeof *passed_on)

/* Every fd from 3 up closed but `a` and `b` (-1: none). */
static void close_all_but(int a, int b) {
    int keep[2] = {a < b ? a : b, a < b ? b : a};
    unsigned from = 3;
    for (int i = 0; i < 2; i++) {
        if (keep[i] < (int)from) continue;
        if ((unsigned)keep[i] > from && close_range(from, (unsigned)keep[i] - 1, 0) < 0) die("close_range");
        from = (unsigned)keep[i] + 1;
    }
    if (close_range(from, ~0U, 0) < 0) die("close_range");
}

static void write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        buf += w;
        n -= (size_t)w;
    }
}

static volatile sig_atomic_t bwrap_pid;
static void pass_on(int sig) {
    if (bwrap_pid > 0) kill(bwrap_pid, sig);
}

/* bwrap's setup fails now and then while the host's mount table changes under it ("Can't find source
   path /proc/self/fd/N", "Race condition binding dirfd"), before the run's pid 1 starts: nothing of the
   run has started, so bwrap is started again, up to SETUP_ATTEMPTS times after a pause that doubles each
   time (10 ms .. 160 ms: a busy host's mount table settles), and only the last attempt's words reach the
   run's stderr. Until the run's `status` (bwrap's last step: its setup is done) writes a
   NUL to it and takes the real stderr back from ERR (`status FD:ERR`), bwrap's stderr is a pipe read here.
   This process stays bwrap's parent, passing on the signals it does not ignore, and tells its exit as it
   was. */
#define SETUP_ATTEMPTS 6
static int setup_retried(char **command, char **slot) {
    static char word[48];
    int err = fcntl(2, F_DUPFD, 3); /* not close-on-exec: bwrap passes it on to the run's `status` */
    if (err < 0) die("stderr");
    snprintf(word, sizeof word, "%s:%d", *slot, err);
    *slot = word;
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    struct sigaction forward = {.sa_handler = pass_on, .sa_flags = SA_RESTART}, was;
    sigemptyset(&forward.sa_mask);
    for (size_t i = 0; i < PASSED_ON; i++)
        if (sigaction(passed_on[i], NULL, &was) == 0 && was.sa_handler != SIG_IGN)
            sigaction(passed_on[i], &forward, NULL);
    for (int attempt = 1;; attempt++) {
        int setup[2];
        if (pipe2(setup, O_CLOEXEC) < 0) die("pipe");
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (dup2(setup[1], 2) < 0) _exit(FAIL);
            execvp(command[0], command);
            fprintf(stderr, "exechost: %s: %s\n", command[0], strerror(errno));
            _exit(errno == ENOENT ? 127 : 126);
        }
        bwrap_pid = pid;
        close(setup[1]);
        char held[4096], buf[4096];
        size_t n = 0;
        int started = 0, spilled = 0;
        for (;;) {
            ssize_t got = read(setup[0], buf, sizeof buf);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) break;
            char *nul = started ? NULL : memchr(buf, 0, (size_t)got);
            if (nul) {
                started = 1;
                write_all(err, held, n);
                write_all(err, buf, (size_t)(nul - buf));
                write_all(err, nul + 1, (size_t)(buf + got - nul - 1));
            } else if (started || spilled || n + (size_t)got > sizeof held) {
                spilled = !started; /* more than setup's words: told as they come, never retried */
                write_all(err, held, n);
                n = 0;
                write_all(err, buf, (size_t)got);
            } else {
                memcpy(held + n, buf, (size_t)got);
                n += (size_t)got;
            }
        }
        close(setup[0]);
        int status;
        while (waitpid(pid, &status, 0) < 0)
            if (errno != EINTR) die("waitpid");
        bwrap_pid = 0;
        int failed = !started && !spilled && WIFEXITED(status) && WEXITSTATUS(status) == 1 && n > 7 &&
                     !memcmp(held, "bwrap: ", 7);
        if (failed && attempt < SETUP_ATTEMPTS) {
            struct timespec pause = {0, 10000000L << (attempt - 1)};
            while (nanosleep(&pause, &pause) < 0 && errno == EINTR) {}
            continue;
        }
        write_all(err, held, n);
        report(status);
    }
}

static int status_then(char **argv) {
    char *err = strchr(argv[0], ':');
    if (err) { /* own-pts' setup_retried reads this stderr until the NUL: bwrap's setup is done */
        *err++ = '\0';
        int real = ns_fd(err);
        struct sigaction quiet = {.sa_handler = SIG_IGN}, was;
        sigemptyset(&quiet.sa_mask);
        sigaction(SIGPIPE, &quiet, &was);
        write_all(2, "", 1);
        sigaction(SIGPIPE, &was, NULL);
        if (dup2(real, 2) < 0) die("stderr");
        close(real);
    }
    int fd = optional_fd(argv[0]);
    char **command = argv + 2;
    struct sigaction ignore = {.sa_handler = SIG_IGN}, was[PASSED_ON];
    sigemptyset(&ignore.sa_mask);
    for (size_t i = 0; i < PASSED_ON; i++) sigaction(passed_on[i], &ignore, &was[i]);
    if (fd >= 0) {
        /* Never the command's (close-on-exec), and a full pipe never holds this process up. */
        if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) die("the status fd");
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) die("the status fd");
    }
    int go[2]; /* the child starts ARGV once this process holds nothing of it (EOF on go[0]) */
    if (pipe2(go, O_CLOEXEC) < 0) die("pipe");
    pid_t cmd = fork();
    if (cmd < 0) die("fork");
    if (cmd == 0) {
        close(go[1]);
        char byte;
        while (read(go[0], &byte, 1) < 0 && errno == EINTR) {}
        for (size_t i = 0; i < PASSED_ON; i++) sigaction(passed_on[i], &was[i], NULL);
        execvp(command[0], command);
        fprintf(stderr, "exechost: %s: %s\n", command[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    /* Nothing but the status fd and stdio stays open here while the command runs: a passed fd (the
       decided directory's, which check-cwd closes in the command) held by this process would be a way
       into the host's mounts through /proc/<pid>/fd. Nor may the command open our own pipe there. */
    close_all_but(fd, go[1]);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    close(go[1]);
    /* pid 1 of the run's namespace (bwrap --as-pid-1): what the command leaves behind is reaped here, and
       ends with it when this process ends, as it did under bwrap's own reaper. */
    int status;
    for (;;) {
        pid_t done = waitpid(-1, &status, 0);
        if (done == cmd) break;
        if (done < 0 && errno != EINTR) die("waitpid");
    }
    if (fd >= 0) {
        char text[16];
        int n = snprintf(text, sizeof text, "%d\n", status);
        ssize_t w = write(fd, text, (size_t)n);
        (void)w;
        close(fd);
    }
    report(status);
    return FAIL;
}

static int enter(char **argv) {
    const char *mnt = argv[0], *user = argv[1], *pty = argv[3];
    int cwdfd = optional_fd(argv[2]);
    char **layers = argv + 4, **command = layers;
    while (strcmp(*command, "--")) command++;
    *command++ = NULL; /* layers: the words between PTY and `--` */
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) die("getcwd");
    int userfd = strcmp(user, "-") ? ns_fd(user) : -1;
    int mntfd = ns_fd(mnt);
    /* setns refuses an fd that is not a namespace of that type */
    if (userfd >= 0 && setns(userfd, CLONE_NEWUSER) < 0) die("setns(user)");
    if (setns(mntfd, CLONE_NEWNS) < 0) die("setns(mnt)");
    close(mntfd);
    int entered_user = userfd >= 0;
    if (entered_user) close(userfd);
    /* and an IPC namespace of its own: SysV segments, semaphores and queues are in no directory (round 10 a) */
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC) < 0) die("unshare");
    own_pts(pty); /* here, not in pid 1: this process is the session leader a terminal needs */
    layers_at_cwd(layers, cwdfd, cwd);
    terminal_signals(SIG_IGN);
    int told[2];
    if (pipe2(told, O_CLOEXEC) < 0) die("pipe");
    pid_t init = fork();
    if (init < 0) die("fork");
    if (init > 0) {
        close(told[1]);
        if (cwdfd >= 0) close(cwdfd);
        int status, outcome[2]; /* the command's wait status; whether pid 1 stays for what it left running */
        ssize_t n;
        while ((n = read(told[0], outcome, sizeof outcome)) < 0 && errno == EINTR) {}
        if (n == (ssize_t)sizeof outcome && outcome[1]) report(outcome[0]); /* pid 1 outlives us: init reaps it */
        while (waitpid(init, &status, 0) < 0)
            if (errno != EINTR) die("waitpid");
        report(n == (ssize_t)sizeof outcome ? outcome[0] : status);
    }
    /* pid 1: /proc of this namespace (private since own_pts: mounts made here stay here). */
    close(told[0]);
    unsigned long proc_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    if (mount("proc", "/proc", "proc", proc_flags, NULL) < 0) die("mount /proc");
    /* As bwrap's --proc does: the old knobs of /proc that could act on the whole machine, read-only. */
    static const char *const cover[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"};
    for (size_t i = 0; i < sizeof cover / sizeof *cover; i++) {
        if (access(cover[i], W_OK) < 0 && (errno == EACCES || errno == ENOENT || errno == EROFS)) continue;
        if (mount(cover[i], cover[i], NULL, MS_BIND | MS_REC, NULL) < 0 ||
            mount(NULL, cover[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | proc_flags, NULL) < 0)
            die(cover[i]);
    }
    /* The decided directory's fd closed before the command exists: held here after the fork, the command
       could open it through /proc/1/fd while it is, into the host's mounts. */
    struct stat want;
    int checked = decided(cwdfd, &want);
    pid_t cmd = fork();
    if (cmd < 0) die("fork");
    if (cmd == 0) {
        close(told[1]);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
        /* In the kept user namespace (a non-root gateway) this process holds every capability there;
           the exec of a non-root uid drops them, and the bounding set goes as bwrap drops it. */
        for (int cap = 0; entered_user; cap++) {
            if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
            if (errno == EINVAL) break; /* past the last capability */
            die("capability bounding set");
        }
        if (chdir(cwd) < 0) die(cwd);
        run_checked(checked ? &want : NULL, command);
    }
    /* The command's output is the command's: pid 1 holds none of it open, so an exit is seen when the
       command and what it left holding the output are done, as without the view. */
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(FAIL);
    for (;;) {
        int status;
        pid_t done = waitpid(-1, &status, 0);
        if (done < 0 && errno == EINTR) continue;
        if (done < 0) _exit(0); /* nothing left in the namespace */
        if (done == cmd) {
            /* Told now; pid 1 stays while anything the command started (a server, `nohup … &`) runs,
               reaping it, as init would have without the view: the namespace ends with the last. When
               nothing is left it ends at once, and its parent (which waits then) reaps it. */
            while ((done = waitpid(-1, NULL, WNOHANG)) > 0) {}
            int outcome[2] = {status, !(done < 0 && errno == ECHILD)};
            ssize_t w = write(told[1], outcome, sizeof outcome);
            (void)w;
            if (!outcome[1]) _exit(0);
            close(told[1]);
        }
    }
}

/* seal MNT USER: the kept mount namespace (at fd MNT, its user namespace at fd USER first unless "-")
   made private, once, when the keeper is made: bwrap leaves it a slave of the host's, and a mount the host
   made later (a vault under the home) would arrive there, with its own flags, before a run's own copy of
   it is made private (own_pts). */
static int seal(char **argv) {
    int userfd = strcmp(argv[1], "-") ? ns_fd(argv[1]) : -1;
    int mntfd = ns_fd(argv[0]);
    if (userfd >= 0 && setns(userfd, CLONE_NEWUSER) < 0) die("setns(user)");
    if (setns(mntfd, CLONE_NEWNS) < 0) die("setns(mnt)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("mount --make-rprivate /");
    return 0;
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

static int netkeep(char **argv) {
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

static int netns_then(char **argv) {
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

static int join_then(char **argv) {
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

/* Absolute directories up to a `--` (the layers), and with `carried` absolute paths after a `+`. */
static int layer_words(char **words, int carried) {
    for (int n = 0; *words; words++, n++) {
        if (!strcmp(*words, "--")) return 1;
        const char *w = *words + (carried && (*words)[0] == '+');
        if (w[0] != '/' || (w == *words && n >= MAX_LAYERED)) return 0;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "keep")) return keep();
    if (argc == 4 && !strcmp(argv[1], "seal")) return seal(argv + 2);
    if (argc == 5 && !strcmp(argv[1], "netkeep")) return netkeep(argv + 2);
    if (argc >= 6 && !strcmp(argv[1], "netns") && !strcmp(argv[4], "--")) return netns_then(argv + 2);
    if (argc >= 5 && !strcmp(argv[1], "join") && !strcmp(argv[3], "--")) return join_then(argv + 2);
    if (argc >= 8 && !strcmp(argv[1], "enter") && layer_words(argv + 6, 0)) return enter(argv + 2);
    if (argc >= 5 && !strcmp(argv[1], "own-pts") && layer_words(argv + 3, 1)) return own_pts_then(argv + 2);
    if (argc >= 5 && !strcmp(argv[1], "status") && !strcmp(argv[3], "--")) return status_then(argv + 2);
    if (argc >= 4 && !strcmp(argv[1], "ro-cgroups") && !strcmp(argv[2], "--")) return ro_cgroups_then(argv + 3);
    if (argc >= 5 && !strcmp(argv[1], "check-cwd") && !strcmp(argv[3], "--")) {
        struct stat want;
        run_checked(decided_word(argv[2], &want) ? &want : NULL, argv + 4);
    }
    fprintf(stderr, "usage: exechost-hostenter keep | seal MNT-FD USER-FD|- | enter MNT-FD USER-FD|- CWD-FD|- PTY-FD|- [DIR...] -- COMMAND... | "
                    "own-pts PTY-FD|- [DIR...] [+PATH...] -- COMMAND... | check-cwd CWD-FD|- -- COMMAND... | "
                    "status FD|- -- COMMAND... | join TASKS -- COMMAND... | ro-cgroups -- COMMAND... | "
                    "netkeep FWD|- PORT SOCK | netns NET-FD USER-FD|- -- COMMAND...\n");
    return 2;
}
