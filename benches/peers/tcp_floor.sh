#!/usr/bin/env bash
# tcp_floor: the floor of a message over TCP on this host or link, what the kernel's TCP
# path costs with no library on top: two processes, one connection, non-blocking
# TCP_NODELAY sockets, both sides busy-polling recv() (no epoll, no completion queue, no
# header, no matching).
#
#   benches/peers/tcp_floor.sh [-m lat|bw] [-S size] [-I iters] [-W window] [-T secs]
#                                             # self-contained: forks a server, 127.0.0.1
#   benches/peers/tcp_floor.sh -s [-b addr] [-P port]
#                                             # server: one client, then exit
#   benches/peers/tcp_floor.sh [options] [-P port] <srv_addr>
#                                             # client of that server
#   benches/peers/tcp_floor.sh --build        # only compile, print the binary's path
#
# The C program below is compiled once (needs cc) into $TCP_FLOOR_DIR (default:
# <repo>/target/peers). The client opens the connection and sends the server the run's
# parameters (mode, size, iterations, window), so a server needs none of them. A server
# prints "listening on port N" once it listens (-P 0: any free port; default 47600);
# a client retries a refused connection for 5 s while the server starts.
#
# -m lat (default): ping-pong. The client sends `size` bytes with one send() and
# busy-polls recv() until `size` bytes are back; the server does the mirror image. 1000
# round trips warm up untimed, then `iters` (default 20000) run between two
# CLOCK_MONOTONIC reads in the client. One-way time = elapsed / iters / 2.
#
# -m bw: streaming with a window, the method of rdm_tagged_bw. Per window the client
# sends `window` (default 64) messages of `size` bytes, one send() each (the floor of a
# library that hands every message to the kernel on its own), then waits for a one-byte
# acknowledgement the server sends once it has read the window's bytes (recv() into a
# 4 MiB buffer, as much as is there per call). 10 windows warm up; `iters` (default 64000
# under 64 KiB, 640 from 64 KiB) messages are timed, rounded up to whole windows.
#
# Every wait has a deadline (-T seconds without progress, default 10): a lost peer ends
# the run with status 2 instead of hanging. A self-contained run's server child dies with
# its parent.
#
# Output (client): one JSON line,
#   {"test":"tcp_floor","mode":"lat","bytes":..,"iters":..,"usec_per_xfer":..}
#   {"test":"tcp_floor","mode":"bw","bytes":..,"iters":..,"window":..,"time_s":..,
#    "mb_per_sec":..,"msgs_per_sec":..}
# (mb_per_sec in 10^6 bytes per second, as fabtests prints.)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="${TCP_FLOOR_DIR:-$repo/target/peers}"
bin="$dir/tcp_floor"
# shellcheck source=embedded_c.sh
. "$here/embedded_c.sh"

build() {
    build_embedded tcp_floor "${BASH_SOURCE[0]}" "$dir"
}

embedded_main "$bin" build "$@"

# The C source lives below `exit`/`exec`: bash never reads it.
cat >/dev/null <<'C_SOURCE'
// ---- tcp_floor.c begin
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WARMUP_LAT 1000L
#define WARMUP_WINDOWS 10L
#define MAX_SIZE (64L << 20)
#define BW_RX_BUF (4L << 20)
/* Polls between two looks at the clock: rare enough to stay off the measured path. */
#define CHECK_EVERY 4096UL
#define CONNECT_RETRY_S 5.0

enum mode { M_LAT = 1, M_BW = 2 };

/* What the client tells the server, in network byte order. */
struct params {
	uint32_t mode;
	uint32_t window;
	uint64_t size;
	uint64_t iters;
};

static double deadline_s = 10.0;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "tcp_floor: %s: %s\n", what, errno ? strerror(errno) : "failed");
	exit(2);
}

/* Progress watch: fails the run after `deadline_s` without progress. */
struct watch {
	unsigned long polls;
	double since;
};

static void idle(struct watch *w, const char *what)
{
	if (++w->polls % CHECK_EVERY)
		return;
	double t = now();
	if (w->since == 0)
		w->since = t;
	else if (t - w->since > deadline_s) {
		errno = ETIMEDOUT;
		die(what);
	}
}

static void busy(struct watch *w)
{
	w->polls = 0;
	w->since = 0;
}

/* Sends all `n` bytes, busy-polling a full socket buffer. */
static void send_all(int fd, const char *p, size_t n)
{
	struct watch w = {0, 0};
	while (n) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			busy(&w);
		} else if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			idle(&w, "send (peer stuck)");
		} else {
			die("send");
		}
	}
}

