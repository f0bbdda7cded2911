/* The run's own mount namespace: private, its /dev/pts a devpts of its own (its terminal made there), a
   user namespace of its own when not root, and the fresh per-run overlays of the home (own-pts and
   enter), read from /proc/self/mountinfo. */

#include "hostenter.h"

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
void own_pts(const char *pty) {
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
void own_user_namespace(void) {
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
void remount_ro_under(const char *top, int visible_only) {
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

/* Read-only, and nodev whatever the directory's mount says: the run's devices are the view's own /dev
   (bwrap's --dev), so a device node anywhere else opens nothing; a layer is the same in the kept view
   and in a run's own bwrap, whichever mount (bwrap's bind, the host's) it was made from. */
static unsigned long mount_attrs(const char *dir) {
    struct statvfs st;
    if (statvfs(dir, &st) < 0) die(dir);
    unsigned long attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV;
    if (st.f_flag & ST_NOSUID) attrs |= MOUNT_ATTR_NOSUID;
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
    char **since = dirs; /* the layers made since the table was read */
    for (char **d = dirs; *d; d++) {
        /* The next one's mounts as they are now: the table is read again only when a layer made since
           is below it (innermost first: its overlay is a mount the next one carries over). A layer
           elsewhere changed nothing below it. */
        int stale = 0;
        for (char **s = since; s < d && !stale; s++) stale = below(*s, *d);
        if (stale) {
            for (size_t i = 0; i < n; i++) free(m[i].point);
            free(m);
            m = read_mounts(&n);
            since = d;
        }
        layered(*d, empty, m, n);
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
int cwd_layered;
struct stat cwd_in_layers;
static int cwd_is_decided(int cwdfd, const char *cwd) {
    struct stat want, there;
    if (cwdfd < 0) return 0;
    if (fstat(cwdfd, &want) < 0) die("the decided directory's fd");
    return stat(cwd, &there) == 0 && there.st_dev == want.st_dev && there.st_ino == want.st_ino;
}

void layers_at_cwd(char **layers, int cwdfd, const char *cwd) {
    int same = layers[0] && cwd_is_decided(cwdfd, cwd);
    fresh_layers(layers);
    if (same && stat(cwd, &cwd_in_layers) == 0) cwd_layered = 1;
}

int own_pts_then(char **argv) {
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
