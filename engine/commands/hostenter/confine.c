/* The command's last step, in every mode that runs it: its cwd checked against the decided directory,
   then confined past the namespaces (a session keyring of its own, the seccomp filter, landlock's
   abstract-socket scope) and its terminal signals restored. */

#include "hostenter.h"

/* The decided directory's identity, and its fd closed (-1: none, false). */
int decided(int cwdfd, struct stat *want) {
    if (cwdfd < 0) return 0;
    if (fstat(cwdfd, want) < 0) die("the decided directory's fd");
    close(cwdfd);
    if (cwd_layered) *want = cwd_in_layers;
    return 1;
}

/* CWD as check-cwd takes it: an fd, "-", or "@DEV:INO", the identity own-pts found (layers_at_cwd). */
int decided_word(const char *word, struct stat *want) {
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
   ccache), an eCryptfs or AFS key (fresh round 10 a). The new one holds nothing and links nothing; the
   seccomp filter below then refuses the command every keyring call, so the account's own keyrings (@u,
   @us, the persistent one) are out of its reach too. */
#define KEYCTL_JOIN_SESSION_KEYRING 1
static void own_session_keyring(void) {
    if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS) die("keyctl join");
}

/* A seccomp filter installed after the fresh session keyring is joined, refusing what reaches past the
   run's namespaces and view; every other syscall is allowed. Its rules are the sandboxes' own
   (engine/sandbox/seccomprules.py, HOST_ part), in rules.h as engine/sandbox/seccomphost.py writes it:
   - keyctl, add_key, request_key EPERM: the kernel's key store is the account's, in no namespace:
     keyctl(KEYCTL_GET_PERSISTENT) handed a run the persistent keyring (fresh round 11 a), and the user
     keyrings @u and @us are reached by their special ids and linked into any session keyring (fresh round
     14 c), so a run makes no keyring call at all, whatever operation or keyring a call names;
   - io_uring_setup EPERM (as Docker refuses it): its socket operation makes a socket no filter sees;
   - a mode with a set-id bit EPERM wherever a call gives one (chmod, fchmod, fchmodat, fchmodat2, open,
     openat, creat, mknod, mknodat), openat2 ENOSYS (its mode is in a struct no filter reads; libc and
     runtimes fall back to openat): a root gateway's run left a setuid copy of a program, root's, in its
     hostWritable dir on the host (fresh round 17 a), as the sandboxes refuse since round 8 q;
   - socket() only for the families a network namespace confines (unix, inet, inet6, netlink), others
     EAFNOSUPPORT: AF_VSOCK ignores the agent's own network namespace and listened on, and reached, the
     hypervisor's side with no proxy and no ask (fresh round 13 b).
   A syscall of another architecture (x32, i386 on x86-64) is refused outright. */
#include "rules.h"
#if defined(__x86_64__)
#define HOST_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define HOST_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "a mode's and a family's low word are read at their argument's offset: little-endian only"
#endif
#define MAX_FILTER 256
#define LOW_WORD(n) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (n)))

static void emit(struct sock_filter *code, size_t *len, struct sock_filter insn) {
    if (*len >= MAX_FILTER) {
        errno = E2BIG;
        die("seccomp filter");
    }
    code[(*len)++] = insn;
}

static void refuse_beyond_namespaces(void) {
#ifdef HOST_AUDIT_ARCH
    struct sock_filter code[MAX_FILTER];
    size_t n = 0;
    const size_t families = sizeof HOST_SOCKET_FAMILIES / sizeof HOST_SOCKET_FAMILIES[0];
    emit(code, &n, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
    emit(code, &n, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, HOST_AUDIT_ARCH, 1, 0));
    emit(code, &n, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
    emit(code, &n, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
#if defined(__x86_64__)
    emit(code, &n, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
    emit(code, &n, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
#endif
    for (size_t i = 0; i < sizeof HOST_RULES / sizeof HOST_RULES[0]; i++) {
        const struct host_rule *r = &HOST_RULES[i];
        uint32_t refuse = SECCOMP_RET_ERRNO | (uint32_t)r->err;
        if (r->mode_arg < 0) {  /* nr == this: refused */
            emit(code, &n, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)r->nr, 0, 1));
            emit(code, &n, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, refuse));
            continue;
        }
        /* nr == this: its mode's low word (mode_t is 32 bits) with a set-id bit refused, else allowed */
        emit(code, &n, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)r->nr, 0, 4));
        emit(code, &n, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, LOW_WORD(r->mode_arg)));
        emit(code, &n, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, HOST_SET_ID_BITS, 0, 1));
        emit(code, &n, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, refuse));
        emit(code, &n, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    }
    /* socket: the family (an int: the low word) one of HOST_SOCKET_FAMILIES, else EAFNOSUPPORT; last, so
       each family's match and a call that is not socket() land on the final allow */
    emit(code, &n, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, (uint8_t)(families + 2)));
    emit(code, &n, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, LOW_WORD(0)));
    for (size_t i = 0; i < families; i++)
        emit(code, &n, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)HOST_SOCKET_FAMILIES[i],
                                                    (uint8_t)(families - i), 0));
    emit(code, &n, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT));
    emit(code, &n, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    struct sock_fprog prog = {.len = (unsigned short)n, .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) die("seccomp");
#endif
}

