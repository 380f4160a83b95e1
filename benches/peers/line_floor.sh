#!/usr/bin/env bash
# line_floor: the hardware floor of an intra-node latency on this host, the one-way time
# of a bare cache-line ping-pong between two processes (no library, no queue, no
# completion). On this 2-vCPU VM it depends on where the hypervisor places the two vCPUs
# (about 0.026, 0.055 or 0.2 us, changing from one second to the next); measured next to
# a latency it tells which placement state that measurement ran in.
#
#   benches/peers/line_floor.sh [-I iters]   # timed exchanges, default 50000
#   benches/peers/line_floor.sh --build      # only compile, print the binary's path
#
# The C program below is compiled once (needs cc) into $LINE_FLOOR_DIR (default:
# <repo>/target/peers). One run maps a shared anonymous page and forks. The parent
# stores i into line A and spins (PAUSE) until line B holds i; the child spins until A
# holds i and stores i into B. A and B are 64 bytes apart, so each exchange moves two
# cache lines between the cores. 1000 exchanges warm up untimed, then `iters` exchanges
# run between two CLOCK_MONOTONIC reads in the parent.
#
# Output: one JSON line {"test":"line_floor","iters":..,"usec_per_xfer":..}, where
# usec_per_xfer is the one-way time, elapsed / iters / 2, in microseconds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="${LINE_FLOOR_DIR:-$repo/target/peers}"
bin="$dir/line_floor"
# shellcheck source=embedded_c.sh
. "$here/embedded_c.sh"

build() {
    build_embedded line_floor "${BASH_SOURCE[0]}" "$dir"
}

embedded_main "$bin" build "$@"

# The C source lives below `exit`/`exec`: bash never reads it.
cat >/dev/null <<'C_SOURCE'
// ---- line_floor.c begin
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 1000L
#define LINE 64
/* Spins between liveness checks of the peer: rare enough to stay out of the measured
 * path, frequent enough that a dead peer ends the run within milliseconds. */
#define CHECK_EVERY (1UL << 20)

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}

static inline uint64_t load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void store(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Spin until *p == want. Returns 0, or -1 when `alive` reports the peer gone. */
static int wait_for(const uint64_t *p, uint64_t want, int (*alive)(void))
{
	unsigned long spins = 0;
	while (load(p) != want) {
		cpu_relax();
		if (++spins % CHECK_EVERY == 0 && !alive())
			return -1;
	}
	return 0;
}

static pid_t child_pid;
static pid_t parent_pid;

/* WNOWAIT leaves a dead child unreaped, so its pid stays ours for the kill/waitpid. */
static int child_alive(void)
{
	siginfo_t info;
	memset(&info, 0, sizeof info);
	return waitid(P_PID, (id_t)child_pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	       info.si_pid == 0;
}

static int parent_alive(void)
{
	return getppid() == parent_pid;
}

static void fail_parent(const char *what)
{
	fprintf(stderr, "line_floor: %s\n", what);
	kill(child_pid, SIGKILL);
	waitpid(child_pid, NULL, 0);
	exit(2);
}

int main(int argc, char **argv)
{
	long iters = 50000;
	int c;
	while ((c = getopt(argc, argv, "I:h")) != -1) {
		switch (c) {
		case 'I': {
			char *end;
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 1 || v > INT64_MAX - WARMUP) {
				fprintf(stderr, "line_floor: bad -I '%s' (a positive integer)\n",
					optarg);
				return 1;
			}
			iters = v;
			break;
		}
		default:
			fprintf(stderr, "usage: line_floor [-I iters]\n");
			return c == 'h' ? 0 : 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "line_floor: unexpected argument '%s'\n", argv[optind]);
		return 1;
	}

	uint8_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			     -1, 0);
	if (page == MAP_FAILED) {
		perror("line_floor: mmap");
		return 2;
	}
	/* The page is zeroed and page-aligned, so A and B start lines of their own. */
	uint64_t *a = (uint64_t *)page;
	uint64_t *b = (uint64_t *)(page + LINE);
	uint64_t total = (uint64_t)iters + WARMUP;

	parent_pid = getpid();
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("line_floor: fork");
		return 2;
	}
	if (pid == 0) {
		/* The child dies with the parent; the getppid check closes the race of the
		 * parent dying before prctl took effect. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || !parent_alive())
			_exit(3);
		for (uint64_t i = 1; i <= total; i++) {
			if (wait_for(a, i, parent_alive))
				_exit(3);
			store(b, i);
		}
		_exit(0);
	}
	child_pid = pid;

	uint64_t i = 1;
	for (; i <= (uint64_t)WARMUP; i++) {
		store(a, i);
		if (wait_for(b, i, child_alive))
			fail_parent("child process died");
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (; i <= total; i++) {
		store(a, i);
		if (wait_for(b, i, child_alive))
			fail_parent("child process died");
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);

	int status = 0;
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "line_floor: child process failed (status %d)\n", status);
		return 2;
	}
	double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
	printf("{\"test\":\"line_floor\",\"iters\":%ld,\"usec_per_xfer\":%.5f}\n", iters,
	       ns / (double)iters / 2.0 / 1000.0);
	return 0;
}
// ---- line_floor.c end
C_SOURCE
