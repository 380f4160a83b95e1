#!/usr/bin/env bash
# line_floor: the hardware floor of an intra-node latency on this host, the one-way time
# of a bare cache-line ping-pong between two processes (no library, no queue, no
# completion). On this 2-vCPU VM it depends on where the hypervisor places the two vCPUs
# (about 0.026, 0.055 or 0.2 us, changing from one second to the next); measured next to
# a latency it tells which placement state that measurement ran in.
#
#   benches/peers/line_floor.sh [-I iters] [-R cells] [-W steps]
#                                            # timed exchanges, default 50000
#   benches/peers/line_floor.sh --build      # only compile, print the binary's path
#
# The C program below is compiled once (needs cc) into $LINE_FLOOR_DIR (default:
# <repo>/target/peers). One run maps a shared anonymous page and forks. The parent
# stores i into line A and spins (PAUSE) until line B holds i; the child spins until A
# holds i and stores i into B. A and B are 64 bytes apart, so each exchange moves two
# cache lines between the cores. 1000 exchanges warm up untimed, then `iters` exchanges
# run between two CLOCK_MONOTONIC reads in the parent.
#
# -R cells (a power of two) exchanges messages the way the shm provider's small-message
# lane does instead: two rings of `cells` 64-byte cells, one each way; a message is an
# 8-byte tag and 8 bytes of payload stored into the next cell, then the cell's stamp word
# (release); the receiver spins on its ring's next stamp, prefetches the cell after it,
# reads tag and payload, publishes its head in a line of its own, and answers. It tells
# what the provider's memory traffic costs next to the bare line floor.
#
# -W steps adds, on each side after each receipt, a chain of `steps` dependent
# multiply-adds (about 4 cycles each on x86-64) before the answer: a stand-in for a
# library's software of known length, to see how cycles on the path turn into latency.
#
# Output: one JSON line {"test":"line_floor","iters":..,"usec_per_xfer":..} ("ring_floor",
# with "cells" and "work", under -R; "work" under -W), where usec_per_xfer is the one-way
# time, elapsed / iters / 2, in microseconds.
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

/* Spin until *p == want, prefetching `next` (if not NULL) on every look. Returns 0, or -1
 * when `alive` reports the peer gone. Inline, so the line mode's NULL costs no test. */
static inline int wait_for(const uint64_t *p, uint64_t want, const void *next,
			   int (*alive)(void))
{
	unsigned long spins = 0;
	for (;;) {
		uint64_t v = load(p);
		if (next)
			__builtin_prefetch(next);
		if (v == want)
			break;
		cpu_relax();
		if (++spins % CHECK_EVERY == 0 && !alive())
			return -1;
	}
	return 0;
}

/* One direction of the exchange: in line mode a single line, in ring mode (-R) a ring of
 * cells and the line its receiver publishes its head in. */
struct way {
	uint8_t *cells;
	uint64_t *head;
};

static uint64_t ring_mask; /* cells - 1 under -R; unused in line mode */
static int ring_mode;
static long work_steps;
static volatile uint64_t work_sink;

static uint8_t *cell(const struct way *w, uint64_t i)
{
	return w->cells + (size_t)(i & ring_mask) * LINE;
}

/* Message i on `w`: the line's value, or tag and payload into cell i, then its stamp. */
static void send_msg(const struct way *w, uint64_t i)
{
	if (!ring_mode) {
		store((uint64_t *)w->cells, i);
		return;
	}
	uint8_t *c = cell(w, i);
	uint64_t tag = 0x2a;
	memcpy(c + 8, &tag, sizeof tag);
	memcpy(c + 16, &i, sizeof i);
	store((uint64_t *)c, i);
}

/* Waits for message i on `w`, then runs the -W chain. Returns 0, or -1 when `alive`
 * reports the peer gone or the payload is not the one sent. */
