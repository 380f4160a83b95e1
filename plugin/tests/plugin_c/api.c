/* The plugin through libfabric's C API: getinfo and hints, every object the plugin
 * offers, messages and tagged messages to self, the four CQ formats, error entries,
 * and misuse (NULL pointers, wrong classes, double close, busy objects, unknown flags
 * and versions), which must give libfabric error codes, never a crash.
 *
 * Run with FI_PROVIDER_PATH pointing at a directory holding libfab_shm-fi.so (and
 * libfab_tcp-fi.so); FAB_PROV names the provider under test (default fab_shm). Prints
 * one line per check and exits non-zero on the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

/* The provider under test, and whether it is fab_tcp (remote peers, socket
 * addresses) rather than fab_shm (local only, opaque names). */
static const char *PROV = "fab_shm";
static int tcp;
/* Whether it is fab_hybrid: remote peers too, but opaque names like fab_shm's. */
static int hybrid;
#define VER FI_VERSION(1, 17)

static int checks;

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                      \
		}                                                                     \
		checks++;                                                             \
	} while (0)

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

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads one entry of `size` bytes, polling for at most 5 seconds. */
static ssize_t read_one(struct fid_cq *cq, void *entry)
{
	double end = now() + 5;
	ssize_t r;
	do {
		r = fi_cq_read(cq, entry, 1);
	} while (r == -FI_EAGAIN && now() < end);
	return r;
}

/* The stack the data tests run on: 0 is the default (FI_THREAD_DOMAIN, manual progress,
 * FI_AV_TABLE); 1 asks for FI_THREAD_SAFE, auto progress and FI_AV_MAP, another
 * monomorphized stack behind the same ops tables' shape. */
static int variant;

static struct fi_info *hints_base(void)
{
	struct fi_info *h = fi_allocinfo();
	CHECK(h != NULL);
	h->fabric_attr->prov_name = strdup(PROV);
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC;
	h->mode = FI_CONTEXT;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	if (variant == 1) {
		h->domain_attr->threading = FI_THREAD_SAFE;
		h->domain_attr->data_progress = FI_PROGRESS_AUTO;
		h->domain_attr->av_type = FI_AV_MAP;
	}
	return h;
}

static void test_getinfo(void)
{
	struct fi_info *h = hints_base(), *info = NULL;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &info), 0);
	CHECK(info != NULL);
	CHECK(strcmp(info->fabric_attr->prov_name, PROV) == 0);
	CHECK(strcmp(info->fabric_attr->name, PROV) == 0);
	CHECK(strcmp(info->domain_attr->name, PROV) == 0);
	EQ(info->ep_attr->type, FI_EP_RDM);
	CHECK((info->caps & (FI_MSG | FI_TAGGED)) == (FI_MSG | FI_TAGGED));
	/* Only what the plugin implements is claimed; remote peers over tcp and hybrid. */
	EQ(info->caps & (FI_TRIGGER | FI_RMA_EVENT), 0);
	EQ(info->caps & FI_REMOTE_COMM, tcp || hybrid ? FI_REMOTE_COMM : 0);
	CHECK(info->caps & FI_LOCAL_COMM);
	if (tcp)
		CHECK(info->addr_format == FI_SOCKADDR_IN || info->addr_format == FI_SOCKADDR_IN6);
	EQ(info->domain_attr->threading, FI_THREAD_DOMAIN);
	EQ(info->domain_attr->data_progress, FI_PROGRESS_MANUAL);
	EQ(info->domain_attr->av_type, FI_AV_TABLE);
	EQ(info->domain_attr->mr_mode, 0);
	/* No scalable endpoints or shared contexts through the plugin, so none claimed. */
	EQ(info->domain_attr->max_ep_tx_ctx, 1);
	EQ(info->domain_attr->max_ep_rx_ctx, 1);
	EQ(info->domain_attr->max_ep_stx_ctx, 0);
	EQ(info->domain_attr->max_ep_srx_ctx, 0);
	EQ(info->mode, 0);
	CHECK(info->tx_attr->inject_size > 0);
	fi_freeinfo(info);

	/* Hints choose the stack: thread safety, auto progress, a map AV. */
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
	h->domain_attr->av_type = FI_AV_MAP;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &info), 0);
	EQ(info->domain_attr->threading, FI_THREAD_SAFE);
	EQ(info->domain_attr->data_progress, FI_PROGRESS_AUTO);
	EQ(info->domain_attr->av_type, FI_AV_MAP);
	fi_freeinfo(info);

	/* What we do not offer matches nothing. */
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
	h->domain_attr->av_type = FI_AV_UNSPEC;
	h->caps = FI_MSG | FI_TRIGGER;
	info = NULL;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &info), -FI_ENODATA);
	CHECK(info == NULL);
	/* MSG endpoints: tcp has them, with manual progress (they run on the stack of the
	 * fabric's EQs); shm does not. */
	h->caps = FI_MSG;
	h->ep_attr->type = FI_EP_MSG;
	if (tcp) {
		EQ(fi_getinfo(VER, NULL, NULL, 0, h, &info), 0);
		EQ(info->ep_attr->type, FI_EP_MSG);
		EQ(info->domain_attr->data_progress, FI_PROGRESS_MANUAL);
		EQ(info->caps & (FI_SOURCE | FI_DIRECTED_RECV), 0);
		fi_freeinfo(info);
		info = NULL;
		/* Node and service name the local address with FI_SOURCE, else a peer. */
		EQ(fi_getinfo(VER, "127.0.0.1", "4242", FI_SOURCE, h, &info), 0);
		CHECK(info->src_addr != NULL && info->dest_addr == NULL);
		EQ(((struct sockaddr_in *)info->src_addr)->sin_port, htons(4242));
		fi_freeinfo(info);
		EQ(fi_getinfo(VER, "127.0.0.1", "4243", 0, h, &info), 0);
		CHECK(info->dest_addr != NULL);
		EQ(((struct sockaddr_in *)info->dest_addr)->sin_port, htons(4243));
		fi_freeinfo(info);
		info = NULL;
	} else {
		EQ(fi_getinfo(VER, NULL, NULL, 0, h, &info), -FI_ENODATA);
	}
	h->ep_attr->type = FI_EP_RDM;
	/* An address format that is not ours. */
	h->addr_format = tcp ? FI_ADDR_STR : FI_SOCKADDR_IN;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &info), -FI_ENODATA);
	h->addr_format = FI_FORMAT_UNSPEC;
	h->tx_attr->inject_size = 1 << 30;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &info), -FI_ENODATA);
	h->tx_attr->inject_size = 0;
	/* An API version from the future is refused. */
	CHECK(fi_getinfo(FI_VERSION(1, 99), NULL, NULL, 0, h, &info) < 0);
	CHECK(fi_getinfo(FI_VERSION(2, 0), NULL, NULL, 0, h, &info) < 0);
	fi_freeinfo(h);
	printf("ok getinfo\n");
}

struct res {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep;
	fi_addr_t self;
};

static void open_res(struct res *r, struct fid_cq **cqs, int ncq)
{
	struct fi_info *h = hints_base();
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &r->info), 0);
	fi_freeinfo(h);
	EQ(fi_fabric(r->info->fabric_attr, &r->fabric, NULL), 0);
	EQ(r->fabric->fid.fclass, FI_CLASS_FABRIC);
	EQ(fi_domain(r->fabric, r->info, &r->domain, NULL), 0);
	EQ(r->domain->fid.fclass, FI_CLASS_DOMAIN);
	struct fi_av_attr av_attr = { .type = r->info->domain_attr->av_type };
	EQ(fi_av_open(r->domain, &av_attr, &r->av, NULL), 0);
	EQ(fi_endpoint(r->domain, r->info, &r->ep, NULL), 0);
	EQ(r->ep->fid.fclass, FI_CLASS_EP);
	for (int i = 0; i < ncq; i++) {
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
		EQ(fi_cq_open(r->domain, &cq_attr, &cqs[i], NULL), 0);
	}
	EQ(fi_ep_bind(r->ep, &cqs[0]->fid, FI_TRANSMIT | FI_RECV), 0);
	EQ(fi_ep_bind(r->ep, &r->av->fid, 0), 0);
	EQ(fi_enable(r->ep), 0);
	char name[256];
	size_t len = sizeof(name);
	EQ(fi_getname(&r->ep->fid, name, &len), 0);
	CHECK(len > 0 && len < sizeof(name));
	/* Programs keep names in FI_NAME_MAX bytes (Open MPI's mtl ofi does). */
	CHECK(len <= FI_NAME_MAX);
	EQ(fi_av_insert(r->av, name, 1, &r->self, 0, NULL), 1);
}

static void close_res(struct res *r, struct fid_cq **cqs, int ncq)
{
	EQ(fi_close(&r->ep->fid), 0);
	EQ(fi_close(&r->av->fid), 0);
	for (int i = 0; i < ncq; i++)
		EQ(fi_close(&cqs[i]->fid), 0);
	EQ(fi_close(&r->domain->fid), 0);
	EQ(fi_close(&r->fabric->fid), 0);
	fi_freeinfo(r->info);
}

