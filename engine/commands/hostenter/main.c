/* exechost-hostenter: a gateway-host command enters the kept host view (engine.commands.hostkeeper).
   This file: its modes and their words (below), the failure every mode reports the same way, and the
   dispatch from the first word to the mode. The modes live by concept: layers.c (the run's own mount
   namespace, devpts and fresh layers), confine.c (the command's last step), run.c (entering, keeping
   and reporting a run), net.c (network namespace, pids cgroup, read-only cgroups); hostenter.h holds
   what they share. Built with `cc -O2 -Wall -o exechost-hostenter every .c file of this directory`.

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

#include "hostenter.h"

void die(const char *what) {
    fprintf(stderr, "exechost: host view: %s: %s\n", what, strerror(errno));
    _exit(FAIL);
}

void terminal_signals(void (*how)(int)) {
    signal(SIGINT, how);
    signal(SIGQUIT, how);
    signal(SIGTSTP, how);
}

int ns_fd(const char *number) {
    char *end;
    long fd = strtol(number, &end, 10);
    if (*number == '\0' || *end != '\0' || fd < 0 || fd > INT_MAX) {
        errno = EBADF;
        die("not a namespace fd");
    }
    return (int)fd;
}

int optional_fd(const char *number) { return strcmp(number, "-") ? ns_fd(number) : -1; }

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
