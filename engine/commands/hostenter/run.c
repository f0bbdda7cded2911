/* A run's processes: the keeper that holds the kept view, entering it (enter, seal), the `status` pid 1
   of a run's own bwrap, a bwrap whose setup failed started again (setup_retried), and the command's exit
   told as it was (report). */

#include "hostenter.h"

/* The run's `status FD` words right after bwrap's `--`, before its check-cwd (as engine.sessions.host_io
   finds them): the slot of FD, or NULL (no status helper: bwrap is run as it is, never again). */
char **status_slot(char **command) {
    for (char **w = command; *w; w++)
        if (w - command >= 2 && !strcmp(w[-2], "--") && !strcmp(w[0], "status") && w[1] && w[2] &&
            !strcmp(w[2], "--") && w[3] && !strcmp(w[3], w[-1]) && w[4] && !strcmp(w[4], "check-cwd"))
            return w + 1;
    return NULL;
}

int keep(void) {
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
int setup_retried(char **command, char **slot) {
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

int status_then(char **argv) {
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

int enter(char **argv) {
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
    entered_user_ns = entered_user;
    if (entered_user) close(userfd);
    /* and an IPC namespace of its own: SysV segments, semaphores and queues are in no directory (round 10 a);
       and a UTS namespace: the host's name is the machine's, not a run's to change (fresh round 18 a) */
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS) < 0) die("unshare");
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
    /* The old knobs of /proc that could act on the whole machine, read-only (a non-root gateway's run, in
       its kept user namespace, writes none of the host's: as before, they stay as procfs makes them). */
    if (!entered_user) cover_proc(proc_flags);
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
int seal(char **argv) {
    int userfd = strcmp(argv[1], "-") ? ns_fd(argv[1]) : -1;
    int mntfd = ns_fd(argv[0]);
    if (userfd >= 0 && setns(userfd, CLONE_NEWUSER) < 0) die("setns(user)");
    if (setns(mntfd, CLONE_NEWNS) < 0) die("setns(mnt)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("mount --make-rprivate /");
    return 0;
}