/* Reads the completions of a send to self (context `s`) and of its receive (`r`), in
 * either order; returns the receive's entry. */
static struct fi_cq_tagged_entry send_recv_pair(struct fid_cq *cq, void *s, void *r)
{
	struct fi_cq_tagged_entry e, got = { 0 };
	int sends = 0, recvs = 0;
	for (int k = 0; k < 2; k++) {
		EQ(read_one(cq, &e), 1);
		if (e.op_context == s) {
			CHECK(e.flags & FI_SEND);
			sends++;
		} else {
			CHECK(e.op_context == r);
			CHECK(e.flags & FI_RECV);
			got = e;
			recvs++;
		}
	}
	EQ(sends, 1);
	EQ(recvs, 1);
	return got;
}

static void test_messages(void)
{
	struct res r;
	struct fid_cq *cq;
	open_res(&r, &cq, 1);
	char out[64], in[64];
	struct fi_cq_tagged_entry e;
	struct fi_context ctx_r, ctx_s;

	/* A message to self, with its completion fields. */
	for (int i = 0; i < 64; i++)
		out[i] = (char)(i * 7 + 1);
	memset(in, 0, sizeof(in));
	EQ(fi_recv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &ctx_r), 0);
	EQ(fi_send(r.ep, out, 40, NULL, r.self, &ctx_s), 0);
	int got_send = 0, got_recv = 0;
	for (int k = 0; k < 2; k++) {
		EQ(read_one(cq, &e), 1);
		if (e.op_context == &ctx_s) {
			CHECK(e.flags & FI_SEND);
			got_send++;
		} else {
			CHECK(e.op_context == &ctx_r);
			CHECK((e.flags & (FI_RECV | FI_MSG)) == (FI_RECV | FI_MSG));
			EQ(e.len, 40);
			got_recv++;
		}
	}
	EQ(got_send, 1);
	EQ(got_recv, 1);
	CHECK(memcmp(in, out, 40) == 0);

	/* Tagged: the receive takes the matching tag only; inject has no completion. */
	EQ(fi_trecv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 0x1234, 0, &ctx_r), 0);
	EQ(fi_tinject(r.ep, out, 8, r.self, 0x1234), 0);
	EQ(read_one(cq, &e), 1);
	CHECK(e.op_context == &ctx_r);
	CHECK(e.flags & FI_TAGGED);
	EQ(e.tag, 0x1234);
	EQ(e.len, 8);
	EQ(fi_cq_read(cq, &e, 1), -FI_EAGAIN);

	/* Remote CQ data. */
	EQ(fi_trecv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 5, 0, &ctx_r), 0);
	EQ(fi_tinjectdata(r.ep, out, 4, 0xfeedULL, r.self, 5), 0);
	EQ(read_one(cq, &e), 1);
	CHECK(e.flags & FI_REMOTE_CQ_DATA);
	EQ(e.data, 0xfeed);

	/* Truncation: an error entry with the overflow length. */
	EQ(fi_recv(r.ep, in, 8, NULL, FI_ADDR_UNSPEC, &ctx_r), 0);
	EQ(fi_inject(r.ep, out, 24, r.self), 0);
	EQ(read_one(cq, &e), -FI_EAVAIL);
	struct fi_cq_err_entry err;
	memset(&err, 0, sizeof(err));
	EQ(fi_cq_readerr(cq, &err, 0), 1);
	EQ(err.err, FI_ETRUNC);
	CHECK(err.op_context == &ctx_r);
	EQ(err.olen, 16);
	EQ(err.err_data_size, 0);
	CHECK(fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0) != NULL);
	EQ(fi_cq_readerr(cq, &err, 0), -FI_EAGAIN);

	/* Vectors. */
	struct iovec iov[2] = { { in, 10 }, { in + 10, 30 } };
	EQ(fi_recvv(r.ep, iov, NULL, 2, FI_ADDR_UNSPEC, &ctx_r), 0);
	struct iovec siov[2] = { { out, 20 }, { out + 20, 20 } };
	memset(in, 0, sizeof(in));
	EQ(fi_sendv(r.ep, siov, NULL, 2, r.self, &ctx_s), 0);
	for (int k = 0; k < 2; k++)
		EQ(read_one(cq, &e), 1);
	CHECK(memcmp(in, out, 40) == 0);

	/* iov_limit entries work (the receive scatters them in reverse order); one more is
	 * an invalid argument, -FI_EINVAL, and posts nothing. */
	const size_t lim = r.info->tx_attr->iov_limit;
	EQ(r.info->rx_attr->iov_limit, lim);
	CHECK(lim >= 1 && (lim + 1) * 8 <= sizeof(in));
	struct iovec lv[8], ls[8];
	for (size_t k = 0; k <= lim; k++) {
		lv[k] = (struct iovec){ in + 8 * (lim - k), 8 };
		ls[k] = (struct iovec){ out + 8 * k, 8 };
	}
	memset(in, 0, sizeof(in));
	EQ(fi_recvv(r.ep, lv, NULL, lim, FI_ADDR_UNSPEC, &ctx_r), 0);
	EQ(fi_sendv(r.ep, ls, NULL, lim, r.self, &ctx_s), 0);
	e = send_recv_pair(cq, &ctx_s, &ctx_r);
	EQ(e.len, 8 * lim);
	for (size_t k = 0; k < lim; k++)
		CHECK(memcmp(in + 8 * (lim - k), out + 8 * k, 8) == 0);
	for (int k = 0; k < 8; k++)
		EQ(in[k], 0);
	EQ(fi_recvv(r.ep, lv, NULL, lim + 1, FI_ADDR_UNSPEC, &ctx_r), -FI_EINVAL);
	EQ(fi_sendv(r.ep, ls, NULL, lim + 1, r.self, &ctx_s), -FI_EINVAL);
	EQ(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
	/* The same through the tagged message forms. */
	struct fi_msg_tagged tr = { .msg_iov = lv, .iov_count = lim, .addr = FI_ADDR_UNSPEC,
				    .tag = 0x77, .context = &ctx_r };
	struct fi_msg_tagged ts = { .msg_iov = ls, .iov_count = lim, .addr = r.self,
				    .tag = 0x77, .context = &ctx_s };
	memset(in, 0, sizeof(in));
	EQ(fi_trecvmsg(r.ep, &tr, FI_COMPLETION), 0);
	EQ(fi_tsendmsg(r.ep, &ts, FI_COMPLETION), 0);
	e = send_recv_pair(cq, &ctx_s, &ctx_r);
	CHECK(e.flags & FI_TAGGED);
	EQ(e.tag, 0x77);
	EQ(e.len, 8 * lim);
	for (size_t k = 0; k < lim; k++)
		CHECK(memcmp(in + 8 * (lim - k), out + 8 * k, 8) == 0);
	tr.iov_count = ts.iov_count = lim + 1;
	EQ(fi_trecvmsg(r.ep, &tr, FI_COMPLETION), -FI_EINVAL);
	EQ(fi_tsendmsg(r.ep, &ts, FI_COMPLETION), -FI_EINVAL);
	EQ(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
	/* Nothing was posted by the refused receives: a send finds no receive, and the
	 * one posted after it takes it. */
	EQ(fi_send(r.ep, out, 8, NULL, r.self, &ctx_s), 0);
	EQ(fi_recv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &ctx_r), 0);
	e = send_recv_pair(cq, &ctx_s, &ctx_r);
	EQ(e.len, 8);

	/* Cancel a receive: an FI_ECANCELED error entry. */
	EQ(fi_recv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &ctx_r), 0);
	EQ(fi_cancel(&r.ep->fid, &ctx_r), 0);
	EQ(read_one(cq, &e), -FI_EAVAIL);
	EQ(fi_cq_readerr(cq, &err, 0), 1);
	EQ(err.err, FI_ECANCELED);

	/* AV lookup and straddr. */
	char name[256], back[256], str[256];
	size_t len = sizeof(name), blen = sizeof(back), slen = sizeof(str);
	EQ(fi_getname(&r.ep->fid, name, &len), 0);
	EQ(fi_av_lookup(r.av, r.self, back, &blen), 0);
	EQ(blen, len);
	CHECK(memcmp(name, back, len) == 0);
	size_t small = 1;
	EQ(fi_getname(&r.ep->fid, name, &small), -FI_ETOOSMALL);
	EQ(small, len);
	CHECK(fi_av_straddr(r.av, name, str, &slen) == str);
	CHECK(slen > 1 && strlen(str) + 1 <= sizeof(str));

	/* Memory registration: a key and a descriptor, closed once. */
	static char region[4096];
	struct fid_mr *mr;
	EQ(fi_mr_reg(r.domain, region, sizeof(region), FI_SEND | FI_RECV, 0, 42, 0, &mr, NULL), 0);
	EQ(fi_mr_key(mr), 42);
	CHECK(fi_mr_desc(mr) != NULL);
	EQ(fi_close(&mr->fid), 0);
	EQ(fi_close(&mr->fid), -FI_EINVAL);

	/* RMA to self through a registered region: write, read back, a bad key. */
	static uint64_t target[8];
	struct fid_mr *tmr;
	EQ(fi_mr_reg(r.domain, target, sizeof(target), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 7, 0,
		     &tmr, NULL),
	   0);
	uint64_t w[2] = { 0x1111222233334444ULL, 0x5555666677778888ULL }, rd[2] = { 0, 0 };
	EQ(fi_write(r.ep, w, sizeof(w), NULL, r.self, 16, 7, &ctx_s), 0);
	EQ(read_one(cq, &e), 1);
	CHECK(e.op_context == &ctx_s);
	CHECK((e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE));
	EQ(target[2], w[0]);
	EQ(target[3], w[1]);
	EQ(fi_read(r.ep, rd, sizeof(rd), NULL, r.self, 16, 7, &ctx_r), 0);
	EQ(read_one(cq, &e), 1);
	CHECK(e.op_context == &ctx_r);
	CHECK(e.flags & FI_READ);
	EQ(rd[1], w[1]);
	EQ(fi_inject_write(r.ep, &w[0], 8, r.self, 0, 7), 0);
	struct fi_rma_iov riov = { .addr = 8, .len = 8, .key = 7 };
	struct iovec liov = { &w[1], 8 };
	struct fi_msg_rma wm = { .msg_iov = &liov, .iov_count = 1, .addr = r.self,
				 .rma_iov = &riov, .rma_iov_count = 1, .context = &ctx_s };
	EQ(fi_writemsg(r.ep, &wm, FI_COMPLETION), 0);
	EQ(read_one(cq, &e), 1);
	EQ(target[0], w[0]);
	EQ(target[1], w[1]);
	/* A wrong key or a range past the region: an error entry, memory untouched. */
	EQ(fi_write(r.ep, w, 8, NULL, r.self, 0, 99, &ctx_s), 0);
	EQ(read_one(cq, &e), -FI_EAVAIL);
	EQ(fi_cq_readerr(cq, &err, 0), 1);
	CHECK(err.op_context == &ctx_s);
	CHECK(err.err != 0);
	EQ(fi_write(r.ep, w, 16, NULL, r.self, 56, 7, &ctx_s), 0);
	EQ(read_one(cq, &e), -FI_EAVAIL);
	EQ(fi_cq_readerr(cq, &err, 0), 1);
	CHECK(err.err != 0);
	EQ(target[7], 0);
	/* Vectors at iov_limit entries, gathered and scattered in reverse; one more is
	 * refused and leaves the region as it was. */
	uint64_t src[8], dst[8];
	struct iovec wv[8], rv[8];
	for (size_t k = 0; k <= lim; k++) {
		src[k] = 0xa0a0a0a000000000ULL + k;
		dst[k] = 0;
		wv[k] = (struct iovec){ &src[lim - k], 8 };
		rv[k] = (struct iovec){ &dst[lim - k], 8 };
	}
	memset(target, 0, sizeof(target));
	EQ(fi_writev(r.ep, wv, NULL, lim, r.self, 0, 7, &ctx_s), 0);
	EQ(read_one(cq, &e), 1);
	CHECK(e.op_context == &ctx_s);
	for (size_t k = 0; k < lim; k++)
		EQ(target[k], src[lim - k]);
	EQ(target[lim], 0);
	EQ(fi_readv(r.ep, rv, NULL, lim, r.self, 0, 7, &ctx_r), 0);
	EQ(read_one(cq, &e), 1);
	CHECK(e.op_context == &ctx_r);
	for (size_t k = 1; k <= lim; k++)
		EQ(dst[k], src[k]);
	EQ(dst[0], 0);
	EQ(fi_writev(r.ep, wv, NULL, lim + 1, r.self, 0, 7, &ctx_s), -FI_EINVAL);
	EQ(fi_readv(r.ep, rv, NULL, lim + 1, r.self, 0, 7, &ctx_r), -FI_EINVAL);
	EQ(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
	EQ(target[lim], 0);
	/* Atomics on the same region: sum, fetch-and-add, compare-and-swap, read. */
	memset(target, 0, sizeof(target));
	uint64_t one = 5, old = 0, cmp = 12, swp = 99;
	EQ(fi_atomic(r.ep, &one, 1, NULL, r.self, 8, 7, FI_UINT64, FI_SUM, &ctx_s), 0);
	EQ(read_one(cq, &e), 1);
	CHECK((e.flags & (FI_ATOMIC | FI_WRITE)) == (FI_ATOMIC | FI_WRITE));
	EQ(target[1], 5);
	EQ(fi_inject_atomic(r.ep, &one, 1, r.self, 8, 7, FI_UINT64, FI_SUM), 0);
	uint64_t sixteen[2] = { 1, 2 };
	struct fi_ioc ioc = { sixteen, 2 };
	EQ(fi_atomicv(r.ep, &ioc, NULL, 1, r.self, 16, 7, FI_UINT64, FI_SUM, &ctx_s), 0);
	EQ(read_one(cq, &e), 1);
	EQ(target[2], 1);
	EQ(target[3], 2);
	EQ(fi_fetch_atomic(r.ep, &one, 1, NULL, &old, NULL, r.self, 8, 7, FI_UINT64, FI_SUM, &ctx_r), 0);
	EQ(read_one(cq, &e), 1);
	CHECK(e.flags & FI_READ);
	EQ(old, 10);
	EQ(target[1], 15);
	EQ(fi_compare_atomic(r.ep, &swp, 1, NULL, &cmp, NULL, &old, NULL, r.self, 8, 7, FI_UINT64,
			     FI_CSWAP, &ctx_r),
	   0);
	EQ(read_one(cq, &e), 1);
	EQ(old, 15);
	EQ(target[1], 15);
	cmp = 15;
	EQ(fi_compare_atomic(r.ep, &swp, 1, NULL, &cmp, NULL, &old, NULL, r.self, 8, 7, FI_UINT64,
			     FI_CSWAP, &ctx_r),
	   0);
	EQ(read_one(cq, &e), 1);
	EQ(target[1], 99);
	EQ(fi_fetch_atomic(r.ep, NULL, 1, NULL, &old, NULL, r.self, 8, 7, FI_UINT64, FI_ATOMIC_READ,
			   &ctx_r),
	   0);
	EQ(read_one(cq, &e), 1);
	EQ(old, 99);
	/* The message forms, one operand and one remote ioc. */
	struct fi_ioc op_ioc = { &one, 1 }, res_ioc = { &old, 1 };
	struct fi_rma_ioc rioc = { .addr = 8, .count = 1, .key = 7 };
	struct fi_msg_atomic am = { .msg_iov = &op_ioc, .iov_count = 1, .addr = r.self,
				    .rma_iov = &rioc, .rma_iov_count = 1, .datatype = FI_UINT64,
				    .op = FI_SUM, .context = &ctx_r };
	EQ(fi_fetch_atomicmsg(r.ep, &am, &res_ioc, NULL, 1, FI_COMPLETION), 0);
	EQ(read_one(cq, &e), 1);
	EQ(old, 99);
	EQ(target[1], 104);
	/* Limits: the most elements per call, and the domain's query. */
	size_t cnt = 0;
	EQ(fi_atomicvalid(r.ep, FI_UINT64, FI_SUM, &cnt), 0);
	CHECK(cnt >= 1);
	EQ(fi_compare_atomicvalid(r.ep, FI_UINT64, FI_CSWAP, &cnt), 0);
	CHECK(cnt >= 1);
	struct fi_atomic_attr aattr;
	EQ(fi_query_atomic(r.domain, FI_DOUBLE, FI_SUM, &aattr, 0), 0);
	EQ(aattr.size, 8);
	CHECK(aattr.count >= 1);
	EQ(fi_query_atomic(r.domain, FI_UINT64, FI_CSWAP, &aattr, FI_COMPARE_ATOMIC), 0);
	CHECK(fi_query_atomic(r.domain, FI_DOUBLE, FI_BOR, &aattr, 0) < 0);
	EQ(fi_query_atomic(r.domain, FI_UINT64, FI_SUM, &aattr, 1ULL << 40), -FI_EBADFLAGS);
	/* A bad key: an error entry, memory untouched. */
	EQ(fi_atomic(r.ep, &one, 1, NULL, r.self, 8, 98, FI_UINT64, FI_SUM, &ctx_s), 0);
	EQ(read_one(cq, &e), -FI_EAVAIL);
	EQ(fi_cq_readerr(cq, &err, 0), 1);
	CHECK(err.err != 0);
	EQ(target[1], 104);
	/* Atomic vectors at iov_limit iocs of one element each, the compare values in as
	 * many iocs (gathered into one buffer); one ioc more is refused. */
	uint64_t add[8], swap[8], want[8], res[8];
	struct fi_ioc addv[8], swapv[8], wantv[8], resv[8];
	for (size_t k = 0; k <= lim; k++) {
		add[k] = k + 1;
		swap[k] = 100 + k;
		want[k] = k + 1;
		res[k] = 0;
		addv[k] = (struct fi_ioc){ &add[k], 1 };
		swapv[k] = (struct fi_ioc){ &swap[k], 1 };
		wantv[k] = (struct fi_ioc){ &want[k], 1 };
		resv[k] = (struct fi_ioc){ &res[k], 1 };
	}
	memset(target, 0, sizeof(target));
	EQ(fi_atomicv(r.ep, addv, NULL, lim, r.self, 0, 7, FI_UINT64, FI_SUM, &ctx_s), 0);
	EQ(read_one(cq, &e), 1);
	for (size_t k = 0; k < lim; k++)
		EQ(target[k], k + 1);
	EQ(fi_compare_atomicv(r.ep, swapv, NULL, lim, wantv, NULL, lim, resv, NULL, lim, r.self, 0,
			      7, FI_UINT64, FI_CSWAP, &ctx_r),
	   0);
	EQ(read_one(cq, &e), 1);
	for (size_t k = 0; k < lim; k++) {
		EQ(target[k], 100 + k);
		EQ(res[k], k + 1);
	}
	EQ(fi_atomicv(r.ep, addv, NULL, lim + 1, r.self, 0, 7, FI_UINT64, FI_SUM, &ctx_s),
	   -FI_EINVAL);
	EQ(fi_compare_atomicv(r.ep, swapv, NULL, lim + 1, wantv, NULL, lim + 1, resv, NULL,
			      lim + 1, r.self, 0, 7, FI_UINT64, FI_CSWAP, &ctx_r),
	   -FI_EINVAL);
	EQ(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
	EQ(target[lim], 0);
	EQ(fi_close(&tmr->fid), 0);

	/* Endpoint options: the multi-receive threshold round-trips, unknown ones are
	 * refused. */
	size_t minmr = 4096, got = 0, glen = sizeof(got);
	EQ(fi_setopt(&r.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &minmr, sizeof(minmr)), 0);
	EQ(fi_getopt(&r.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &glen), 0);
	EQ(got, 4096);
	EQ(glen, sizeof(size_t));
	glen = 1;
	EQ(fi_getopt(&r.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &glen), -FI_ETOOSMALL);
	EQ(fi_setopt(&r.ep->fid, FI_OPT_ENDPOINT, 1000, &minmr, sizeof(minmr)), -FI_ENOPROTOOPT);
	EQ(fi_setopt(&r.ep->fid, 7, FI_OPT_MIN_MULTI_RECV, &minmr, sizeof(minmr)), -FI_ENOPROTOOPT);

	/* AV remove: the address is gone afterwards. */
	EQ(fi_av_remove(r.av, &r.self, 1, 0), 0);
	blen = sizeof(back);
	CHECK(fi_av_lookup(r.av, r.self, back, &blen) < 0);

	close_res(&r, &cq, 1);
	printf("ok messages (stack %d)\n", variant);
}

/* Open MPI's synchronous send over a matched probe (MPI_Issend, MPI_Mprobe, MPI_Mrecv in
 * mtl ofi): the sender posts the acknowledgement's receive, then sends with a "sync"
 * tag bit and its rank as remote CQ data; the receiver peeks and claims the message,
 * receives it by the claiming context, and answers with a zero-byte fi_tsendmsg
 * (dummy iovec, no FI_COMPLETION) whose tag is built from the claimed entry's tag. */
static void test_peek_claim(void)
{
	struct res r;
	struct fid_cq *cq;
	open_res(&r, &cq, 1);
	const uint64_t SYNC = 1ULL << 61, ACK = 1ULL << 60, T = 0x0000000700000003ULL;
	char out[16] = "sixteen bytes!!", in[16], ackbuf[1];
	struct fi_cq_tagged_entry e;
	struct fi_context ctx_ack, ctx_claim, ctx_peek;

	EQ(fi_trecv(r.ep, ackbuf, 0, NULL, r.self, T | ACK, 0, &ctx_ack), 0);
	EQ(fi_tinjectdata(r.ep, out, 16, 5, r.self, T | SYNC), 0);

	/* A peek that matches nothing: FI_ENOMSG as an error entry. */
	struct iovec none = { NULL, 0 };
	struct fi_msg_tagged pm = { .msg_iov = NULL, .iov_count = 0, .addr = FI_ADDR_UNSPEC,
				    .tag = 0x99, .ignore = 0, .context = &ctx_peek };
	EQ(fi_trecvmsg(r.ep, &pm, FI_PEEK | FI_COMPLETION), 0);
	EQ(read_one(cq, &e), -FI_EAVAIL);
	struct fi_cq_err_entry err;
	memset(&err, 0, sizeof(err));
	EQ(fi_cq_readerr(cq, &err, 0), 1);
	EQ(err.err, FI_ENOMSG);
	CHECK(err.op_context == &ctx_peek);

	/* Peek and claim, polling until the message is there (it may be in flight). */
	pm.tag = T;
	pm.ignore = SYNC | ACK;
	pm.context = &ctx_claim;
	double end = now() + 5;
	for (;;) {
		EQ(fi_trecvmsg(r.ep, &pm, FI_PEEK | FI_CLAIM | FI_COMPLETION), 0);
		ssize_t n = read_one(cq, &e);
		if (n == 1)
			break;
		EQ(n, -FI_EAVAIL);
		EQ(fi_cq_readerr(cq, &err, 0), 1);
		EQ(err.err, FI_ENOMSG);
		CHECK(now() < end);
	}
	CHECK(e.op_context == &ctx_claim);
	EQ(e.tag, T | SYNC);
	EQ(e.len, 16);
	CHECK(e.flags & FI_REMOTE_CQ_DATA);
	EQ(e.data, 5);

	/* The claimed message, received by its context (mtl ofi passes addr 0). */
	struct iovec iov = { in, sizeof(in) };
	struct fi_msg_tagged cm = { .msg_iov = &iov, .iov_count = 1, .addr = 0,
				    .tag = e.tag, .ignore = SYNC | ACK, .context = &ctx_claim };
	memset(in, 0, sizeof(in));
	EQ(fi_trecvmsg(r.ep, &cm, FI_CLAIM | FI_COMPLETION), 0);
	EQ(read_one(cq, &e), 1);
	CHECK(e.op_context == &ctx_claim);
	EQ(e.tag, T | SYNC);
	EQ(e.len, 16);
	CHECK((e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED));
	CHECK(e.flags & FI_REMOTE_CQ_DATA);
	EQ(e.data, 5);
	CHECK(memcmp(in, out, 16) == 0);
	/* The same context claims nothing more. */
	CHECK(fi_trecvmsg(r.ep, &cm, FI_CLAIM | FI_COMPLETION) < 0);

	/* The acknowledgement. The CQ was bound without FI_SELECTIVE_COMPLETION, so the
	 * send completes too, with its NULL context. */
	struct fi_msg_tagged am = { .msg_iov = &none, .iov_count = 1, .addr = r.self,
				    .tag = (e.tag | ACK) & ~SYNC, .context = NULL };
	EQ(fi_tsendmsg(r.ep, &am, 0), 0);
	int acked = 0, sent = 0;
	for (int k = 0; k < 2; k++) {
		EQ(read_one(cq, &e), 1);
		if (e.op_context == NULL) {
			CHECK(e.flags & FI_SEND);
			sent++;
			continue;
		}
		CHECK(e.op_context == &ctx_ack);
		EQ(e.tag, T | ACK);
		EQ(e.len, 0);
		acked++;
	}
	EQ(acked, 1);
	EQ(sent, 1);
	EQ(fi_cq_read(cq, &e, 1), -FI_EAGAIN);

	close_res(&r, &cq, 1);
	printf("ok peek and claim (stack %d)\n", variant);
}

/* Each CQ format gets its own entry size and fields. */
static void test_formats(void)
{
	enum fi_cq_format fmts[] = { FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA,
				     FI_CQ_FORMAT_TAGGED };
	for (unsigned f = 0; f < 4; f++) {
		struct res r;
		struct fid_cq *cq;
		struct fi_info *h = hints_base();
		EQ(fi_getinfo(VER, NULL, NULL, 0, h, &r.info), 0);
		fi_freeinfo(h);
		EQ(fi_fabric(r.info->fabric_attr, &r.fabric, NULL), 0);
		EQ(fi_domain(r.fabric, r.info, &r.domain, NULL), 0);
		struct fi_av_attr av_attr = { .type = r.info->domain_attr->av_type };
		EQ(fi_av_open(r.domain, &av_attr, &r.av, NULL), 0);
		struct fi_cq_attr cq_attr = { .format = fmts[f], .wait_obj = FI_WAIT_NONE };
		EQ(fi_cq_open(r.domain, &cq_attr, &cq, NULL), 0);
		EQ(fi_endpoint(r.domain, r.info, &r.ep, NULL), 0);
		EQ(fi_ep_bind(r.ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		EQ(fi_ep_bind(r.ep, &r.av->fid, 0), 0);
		EQ(fi_enable(r.ep), 0);
		char name[256];
		size_t len = sizeof(name);
		EQ(fi_getname(&r.ep->fid, name, &len), 0);
		EQ(fi_av_insert(r.av, name, 1, &r.self, 0, NULL), 1);

		/* Two entries read at once, a guard after them untouched. */
		char in[2][32], out[32] = "format check";
		struct fi_context ctx[2];
		for (int i = 0; i < 2; i++)
			EQ(fi_trecv(r.ep, in[i], sizeof(in[i]), NULL, FI_ADDR_UNSPEC, 9, 0, &ctx[i]), 0);
		EQ(fi_tinjectdata(r.ep, out, 13, 77, r.self, 9), 0);
		EQ(fi_tinjectdata(r.ep, out, 5, 78, r.self, 9), 0);
		unsigned char buf[4 * sizeof(struct fi_cq_tagged_entry)];
		memset(buf, 0xa5, sizeof(buf));
		double end = now() + 5;
		ssize_t n = 0;
		size_t esz[] = { sizeof(struct fi_cq_entry), sizeof(struct fi_cq_msg_entry),
				 sizeof(struct fi_cq_data_entry), sizeof(struct fi_cq_tagged_entry) };
		while (n < 2 && now() < end) {
			ssize_t k = fi_cq_read(cq, buf + n * esz[f], 2 - n);
			if (k > 0)
				n += k;
			else if (k != -FI_EAGAIN)
				EQ(k, -FI_EAGAIN);
		}
		EQ(n, 2);
		EQ(buf[2 * esz[f]], 0xa5);
		for (int i = 0; i < 2; i++) {
			void *p = buf + i * esz[f];
			CHECK(((struct fi_cq_entry *)p)->op_context == &ctx[i]);
			if (fmts[f] >= FI_CQ_FORMAT_MSG) {
				struct fi_cq_msg_entry *m = p;
				EQ(m->len, i == 0 ? 13 : 5);
				CHECK(m->flags & FI_RECV);
			}
			if (fmts[f] >= FI_CQ_FORMAT_DATA) {
				struct fi_cq_data_entry *d = p;
				EQ(d->data, 77 + i);
				CHECK(d->buf == in[i]);
			}
			if (fmts[f] == FI_CQ_FORMAT_TAGGED)
				EQ(((struct fi_cq_tagged_entry *)p)->tag, 9);
		}
		CHECK(memcmp(in[0], out, 13) == 0);
		/* readfrom gives the source address with FI_SOURCE, else FI_ADDR_NOTAVAIL. */
		fi_addr_t src = 0;
		EQ(fi_trecv(r.ep, in[0], sizeof(in[0]), NULL, FI_ADDR_UNSPEC, 9, 0, &ctx[0]), 0);
		EQ(fi_tinject(r.ep, out, 3, r.self, 9), 0);
		end = now() + 5;
		ssize_t k;
		do {
			k = fi_cq_readfrom(cq, buf, 1, &src);
		} while (k == -FI_EAGAIN && now() < end);
		EQ(k, 1);
		EQ(src, (r.info->caps & FI_SOURCE) ? r.self : FI_ADDR_NOTAVAIL);
		close_res(&r, &cq, 1);
		printf("ok format %d (stack %d)\n", fmts[f], variant);
	}
}

static void test_misuse(void)
{
	struct res r;
	struct fid_cq *cqs[2];
	open_res(&r, cqs, 2);
	char buf[16];

	/* NULL pointers. */
	EQ(fi_cq_read(cqs[0], NULL, 1), -FI_EINVAL);
	EQ(fi_cq_readerr(cqs[0], NULL, 0), -FI_EINVAL);
	EQ(fi_send(r.ep, NULL, 8, NULL, r.self, NULL), -FI_EINVAL);
	EQ(fi_recv(r.ep, NULL, 8, NULL, FI_ADDR_UNSPEC, NULL), -FI_EINVAL);
	EQ(fi_sendmsg(r.ep, NULL, 0), -FI_EINVAL);
	EQ(fi_getname(&r.ep->fid, buf, NULL), -FI_EINVAL);
	EQ(fi_av_insert(r.av, NULL, 1, NULL, 0, NULL), -FI_EINVAL);
	EQ(fi_ep_bind(r.ep, NULL, 0), -FI_EINVAL);
	EQ(fi_cq_open(r.domain, NULL, &cqs[1], NULL), -FI_EINVAL);
	EQ(fi_endpoint(r.domain, r.info, NULL, NULL), -FI_EINVAL);

	/* Wrong classes and foreign objects as bind targets. */
	EQ(fi_ep_bind(r.ep, &r.domain->fid, 0), -FI_EINVAL);
	EQ(fi_ep_bind(r.ep, &r.fabric->fid, 0), -FI_EINVAL);
	struct fid fake = { .fclass = FI_CLASS_CQ, .context = NULL, .ops = NULL };
	EQ(fi_ep_bind(r.ep, &fake, FI_TRANSMIT), -FI_EINVAL);

	/* Unknown flags. */
	EQ(fi_ep_bind(r.ep, &cqs[1]->fid, 1ULL << 62), -FI_EBADFLAGS);
	EQ(fi_ep_bind(r.ep, &r.av->fid, FI_TRANSMIT), -FI_EBADFLAGS);
	fi_addr_t a;
	EQ(fi_av_insert(r.av, buf, 0, &a, 1ULL << 62, NULL), -FI_EBADFLAGS);
	EQ(fi_av_remove(r.av, &a, 1, 1ULL << 62), -FI_EBADFLAGS);

	/* What we do not offer. */
	EQ(fi_barrier(r.ep, 0, NULL), -FI_ENOSYS);
	EQ(fi_atomic(r.ep, buf, 1, NULL, r.self, 0, 0, FI_UINT64, (enum fi_op)99, NULL), -FI_EINVAL);
	EQ(fi_atomic(r.ep, buf, 1, NULL, r.self, 0, 0, (enum fi_datatype)99, FI_SUM, NULL), -FI_EINVAL);
	size_t cnt;
	EQ(fi_atomicvalid(r.ep, FI_UINT64, FI_SUM, NULL), -FI_EINVAL);
	CHECK(fi_compare_atomicvalid(r.ep, FI_UINT64, FI_SUM, &cnt) < 0);
	struct fi_msg_rma two = { .iov_count = 0, .rma_iov_count = 2 };
	EQ(fi_writemsg(r.ep, &two, 0), -FI_EINVAL);
	if (tcp) {
		/* A host and port name a tcp address. */
		a = FI_ADDR_NOTAVAIL;
		EQ(fi_av_insertsvc(r.av, "127.0.0.1", "1", &a, 0, NULL), 1);
		CHECK(a != FI_ADDR_NOTAVAIL);
		EQ(fi_av_insertsvc(r.av, "127.0.0.1", "not-a-port", &a, 0, NULL), -FI_EINVAL);
	} else {
		EQ(fi_av_insertsvc(r.av, "localhost", "1", &a, 0, NULL), -FI_ENOSYS);
	}
	/* An RDM endpoint does not connect. */
	char me[256];
	size_t melen = sizeof(me);
	EQ(fi_getname(&r.ep->fid, me, &melen), 0);
	EQ(fi_connect(r.ep, me, NULL, 0), -FI_EOPNOTSUPP);
	/* A table domain serves a map AV (Open MPI's btl ofi asks for one on any domain):
	 * its addresses are the values insert returns. */
	struct fi_av_attr map_attr = { .type = FI_AV_MAP };
	struct fid_av *av2;
	EQ(fi_av_open(r.domain, &map_attr, &av2, NULL), 0);
	fi_addr_t a2 = FI_ADDR_NOTAVAIL;
	EQ(fi_av_insert(av2, me, 1, &a2, 0, NULL), 1);
	CHECK(a2 != FI_ADDR_NOTAVAIL);
	char back2[256];
	size_t back2len = sizeof(back2);
	EQ(fi_av_lookup(av2, a2, back2, &back2len), 0);
	EQ(back2len, melen);
	CHECK(memcmp(back2, me, melen) == 0);
	/* The same address inserted again keeps its fi_addr (Open MPI inserts a peer once
	 * per communicator that reaches it). */
	fi_addr_t a3 = FI_ADDR_NOTAVAIL;
	EQ(fi_av_insert(av2, me, 1, &a3, 0, NULL), 1);
	EQ(a3, a2);
	EQ(fi_close(&av2->fid), 0);
	/* A map domain cannot serve a table, whose addresses must count from 0. */
	{
		struct fi_info *mh = hints_base(), *mi;
		mh->domain_attr->av_type = FI_AV_MAP;
		EQ(fi_getinfo(VER, NULL, NULL, 0, mh, &mi), 0);
		struct fid_domain *md;
		EQ(fi_domain(r.fabric, mi, &md, NULL), 0);
		struct fi_av_attr table_attr = { .type = FI_AV_TABLE };
		EQ(fi_av_open(md, &table_attr, &av2, NULL), -FI_EINVAL);
		EQ(fi_av_open(md, &map_attr, &av2, NULL), 0);
		EQ(fi_close(&av2->fid), 0);
		EQ(fi_close(&md->fid), 0);
		fi_freeinfo(mi);
		fi_freeinfo(mh);
	}

	/* Objects in use cannot close: -FI_EBUSY, and they stay usable. */
	EQ(fi_close(&r.domain->fid), -FI_EBUSY);
	EQ(fi_close(&r.fabric->fid), -FI_EBUSY);
	EQ(fi_close(&cqs[0]->fid), -FI_EBUSY);
	EQ(fi_close(&r.av->fid), -FI_EBUSY);
	struct fi_cq_tagged_entry te;
	EQ(fi_cq_read(cqs[0], &te, 1), -FI_EAGAIN);

	/* Double close. */
	EQ(fi_close(&cqs[1]->fid), 0);
	EQ(fi_close(&cqs[1]->fid), -FI_EINVAL);
	/* A closed CQ is no bind target. */
	EQ(fi_ep_bind(r.ep, &cqs[1]->fid, FI_TRANSMIT), -FI_EINVAL);

	EQ(fi_close(&r.ep->fid), 0);
	EQ(fi_close(&r.ep->fid), -FI_EINVAL);
	/* A closed object's calls fail instead of touching freed state. */
	EQ(fi_send(r.ep, buf, 8, NULL, r.self, NULL), -FI_EINVAL);
	EQ(fi_tinject(r.ep, buf, 8, r.self, 1), -FI_EINVAL);
	EQ(fi_cq_read(cqs[1], &te, 1), -FI_EINVAL);
	EQ(fi_enable(r.ep), -FI_EINVAL);
	EQ(fi_close(&r.av->fid), 0);
	EQ(fi_close(&cqs[0]->fid), 0);
	EQ(fi_close(&r.domain->fid), 0);
	EQ(fi_close(&r.domain->fid), -FI_EINVAL);
	EQ(fi_close(&r.fabric->fid), 0);
	EQ(fi_close(&r.fabric->fid), -FI_EINVAL);
	fi_freeinfo(r.info);
	printf("ok misuse\n");
}

/* Counters: completions counted per direction, add/set, errors, a bounded wait; a
 * blocking CQ read (sread) with a wait object. */
static void test_counters_and_waits(void)
{
	struct fi_info *h = hints_base();
	struct res r;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &r.info), 0);
	fi_freeinfo(h);
	EQ(fi_fabric(r.info->fabric_attr, &r.fabric, NULL), 0);
	EQ(fi_domain(r.fabric, r.info, &r.domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	EQ(fi_av_open(r.domain, &av_attr, &r.av, NULL), 0);
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cq *cq;
	EQ(fi_cq_open(r.domain, &cq_attr, &cq, NULL), 0);
	struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cntr *tx, *rx;
	EQ(fi_cntr_open(r.domain, &cntr_attr, &tx, NULL), 0);
	EQ(fi_cntr_open(r.domain, &cntr_attr, &rx, NULL), 0);
	EQ(tx->fid.fclass, FI_CLASS_CNTR);
	EQ(fi_endpoint(r.domain, r.info, &r.ep, NULL), 0);
	EQ(fi_ep_bind(r.ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	EQ(fi_ep_bind(r.ep, &tx->fid, FI_SEND), 0);
	EQ(fi_ep_bind(r.ep, &rx->fid, FI_RECV), 0);
	EQ(fi_ep_bind(r.ep, &r.av->fid, 0), 0);
	EQ(fi_enable(r.ep), 0);
	char name[256];
	size_t len = sizeof(name);
	EQ(fi_getname(&r.ep->fid, name, &len), 0);
	EQ(fi_av_insert(r.av, name, 1, &r.self, 0, NULL), 1);

	char in[16], out[16] = "counted";
	struct fi_context ctx;
	EQ(fi_cntr_read(rx), 0);
	EQ(fi_recv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &ctx), 0);
	EQ(fi_send(r.ep, out, 8, NULL, r.self, &ctx), 0);
	EQ(fi_cntr_wait(rx, 1, 5000), 0);
	EQ(fi_cntr_wait(tx, 1, 5000), 0);
	EQ(fi_cntr_read(rx), 1);
	EQ(fi_cntr_read(tx), 1);
	/* Nothing more arrives: the wait times out. */
	EQ(fi_cntr_wait(rx, 2, 20), -FI_ETIMEDOUT);
	EQ(fi_cntr_add(rx, 5), 0);
	EQ(fi_cntr_read(rx), 6);
	EQ(fi_cntr_set(rx, 2), 0);
	EQ(fi_cntr_read(rx), 2);
	EQ(fi_cntr_adderr(rx, 3), 0);
	EQ(fi_cntr_readerr(rx), 3);
	EQ(fi_cntr_seterr(rx, 0), 0);
	EQ(fi_cntr_readerr(rx), 0);

	/* The two completions, read blocking. */
	struct fi_cq_msg_entry e[2];
	ssize_t n = 0;
	double end = now() + 5;
	while (n < 2 && now() < end) {
		ssize_t k = fi_cq_sread(cq, &e[n], 2 - n, NULL, 1000);
		if (k > 0)
			n += k;
		else if (k != -FI_EAGAIN)
			EQ(k, -FI_EAGAIN);
	}
	EQ(n, 2);
	/* Empty: sread returns -FI_EAGAIN at its timeout. */
	double t0 = now();
	EQ(fi_cq_sread(cq, e, 1, NULL, 50), -FI_EAGAIN);
	CHECK(now() - t0 >= 0.04);
	int fd = -1;
	CHECK(fi_control(&cq->fid, FI_GETWAIT, &fd) == 0 ? fd >= 0 : 1);

	EQ(fi_close(&rx->fid), -FI_EBUSY);
	EQ(fi_close(&r.ep->fid), 0);
	EQ(fi_close(&rx->fid), 0);
	EQ(fi_close(&tx->fid), 0);
	EQ(fi_close(&tx->fid), -FI_EINVAL);
	EQ(fi_close(&r.av->fid), 0);
	EQ(fi_close(&cq->fid), 0);
	EQ(fi_close(&r.domain->fid), 0);
	EQ(fi_close(&r.fabric->fid), 0);
	fi_freeinfo(r.info);
	printf("ok counters and waits\n");
}

/* Whether `fd` is readable within `ms` milliseconds. */
static int readable(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int n = poll(&pfd, 1, ms);
	CHECK(n >= 0);
	return n == 1 && (pfd.revents & POLLIN);
}

/* Calls fi_trywait on `fid` until it reports events (-FI_EAGAIN), for at most 5
 * seconds; under manual progress the call is what writes the completions. */
static int trywait_until_events(struct fid_fabric *fabric, struct fid *fid)
{
	double end = now() + 5;
	int r;
	do {
		r = fi_trywait(fabric, &fid, 1);
	} while (r == 0 && now() < end);
	return r;
}

/* Wait sets (a CQ and a counter on one FI_WAIT_FD set, an FI_WAIT_UNSPEC one),
 * fi_trywait, poll sets, and their misuse. */
static void test_wait_and_poll_sets(void)
{
	struct fi_info *h = hints_base();
	struct res r;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &r.info), 0);
	fi_freeinfo(h);
	EQ(fi_fabric(r.info->fabric_attr, &r.fabric, NULL), 0);

	/* fi_wait_open: bad attributes, then an FD set and an UNSPEC one. */
	struct fi_wait_attr wa = { .wait_obj = FI_WAIT_FD };
	struct fid_wait *ws, *ws2;
	EQ(fi_wait_open(r.fabric, NULL, &ws), -FI_EINVAL);
	EQ(fi_wait_open(r.fabric, &wa, NULL), -FI_EINVAL);
	wa.flags = 1;
	EQ(fi_wait_open(r.fabric, &wa, &ws), -FI_EBADFLAGS);
	wa.flags = 0;
	wa.wait_obj = FI_WAIT_NONE;
	EQ(fi_wait_open(r.fabric, &wa, &ws), -FI_EINVAL);
	wa.wait_obj = FI_WAIT_SET;
	EQ(fi_wait_open(r.fabric, &wa, &ws), -FI_EINVAL);
	wa.wait_obj = FI_WAIT_POLLFD;
	EQ(fi_wait_open(r.fabric, &wa, &ws), -FI_ENOSYS);
	wa.wait_obj = FI_WAIT_FD;
	EQ(fi_wait_open(r.fabric, &wa, &ws), 0);
	EQ(ws->fid.fclass, FI_CLASS_WAIT);
	wa.wait_obj = FI_WAIT_UNSPEC;
	EQ(fi_wait_open(r.fabric, &wa, &ws2), 0);
	int fd = -1, fd2 = -1;
	EQ(fi_control(&ws->fid, FI_GETWAIT, &fd), 0);
	CHECK(fd >= 0);
	EQ(fi_control(&ws->fid, FI_GETWAIT, NULL), -FI_EINVAL);
	EQ(fi_control(&ws2->fid, FI_GETWAIT, &fd2), -FI_EINVAL);
	enum fi_wait_obj wo = FI_WAIT_NONE;
	EQ(fi_control(&ws->fid, FI_GETWAITOBJ, &wo), 0);
	EQ(wo, FI_WAIT_FD);
	EQ(fi_control(&ws->fid, FI_GETOPSFLAG, &wo), -FI_ENOSYS);

	EQ(fi_domain(r.fabric, r.info, &r.domain, NULL), 0);
	struct fi_av_attr av_attr = { .type = r.info->domain_attr->av_type };
	EQ(fi_av_open(r.domain, &av_attr, &r.av, NULL), 0);

	/* CQs and counters on a set: no set, or not a set, is refused. */
	static int cq_ctx, cntr_ctx, rxc_ctx;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_SET };
	struct fid_cq *cq;
	EQ(fi_cq_open(r.domain, &cq_attr, &cq, &cq_ctx), -FI_EINVAL);
	cq_attr.wait_set = (struct fid_wait *)r.av;
	EQ(fi_cq_open(r.domain, &cq_attr, &cq, &cq_ctx), -FI_EINVAL);
	cq_attr.wait_set = ws;
	EQ(fi_cq_open(r.domain, &cq_attr, &cq, &cq_ctx), 0);
	struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_SET };
	struct fid_cntr *cntr, *cntr2;
	EQ(fi_cntr_open(r.domain, &cntr_attr, &cntr, &cntr_ctx), -FI_EINVAL);
	cntr_attr.wait_set = ws;
	EQ(fi_cntr_open(r.domain, &cntr_attr, &cntr, &cntr_ctx), 0);
	cntr_attr.wait_set = ws2;
	EQ(fi_cntr_open(r.domain, &cntr_attr, &cntr2, NULL), 0);
	/* wait_set is ignored with another wait object (fi_cq(3)). */
	struct fid_cq *plain;
	struct fi_cq_attr plain_attr = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE,
					 .wait_set = (struct fid_wait *)r.av };
	EQ(fi_cq_open(r.domain, &plain_attr, &plain, NULL), 0);
	/* A counter of receives, in no wait set, for the poll set. */
	struct fi_cntr_attr rxc_attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE };
	struct fid_cntr *rxc;
	EQ(fi_cntr_open(r.domain, &rxc_attr, &rxc, &rxc_ctx), 0);

	EQ(fi_endpoint(r.domain, r.info, &r.ep, NULL), 0);
	EQ(fi_ep_bind(r.ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	EQ(fi_ep_bind(r.ep, &rxc->fid, FI_RECV), 0);
	EQ(fi_ep_bind(r.ep, &r.av->fid, 0), 0);
	EQ(fi_enable(r.ep), 0);
	char name[256];
	size_t len = sizeof(name);
	EQ(fi_getname(&r.ep->fid, name, &len), 0);
	EQ(fi_av_insert(r.av, name, 1, &r.self, 0, NULL), 1);

	/* Nothing there: fi_wait times out, not early; safe to block; fd not readable. */
	struct fid *wsfid = &ws->fid;
	double t0 = now();
	EQ(fi_wait(ws, 50), -FI_ETIMEDOUT);
	CHECK(now() - t0 >= 0.045);
	EQ(fi_trywait(r.fabric, &wsfid, 1), 0);
	EQ(readable(fd, 0), 0);
	t0 = now();
	EQ(fi_wait(ws2, 20), -FI_ETIMEDOUT);
	CHECK(now() - t0 >= 0.015);

	/* A message to self: fi_wait returns, trywait says events, both completions. */
	char in[16], out[16] = "waited";
	struct fi_context rctx, sctx;
	struct fi_cq_entry e;
	EQ(fi_recv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	EQ(fi_send(r.ep, out, 7, NULL, r.self, &sctx), 0);
	EQ(fi_wait(ws, 5000), 0);
	struct fid *cqfid = &cq->fid;
	EQ(trywait_until_events(r.fabric, wsfid), -FI_EAGAIN);
	EQ(fi_trywait(r.fabric, &cqfid, 1), -FI_EAGAIN);
	for (int i = 0; i < 2; i++)
		EQ(read_one(cq, &e), 1);
	CHECK(strcmp(in, "waited") == 0);
	EQ(fi_trywait(r.fabric, &cqfid, 1), 0);
	EQ(fi_trywait(r.fabric, &wsfid, 1), 0);
	EQ(readable(fd, 0), 0);
	EQ(fi_wait(ws, 20), -FI_ETIMEDOUT);

	/* The set's fd: readable after a member's event with no call into the library
	 * (a counter's add; under auto progress, a message's completions, written by the
	 * progress thread), drained by trywait once nothing is left. */
	EQ(fi_cntr_add(cntr, 1), 0);
	EQ(readable(fd, 1000), 1);
	EQ(fi_trywait(r.fabric, &wsfid, 1), -FI_EAGAIN);
	EQ(fi_trywait(r.fabric, &wsfid, 1), 0);
	EQ(readable(fd, 0), 0);
	if (variant == 1) {
		EQ(fi_recv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &rctx), 0);
		EQ(fi_send(r.ep, out, 7, NULL, r.self, &sctx), 0);
		EQ(readable(fd, 5000), 1);
		EQ(fi_trywait(r.fabric, &wsfid, 1), -FI_EAGAIN);
		for (int i = 0; i < 2; i++)
			EQ(read_one(cq, &e), 1);
		EQ(fi_trywait(r.fabric, &wsfid, 1), 0);
		EQ(readable(fd, 0), 0);
	}

	/* The counter wakes its set once per change. */
	EQ(fi_cntr_add(cntr, 1), 0);
	EQ(fi_wait(ws, 5000), 0);
	EQ(fi_wait(ws, 20), -FI_ETIMEDOUT);
	EQ(fi_cntr_add(cntr2, 1), 0);
	EQ(fi_wait(ws2, 5000), 0);
	struct fid *cntrfid = &cntr->fid;
	EQ(fi_trywait(r.fabric, &cntrfid, 1), 0);

	/* An EQ on a set (fi_eq_open with FI_WAIT_SET): refused without one of our sets;
	 * its events end a wait; once closed, its events no longer do. */
	struct fi_eq_attr weq_attr = { .wait_obj = FI_WAIT_SET, .flags = FI_WRITE };
	struct fid_eq *weq;
	EQ(fi_eq_open(r.fabric, &weq_attr, &weq, NULL), -FI_EINVAL);
	weq_attr.wait_set = (struct fid_wait *)r.av;
	EQ(fi_eq_open(r.fabric, &weq_attr, &weq, NULL), -FI_EINVAL);
	weq_attr.wait_set = ws2;
	EQ(fi_eq_open(r.fabric, &weq_attr, &weq, NULL), 0);
	struct fid *weqfid = &weq->fid;
	EQ(fi_wait(ws2, 20), -FI_ETIMEDOUT);
	EQ(fi_trywait(r.fabric, &weqfid, 1), 0);
	struct fi_eq_entry ee = { .fid = &r.fabric->fid, .context = &cq_ctx, .data = 5 }, eb;
	uint32_t ev = 0;
	EQ(fi_eq_write(weq, FI_NOTIFY, &ee, sizeof(ee), 0), sizeof(ee));
	EQ(fi_wait(ws2, 5000), 0);
	EQ(fi_trywait(r.fabric, &weqfid, 1), -FI_EAGAIN);
	EQ(fi_eq_read(weq, &ev, &eb, sizeof(eb), 0), sizeof(eb));
	CHECK(ev == FI_NOTIFY && eb.data == 5 && eb.context == &cq_ctx);
	EQ(fi_trywait(r.fabric, &weqfid, 1), 0);
	EQ(fi_wait(ws2, 20), -FI_ETIMEDOUT);
	EQ(fi_eq_write(weq, FI_NOTIFY, &ee, sizeof(ee), 0), sizeof(ee));
	EQ(fi_close(&weq->fid), 0);
	EQ(fi_wait(ws2, 20), -FI_ETIMEDOUT);

	/* fi_trywait misuse. */
	struct fid *bad[2] = { &r.domain->fid, NULL };
	EQ(fi_trywait(r.fabric, NULL, 1), -FI_EINVAL);
	EQ(fi_trywait(r.fabric, bad, 1), -FI_EINVAL);
	EQ(fi_trywait(r.fabric, &bad[1], 1), -FI_EINVAL);
	EQ(fi_trywait(r.fabric, bad, 0), 0);

	/* A poll set over the CQ and the counter. */
	struct fi_poll_attr pa = { .flags = 1 };
	struct fid_poll *ps;
	EQ(fi_poll_open(r.domain, &pa, &ps), -FI_EBADFLAGS);
	pa.flags = 0;
	EQ(fi_poll_open(r.domain, &pa, NULL), -FI_EINVAL);
	EQ(fi_poll_open(r.domain, &pa, &ps), 0);
	EQ(ps->fid.fclass, FI_CLASS_POLL);
	EQ(fi_poll_add(ps, &cq->fid, 0), 0);
	EQ(fi_poll_add(ps, &cq->fid, 0), -FI_EALREADY);
	EQ(fi_poll_add(ps, &cntr->fid, 1), -FI_EBADFLAGS);
	EQ(fi_poll_add(ps, &cntr->fid, 0), 0);
	EQ(fi_poll_add(ps, &rxc->fid, 0), 0);
	EQ(fi_poll_add(ps, &r.av->fid, 0), -FI_EINVAL);
	EQ(fi_poll_add(ps, NULL, 0), -FI_EINVAL);
	/* A CQ of another domain (same stack) is refused. */
	struct fid_domain *d2;
	struct fid_cq *cq2;
	EQ(fi_domain(r.fabric, r.info, &d2, NULL), 0);
	EQ(fi_cq_open(d2, &plain_attr, &cq2, NULL), 0);
	EQ(fi_poll_add(ps, &cq2->fid, 0), -FI_EINVAL);
	if (variant == 0) {
		/* A domain on the other stack: its counter shares the wait set (opened
		 * before any stack was chosen); its CQ is not for this domain's poll set. */
		variant = 1;
		struct fi_info *h1 = hints_base(), *i1;
		variant = 0;
		EQ(fi_getinfo(VER, NULL, NULL, 0, h1, &i1), 0);
		fi_freeinfo(h1);
		struct fid_domain *d1;
		struct fid_cntr *c1;
		struct fid_cq *cq1;
		EQ(fi_domain(r.fabric, i1, &d1, NULL), 0);
		cntr_attr.wait_set = ws;
		EQ(fi_cntr_open(d1, &cntr_attr, &c1, NULL), 0);
		EQ(fi_cq_open(d1, &plain_attr, &cq1, NULL), 0);
		EQ(fi_poll_add(ps, &cq1->fid, 0), -FI_EINVAL);
		EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);
		EQ(fi_cntr_add(c1, 1), 0);
		EQ(fi_wait(ws, 5000), 0);
		EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);
		EQ(fi_close(&c1->fid), 0);
		EQ(fi_close(&cq1->fid), 0);
		EQ(fi_close(&d1->fid), 0);
		fi_freeinfo(i1);
	}
	void *ctxs[4] = { NULL };
	EQ(fi_poll(ps, ctxs, 4), 0);
	EQ(fi_poll(ps, NULL, 4), -FI_EINVAL);
	EQ(fi_poll(ps, ctxs, -1), -FI_EINVAL);
	EQ(fi_cntr_add(cntr, 1), 0);
	EQ(fi_poll(ps, ctxs, 4), 1);
	CHECK(ctxs[0] == &cntr_ctx);
	EQ(fi_poll(ps, ctxs, 4), 0);
	/* A change of the error value alone is an event too. */
	EQ(fi_cntr_adderr(cntr, 1), 0);
	EQ(fi_poll(ps, ctxs, 4), 1);
	CHECK(ctxs[0] == &cntr_ctx);
	EQ(fi_poll(ps, ctxs, 4), 0);
	uint64_t received = fi_cntr_read(rxc);
	EQ(fi_recv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	EQ(fi_send(r.ep, out, 7, NULL, r.self, &sctx), 0);
	/* The CQ (not empty) and the receive counter (moved), once both completions are
	 * there; one context fits in a one-entry array. */
	int n = 0, seen_cq = 0, seen_rxc = 0;
	double end = now() + 5;
	while (!(seen_cq && seen_rxc) && now() < end) {
		n = fi_poll(ps, ctxs, 4);
		CHECK(n >= 0 && n <= 2);
		for (int i = 0; i < n; i++) {
			seen_cq |= ctxs[i] == &cq_ctx;
			seen_rxc |= ctxs[i] == &rxc_ctx;
			CHECK(ctxs[i] == &cq_ctx || ctxs[i] == &rxc_ctx);
		}
	}
	CHECK(seen_cq && seen_rxc);
	EQ(fi_poll(ps, ctxs, 1), 1);
	CHECK(ctxs[0] == &cq_ctx);
	for (int i = 0; i < 2; i++)
		EQ(read_one(cq, &e), 1);
	EQ(fi_cntr_read(rxc), received + 1);
	EQ(fi_poll(ps, ctxs, 4), 0);
	/* The counter's changes woke the wait set too, once. */
	EQ(fi_wait(ws, 0), 0);
	EQ(fi_wait(ws, 0), -FI_ETIMEDOUT);
	/* Members and the set are busy while together. */
	EQ(fi_close(&cntr->fid), -FI_EBUSY);
	EQ(fi_close(&ps->fid), -FI_EBUSY);
	EQ(fi_close(&ws->fid), -FI_EBUSY);
	EQ(fi_poll_del(ps, &cq->fid, 1), -FI_EBADFLAGS);
	EQ(fi_poll_del(ps, &cq->fid, 0), 0);
	EQ(fi_poll_del(ps, &cq->fid, 0), -FI_ENOENT);
	EQ(fi_poll_del(ps, &cq2->fid, 0), -FI_ENOENT);
	EQ(fi_poll_del(ps, &cntr->fid, 0), 0);
	EQ(fi_poll_del(ps, &rxc->fid, 0), 0);
	EQ(fi_poll_del(ps, NULL, 0), -FI_EINVAL);
	EQ(fi_close(&ps->fid), 0);
	EQ(fi_close(&ps->fid), -FI_EINVAL);
	EQ(fi_close(&cq2->fid), 0);
	EQ(fi_close(&d2->fid), 0);

	/* A member that closes leaves its set: the completions left in the CQ no longer
	 * end a wait. */
	EQ(fi_recv(r.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &rctx), 0);
	EQ(fi_send(r.ep, out, 7, NULL, r.self, &sctx), 0);
	EQ(trywait_until_events(r.fabric, wsfid), -FI_EAGAIN);
	EQ(fi_trywait(r.fabric, &cqfid, 1), -FI_EAGAIN);
	EQ(fi_close(&r.ep->fid), 0);
	EQ(fi_close(&cq->fid), 0);
	EQ(fi_close(&cntr->fid), 0);
	EQ(fi_close(&rxc->fid), 0);
	EQ(fi_wait(ws, 30), -FI_ETIMEDOUT);

	/* Closing: a set with members is busy, a fabric with a set too. */
	EQ(fi_close(&ws2->fid), -FI_EBUSY);
	EQ(fi_close(&cntr2->fid), 0);
	EQ(fi_close(&plain->fid), 0);
	EQ(fi_close(&r.av->fid), 0);
	EQ(fi_close(&r.domain->fid), 0);
	EQ(fi_close(&r.fabric->fid), -FI_EBUSY);
	EQ(fi_close(&ws->fid), 0);
	EQ(fi_close(&ws->fid), -FI_EINVAL);
	EQ(fi_wait(ws, 0), -FI_EINVAL);
	EQ(fi_close(&ws2->fid), 0);
	EQ(fi_close(&r.fabric->fid), 0);
	fi_freeinfo(r.info);
	printf("ok wait and poll sets (stack %d)\n", variant);
}

