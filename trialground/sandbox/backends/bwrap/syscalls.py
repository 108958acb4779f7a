"""System call numbers (x86_64 and the generic table aarch64 uses) and the sandbox's policy for each.

`ALLOWED`: what Python, bash, coreutils and ordinary programs (threads, asyncio, multiprocessing, sockets in
the sandbox's own network namespace) call. `REFUSED`: calls that reach kernel attack surface or other
processes, refused with EPERM so that a program sees a clear "not permitted". Every other number (calls
added to the kernel after this table, and obsolete ones) gets ENOSYS, as from an older kernel: libc then
falls back to an older call where it has one. `clone`, `ioctl` and `personality` are allowed only with
harmless arguments, `clone3` is ENOSYS (its flags are behind a pointer the filter cannot read); see
`seccomp.py`.
"""

from __future__ import annotations


def _names(text: str) -> list[str]:
    return text.split()


ALLOWED = _names("""
read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction rt_sigprocmask
rt_sigreturn pread64 pwrite64 readv writev access pipe select sched_yield mremap msync mincore madvise
shmget shmat shmctl dup dup2 pause nanosleep getitimer alarm setitimer getpid sendfile socket connect
accept sendto recvfrom sendmsg recvmsg shutdown bind listen getsockname getpeername socketpair setsockopt
getsockopt fork vfork execve exit wait4 kill uname semget semop semctl shmdt msgget msgsnd msgrcv msgctl
fcntl flock fsync fdatasync truncate ftruncate getdents getcwd chdir fchdir rename mkdir rmdir creat link
unlink symlink readlink chmod fchmod chown fchown lchown umask gettimeofday getrlimit getrusage sysinfo
times getuid getgid setuid setgid geteuid getegid setpgid getppid getpgrp setsid setreuid setregid
getgroups setgroups setresuid getresuid setresgid getresgid getpgid setfsuid setfsgid getsid capget capset
rt_sigpending rt_sigtimedwait rt_sigqueueinfo rt_sigsuspend sigaltstack utime mknod statfs fstatfs
getpriority setpriority sched_setparam sched_getparam sched_setscheduler sched_getscheduler
sched_get_priority_max sched_get_priority_min sched_rr_get_interval mlock munlock mlockall munlockall
prctl arch_prctl setrlimit sync gettid readahead setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr
listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr tkill time futex sched_setaffinity
sched_getaffinity io_setup io_destroy io_getevents io_submit io_cancel epoll_create remap_file_pages
getdents64 set_tid_address restart_syscall semtimedop fadvise64 timer_create timer_settime timer_gettime
timer_getoverrun timer_delete clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl
tgkill utimes mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify
mq_getsetattr waitid ioprio_set ioprio_get inotify_init inotify_add_watch inotify_rm_watch openat mkdirat
mknodat fchownat futimesat newfstatat unlinkat renameat linkat symlinkat readlinkat fchmodat faccessat
pselect6 ppoll set_robust_list get_robust_list splice tee sync_file_range vmsplice utimensat epoll_pwait
signalfd timerfd_create eventfd fallocate timerfd_settime timerfd_gettime accept4 signalfd4 eventfd2
epoll_create1 dup3 pipe2 inotify_init1 preadv pwritev rt_tgsigqueueinfo recvmmsg prlimit64 syncfs sendmmsg
getcpu sched_setattr sched_getattr renameat2 seccomp getrandom memfd_create execveat membarrier mlock2
copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq uretprobe
pidfd_send_signal pidfd_open close_range openat2 faccessat2 epoll_pwait2 futex_waitv cachestat fchmodat2
map_shadow_stack futex_wake futex_wait futex_requeue mseal setxattrat getxattrat listxattrat removexattrat
""")

