/* Two processes through the plugin: RMA writes and reads, atomics and tagged messages
 * from a parent into a child's registered region, the child progressing it (manual
 * progress) until the parent's closing message, then checking its memory. Names are
 * exchanged through pipes. FAB_PROV names the provider (default fab_shm). Every wait
 * has a deadline; exits non-zero on failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#define CHECK(cond)                                                                     \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "FAIL [%d] %s:%d: %s\n", (int)getpid(), __FILE__, \
				__LINE__, #cond);                                       \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct res {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
};

static void open_res(struct res *r)
{
	struct fi_info *h = fi_allocinfo();
	const char *prov = getenv("FAB_PROV");
	h->fabric_attr->prov_name = strdup(prov && *prov ? prov : "fab_shm");
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &r->info) == 0);
	fi_freeinfo(h);
	CHECK(fi_fabric(r->info->fabric_attr, &r->fabric, NULL) == 0);
	CHECK(fi_domain(r->fabric, r->info, &r->domain, NULL) == 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	CHECK(fi_av_open(r->domain, &av_attr, &r->av, NULL) == 0);
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
	CHECK(fi_cq_open(r->domain, &cq_attr, &r->cq, NULL) == 0);
	CHECK(fi_endpoint(r->domain, r->info, &r->ep, NULL) == 0);
	CHECK(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV) == 0);
	CHECK(fi_ep_bind(r->ep, &r->av->fid, 0) == 0);
	CHECK(fi_enable(r->ep) == 0);
}

static void close_res(struct res *r)
{
	CHECK(fi_close(&r->ep->fid) == 0);
	CHECK(fi_close(&r->av->fid) == 0);
	CHECK(fi_close(&r->cq->fid) == 0);
	CHECK(fi_close(&r->domain->fid) == 0);
	CHECK(fi_close(&r->fabric->fid) == 0);
	fi_freeinfo(r->info);
}

/* Exchanges names over the pipes and inserts the peer's. */
static fi_addr_t exchange(struct res *r, int rfd, int wfd)
{
	char name[256], peer[256];
	size_t len = sizeof(name);
	CHECK(fi_getname(&r->ep->fid, name, &len) == 0);
	CHECK(write(wfd, &len, sizeof(len)) == sizeof(len));
	CHECK(write(wfd, name, len) == (ssize_t)len);
	size_t plen;
	CHECK(read(rfd, &plen, sizeof(plen)) == sizeof(plen) && plen <= sizeof(peer));
	CHECK(read(rfd, peer, plen) == (ssize_t)plen);
	fi_addr_t a;
	CHECK(fi_av_insert(r->av, peer, 1, &a, 0, NULL) == 1);
	return a;
}

/* One completion (or error) within 10 seconds; drives progress meanwhile. */
static void wait_one(struct fid_cq *cq, struct fi_cq_tagged_entry *e)
{
	double end = now() + 10;
	ssize_t n;
	do {
		n = fi_cq_read(cq, e, 1);
	} while (n == -FI_EAGAIN && now() < end);
	if (n != 1) {
		struct fi_cq_err_entry err = { 0 };
		if (n == -FI_EAVAIL)
			fi_cq_readerr(cq, &err, 0);
		fprintf(stderr, "FAIL [%d] cq read %zd err %d\n", (int)getpid(), n, err.err);
		exit(1);
	}
}

static uint64_t region[64];

static int child(int rfd, int wfd)
{
	struct res r;
	open_res(&r);
	struct fid_mr *mr;
	CHECK(fi_mr_reg(r.domain, region, sizeof(region), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 7,
			0, &mr, NULL) == 0);
	for (int i = 0; i < 64; i++)
		region[i] = 1000 + i;
	fi_addr_t peer = exchange(&r, rfd, wfd);
	/* Progress by waiting for the parent's closing message. */
	uint64_t done = 0;
	struct fi_cq_tagged_entry e;
	CHECK(fi_trecv(r.ep, &done, sizeof(done), NULL, FI_ADDR_UNSPEC, 0xd0, 0, NULL) == 0);
	wait_one(r.cq, &e);
	CHECK(e.tag == 0xd0 && done == 42);
	/* What the parent did: a write of 8 words at 0, a sum at 20, a swap at 30. */
	for (int i = 0; i < 8; i++)
		CHECK(region[i] == (uint64_t)(7 * i + 3));
	CHECK(region[20] == 1020 + 100);
	CHECK(region[30] == 555);
	CHECK(region[40] == 1040);
	uint64_t ok = 1;
	CHECK(fi_tinject(r.ep, &ok, sizeof(ok), peer, 0xd1) == 0);
	/* Leave time for the injected answer to be taken before closing. */
	CHECK(read(rfd, &ok, 1) == 0);
	CHECK(fi_close(&mr->fid) == 0);
	close_res(&r);
	return 0;
}

static int parent(int rfd, int wfd)
{
	struct res r;
	open_res(&r);
	fi_addr_t peer = exchange(&r, rfd, wfd);
	struct fi_cq_tagged_entry e;
	uint64_t w[8];
	for (int i = 0; i < 8; i++)
		w[i] = 7 * i + 3;
	CHECK(fi_write(r.ep, w, sizeof(w), NULL, peer, 0, 7, NULL) == 0);
	wait_one(r.cq, &e);
	uint64_t back[8] = { 0 };
	CHECK(fi_read(r.ep, back, sizeof(back), NULL, peer, 0, 7, NULL) == 0);
	wait_one(r.cq, &e);
	CHECK(memcmp(back, w, sizeof(w)) == 0);
	uint64_t add = 100, old = 0, cmp = 1030, swp = 555;
	CHECK(fi_fetch_atomic(r.ep, &add, 1, NULL, &old, NULL, peer, 20 * 8, 7, FI_UINT64, FI_SUM,
			      NULL) == 0);
	wait_one(r.cq, &e);
	CHECK(old == 1020);
	CHECK(fi_compare_atomic(r.ep, &swp, 1, NULL, &cmp, NULL, &old, NULL, peer, 30 * 8, 7,
				FI_UINT64, FI_CSWAP, NULL) == 0);
	wait_one(r.cq, &e);
	CHECK(old == 1030);
	/* A wrong key: an error entry here, the child's memory untouched. */
	CHECK(fi_write(r.ep, w, 8, NULL, peer, 40 * 8, 8, NULL) == 0);
	double end = now() + 10;
	ssize_t n;
	do {
		n = fi_cq_read(r.cq, &e, 1);
	} while (n == -FI_EAGAIN && now() < end);
	CHECK(n == -FI_EAVAIL);
	struct fi_cq_err_entry err = { 0 };
	CHECK(fi_cq_readerr(r.cq, &err, 0) == 1 && err.err != 0);
	/* Done: the child checks its memory and answers. */
	uint64_t ok = 0, done = 42;
	CHECK(fi_trecv(r.ep, &ok, sizeof(ok), NULL, FI_ADDR_UNSPEC, 0xd1, 0, NULL) == 0);
	CHECK(fi_tsend(r.ep, &done, sizeof(done), NULL, peer, 0xd0, NULL) == 0);
	for (int k = 0; k < 2; k++)
		wait_one(r.cq, &e);
	CHECK(ok == 1);
	close(wfd);
	close_res(&r);
	return 0;
}

int main(void)
{
	int a[2], b[2];
	CHECK(pipe(a) == 0 && pipe(b) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(a[1]);
		close(b[0]);
		return child(a[0], b[1]);
	}
	close(a[0]);
	close(b[1]);
	int rc = parent(b[0], a[1]);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	printf("ok two processes: rma, atomics, messages\n");
	return rc;
}
