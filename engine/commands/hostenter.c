/* exechost-hostenter: a gateway-host command enters the kept host view (engine.commands.hostkeeper).

   keep                       the keeper's program, run by bwrap inside the prepared view: prints its pid,
                              then holds the namespaces until its stdin closes (the gateway that made it is
                              gone, or made a new one).
   enter PID MNT USER -- ARGV run ARGV in the mount namespace of keeper PID (entered only when its inode is
                              MNT; its user namespace first when USER is not "-"), in a PID namespace of its
                              own with its own /proc: the gateway's and the session hosts' /proc/<pid>/root,
                              cwd and fd are not there to follow.

   Three processes, as bwrap has them: this one (in the caller's PID namespace, the one its spawner waits
   for and signals), pid 1 of the new namespace (reaps; when it exits the kernel ends everything left in
   the namespace), and the command as pid 2 (a pid 1 would ignore ^C). This process and pid 1 ignore the
   terminal's INT/QUIT/TSTP so they reach the command and leave its parents waiting; the command gets them
   back at their defaults, no_new_privs set. The command's exit is told as it was: its code as the code,
   its signal by dying of that signal (never 128+n, which a command can exit with itself). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

static int open_ns(const char *pid, const char *kind, const char *ino) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/ns/%s", pid, kind);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) die("the kept namespace is gone");
    if ((unsigned long long)st.st_ino != strtoull(ino, NULL, 10)) {
        errno = ESRCH; /* another process has that pid now */
        die("the kept namespace is gone");
    }
    return fd;
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

static int enter(char **argv) {
    const char *pid = argv[0], *mnt = argv[1], *user = argv[2];
    char **command = argv + 4;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) die("getcwd");
    int userfd = strcmp(user, "-") ? open_ns(pid, "user", user) : -1;
    int mntfd = open_ns(pid, "mnt", mnt);
    if (userfd >= 0 && setns(userfd, CLONE_NEWUSER) < 0) die("setns(user)");
    if (setns(mntfd, CLONE_NEWNS) < 0) die("setns(mnt)");
    close(mntfd);
    if (userfd >= 0) close(userfd);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) < 0) die("unshare");
    terminal_signals(SIG_IGN);
    int told[2];
    if (pipe2(told, O_CLOEXEC) < 0) die("pipe");
    pid_t init = fork();
    if (init < 0) die("fork");
    if (init > 0) {
        close(told[1]);
        int status, child;
        while (waitpid(init, &status, 0) < 0)
            if (errno != EINTR) die("waitpid");
        ssize_t n;
        while ((n = read(told[0], &child, sizeof child)) < 0 && errno == EINTR) {}
        report(n == (ssize_t)sizeof child ? child : status);
    }
    /* pid 1: a view of its own (mounts made here stay here), /proc of this namespace. */
    close(told[0]);
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) die("mount --make-rslave /");
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
    pid_t cmd = fork();
    if (cmd < 0) die("fork");
    if (cmd == 0) {
        close(told[1]);
        terminal_signals(SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
        if (chdir(cwd) < 0) die(cwd);
        execvp(command[0], command);
        fprintf(stderr, "exechost: %s: %s\n", command[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    for (;;) {
        int status;
        pid_t done = waitpid(-1, &status, 0);
        if (done < 0 && errno == EINTR) continue;
        if (done < 0) die("waitpid");
        if (done == cmd) {
            ssize_t w = write(told[1], &status, sizeof status);
            (void)w;
            _exit(0);
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "keep")) return keep();
    if (argc >= 7 && !strcmp(argv[1], "enter") && !strcmp(argv[5], "--")) return enter(argv + 2);
    fprintf(stderr, "usage: exechost-hostenter keep | enter PID MNT USER|- -- COMMAND...\n");
    return 2;
}
