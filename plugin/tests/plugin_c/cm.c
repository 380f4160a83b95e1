/* Connection management through the plugin on fab_tcp, in one process: a passive
 * endpoint listens; a connect carrying data is rejected with data (the connecting side
 * reads FI_ECONNREFUSED and the reject's data through fi_eq_readerr), a second one is
 * accepted (FI_CONNECTED on both sides, each naming its endpoint, the accept's data on
 * the connecting side), a message crosses with its bytes checked, fi_getpeer names the
 * peer, and fi_shutdown gives the other side FI_SHUTDOWN. Every wait has a deadline;
 * exits non-zero on the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#define VER FI_VERSION(1, 17)

static int checks;

#define EQ(a, b)                                                                      \
	do {                                                                          \
		long long _a = (long long)(a), _b = (long long)(b);                   \
		if (_a != _b) {                                                       \
			fprintf(stderr, "FAIL %s:%d: %s == %lld, expected %s == %lld\n", \
				__FILE__, __LINE__, #a, _a, #b, _b);                  \
			exit(1);                                                      \
		}                                                                     \
		checks++;                                                             \
	} while (0)
#define CHECK(c) EQ(!!(c), 1)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct cm_buf {
	struct fi_eq_cm_entry e;
	char data[256];
};

/* Reads `want` from `eq` within 5 s while reading (and so progressing) `other` too,
 * whose events are kept for later reads: returns the bytes read, or -FI_EAVAIL. */
static struct fid_eq *peer_eq;
static ssize_t wait_eq(struct fid_eq *eq, uint32_t *event, struct cm_buf *b)
{
	double end = now() + 5;
	ssize_t r;
	do {
		r = fi_eq_read(eq, event, b, sizeof(*b), 0);
		if (r != -FI_EAGAIN)
			return r;
		/* The other side progresses only when its EQ is read: peek to leave
		 * its events in place. */
		if (peer_eq) {
			uint32_t ev;
			struct cm_buf tmp;
			(void)fi_eq_read(peer_eq, &ev, &tmp, sizeof(tmp), FI_PEEK);
		}
	} while (now() < end);
	return r;
}

struct side {
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_ep *ep;
};

static void open_side(struct fid_fabric *fabric, struct fi_info *info, struct fid_eq *eq,
		      struct side *s)
{
	EQ(fi_domain(fabric, info, &s->domain, NULL), 0);
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE };
	EQ(fi_cq_open(s->domain, &ca, &s->cq, NULL), 0);
	EQ(fi_endpoint(s->domain, info, &s->ep, NULL), 0);
	EQ(fi_ep_bind(s->ep, &eq->fid, 0), 0);
	EQ(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	EQ(fi_enable(s->ep), 0);
}

static void close_side(struct side *s)
{
	EQ(fi_close(&s->ep->fid), 0);
	EQ(fi_close(&s->cq->fid), 0);
	EQ(fi_close(&s->domain->fid), 0);
}

static void wait_cq(struct fid_cq *cq, struct fid_cq *other)
{
	struct fi_cq_data_entry e;
	double end = now() + 5;
	ssize_t r;
	do {
		r = fi_cq_read(cq, &e, 1);
		if (other)
			(void)fi_cq_read(other, NULL, 0);
	} while (r == -FI_EAGAIN && now() < end);
	EQ(r, 1);
}

