/* MPI point-to-point over whatever transport mpirun selects: blocking send/recv of
 * many sizes with data checks, windows of Isend/Irecv, MPI_ANY_SOURCE/MPI_ANY_TAG,
 * MPI_Probe/Iprobe, every rank to every other at once, and a ring over all ranks.
 * An argument caps the blocking sizes (4 MiB by default). Prints "ok p2p <n> ranks"
 * on rank 0 and exits non-zero on the first wrong byte or status. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK(c, ...)                                                        \
    do {                                                                     \
        if (!(c)) {                                                          \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, "\n");                                           \
            MPI_Abort(MPI_COMM_WORLD, 1);                                    \
        }                                                                    \
    } while (0)

static unsigned char pat(int from, int tag, size_t i) {
    return (unsigned char)(from * 31 + tag * 7 + i * 13 + (i >> 8));
}

static void fill(unsigned char *b, size_t n, int from, int tag) {
    for (size_t i = 0; i < n; i++) b[i] = pat(from, tag, i);
}

static void check(const unsigned char *b, size_t n, int from, int tag) {
    for (size_t i = 0; i < n; i++)
        CHECK(b[i] == pat(from, tag, i), "byte %zu of %zu from %d tag %d: %u", i, n,
              from, tag, b[i]);
}

/* The largest message of sizes(): the program's argument, 4 MiB without one. Jobs of
 * many oversubscribed ranks pass less, as each ping-pong waits for its two ranks to be
 * scheduled among all the others. */
static size_t max = 4u << 20;

