/* The plugin's fast path allocates nothing: every vector call (sendv/recvv, the msg
 * forms, tagged, RMA and atomics, at iov_limit entries) to self, with its completions
 * read, makes no call into the allocator once warmed up.
 *
 * The program defines malloc, calloc, realloc and the aligned forms itself, forwarding
 * to glibc's __libc_* entry points: the dynamic linker binds every library's calls to
 * these (libfabric's and the plugin's, whose Rust allocator is glibc's malloc), so
 * each one is counted. The calls' own thread is what must not allocate (with manual
 * progress it does all of the work); other threads' allocations are shown, not judged:
 * the providers' helper threads allocate once when they first run, whenever the
 * scheduler lets them. Each operation runs 1000 rounds first (queues and lazily made
 * state reach their steady size), then NOALLOC_ITERS rounds between two readings of
 * the count; the difference must be 0. A plain fi_send/fi_recv round is measured the
 * same way for comparison.
 *
 * FAB_PROV names the provider (default fab_shm); NOALLOC_ITERS the measured rounds per
 * operation (default 20000); NOALLOC_ONLY one operation by its printed name;
 * NOALLOC_COUNT=0 runs the operations uncounted, for a tool that replaces the
 * allocator itself (valgrind) and counts instead. Prints one line per operation; exits non-zero if any
 * allocated, after printing them all. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

/* The thread making the calls, and allocator calls so far by it and by the others. */
static pthread_t caller;
static atomic_ulong mine, others;

