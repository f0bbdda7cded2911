/* What the parts of exechost-hostenter share (main.c says what it is and its modes): the headers, the
   exit of a run that could not enter its view, and the functions one part calls in another. */

#ifndef EXECHOST_HOSTENTER_H
#define EXECHOST_HOSTENTER_H

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
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define FAIL 126 /* the host view could not be entered: nothing of the command ran */

#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define MAX_LAYERED 64 /* directories made an overlay per run */

/* main.c: the words' fds, and the failure of a run that could not enter its view */
void die(const char *what) __attribute__((noreturn));
void terminal_signals(void (*how)(int));
int ns_fd(const char *number);
int optional_fd(const char *number);

/* layers.c */
void own_user_namespace(void);
void remount_ro_under(const char *top, int visible_only);
void own_pts(const char *pty);
void layers_at_cwd(char **layers, int cwdfd, const char *cwd);
extern int cwd_layered;              /* the decided directory's identity in the layers, when found */
extern struct stat cwd_in_layers;
int own_pts_then(char **argv);

/* confine.c */
int decided(int cwdfd, struct stat *want);
int decided_word(const char *word, struct stat *want);
void run_checked(const struct stat *want, char **command) __attribute__((noreturn));
void cover_proc(unsigned long flags);
extern int entered_user_ns; /* `enter` joined a kept user namespace (a non-root gateway's) */

/* run.c */
char **status_slot(char **command);
int setup_retried(char **command, char **slot);
int keep(void);
int status_then(char **argv);
int enter(char **argv);
int seal(char **argv);

/* net.c */
int netkeep(char **argv);
int netns_then(char **argv);
int join_then(char **argv);
int ro_cgroups_then(char **argv);

#endif