int main(void)
{
	struct fi_info *h = fi_allocinfo(), *info;
	h->fabric_attr->prov_name = strdup("fab_tcp");
	h->ep_attr->type = FI_EP_MSG;
	h->caps = FI_MSG;
	EQ(fi_getinfo(VER, "127.0.0.1", "0", FI_SOURCE, h, &info), 0);
	EQ(info->ep_attr->type, FI_EP_MSG);
	struct fid_fabric *fabric;
	EQ(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	struct fi_eq_attr ea = { .size = 16, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_eq *seq, *ceq;
	EQ(fi_eq_open(fabric, &ea, &seq, NULL), 0);
	EQ(fi_eq_open(fabric, &ea, &ceq, NULL), 0);

	struct fid_pep *pep;
	EQ(fi_passive_ep(fabric, info, &pep, NULL), 0);
	EQ(fi_listen(pep), -FI_ENOEQ);
	EQ(fi_pep_bind(pep, &seq->fid, 0), 0);
	EQ(fi_listen(pep), 0);
	char addr[64];
	size_t alen = sizeof(addr);
	EQ(fi_getname(&pep->fid, addr, &alen), 0);
	CHECK(alen >= 16);

	uint32_t event;
	struct cm_buf b;

	/* 1: refused, with the reject's data. */
	struct fi_info *ci;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &ci), 0);
	struct side c1;
	open_side(fabric, ci, ceq, &c1);
	EQ(fi_connect(c1.ep, addr, "hello", 5), 0);
	peer_eq = ceq;
	ssize_t r = wait_eq(seq, &event, &b);
	CHECK(r >= (ssize_t)sizeof(b.e) + 5);
	EQ(event, FI_CONNREQ);
	CHECK(b.e.fid == &pep->fid);
	CHECK(memcmp(b.e.data, "hello", 5) == 0);
	CHECK(b.e.info != NULL && b.e.info->handle != NULL);
	EQ(fi_reject(pep, b.e.info->handle, "nope", 4), 0);
	EQ(fi_reject(pep, b.e.info->handle, NULL, 0), -FI_EINVAL);
	fi_freeinfo(b.e.info);
	peer_eq = seq;
	EQ(wait_eq(ceq, &event, &b), -FI_EAVAIL);
	char errbuf[64];
	struct fi_eq_err_entry err = { .err_data = errbuf, .err_data_size = sizeof(errbuf) };
	EQ(fi_eq_readerr(ceq, &err, 0), sizeof(err));
	EQ(err.err, FI_ECONNREFUSED);
	CHECK(err.fid == &c1.ep->fid);
	EQ(err.err_data_size, 4);
	CHECK(memcmp(errbuf, "nope", 4) == 0);
	close_side(&c1);
	printf("ok reject\n");

	/* 2: accepted. */
	struct side c2, s;
	open_side(fabric, ci, ceq, &c2);
	EQ(fi_connect(c2.ep, addr, "again", 5), 0);
	peer_eq = ceq;
	r = wait_eq(seq, &event, &b);
	EQ(event, FI_CONNREQ);
	CHECK(b.e.fid == &pep->fid);
	struct fi_info *req = b.e.info;
	open_side(fabric, req, seq, &s);
	EQ(fi_accept(s.ep, "yes", 3), 0);
	fi_freeinfo(req);
	r = wait_eq(seq, &event, &b);
	EQ(event, FI_CONNECTED);
	CHECK(b.e.fid == &s.ep->fid);
	peer_eq = seq;
	r = wait_eq(ceq, &event, &b);
	EQ(event, FI_CONNECTED);
	CHECK(b.e.fid == &c2.ep->fid);
	EQ(r, sizeof(b.e) + 3);
	CHECK(memcmp(b.e.data, "yes", 3) == 0);
	printf("ok accept\n");

	char peer[64];
	size_t plen = sizeof(peer);
	EQ(fi_getpeer(s.ep, peer, &plen), 0);
	CHECK(plen >= 16);

	char msg[1000], got[1000];
	for (int i = 0; i < 1000; i++)
		msg[i] = (char)(i * 7 + 3);
	memset(got, 0, sizeof(got));
	EQ(fi_recv(s.ep, got, sizeof(got), NULL, FI_ADDR_UNSPEC, NULL), 0);
	EQ(fi_send(c2.ep, msg, sizeof(msg), NULL, FI_ADDR_UNSPEC, NULL), 0);
	wait_cq(s.cq, c2.cq);
	wait_cq(c2.cq, s.cq);
	CHECK(memcmp(msg, got, sizeof(msg)) == 0);
	printf("ok message\n");

	EQ(fi_shutdown(c2.ep, 0), 0);
	peer_eq = NULL;
	r = wait_eq(seq, &event, &b);
	EQ(event, FI_SHUTDOWN);
	CHECK(b.e.fid == &s.ep->fid);
	printf("ok shutdown\n");

	close_side(&s);
	close_side(&c2);
	EQ(fi_close(&pep->fid), 0);
	EQ(fi_close(&seq->fid), 0);
	EQ(fi_close(&ceq->fid), 0);
	EQ(fi_close(&fabric->fid), 0);
	fi_freeinfo(ci);
	fi_freeinfo(info);
	fi_freeinfo(h);
	printf("all %d checks passed\n", checks);
	return 0;
}
