#!/usr/bin/env bash
# fi_peer: a fabtests stand-in for libfabric's own providers (Debian 12 packages
# fi_pingpong only; fi_rdm_tagged_bw, fi_rma_bw and fi_rdm_atomic are not packaged).
#
#   benches/peers/fi_peer.sh -t tagged|write|read|fadd -S size [-W window] [-I iters]
#                            [-w warmup_windows] [-p provider]
#   benches/peers/fi_peer.sh -s [-b addr] [-P port] [test options]   # target (server)
#   benches/peers/fi_peer.sh [-b addr] [-P port] [test options] <srv_addr>  # initiator
#   benches/peers/fi_peer.sh --build      # only compile, print the binary's path
#
# The C program below is compiled once against the installed libfabric (needs cc and
# libfabric-dev) into $FI_PEER_DIR (default: <repo>/target/peers). One run forks: the
# child is the target/receiver, the parent the initiator; they exchange endpoint names,
# buffer address and MR key over pipes, then use the provider's RDM endpoints only.
# Between hosts (network providers such as tcp), `-s` runs the target alone: it listens
# for the initiator's control connection on port -P (default 47610; it prints
# "listening on port N"), and `<srv_addr>` runs the initiator, which connects there
# (retrying for 5 s while the target starts); the same exchange then runs over that
# connection. Both sides must be given the same test options. `-b addr` passes addr to
# fi_getinfo as the source node (FI_SOURCE), so the endpoint listens on that address.
#
# Method (that of fabtests' ft_bw / fi_rma_bw): one `size`-byte buffer per side, reused
# by every operation. Per window the initiator posts `window` operations (tagged send,
# fi_write, fi_read or fi_fetch_atomic FI_SUM uint64) and waits for their local
# completions; for `tagged` the receiver posts `window` tagged receives per window.
# Warm-up windows run first, untimed. The clock starts after a tagged handshake and
# stops when the receiver's final tagged ack arrives, so the receiver having processed
# every operation is inside the timed interval. `fadd -W 1` is the fetch-add round-trip
# latency; `write -W 1` the write-with-local-completion latency.
#
# `-p` names the provider exactly: the first info whose provider name is that string is
# used ("tcp" is the core provider's own RDM endpoint, "tcp;ofi_rxm" rxm over its MSG
# endpoints).
#
# Output: one JSON line from the initiator:
#   {"test":..,"provider":..,"bytes":..,"iters":..,"window":..,"time_s":..,
#    "usec_per_op":..,"mb_per_sec":..,"ops_per_sec":..}
# (iters = timed operations; mb_per_sec in 10^6 bytes per second as fabtests prints.)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="${FI_PEER_DIR:-$repo/target/peers}"
bin="$dir/fi_peer"
# shellcheck source=embedded_c.sh
. "$here/embedded_c.sh"

build() {
    if [[ ! -f /usr/include/rdma/fabric.h ]]; then
        echo "fi_peer: libfabric headers missing (apt-get install -y libfabric-dev)" >&2
        return 1
    fi
    build_embedded fi_peer "${BASH_SOURCE[0]}" "$dir" -lfabric
}

embedded_main "$bin" build "$@"

# The C source lives below `exit`/`exec`: bash never reads it.
cat >/dev/null <<'C_SOURCE'
// ---- fi_peer.c begin
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

enum test { T_TAGGED, T_WRITE, T_READ, T_FADD };
static const char *test_names[] = {"tagged", "write", "read", "fadd"};

#define DATA_TAG 0x1000u
#define CTRL_TAG 0x2000u
#define MAX_WINDOW 4096

static struct {
	enum test test;
	size_t size;
	unsigned window;
	unsigned long iters; /* timed windows * window, rounded up to whole windows */
	unsigned warmup;     /* untimed windows */
	const char *prov;
	const char *bind; /* -b: fi_getinfo's source node, or NULL */
} o = {T_TAGGED, 8, 64, 0, 0, "shm", NULL};

