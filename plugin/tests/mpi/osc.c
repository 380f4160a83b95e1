/* MPI one-sided communication over whatever osc/btl mpirun selects: a window from
 * MPI_Win_allocate; under fences every rank puts into every rank, accumulates (sum)
 * into slot 0 of every rank and gets a neighbour's slot; under passive-target locks
 * every rank fetch-and-adds a counter on rank 0. Prints "ok osc <n> ranks" on rank 0
 * and exits non-zero on the first wrong value.
 *
 * MPI_Compare_and_swap is left out: Open MPI 4.1.4's osc rdma crashes in it before
 * any provider is called (plugin/tests/ompi414.sh, case cswap). */
#include <mpi.h>
#include <stdio.h>

static int rank, size;

#define CHECK(c, ...)                                                      \
    do {                                                                   \
        if (!(c)) {                                                        \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                  \
        }                                                                  \
    } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* Slots 0..size-1 take puts (slot 0 then accumulates), slot `size` counts. */
    long *base;
    MPI_Win win;
    MPI_Win_allocate(sizeof(long) * (size + 1), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                     &base, &win);
    for (int i = 0; i <= size; i++)
        base[i] = 0;
    MPI_Win_fence(0, win);
    long v = rank + 1;
    for (int t = 0; t < size; t++)
        MPI_Put(&v, 1, MPI_LONG, t, rank, 1, MPI_LONG, win);
    MPI_Win_fence(0, win);
    long one = 1;
    for (int t = 0; t < size; t++)
        MPI_Accumulate(&one, 1, MPI_LONG, t, 0, 1, MPI_LONG, MPI_SUM, win);
    MPI_Win_fence(0, win);
    long got = -1;
    MPI_Get(&got, 1, MPI_LONG, (rank + 1) % size, size - 1, 1, MPI_LONG, win);
    MPI_Win_fence(0, win);
    CHECK(base[0] == 1 + size, "slot 0 holds %ld, not %d", base[0], 1 + size);
    for (int i = 1; i < size; i++)
        CHECK(base[i] == i + 1, "slot %d holds %ld, not %d", i, base[i], i + 1);
    CHECK(got == size, "got %ld from the neighbour, not %d", got, size);

    long old = -1, count = -1;
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, size, MPI_SUM, win);
    MPI_Win_unlock(0, win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    MPI_Get(&count, 1, MPI_LONG, 0, size, 1, MPI_LONG, win);
    MPI_Win_unlock(0, win);
    CHECK(old >= 0 && old < size, "fetch-and-add returned %ld", old);
    CHECK(count == size, "the counter holds %ld, not %d", count, size);
    /* Each rank saw a different old value: their sum is 0 + 1 + ... + size-1. */
    long sum = 0;
    MPI_Allreduce(&old, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == (long)size * (size - 1) / 2, "fetched values sum to %ld", sum);

    MPI_Win_free(&win);
    if (rank == 0)
        printf("ok osc %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