REFUSED = _names("""
ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd process_madvise process_mrelease
mount umount2 pivot_root chroot open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr
open_tree_attr statmount listmount
bpf perf_event_open keyctl add_key request_key userfaultfd io_uring_setup io_uring_enter io_uring_register
unshare setns init_module finit_module delete_module reboot kexec_load kexec_file_load
open_by_handle_at name_to_handle_at swapon swapoff acct settimeofday clock_settime clock_adjtime adjtimex
quotactl quotactl_fd syslog vhangup iopl ioperm modify_ldt fanotify_init fanotify_mark lookup_dcookie
sethostname setdomainname move_pages migrate_pages memfd_secret set_mempolicy_home_node
""")

# x86_64: arch/x86/entry/syscalls/syscall_64.tbl (the common and 64-bit entries).
X86_64 = {
    "read": 0, "write": 1, "open": 2, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "poll": 7, "lseek": 8,
    "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14,
    "rt_sigreturn": 15, "ioctl": 16, "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "access": 21,
    "pipe": 22, "select": 23, "sched_yield": 24, "mremap": 25, "msync": 26, "mincore": 27, "madvise": 28,
    "shmget": 29, "shmat": 30, "shmctl": 31, "dup": 32, "dup2": 33, "pause": 34, "nanosleep": 35,
    "getitimer": 36, "alarm": 37, "setitimer": 38, "getpid": 39, "sendfile": 40, "socket": 41, "connect": 42,
    "accept": 43, "sendto": 44, "recvfrom": 45, "sendmsg": 46, "recvmsg": 47, "shutdown": 48, "bind": 49,
    "listen": 50, "getsockname": 51, "getpeername": 52, "socketpair": 53, "setsockopt": 54, "getsockopt": 55,
    "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "exit": 60, "wait4": 61, "kill": 62, "uname": 63,
    "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
    "msgctl": 71, "fcntl": 72, "flock": 73, "fsync": 74, "fdatasync": 75, "truncate": 76, "ftruncate": 77,
    "getdents": 78, "getcwd": 79, "chdir": 80, "fchdir": 81, "rename": 82, "mkdir": 83, "rmdir": 84,
    "creat": 85, "link": 86, "unlink": 87, "symlink": 88, "readlink": 89, "chmod": 90, "fchmod": 91,
    "chown": 92, "fchown": 93, "lchown": 94, "umask": 95, "gettimeofday": 96, "getrlimit": 97,
    "getrusage": 98, "sysinfo": 99, "times": 100, "ptrace": 101, "getuid": 102, "syslog": 103, "getgid": 104,
    "setuid": 105, "setgid": 106, "geteuid": 107, "getegid": 108, "setpgid": 109, "getppid": 110,
    "getpgrp": 111, "setsid": 112, "setreuid": 113, "setregid": 114, "getgroups": 115, "setgroups": 116,
    "setresuid": 117, "getresuid": 118, "setresgid": 119, "getresgid": 120, "getpgid": 121, "setfsuid": 122,
    "setfsgid": 123, "getsid": 124, "capget": 125, "capset": 126, "rt_sigpending": 127,
    "rt_sigtimedwait": 128, "rt_sigqueueinfo": 129, "rt_sigsuspend": 130, "sigaltstack": 131, "utime": 132,
    "mknod": 133, "personality": 135, "statfs": 137, "fstatfs": 138, "getpriority": 140,
    "setpriority": 141, "sched_setparam": 142, "sched_getparam": 143, "sched_setscheduler": 144,
    "sched_getscheduler": 145, "sched_get_priority_max": 146, "sched_get_priority_min": 147,
    "sched_rr_get_interval": 148, "mlock": 149, "munlock": 150, "mlockall": 151, "munlockall": 152,
    "vhangup": 153, "modify_ldt": 154, "pivot_root": 155, "prctl": 157, "arch_prctl": 158, "adjtimex": 159,
    "setrlimit": 160, "chroot": 161, "sync": 162, "acct": 163, "settimeofday": 164, "mount": 165,
    "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171,
    "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176, "quotactl": 179, "gettid": 186,
    "readahead": 187, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "getxattr": 191,
    "lgetxattr": 192, "fgetxattr": 193, "listxattr": 194, "llistxattr": 195, "flistxattr": 196,
    "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "tkill": 200, "time": 201, "futex": 202,
    "sched_setaffinity": 203, "sched_getaffinity": 204, "io_setup": 206, "io_destroy": 207,
    "io_getevents": 208, "io_submit": 209, "io_cancel": 210, "lookup_dcookie": 212, "epoll_create": 213,
    "remap_file_pages": 216, "getdents64": 217, "set_tid_address": 218, "restart_syscall": 219,
    "semtimedop": 220, "fadvise64": 221, "timer_create": 222, "timer_settime": 223, "timer_gettime": 224,
    "timer_getoverrun": 225, "timer_delete": 226, "clock_settime": 227, "clock_gettime": 228,
    "clock_getres": 229, "clock_nanosleep": 230, "exit_group": 231, "epoll_wait": 232, "epoll_ctl": 233,
    "tgkill": 234, "utimes": 235, "mbind": 237, "set_mempolicy": 238, "get_mempolicy": 239, "mq_open": 240,
    "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
    "kexec_load": 246, "waitid": 247, "add_key": 248, "request_key": 249, "keyctl": 250, "ioprio_set": 251,
    "ioprio_get": 252, "inotify_init": 253, "inotify_add_watch": 254, "inotify_rm_watch": 255,
    "migrate_pages": 256, "openat": 257, "mkdirat": 258, "mknodat": 259, "fchownat": 260, "futimesat": 261,
    "newfstatat": 262, "unlinkat": 263, "renameat": 264, "linkat": 265, "symlinkat": 266, "readlinkat": 267,
    "fchmodat": 268, "faccessat": 269, "pselect6": 270, "ppoll": 271, "unshare": 272, "set_robust_list": 273,
    "get_robust_list": 274, "splice": 275, "tee": 276, "sync_file_range": 277, "vmsplice": 278,
    "move_pages": 279, "utimensat": 280, "epoll_pwait": 281, "signalfd": 282, "timerfd_create": 283,
    "eventfd": 284, "fallocate": 285, "timerfd_settime": 286, "timerfd_gettime": 287, "accept4": 288,
    "signalfd4": 289, "eventfd2": 290, "epoll_create1": 291, "dup3": 292, "pipe2": 293, "inotify_init1": 294,
    "preadv": 295, "pwritev": 296, "rt_tgsigqueueinfo": 297, "perf_event_open": 298, "recvmmsg": 299,
    "fanotify_init": 300, "fanotify_mark": 301, "prlimit64": 302, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "syncfs": 306, "sendmmsg": 307, "setns": 308,
    "getcpu": 309, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
    "sched_setattr": 314, "sched_getattr": 315, "renameat2": 316, "seccomp": 317, "getrandom": 318,
    "memfd_create": 319, "kexec_file_load": 320, "bpf": 321, "execveat": 322, "userfaultfd": 323,
    "membarrier": 324, "mlock2": 325, "copy_file_range": 326, "preadv2": 327, "pwritev2": 328,
    "pkey_mprotect": 329, "pkey_alloc": 330, "pkey_free": 331, "statx": 332, "io_pgetevents": 333,
    "rseq": 334, "uretprobe": 335,
    **{name: 424 + i for i, name in enumerate((
        "pidfd_send_signal", "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree",
        "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "pidfd_open", "clone3", "close_range",
        "openat2", "pidfd_getfd", "faccessat2", "process_madvise", "epoll_pwait2", "mount_setattr",
        "quotactl_fd", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
        "memfd_secret", "process_mrelease", "futex_waitv", "set_mempolicy_home_node", "cachestat",
        "fchmodat2", "map_shadow_stack", "futex_wake", "futex_wait", "futex_requeue", "statmount",
        "listmount", "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules", "mseal", "setxattrat",
        "getxattrat", "listxattrat", "removexattrat", "open_tree_attr",
    ))},
}  # fmt: skip