/* Receives exactly `n` bytes, busy-polling. */
static void recv_all(int fd, char *p, size_t n)
{
	struct watch w = {0, 0};
	while (n) {
		ssize_t r = recv(fd, p, n, 0);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			busy(&w);
		} else if (r == 0) {
			errno = ECONNRESET;
			die("recv (peer closed)");
		} else if (errno == EAGAIN || errno == EINTR) {
			idle(&w, "recv (no data from peer)");
		} else {
			die("recv");
		}
	}
}

/* Receives `n` bytes into a buffer of `cap` bytes, as much per call as is there. */
static void drain(int fd, char *buf, size_t cap, uint64_t n)
{
	struct watch w = {0, 0};
	while (n) {
		ssize_t r = recv(fd, buf, n < cap ? n : cap, 0);
		if (r > 0) {
			n -= (uint64_t)r;
			busy(&w);
		} else if (r == 0) {
			errno = ECONNRESET;
			die("recv (peer closed)");
		} else if (errno == EAGAIN || errno == EINTR) {
			idle(&w, "recv (no data from peer)");
		} else {
			die("recv");
		}
	}
}

static void tune(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one))
		die("setsockopt TCP_NODELAY");
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		die("fcntl O_NONBLOCK");
}

static void fill(char *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)('a' + (seed + i) % 26);
}

/* The server's side of one connection; the parameters come from the client. */
static void serve(int fd)
{
	struct params p;
	recv_all(fd, (char *)&p, sizeof p);
	uint32_t mode = ntohl(p.mode), window = ntohl(p.window);
	uint64_t size = be64toh(p.size), iters = be64toh(p.iters);
	if ((mode != M_LAT && mode != M_BW) || size < 1 || size > (uint64_t)MAX_SIZE ||
	    window < 1) {
		errno = EINVAL;
		die("bad parameters from the client");
	}
	char *buf = malloc(mode == M_BW && size < BW_RX_BUF ? BW_RX_BUF : size);
	if (!buf)
		die("malloc");
	if (mode == M_LAT) {
		for (uint64_t i = 0; i < iters + WARMUP_LAT; i++) {
			recv_all(fd, buf, size);
			send_all(fd, buf, size);
		}
	} else {
		uint64_t windows = WARMUP_WINDOWS + (iters + window - 1) / window;
		size_t cap = size < BW_RX_BUF ? BW_RX_BUF : size;
		for (uint64_t k = 0; k < windows; k++) {
			drain(fd, buf, cap, size * window);
			send_all(fd, "a", 1);
		}
	}
	free(buf);
}

/* The client's side: sends the parameters, runs, prints the result. */
static void client(int fd, enum mode mode, uint64_t size, uint64_t iters, uint32_t window)
{
	struct params p = {htonl(mode), htonl(window), htobe64(size), htobe64(iters)};
	send_all(fd, (const char *)&p, sizeof p);
	char *tx = malloc(size), *rx = malloc(size);
	if (!tx || !rx)
		die("malloc");
	fill(tx, size, 1);
	if (mode == M_LAT) {
		double t0 = 0;
		for (uint64_t i = 0; i < iters + WARMUP_LAT; i++) {
			if (i == WARMUP_LAT)
				t0 = now();
			send_all(fd, tx, size);
			recv_all(fd, rx, size);
		}
		double t = now() - t0;
		if (memcmp(tx, rx, size)) {
			errno = EIO;
			die("the echo differs from what was sent");
		}
		printf("{\"test\":\"tcp_floor\",\"mode\":\"lat\",\"bytes\":%lu,\"iters\":%lu,"
		       "\"usec_per_xfer\":%.4f}\n",
		       (unsigned long)size, (unsigned long)iters, t * 1e6 / (double)iters / 2.0);
	} else {
		uint64_t windows = (iters + window - 1) / window;
		double t0 = 0;
		char ack;
		for (uint64_t k = 0; k < WARMUP_WINDOWS + windows; k++) {
			if (k == WARMUP_WINDOWS)
				t0 = now();
			for (uint32_t i = 0; i < window; i++)
				send_all(fd, tx, size);
			recv_all(fd, &ack, 1);
		}
		double t = now() - t0;
		uint64_t msgs = windows * window;
		printf("{\"test\":\"tcp_floor\",\"mode\":\"bw\",\"bytes\":%lu,\"iters\":%lu,"
		       "\"window\":%u,\"time_s\":%.6f,\"mb_per_sec\":%.2f,\"msgs_per_sec\":%.1f}\n",
		       (unsigned long)size, (unsigned long)msgs, window, t,
		       (double)msgs * (double)size / t / 1e6, (double)msgs / t);
	}
	fflush(stdout);
	free(tx);
	free(rx);
}