struct side {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *mr_tx, *mr_rx, *mr_ctrl;
	void *desc_tx, *desc_rx, *desc_ctrl;
	char *tx, *rx;
	uint64_t *ctrl; /* [0]: send slot, [1]: receive slot, [2]: fetch-add result */
	fi_addr_t peer;
	uint64_t raddr, rkey; /* peer's rx buffer */
	unsigned long tx_done, rx_done;
	struct fi_context2 ctx[MAX_WINDOW + 4];
	int rd, wr; /* pipes to the peer process */
	const char *who;
};

static void die(struct side *s, const char *what, long ret)
{
	fprintf(stderr, "fi_peer %s: %s: %ld (%s)\n", s ? s->who : "", what, ret,
		fi_strerror((int)(ret < 0 ? -ret : ret)));
	exit(2);
}

static void pipe_write(struct side *s, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t r = write(s->wr, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die(s, "pipe write", -errno);
		c += r;
		n -= (size_t)r;
	}
}

static void pipe_read(struct side *s, void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t r = read(s->rd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die(s, "pipe read (peer exited?)", r < 0 ? -errno : -FI_EIO);
		c += r;
		n -= (size_t)r;
	}
}

/* Reads completions; receives (FI_RECV) and everything else counted apart. */
static void progress(struct side *s)
{
	struct fi_cq_msg_entry e[64];
	ssize_t n = fi_cq_read(s->cq, e, 64);
	if (n > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (e[i].flags & FI_RECV)
				s->rx_done++;
			else
				s->tx_done++;
		}
	} else if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};
		fi_cq_readerr(s->cq, &err, 0);
		fprintf(stderr, "fi_peer %s: completion error %d (%s), prov_errno %d\n",
			s->who, err.err, fi_strerror(err.err), err.prov_errno);
		exit(2);
	} else if (n != -FI_EAGAIN) {
		die(s, "fi_cq_read", n);
	}
}

#define POST(s, call)                                                          \
	do {                                                                   \
		ssize_t ret_;                                                  \
		while ((ret_ = (call)) == -FI_EAGAIN)                          \
			progress(s);                                           \
		if (ret_)                                                      \
			die(s, #call, ret_);                                   \
	} while (0)

static void wait_tx(struct side *s, unsigned long target)
{
	while (s->tx_done < target)
		progress(s);
}

static void wait_rx(struct side *s, unsigned long target)
{
	while (s->rx_done < target)
		progress(s);
}

/* One 8-byte tagged control message each way: a barrier that also progresses RMA. */
static void ctrl_send(struct side *s)
{
	unsigned long t = s->tx_done + 1;
	POST(s, fi_tsend(s->ep, &s->ctrl[0], 8, s->desc_ctrl, s->peer, CTRL_TAG,
			 &s->ctx[MAX_WINDOW]));
	wait_tx(s, t);
}

static void ctrl_post_recv(struct side *s)
{
	POST(s, fi_trecv(s->ep, &s->ctrl[1], 8, s->desc_ctrl, s->peer, CTRL_TAG, 0,
			 &s->ctx[MAX_WINDOW + 1]));
}

static void *alloc_buf(struct side *s, size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n < 4096 ? 4096 : n))
		die(s, "posix_memalign", -FI_ENOMEM);
	memset(p, 'a', n < 4096 ? 4096 : n);
	return p;
}

static struct fid_mr *reg(struct side *s, void *buf, size_t len, uint64_t access,
			  uint64_t key, void **desc)
{
	struct fid_mr *mr;
	int ret = fi_mr_reg(s->domain, buf, len, access, 0, key, 0, &mr, NULL);
	if (ret)
		die(s, "fi_mr_reg", ret);
	if (s->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		ret = fi_mr_bind(mr, &s->ep->fid, 0);
		if (ret)
			die(s, "fi_mr_bind", ret);
		ret = fi_mr_enable(mr);
		if (ret)
			die(s, "fi_mr_enable", ret);
	}
	*desc = fi_mr_desc(mr);
	return mr;
}