static void count(void)
{
	if (pthread_equal(pthread_self(), caller))
		atomic_fetch_add_explicit(&mine, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&others, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
	count();
	return __libc_malloc(n);
}

void free(void *p)
{
	__libc_free(p);
}

void *calloc(size_t n, size_t size)
{
	count();
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	count();
	return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n)
{
	count();
	return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	return memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	if (align < sizeof(void *) || (align & (align - 1)) != 0)
		return EINVAL;
	void *p = memalign(align, n);
	if (p == NULL)
		return ENOMEM;
	*out = p;
	return 0;
}

#define FAIL(...)                                                         \
	do {                                                              \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
		fprintf(stderr, __VA_ARGS__);                             \
		fprintf(stderr, "\n");                                    \
		exit(1);                                                  \
	} while (0)

#define OK(call)                                                          \
	do {                                                              \
		long long _r = (long long)(call);                         \
		if (_r != 0)                                              \
			FAIL("%s == %lld (%s)", #call, _r, fi_strerror((int)-_r)); \
	} while (0)

#define VER FI_VERSION(1, 17)
/* Elements (uint64_t) per iovec entry, and the most entries a test uses. */
#define SEG 4
#define MAXV 8

static struct fid_ep *ep;
static struct fid_cq *cq;
static fi_addr_t self;
static size_t lim;
static uint64_t out[MAXV * SEG], in[MAXV * SEG], region[MAXV * SEG];
static uint64_t cmp[MAXV], res[MAXV * SEG];
static struct iovec out_iov[MAXV], in_iov[MAXV];
static struct fi_ioc out_ioc[MAXV], cmp_ioc[MAXV], res_ioc[MAXV];
static struct fi_context ctx;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads `n` successful completions, for at most 5 seconds. */
static void complete(int n)
{
	struct fi_cq_tagged_entry e[2];
	double end = now() + 5;
	while (n > 0) {
		ssize_t r = fi_cq_read(cq, e, (size_t)n);
		if (r > 0)
			n -= (int)r;
		else if (r != -FI_EAGAIN)
			FAIL("fi_cq_read: %zd (%s)", r, fi_strerror((int)-r));
		else if (now() > end)
			FAIL("no completion within 5 s");
	}
}

/* A message of `len` 64-bit words arrived whole. */
static void check_in(size_t len)
{
	if (memcmp(in, out, len * 8) != 0)
		FAIL("received data differs");
	memset(in, 0, len * 8);
}

static void op_send_recv(void)
{
	OK(fi_recv(ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, &ctx));
	OK(fi_send(ep, out, lim * SEG * 8, NULL, self, &ctx));
	complete(2);
	check_in(lim * SEG);
}

static void op_sendv_recvv(void)
{
	OK(fi_recvv(ep, in_iov, NULL, lim, FI_ADDR_UNSPEC, &ctx));
	OK(fi_sendv(ep, out_iov, NULL, lim, self, &ctx));
	complete(2);
	check_in(lim * SEG);
}

static void op_sendmsg_recvmsg(void)
{
	struct fi_msg rm = { .msg_iov = in_iov, .iov_count = lim, .addr = FI_ADDR_UNSPEC,
			     .context = &ctx };
	struct fi_msg sm = { .msg_iov = out_iov, .iov_count = lim, .addr = self,
			     .context = &ctx };
	OK(fi_recvmsg(ep, &rm, FI_COMPLETION));
	OK(fi_sendmsg(ep, &sm, FI_COMPLETION));
	complete(2);
	check_in(lim * SEG);
}

static void op_tsendv_trecvv(void)
{
	OK(fi_trecvv(ep, in_iov, NULL, lim, FI_ADDR_UNSPEC, 9, 0, &ctx));
	OK(fi_tsendv(ep, out_iov, NULL, lim, self, 9, &ctx));
	complete(2);
	check_in(lim * SEG);
}

static void op_tsendmsg_trecvmsg(void)
{
	struct fi_msg_tagged rm = { .msg_iov = in_iov, .iov_count = lim,
				    .addr = FI_ADDR_UNSPEC, .tag = 9, .context = &ctx };
	struct fi_msg_tagged sm = { .msg_iov = out_iov, .iov_count = lim, .addr = self,
				    .tag = 9, .context = &ctx };
	OK(fi_trecvmsg(ep, &rm, FI_COMPLETION));
	OK(fi_tsendmsg(ep, &sm, FI_COMPLETION));
	complete(2);
	check_in(lim * SEG);
}

static void op_writev_readv(void)
{
	OK(fi_writev(ep, out_iov, NULL, lim, self, 0, 7, &ctx));
	complete(1);
	OK(fi_readv(ep, in_iov, NULL, lim, self, 0, 7, &ctx));
	complete(1);
	check_in(lim * SEG);
}

static void op_writemsg_readmsg(void)
{
	struct fi_rma_iov rma = { .addr = 0, .len = lim * SEG * 8, .key = 7 };
	struct fi_msg_rma wm = { .msg_iov = out_iov, .iov_count = lim, .addr = self,
				 .rma_iov = &rma, .rma_iov_count = 1, .context = &ctx };
	struct fi_msg_rma rm = { .msg_iov = in_iov, .iov_count = lim, .addr = self,
				 .rma_iov = &rma, .rma_iov_count = 1, .context = &ctx };
	OK(fi_writemsg(ep, &wm, FI_COMPLETION));
	complete(1);
	OK(fi_readmsg(ep, &rm, FI_COMPLETION));
	complete(1);
	check_in(lim * SEG);
}

/* Atomics take one element per ioc here (lim elements in all), the compare values too. */
static void op_atomicv(void)
{
	OK(fi_atomicv(ep, out_ioc, NULL, lim, self, 0, 7, FI_UINT64, FI_SUM, &ctx));
	complete(1);
	OK(fi_fetch_atomicv(ep, out_ioc, NULL, lim, res_ioc, NULL, lim, self, 0, 7, FI_UINT64,
			    FI_SUM, &ctx));
	complete(1);
	OK(fi_compare_atomicv(ep, out_ioc, NULL, lim, cmp_ioc, NULL, lim, res_ioc, NULL, lim,
			      self, 0, 7, FI_UINT64, FI_CSWAP, &ctx));
	complete(1);
}

static void op_atomicmsg(void)
{
	struct fi_ioc operand = { out, lim }, result = { res, lim };
	struct fi_rma_ioc rma = { .addr = 0, .count = lim, .key = 7 };
	struct fi_msg_atomic am = { .msg_iov = &operand, .iov_count = 1, .addr = self,
				    .rma_iov = &rma, .rma_iov_count = 1,
				    .datatype = FI_UINT64, .op = FI_SUM, .context = &ctx };
	OK(fi_atomicmsg(ep, &am, FI_COMPLETION));
	complete(1);
	OK(fi_fetch_atomicmsg(ep, &am, &result, NULL, 1, FI_COMPLETION));
	complete(1);
	am.op = FI_CSWAP;
	OK(fi_compare_atomicmsg(ep, &am, cmp_ioc, NULL, lim, &result, NULL, 1, FI_COMPLETION));
	complete(1);
}

static const struct {
	const char *name;
	void (*run)(void);
} ops[] = {
	{ "fi_send+fi_recv", op_send_recv },
	{ "fi_sendv+fi_recvv", op_sendv_recvv },
	{ "fi_sendmsg+fi_recvmsg", op_sendmsg_recvmsg },
	{ "fi_tsendv+fi_trecvv", op_tsendv_trecvv },
	{ "fi_tsendmsg+fi_trecvmsg", op_tsendmsg_trecvmsg },
	{ "fi_writev+fi_readv", op_writev_readv },
	{ "fi_writemsg+fi_readmsg", op_writemsg_readmsg },
	{ "fi_atomicv+fetch+compare", op_atomicv },
	{ "fi_atomicmsg+fetch+compare", op_atomicmsg },
};

int main(void)
{
	const char *prov = getenv("FAB_PROV") ? getenv("FAB_PROV") : "fab_shm";
	long iters = getenv("NOALLOC_ITERS") ? atol(getenv("NOALLOC_ITERS")) : 20000;
	const long warmup = 1000;
	const char *only = getenv("NOALLOC_ONLY");
	const int counted = getenv("NOALLOC_COUNT") == NULL || strcmp(getenv("NOALLOC_COUNT"), "0");
	if (iters < 1)
		FAIL("NOALLOC_ITERS must be at least 1");
	caller = pthread_self();
	unsigned long at_start = atomic_load(&mine);

	struct fi_info *h = fi_allocinfo(), *info = NULL;
	if (h == NULL)
		FAIL("fi_allocinfo");
	h->fabric_attr->prov_name = strdup(prov);
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC;
	OK(fi_getinfo(VER, NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	/* getinfo builds its answer with calloc and strdup: unseen, the counting is not in
	 * effect and a zero below would prove nothing. */
	if (counted && atomic_load(&mine) == at_start)
		FAIL("the allocator calls are not counted");
	lim = info->tx_attr->iov_limit;
	if (lim < 1 || lim > MAXV || info->rx_attr->iov_limit != lim)
		FAIL("iov_limit %zu/%zu outside 1..%d", lim, info->rx_attr->iov_limit, MAXV);

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_mr *mr;
	OK(fi_fabric(info->fabric_attr, &fabric, NULL));
	OK(fi_domain(fabric, info, &domain, NULL));
	struct fi_av_attr av_attr = { .type = info->domain_attr->av_type };
	OK(fi_av_open(domain, &av_attr, &av, NULL));
	OK(fi_endpoint(domain, info, &ep, NULL));
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
	OK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	OK(fi_ep_bind(ep, &av->fid, 0));
	OK(fi_enable(ep));
	OK(fi_mr_reg(domain, region, sizeof(region), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 7, 0,
		     &mr, NULL));
	char name[256];
	size_t len = sizeof(name);
	OK(fi_getname(&ep->fid, name, &len));
	if (fi_av_insert(av, name, 1, &self, 0, NULL) != 1)
		FAIL("fi_av_insert");

	for (size_t k = 0; k < MAXV; k++) {
		for (size_t j = 0; j < SEG; j++)
			out[k * SEG + j] = 0x1000 * (k + 1) + j;
		out_iov[k] = (struct iovec){ &out[k * SEG], SEG * 8 };
		in_iov[k] = (struct iovec){ &in[k * SEG], SEG * 8 };
		out_ioc[k] = (struct fi_ioc){ &out[k], 1 };
		cmp_ioc[k] = (struct fi_ioc){ &cmp[k], 1 };
		res_ioc[k] = (struct fi_ioc){ &res[k], 1 };
	}

	printf("%s, iov_limit %zu, %ld rounds per operation after %ld to warm up\n", prov, lim,
	       iters, warmup);
	int bad = 0, ran = 0;
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
		if (only != NULL && strcmp(only, ops[o].name) != 0)
			continue;
		ran++;
		for (long i = 0; i < warmup; i++)
			ops[o].run();
		unsigned long before = atomic_load(&mine), other = atomic_load(&others);
		for (long i = 0; i < iters; i++)
			ops[o].run();
		unsigned long n = atomic_load(&mine) - before;
		other = atomic_load(&others) - other;
		if (counted)
			printf("%-28s %8lu allocations, %.4f per round (other threads: %lu)\n",
			       ops[o].name, n, (double)n / (double)iters, other);
		else
			printf("%-28s ran uncounted\n", ops[o].name);
		if (counted && n != 0)
			bad++;
	}

	OK(fi_close(&mr->fid));
	OK(fi_close(&ep->fid));
	OK(fi_close(&av->fid));
	OK(fi_close(&cq->fid));
	OK(fi_close(&domain->fid));
	OK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	if (ran == 0)
		FAIL("no operation is named %s", only);
	if (bad)
		FAIL("%d operations allocated", bad);
	if (counted)
		printf("ok no allocation\n");
	return 0;
}