static int wait_msg(const struct way *w, uint64_t i, int (*alive)(void))
{
	uint64_t got = i;
	if (!ring_mode) {
		if (wait_for((const uint64_t *)w->cells, i, NULL, alive))
			return -1;
	} else {
		const uint8_t *c = cell(w, i);
		if (wait_for((const uint64_t *)c, i, cell(w, i + 1), alive))
			return -1;
		uint64_t tag;
		memcpy(&tag, c + 8, sizeof tag);
		memcpy(&got, c + 16, sizeof got);
		store(w->head, i);
		got += tag - 0x2a;
	}
	if (work_steps) {
		/* A chain the compiler cannot fold: each step needs the one before. */
		uint64_t x = got;
		for (long k = 0; k < work_steps; k++)
			x = x * 0x9E3779B97F4A7C15ULL + (uint64_t)k;
		work_sink = x;
	}
	return got == i ? 0 : -1;
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

/* Parses option `opt`'s argument as an integer in [lo, hi]; exits with a message if not. */
static long parse_long(int opt, const char *arg, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < lo || v > hi) {
		fprintf(stderr, "line_floor: bad -%c '%s' (an integer from %ld to %ld)\n", opt,
			arg, lo, hi);
		exit(1);
	}
	return v;
}

int main(int argc, char **argv)
{
	long iters = 50000, cells = 0;
	int c;
	while ((c = getopt(argc, argv, "I:R:W:h")) != -1) {
		switch (c) {
		case 'I':
			iters = parse_long(c, optarg, 1, INT64_MAX - WARMUP);
			break;
		case 'R':
			cells = parse_long(c, optarg, 2, 1L << 20);
			if (cells & (cells - 1)) {
				fprintf(stderr, "line_floor: -R %ld is not a power of two\n", cells);
				return 1;
			}
			break;
		case 'W':
			work_steps = parse_long(c, optarg, 0, 1000000);
			break;
		default:
			fprintf(stderr, "usage: line_floor [-I iters] [-R cells] [-W steps]\n");
			return c == 'h' ? 0 : 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "line_floor: unexpected argument '%s'\n", argv[optind]);
		return 1;
	}
	ring_mode = cells > 0;
	ring_mask = ring_mode ? (uint64_t)cells - 1 : 0;

	/* The first page holds the two lines (line mode) or the two heads (ring mode), 64
	 * bytes apart; the rings follow it. The mapping is zeroed and page-aligned, so each
	 * starts lines of its own. */
	size_t size = 4096 + (size_t)2 * (size_t)cells * LINE;
	uint8_t *page = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			     -1, 0);
	if (page == MAP_FAILED) {
		perror("line_floor: mmap");
		return 2;
	}
	struct way to_child = {page, (uint64_t *)page};
	struct way to_parent = {page + LINE, (uint64_t *)(page + LINE)};
	if (ring_mode) {
		to_child.cells = page + 4096;
		to_parent.cells = page + 4096 + (size_t)cells * LINE;
	}
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
			if (wait_msg(&to_child, i, parent_alive))
				_exit(3);
			send_msg(&to_parent, i);
		}
		_exit(0);
	}
	child_pid = pid;

	uint64_t i = 1;
	for (; i <= (uint64_t)WARMUP; i++) {
		send_msg(&to_child, i);
		if (wait_msg(&to_parent, i, child_alive))
			fail_parent("child process died or answered wrong");
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (; i <= total; i++) {
		send_msg(&to_child, i);
		if (wait_msg(&to_parent, i, child_alive))
			fail_parent("child process died or answered wrong");
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);

	int status = 0;
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "line_floor: child process failed (status %d)\n", status);
		return 2;
	}
	double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
	double usec = ns / (double)iters / 2.0 / 1000.0;
	if (ring_mode)
		printf("{\"test\":\"ring_floor\",\"iters\":%ld,\"cells\":%ld,\"work\":%ld,"
		       "\"usec_per_xfer\":%.5f}\n",
		       iters, cells, work_steps, usec);
	else if (work_steps)
		printf("{\"test\":\"line_floor\",\"iters\":%ld,\"work\":%ld,\"usec_per_xfer\":%.5f}\n",
		       iters, work_steps, usec);
	else
		printf("{\"test\":\"line_floor\",\"iters\":%ld,\"usec_per_xfer\":%.5f}\n", iters,
		       usec);
	return 0;
}
// ---- line_floor.c end
C_SOURCE