static void open_side(struct side *s)
{
	struct fi_info *hints = fi_allocinfo();
	int ret;
	if (!hints)
		die(s, "fi_allocinfo", -FI_ENOMEM);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED;
	if (o.test == T_WRITE || o.test == T_READ)
		hints->caps |= FI_RMA;
	if (o.test == T_FADD)
		hints->caps |= FI_ATOMIC;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->fabric_attr->prov_name = strdup(o.prov);
	struct fi_info *all;
	ret = fi_getinfo(FI_VERSION(1, 17), o.bind, NULL, o.bind ? FI_SOURCE : 0, hints, &all);
	if (ret)
		die(s, "fi_getinfo", ret);
	fi_freeinfo(hints);
	/* The provider named exactly: "tcp" also matches "tcp;ofi_rxm", listed first. */
	for (struct fi_info *i = all; i && !s->info; i = i->next)
		if (!strcmp(i->fabric_attr->prov_name, o.prov))
			s->info = fi_dupinfo(i);
	fi_freeinfo(all);
	if (!s->info)
		die(s, "fi_getinfo (no info of exactly that provider)", -FI_ENODATA);

	if ((ret = fi_fabric(s->info->fabric_attr, &s->fabric, NULL)))
		die(s, "fi_fabric", ret);
	if ((ret = fi_domain(s->fabric, s->info, &s->domain, NULL)))
		die(s, "fi_domain", ret);
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = 2};
	if ((ret = fi_av_open(s->domain, &av_attr, &s->av, NULL)))
		die(s, "fi_av_open", ret);
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_MSG,
				     .size = 2 * MAX_WINDOW + 16,
				     .wait_obj = FI_WAIT_NONE};
	if ((ret = fi_cq_open(s->domain, &cq_attr, &s->cq, NULL)))
		die(s, "fi_cq_open", ret);
	if ((ret = fi_endpoint(s->domain, s->info, &s->ep, NULL)))
		die(s, "fi_endpoint", ret);
	if ((ret = fi_ep_bind(s->ep, &s->av->fid, 0)))
		die(s, "fi_ep_bind av", ret);
	if ((ret = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV)))
		die(s, "fi_ep_bind cq", ret);
	if ((ret = fi_enable(s->ep)))
		die(s, "fi_enable", ret);

	s->tx = alloc_buf(s, o.size);
	s->rx = alloc_buf(s, o.size);
	s->ctrl = alloc_buf(s, 64);
	s->mr_tx = reg(s, s->tx, o.size, FI_SEND | FI_WRITE | FI_READ, 1, &s->desc_tx);
	s->mr_rx = reg(s, s->rx, o.size,
		       FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ, 2, &s->desc_rx);
	s->mr_ctrl = reg(s, s->ctrl, 64, FI_SEND | FI_RECV | FI_READ | FI_WRITE, 3,
			 &s->desc_ctrl);

	/* Exchange names, then the rx buffer's address and key. */
	char name[256];
	size_t len = sizeof(name);
	if ((ret = fi_getname(&s->ep->fid, name, &len)))
		die(s, "fi_getname", ret);
	pipe_write(s, &len, sizeof(len));
	pipe_write(s, name, len);
	size_t plen;
	char pname[256];
	pipe_read(s, &plen, sizeof(plen));
	if (plen > sizeof(pname))
		die(s, "peer name too long", -FI_EINVAL);
	pipe_read(s, pname, plen);
	if (fi_av_insert(s->av, pname, 1, &s->peer, 0, NULL) != 1)
		die(s, "fi_av_insert", -FI_EINVAL);
	uint64_t mine[2] = {
		(s->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)s->rx : 0,
		fi_mr_key(s->mr_rx)};
	pipe_write(s, mine, sizeof(mine));
	uint64_t theirs[2];
	pipe_read(s, theirs, sizeof(theirs));
	s->raddr = theirs[0];
	s->rkey = theirs[1];
}

static void close_side(struct side *s)
{
	fi_close(&s->mr_ctrl->fid);
	fi_close(&s->mr_rx->fid);
	fi_close(&s->mr_tx->fid);
	fi_close(&s->ep->fid);
	fi_close(&s->cq->fid);
	fi_close(&s->av->fid);
	fi_close(&s->domain->fid);
	fi_close(&s->fabric->fid);
	fi_freeinfo(s->info);
}