/* Blocking ping-pong between 0 and every other rank, sizes 0..max. */
static void sizes(void) {
    unsigned char *buf = malloc(max);
    CHECK(buf, "malloc");
    size_t ns[64];
    int k = 0;
    ns[k++] = 0;
    for (size_t n = 1; n <= max; n = n * 2) {
        ns[k++] = n;
        if (n > 2 && n * 3 / 2 <= max) ns[k++] = n * 3 / 2 + 1;
    }
    for (int peer = 1; peer < size; peer++) {
        for (int j = 0; j < k; j++) {
            size_t n = ns[j];
            int tag = j;
            MPI_Status st;
            int cnt;
            if (rank == 0) {
                fill(buf, n, 0, tag);
                MPI_Send(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
                memset(buf, 0, n);
                MPI_Recv(buf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &cnt);
                CHECK((size_t)cnt == n, "count %d != %zu", cnt, n);
                check(buf, n, peer, tag);
            } else if (rank == peer) {
                memset(buf, 0, n);
                MPI_Recv(buf, (int)n, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &cnt);
                CHECK((size_t)cnt == n, "count %d != %zu", cnt, n);
                check(buf, n, 0, tag);
                fill(buf, n, peer, tag);
                MPI_Send(buf, (int)n, MPI_BYTE, 0, tag, MPI_COMM_WORLD);
            }
        }
    }
    free(buf);
}

/* Windows of nonblocking sends and receives in both directions between rank pairs. */
static void windows(void) {
    enum { W = 32, ROUNDS = 20 };
    size_t lens[] = {8, 1000, 70000};
    int peer = rank ^ 1;
    if (peer >= size) return;
    for (int l = 0; l < 3; l++) {
        size_t n = lens[l];
        unsigned char *s = malloc(n * W), *r = malloc(n * W);
        CHECK(s && r, "malloc");
        for (int round = 0; round < ROUNDS; round++) {
            MPI_Request req[2 * W];
            for (int i = 0; i < W; i++) {
                memset(r + i * n, 0, n);
                MPI_Irecv(r + i * n, (int)n, MPI_BYTE, peer, 100 + i, MPI_COMM_WORLD, &req[i]);
            }
            for (int i = 0; i < W; i++) {
                /* Post in reverse tag order: matching is by tag, not arrival. */
                int t = W - 1 - i;
                fill(s + t * n, n, rank, 100 + t + round);
                MPI_Isend(s + t * n, (int)n, MPI_BYTE, peer, 100 + t, MPI_COMM_WORLD,
                          &req[W + i]);
            }
            MPI_Waitall(2 * W, req, MPI_STATUSES_IGNORE);
            for (int i = 0; i < W; i++) check(r + i * n, n, peer, 100 + i + round);
        }
        free(s);
        free(r);
    }
}

/* Rank 0 receives one message from every other rank with ANY_SOURCE/ANY_TAG, after
 * probing each; the statuses name the sender and its tag. */
static void wildcards(void) {
    if (rank == 0) {
        int *seen = calloc((size_t)size, sizeof *seen);
        for (int i = 1; i < size; i++) {
            MPI_Status st;
            MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int src = st.MPI_SOURCE, tag = st.MPI_TAG, cnt;
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            CHECK(src >= 1 && src < size && tag == 500 + src, "probe src %d tag %d", src, tag);
            CHECK(cnt == 100 * src, "probe count %d from %d", cnt, src);
            unsigned char *b = malloc(cnt);
            MPI_Status st2;
            MPI_Recv(b, cnt, MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &st2);
            CHECK(st2.MPI_SOURCE == src, "recv from %d after probing %d", st2.MPI_SOURCE, src);
            check(b, cnt, src, tag);
            CHECK(!seen[src], "twice from %d", src);
            seen[src] = 1;
            free(b);
        }
        free(seen);
        /* Nothing else is pending. */
        int flag = 1;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        CHECK(!flag, "unexpected message pending");
    } else {
        int n = 100 * rank;
        unsigned char *b = malloc(n);
        fill(b, n, rank, 500 + rank);
        MPI_Send(b, n, MPI_BYTE, 0, 500 + rank, MPI_COMM_WORLD);
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Every rank to every other at once: a receive posted from every peer, then a send
 * to every peer, in rounds that alternate posted-first and sent-first (unexpected
 * messages), so each endpoint has every other rank as a live peer. */
static void all_to_all(void) {
    size_t lens[] = {64, 3000, 40000};
    int peers = size - 1;
    MPI_Request *req = malloc(sizeof *req * 2 * (size_t)(peers + 1));
    CHECK(req, "malloc");
    for (int l = 0; l < 3; l++) {
        size_t n = lens[l];
        unsigned char *s = malloc(n * (size_t)size), *r = malloc(n * (size_t)size);
        CHECK(s && r, "malloc");
        for (int round = 0; round < 4; round++) {
            int k = 0, tag = 700 + l * 4 + round;
            int sent_first = round & 1;
            for (int i = 1; i <= peers && sent_first; i++) {
                int to = (rank + i) % size;
                fill(s + to * n, n, rank, tag + to);
                MPI_Isend(s + to * n, (int)n, MPI_BYTE, to, tag, MPI_COMM_WORLD, &req[k++]);
            }
            if (sent_first) MPI_Barrier(MPI_COMM_WORLD);
            for (int i = 1; i <= peers; i++) {
                int from = (rank + size - i) % size;
                memset(r + from * n, 0, n);
                MPI_Irecv(r + from * n, (int)n, MPI_BYTE, from, tag, MPI_COMM_WORLD, &req[k++]);
            }
            for (int i = 1; i <= peers && !sent_first; i++) {
                int to = (rank + i) % size;
                fill(s + to * n, n, rank, tag + to);
                MPI_Isend(s + to * n, (int)n, MPI_BYTE, to, tag, MPI_COMM_WORLD, &req[k++]);
            }
            MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
            for (int from = 0; from < size; from++)
                if (from != rank) check(r + from * n, n, from, tag + rank);
        }
        free(s);
        free(r);
    }
    free(req);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A ring: everyone sends right and receives left, sendrecv of 64 KiB. */
static void ring(void) {
    size_t n = 65536;
    unsigned char *s = malloc(n), *r = malloc(n);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    fill(s, n, rank, 900);
    MPI_Sendrecv(s, (int)n, MPI_BYTE, right, 900, r, (int)n, MPI_BYTE, left, 900,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    check(r, n, left, 900);
    long sum = 0, want = (long)size * (size - 1) / 2;
    long mine = rank;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == want, "allreduce %ld != %ld", sum, want);
    free(s);
    free(r);
}

/* Runs one part of the program; rank 0 tells how long it took, on stderr. */
static void phase(const char *name, void (*f)(void)) {
    double t = MPI_Wtime();
    f();
    if (rank == 0) fprintf(stderr, "p2p phase %s: %.3f s\n", name, MPI_Wtime() - t);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1) max = strtoul(argv[1], NULL, 0);
    CHECK(max <= (1u << 30), "largest size %zu over 1 GiB", max);
    phase("sizes", sizes);
    phase("windows", windows);
    phase("wildcards", wildcards);
    phase("all_to_all", all_to_all);
    phase("ring", ring);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("ok p2p %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