/* A listening socket on addr:port (NULL: any address); prints the port it got. */
static int listen_on(const char *addr, uint16_t port, uint16_t *got)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai;
	char svc[8];
	snprintf(svc, sizeof svc, "%u", port);
	int ret = getaddrinfo(addr, svc, &hints, &ai);
	if (ret) {
		fprintf(stderr, "tcp_floor: %s: %s\n", addr ? addr : "*", gai_strerror(ret));
		exit(2);
	}
	int fd = socket(ai->ai_family, SOCK_STREAM, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1))
		die("listen");
	freeaddrinfo(ai);
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &len))
		die("getsockname");
	*got = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					     : ((struct sockaddr_in6 *)&ss)->sin6_port);
	return fd;
}

/* Accepts one connection within the deadline. */
static int accept_one(int lfd)
{
	struct timeval tv = {.tv_sec = (time_t)deadline_s * 3};
	if (setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv))
		die("setsockopt SO_RCVTIMEO");
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept (no client came)");
	close(lfd);
	tune(fd);
	return fd;
}

static int connect_to(const char *host, uint16_t port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai;
	char svc[8];
	snprintf(svc, sizeof svc, "%u", port);
	int ret = getaddrinfo(host, svc, &hints, &ai);
	if (ret) {
		fprintf(stderr, "tcp_floor: %s: %s\n", host, gai_strerror(ret));
		exit(2);
	}
	double start = now();
	for (;;) {
		int fd = socket(ai->ai_family, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket");
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			freeaddrinfo(ai);
			tune(fd);
			return fd;
		}
		close(fd);
		if (errno != ECONNREFUSED || now() - start > CONNECT_RETRY_S)
			die("connect");
		usleep(20000);
	}
}

static long parse_num(int opt, const char *arg, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	if (errno || end == arg || *end || v < lo || v > hi) {
		fprintf(stderr, "tcp_floor: bad -%c '%s' (from %ld to %ld)\n", opt, arg, lo, hi);
		exit(1);
	}
	return v;
}

int main(int argc, char **argv)
{
	enum mode mode = M_LAT;
	long size = 8, iters = 0, window = 64, port = 47600;
	int server = 0;
	const char *bind_addr = NULL;
	int c;
	while ((c = getopt(argc, argv, "m:S:I:W:P:T:b:sh")) != -1) {
		switch (c) {
		case 'm':
			if (!strcmp(optarg, "lat"))
				mode = M_LAT;
			else if (!strcmp(optarg, "bw"))
				mode = M_BW;
			else {
				fprintf(stderr, "tcp_floor: bad -m %s (lat|bw)\n", optarg);
				return 1;
			}
			break;
		case 'S': size = parse_num(c, optarg, 1, MAX_SIZE); break;
		case 'I': iters = parse_num(c, optarg, 1, 1L << 40); break;
		case 'W': window = parse_num(c, optarg, 1, 1 << 16); break;
		case 'P': port = parse_num(c, optarg, 0, 65535); break;
		case 'T': deadline_s = (double)parse_num(c, optarg, 1, 3600); break;
		case 'b': bind_addr = optarg; break;
		case 's': server = 1; break;
		default:
			fprintf(stderr, "usage: tcp_floor [-m lat|bw] [-S size] [-I iters] "
					"[-W window] [-T secs] [-P port] [-s [-b addr] | srv_addr]\n");
			return c == 'h' ? 0 : 1;
		}
	}
	const char *host = optind < argc ? argv[optind++] : NULL;
	if (optind < argc || (server && host)) {
		fprintf(stderr, "tcp_floor: a server (-s) takes no address; a client one\n");
		return 1;
	}
	if (!iters)
		iters = mode == M_LAT ? 20000 : size >= (64 << 10) ? 640 : 64000;
	if (mode == M_LAT)
		window = 1;
	signal(SIGPIPE, SIG_IGN);

	uint16_t got;
	if (server) {
		int lfd = listen_on(bind_addr, (uint16_t)port, &got);
		printf("listening on port %u\n", got);
		fflush(stdout);
		int fd = accept_one(lfd);
		serve(fd);
		close(fd);
		return 0;
	}
	if (host) {
		int fd = connect_to(host, (uint16_t)port);
		client(fd, mode, (uint64_t)size, (uint64_t)iters, (uint32_t)window);
		close(fd);
		return 0;
	}

	/* Self-contained: a server child on a free port of 127.0.0.1, this process the
	 * client. The listening socket exists before the fork, so the connect finds it. */
	int lfd = listen_on("127.0.0.1", 0, &got);
	pid_t parent = getpid();
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			_exit(3);
		int fd = accept_one(lfd);
		serve(fd);
		_exit(0);
	}
	close(lfd);
	int fd = connect_to("127.0.0.1", got);
	client(fd, mode, (uint64_t)size, (uint64_t)iters, (uint32_t)window);
	close(fd);
	int status = 0;
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "tcp_floor: server child failed (status %d)\n", status);
		return 2;
	}
	return 0;
}
// ---- tcp_floor.c end
C_SOURCE