/* One window of initiator operations; waits for their local completions. */
static void initiator_window(struct side *s)
{
	unsigned long t = s->tx_done + o.window;
	uint64_t one = 1;
	for (unsigned i = 0; i < o.window; i++) {
		switch (o.test) {
		case T_TAGGED:
			POST(s, fi_tsend(s->ep, s->tx, o.size, s->desc_tx, s->peer, DATA_TAG,
					 &s->ctx[i]));
			break;
		case T_WRITE:
			POST(s, fi_write(s->ep, s->tx, o.size, s->desc_tx, s->peer, s->raddr,
					 s->rkey, &s->ctx[i]));
			break;
		case T_READ:
			POST(s, fi_read(s->ep, s->tx, o.size, s->desc_tx, s->peer, s->raddr,
					s->rkey, &s->ctx[i]));
			break;
		case T_FADD:
			POST(s, fi_fetch_atomic(s->ep, &one, 1, NULL, &s->ctrl[2], s->desc_ctrl,
						s->peer, s->raddr, s->rkey, FI_UINT64, FI_SUM,
						&s->ctx[i]));
			break;
		}
	}
	wait_tx(s, t);
}

static void target_window(struct side *s)
{
	if (o.test != T_TAGGED)
		return;
	unsigned long t = s->rx_done + o.window;
	for (unsigned i = 0; i < o.window; i++)
		POST(s, fi_trecv(s->ep, s->rx, o.size, s->desc_rx, s->peer, DATA_TAG, 0,
				 &s->ctx[i]));
	wait_rx(s, t);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run(struct side *s, int initiator)
{
	unsigned long windows = (o.iters + o.window - 1) / o.window;
	open_side(s);
	if (o.test == T_FADD) {
		size_t count = 0;
		int ret = fi_fetch_atomicvalid(s->ep, FI_UINT64, FI_SUM, &count);
		if (ret || count < 1)
			die(s, "fi_fetch_atomicvalid(FI_UINT64, FI_SUM)", ret ? ret : -FI_EOPNOTSUPP);
	}

	/* Warm-up, then a handshake, then the timed windows, then the receiver's ack. */
	for (int phase = 0; phase < 2; phase++) {
		unsigned long n = phase == 0 ? o.warmup : windows;
		double t0 = 0;
		if (initiator) {
			ctrl_post_recv(s);
			unsigned long r = s->rx_done + 1;
			ctrl_send(s);
			wait_rx(s, r);
			t0 = now();
			for (unsigned long w = 0; w < n; w++)
				initiator_window(s);
			ctrl_post_recv(s);
			r = s->rx_done + 1;
			ctrl_send(s);
			wait_rx(s, r);
		} else {
			ctrl_post_recv(s);
			unsigned long r = s->rx_done + 1;
			wait_rx(s, r);
			ctrl_send(s);
			for (unsigned long w = 0; w < n; w++)
				target_window(s);
			/* RMA and atomics: the target progresses until the "done" message. */
			ctrl_post_recv(s);
			wait_rx(s, s->rx_done + 1);
			ctrl_send(s);
		}
		if (initiator && phase == 1) {
			double t = now() - t0;
			unsigned long ops = windows * o.window;
			printf("{\"test\":\"%s\",\"provider\":\"%s\",\"bytes\":%zu,\"iters\":%lu,"
			       "\"window\":%u,\"time_s\":%.6f,\"usec_per_op\":%.4f,"
			       "\"mb_per_sec\":%.2f,\"ops_per_sec\":%.1f}\n",
			       test_names[o.test], s->info->fabric_attr->prov_name, o.size, ops,
			       o.window, t, t * 1e6 / (double)ops,
			       (double)ops * (double)o.size / t / 1e6, (double)ops / t);
			fflush(stdout);
		}
	}
	close_side(s);
	return 0;
}

/* The control connection between hosts: the target listens on `port` and takes one
 * initiator; the initiator connects to host:port. Blocking, like the pipes. */
static int ctrl_socket(const char *host, const char *port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = host ? AI_NUMERICSERV : AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai;
	int ret = getaddrinfo(host ? host : o.bind, port, &hints, &ai);
	if (ret) {
		fprintf(stderr, "fi_peer: %s: %s\n", host ? host : "listen", gai_strerror(ret));
		exit(2);
	}
	int fd = -1;
	if (!host) {
		int one = 1;
		int lfd = socket(ai->ai_family, SOCK_STREAM, 0);
		if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
		    bind(lfd, ai->ai_addr, ai->ai_addrlen) || listen(lfd, 1)) {
			perror("fi_peer: listen");
			exit(2);
		}
		printf("listening on port %s\n", port);
		fflush(stdout);
		/* A target whose initiator never comes gives up instead of hanging. */
		struct timeval tv = {.tv_sec = 30};
		setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			perror("fi_peer: accept");
			exit(2);
		}
		close(lfd);
	} else {
		for (int tries = 0;; tries++) {
			fd = socket(ai->ai_family, SOCK_STREAM, 0);
			if (fd < 0) {
				perror("fi_peer: socket");
				exit(2);
			}
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
				break;
			close(fd);
			if (errno != ECONNREFUSED || tries >= 250) {
				perror("fi_peer: connect");
				exit(2);
			}
			usleep(20000);
		}
	}
	freeaddrinfo(ai);
	return fd;
}