# The generic table (include/uapi/asm-generic/unistd.h) that aarch64 uses; it has no legacy calls (open,
# stat, fork, pipe, ...): those names are simply absent.
_GENERIC_ORDER = _names("""
io_setup io_destroy io_submit io_cancel io_getevents setxattr lsetxattr fsetxattr getxattr lgetxattr
fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr getcwd lookup_dcookie
eventfd2 epoll_create1 epoll_ctl epoll_pwait dup dup3 fcntl inotify_init1 inotify_add_watch
inotify_rm_watch ioctl ioprio_set ioprio_get flock mknodat mkdirat unlinkat symlinkat linkat renameat
umount2 mount pivot_root nfsservctl statfs fstatfs truncate ftruncate fallocate faccessat chdir fchdir
chroot fchmod fchmodat fchownat fchown openat close vhangup pipe2 quotactl getdents64 lseek read write
readv writev pread64 pwrite64 preadv pwritev sendfile pselect6 ppoll signalfd4 vmsplice splice tee
readlinkat newfstatat fstat sync fsync fdatasync sync_file_range timerfd_create timerfd_settime
timerfd_gettime utimensat acct capget capset personality exit exit_group waitid set_tid_address unshare
futex set_robust_list get_robust_list nanosleep getitimer setitimer kexec_load init_module delete_module
timer_create timer_gettime timer_getoverrun timer_settime timer_delete clock_settime clock_gettime
clock_getres clock_nanosleep syslog ptrace sched_setparam sched_setscheduler sched_getscheduler
sched_getparam sched_setaffinity sched_getaffinity sched_yield sched_get_priority_max
sched_get_priority_min sched_rr_get_interval restart_syscall kill tkill tgkill sigaltstack rt_sigsuspend
rt_sigaction rt_sigprocmask rt_sigpending rt_sigtimedwait rt_sigqueueinfo rt_sigreturn setpriority
getpriority reboot setregid setgid setreuid setuid setresuid getresuid setresgid getresgid setfsuid
setfsgid times setpgid getpgid getsid setsid getgroups setgroups uname sethostname setdomainname
getrlimit setrlimit getrusage umask prctl getcpu gettimeofday settimeofday adjtimex getpid getppid getuid
geteuid getgid getegid gettid sysinfo mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify
mq_getsetattr msgget msgctl msgrcv msgsnd semget semctl semtimedop semop shmget shmctl shmat shmdt socket
socketpair bind listen accept connect getsockname getpeername sendto recvfrom setsockopt getsockopt
shutdown sendmsg recvmsg readahead brk munmap mremap add_key request_key keyctl clone execve mmap
fadvise64 swapon swapoff mprotect msync mlock munlock mlockall munlockall mincore madvise
remap_file_pages mbind get_mempolicy set_mempolicy migrate_pages move_pages rt_tgsigqueueinfo
perf_event_open accept4 recvmmsg
""")
AARCH64 = {name: nr for nr, name in enumerate(_GENERIC_ORDER)}
AARCH64.update(
    {
        name: 260 + i
        for i, name in enumerate(
            _names("""
wait4 prlimit64 fanotify_init fanotify_mark name_to_handle_at open_by_handle_at clock_adjtime syncfs setns
sendmmsg process_vm_readv process_vm_writev kcmp finit_module sched_setattr sched_getattr renameat2 seccomp
getrandom memfd_create bpf execveat userfaultfd membarrier mlock2 copy_file_range preadv2 pwritev2
pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq
""")
        )
    }
)
AARCH64["kexec_file_load"] = 294
AARCH64.update({name: nr for name, nr in X86_64.items() if nr >= 424})  # one numbering for both from 424