int entered_user_ns;

/* As bwrap's --proc does, the old knobs of /proc that could act on the whole machine, read-only; but
   covered whenever they exist and are not read-only yet, not (as bwrap) when access(W_OK) says they are
   writable: procfs answers EACCES for /proc/sys itself even to root, whose files under it are writable, so
   that test skipped the cover and a root gateway's run opened kernel.core_pattern for writing (fresh round
   17 a). A cover that cannot be made fails the run: nothing runs with the host's sysctls writable. */
void cover_proc(unsigned long flags) {
    static const char *const cover[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"};
    for (size_t i = 0; i < sizeof cover / sizeof *cover; i++) {
        struct statvfs fs;
        if (statvfs(cover[i], &fs) < 0) {
            if (errno == ENOENT) continue;
            die(cover[i]);
        }
        if (fs.f_flag & ST_RDONLY) continue; /* (bwrap's --proc covered it) */
        if (mount(cover[i], cover[i], NULL, MS_BIND | MS_REC, NULL) < 0 ||
            mount(NULL, cover[i], NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | flags, NULL) < 0)
            die(cover[i]);
    }
}

/* A root gateway's command (no user namespace of its own: root's capabilities are the host's) keeps only
   the short list a root user's ordinary shell work needs (HOST_ROOT_KEPT_CAPS, engine/commands/rootcaps.py
   says why each), every other capability gone from the bounding, effective, permitted, inheritable and
   ambient sets: what is allowed, not a list of what is refused, so one the kernel adds later is gone too.
   Round 17 a dropped CAP_SETFCAP and CAP_MKNOD; the rest of root's set let a run `umount -l` the view's
   covers (CAP_SYS_ADMIN), rename the machine or set its clock (CAP_SYS_TIME), fresh round 18 a. Out of the
   bounding set no exec gives one back (root's exec is given the bounding set; no_new_privs is set). In
   either mode: `enter`, or `check-cwd` in a run's own bwrap (after cover_proc, which mounts). */
static void keep_listed_capabilities(void) {
    uint32_t kept[_LINUX_CAPABILITY_U32S_3] = {0};
    for (size_t i = 0; i < sizeof HOST_ROOT_KEPT_CAPS / sizeof *HOST_ROOT_KEPT_CAPS; i++)
        kept[HOST_ROOT_KEPT_CAPS[i] / 32] |= 1U << (HOST_ROOT_KEPT_CAPS[i] % 32);
    for (int cap = 0;; cap++) {
        int held = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (held < 0 && errno == EINVAL) break; /* past the kernel's last capability */
        if (held < 0) die("capability bounding set");
        int keep = cap < 32 * _LINUX_CAPABILITY_U32S_3 && (kept[cap / 32] & (1U << (cap % 32)));
        if (held && !keep && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) die("capability bounding set");
    }
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &head, data) < 0) die("capget");
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++) {
        data[i].effective &= kept[i];
        data[i].permitted &= kept[i];
        data[i].inheritable &= kept[i];
    }
    if (syscall(SYS_capset, &head, data) < 0) die("capset");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) die("ambient caps");
}

/* The command's last step: its cwd is the decided directory (`want`, NULL: no check), the terminal's
   signals are its own again; then ARGV. */
void run_checked(const struct stat *want, char **command) {
    if (want) {
        struct stat here;
        if (stat(".", &here) < 0 || here.st_dev != want->st_dev || here.st_ino != want->st_ino) {
            fprintf(stderr, "exechost: approval-stale: the working directory changed since it was approved\n");
            _exit(FAIL);
        }
    }
    if (geteuid() == 0 && !entered_user_ns) {
        /* a root gateway's: in its own bwrap (check-cwd) /proc/sys is not covered yet; in `enter` it is */
        cover_proc(MS_NOSUID | MS_NODEV | MS_NOEXEC);
        keep_listed_capabilities();
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