/* An EQ on the fabric: user events written and read back, an empty queue. */
static void test_eq(void)
{
	struct fi_info *h = hints_base(), *info;
	EQ(fi_getinfo(VER, NULL, NULL, 0, h, &info), 0);
	fi_freeinfo(h);
	struct fid_fabric *fabric;
	EQ(fi_fabric(info->fabric_attr, &fabric, NULL), 0);
	struct fi_eq_attr attr = { .size = 8, .flags = FI_WRITE, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_eq *eq;
	EQ(fi_eq_open(fabric, &attr, &eq, NULL), 0);
	uint32_t event;
	struct fi_eq_entry e = { .fid = &fabric->fid, .context = &event, .data = 99 }, back;
	EQ(fi_eq_read(eq, &event, &back, sizeof(back), 0), -FI_EAGAIN);
	EQ(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0), sizeof(e));
	EQ(fi_eq_read(eq, &event, &back, 4, 0), -FI_ETOOSMALL);
	EQ(fi_eq_sread(eq, &event, &back, sizeof(back), 1000, 0), sizeof(back));
	EQ(event, FI_NOTIFY);
	CHECK(back.fid == &fabric->fid && back.context == &event);
	EQ(back.data, 99);
	EQ(fi_eq_sread(eq, &event, &back, sizeof(back), 10, 0), -FI_EAGAIN);
	EQ(fi_close(&fabric->fid), -FI_EBUSY);
	EQ(fi_close(&eq->fid), 0);
	EQ(fi_close(&fabric->fid), 0);
	fi_freeinfo(info);
	printf("ok eq\n");
}

int main(void)
{
	const char *p = getenv("FAB_PROV");
	if (p && *p)
		PROV = p;
	tcp = strcmp(PROV, "fab_tcp") == 0;
	hybrid = strcmp(PROV, "fab_hybrid") == 0;
	printf("provider %s\n", PROV);
	test_getinfo();
	for (variant = 0; variant < 2; variant++) {
		test_messages();
		test_peek_claim();
		test_formats();
		test_wait_and_poll_sets();
	}
	variant = 0;
	test_misuse();
	test_counters_and_waits();
	test_eq();
	printf("all %d checks passed\n", checks);
	return 0;
}
