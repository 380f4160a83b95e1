/*
 * Long double and long double complex atomic element operations for
 * `fabric::atomic` (see src/atomic.rs).
 *
 * Rust has no 80-bit extended float, and emulating it through f64 would
 * silently lose 11 bits of mantissa, so the arithmetic on FI_LONG_DOUBLE and
 * FI_LONG_DOUBLE_COMPLEX is done here, by the C compiler, with the platform's
 * real `long double`. Only the x86_64 80-bit layout (value in the first 10 of
 * 16 storage bytes) is supported; build.rs compiles this file only there.
 *
 * All pointers may be unaligned: every element is moved with memcpy.
 * The Rust caller has already validated the op/datatype combination and the
 * buffer lengths; an op this file does not handle returns -1.
 */

#include <float.h>
#include <stddef.h>
#include <string.h>

#if !defined(__x86_64__) || LDBL_MANT_DIG != 64 || __SIZEOF_LONG_DOUBLE__ != 16
#error "atomic_ld.c supports only the x86_64 80-bit extended long double"
#endif

/* enum fi_op values (rdma/fi_domain.h). */
enum {
	OP_MIN = 0,
	OP_MAX = 1,
	OP_SUM = 2,
	OP_PROD = 3,
	OP_LOR = 4,
	OP_LAND = 5,
	OP_LXOR = 8,
	OP_CSWAP = 12,
	OP_CSWAP_NE = 13,
	OP_CSWAP_LE = 14,
	OP_CSWAP_LT = 15,
	OP_CSWAP_GE = 16,
	OP_CSWAP_GT = 17,
};

#define LD_STORAGE 16	/* sizeof(long double) */
#define LD_VALUE 10	/* bytes holding the 80-bit value; the rest is padding */
#define CLD_STORAGE (2 * LD_STORAGE)

int fabric_ld_apply(unsigned op, unsigned char *dst, const unsigned char *src,
		    const unsigned char *cmp, size_t count);
int fabric_cld_apply(unsigned op, unsigned char *dst, const unsigned char *src,
		     const unsigned char *cmp, size_t count);

static long double ld_load(const unsigned char *p)
{
	long double v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/*
 * Computed results get zeroed padding so that equal values always have equal
 * bytes (the compiler leaves the padding of a long double temporary undefined).
 */
static void ld_store(unsigned char *p, long double v)
{
	memcpy(p, &v, LD_VALUE);
	memset(p + LD_VALUE, 0, LD_STORAGE - LD_VALUE);
}

static int ld_true(long double v)
{
	return v != 0.0L;
}

/* The swap condition of a compare op, `compare OP target` (fi_atomic(3)). */
static int ld_cond(unsigned op, long double c, long double t)
{
	switch (op) {
	case OP_CSWAP:
		return c == t;
	case OP_CSWAP_NE:
		return c != t;
	case OP_CSWAP_LE:
		return c <= t;
	case OP_CSWAP_LT:
		return c < t;
	case OP_CSWAP_GE:
		return c >= t;
	default: /* OP_CSWAP_GT; ld_is_cswap() admitted nothing else */
		return c > t;
	}
}

static int ld_is_cswap(unsigned op)
{
	return op >= OP_CSWAP && op <= OP_CSWAP_GT;
}

int fabric_ld_apply(unsigned op, unsigned char *dst, const unsigned char *src,
		    const unsigned char *cmp, size_t count)
{
	size_t i;

	/* Reject before touching anything, so a bad op never half-applies. */
	switch (op) {
	case OP_MIN:
	case OP_MAX:
	case OP_SUM:
	case OP_PROD:
	case OP_LOR:
	case OP_LAND:
	case OP_LXOR:
		break;
	default:
		if (!ld_is_cswap(op))
			return -1;
		break;
	}

	for (i = 0; i < count; i++) {
		unsigned char *dp = dst + i * LD_STORAGE;
		const unsigned char *sp = src + i * LD_STORAGE;
		long double d = ld_load(dp);
		long double s = ld_load(sp);

		switch (op) {
		case OP_MIN:
			/* addr = buf copies the operand element verbatim. */
			if (s < d)
				memcpy(dp, sp, LD_STORAGE);
			break;
		case OP_MAX:
			if (s > d)
				memcpy(dp, sp, LD_STORAGE);
			break;
		case OP_SUM:
			ld_store(dp, d + s);
			break;
		case OP_PROD:
			ld_store(dp, d * s);
			break;
		case OP_LOR:
			ld_store(dp, (long double)(ld_true(d) || ld_true(s)));
			break;
		case OP_LAND:
			ld_store(dp, (long double)(ld_true(d) && ld_true(s)));
			break;
		case OP_LXOR:
			ld_store(dp, (long double)((ld_true(d) && !ld_true(s)) ||
						   (!ld_true(d) && ld_true(s))));
			break;
		default:
			if (ld_cond(op, ld_load(cmp + i * LD_STORAGE), d))
				memcpy(dp, sp, LD_STORAGE);
			break;
		}
	}
	return 0;
}

static long double _Complex cld_load(const unsigned char *p)
{
	long double _Complex v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void cld_store(unsigned char *p, long double _Complex v)
{
	ld_store(p, __real__ v);
	ld_store(p + LD_STORAGE, __imag__ v);
}

/* A complex value is true when it is not 0 + 0i (C11 6.3.1.2). */
static int cld_true(long double _Complex v)
{
	return __real__ v != 0.0L || __imag__ v != 0.0L;
}

static void cld_store_bool(unsigned char *p, int b)
{
	ld_store(p, (long double)b);
	ld_store(p + LD_STORAGE, 0.0L);
}

int fabric_cld_apply(unsigned op, unsigned char *dst, const unsigned char *src,
		     const unsigned char *cmp, size_t count)
{
	size_t i;

	/* Reject before touching anything, so a bad op never half-applies. */
	switch (op) {
	case OP_SUM:
	case OP_PROD:
	case OP_LOR:
	case OP_LAND:
	case OP_LXOR:
	case OP_CSWAP:
	case OP_CSWAP_NE:
		break;
	default:
		return -1;
	}

	for (i = 0; i < count; i++) {
		unsigned char *dp = dst + i * CLD_STORAGE;
		const unsigned char *sp = src + i * CLD_STORAGE;
		long double _Complex d = cld_load(dp);
		long double _Complex s = cld_load(sp);

		switch (op) {
		case OP_SUM:
			cld_store(dp, d + s);
			break;
		case OP_PROD:
			/* C99 Annex G multiplication, as libfabric's `a * b`. */
			cld_store(dp, d * s);
			break;
		case OP_LOR:
			cld_store_bool(dp, cld_true(d) || cld_true(s));
			break;
		case OP_LAND:
			cld_store_bool(dp, cld_true(d) && cld_true(s));
			break;
		case OP_LXOR:
			cld_store_bool(dp, (cld_true(d) && !cld_true(s)) ||
					   (!cld_true(d) && cld_true(s)));
			break;
		case OP_CSWAP:
		case OP_CSWAP_NE: {
			long double _Complex c = cld_load(cmp + i * CLD_STORAGE);
			int eq = c == d;

			if (op == OP_CSWAP ? eq : !eq)
				memcpy(dp, sp, CLD_STORAGE);
			break;
		}
		default:
			break;
		}
	}
	return 0;
}