static size_t parse_size(const char *a)
{
	char *end;
	unsigned long long v = strtoull(a, &end, 10);
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end || end == a) {
		fprintf(stderr, "fi_peer: bad size '%s'\n", a);
		exit(1);
	}
	return (size_t)v;
}

int main(int argc, char **argv)
{
	int c, server = 0;
	const char *port = "47610";
	while ((c = getopt(argc, argv, "t:S:W:I:w:p:b:P:sh")) != -1) {
		switch (c) {
		case 't':
			if (!strcmp(optarg, "tagged")) o.test = T_TAGGED;
			else if (!strcmp(optarg, "write")) o.test = T_WRITE;
			else if (!strcmp(optarg, "read")) o.test = T_READ;
			else if (!strcmp(optarg, "fadd")) o.test = T_FADD;
			else { fprintf(stderr, "fi_peer: bad -t %s\n", optarg); return 1; }
			break;
		case 'S': o.size = parse_size(optarg); break;
		case 'W': o.window = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'I': o.iters = strtoul(optarg, NULL, 10); break;
		case 'w': o.warmup = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'p': o.prov = optarg; break;
		case 'b': o.bind = optarg; break;
		case 'P': port = optarg; break;
		case 's': server = 1; break;
		default:
			fprintf(stderr, "usage: fi_peer -t tagged|write|read|fadd -S size "
					"[-W window] [-I iters] [-w warmup_windows] [-p provider] "
					"[-b addr] [-P port] [-s | srv_addr]\n");
			return c == 'h' ? 0 : 1;
		}
	}
	if (o.window < 1 || o.window > MAX_WINDOW) {
		fprintf(stderr, "fi_peer: -W must be 1..%d\n", MAX_WINDOW);
		return 1;
	}
	if (o.test == T_FADD)
		o.size = 8;
	if (o.size < 8 && o.test != T_TAGGED) {
		fprintf(stderr, "fi_peer: RMA sizes start at 8\n");
		return 1;
	}
	if (!o.iters)
		o.iters = o.size >= (1 << 20) ? 10 * o.window : 1000 * o.window;
	if (!o.warmup)
		o.warmup = o.size >= (1 << 20) ? 1 : 10;

	const char *host = optind < argc ? argv[optind] : NULL;
	if (optind + (host != NULL) < argc || (server && host)) {
		fprintf(stderr, "fi_peer: a target (-s) takes no address; an initiator one\n");
		return 1;
	}
	static struct side s;
	if (server || host) {
		s.rd = s.wr = ctrl_socket(host, port);
		s.who = server ? "target" : "initiator";
		return run(&s, !server);
	}

	int p2c[2], c2p[2];
	if (pipe(p2c) || pipe(c2p)) {
		perror("pipe");
		return 2;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		close(p2c[1]);
		close(c2p[0]);
		s.rd = p2c[0];
		s.wr = c2p[1];
		s.who = "target";
		return run(&s, 0);
	}
	close(p2c[0]);
	close(c2p[1]);
	s.rd = c2p[0];
	s.wr = p2c[1];
	s.who = "initiator";
	run(&s, 1);
	int status = 0;
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "fi_peer: target process failed (status %d)\n", status);
		return 2;
	}
	return 0;
}
// ---- fi_peer.c end
C_SOURCE
