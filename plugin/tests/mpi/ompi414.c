/* What mpi4py's suite trips over in Open MPI 4.1.4's ofi components, on any libfabric
 * provider (plugin/tests/ompi414.sh runs each case over ours and libfabric's own):
 *
 *   mprobe-ssend   MPI_Issend received through MPI_Mprobe + MPI_Mrecv: mtl ofi's
 *                  mrecv path never acknowledges a synchronous send; the sender's
 *                  MPI_Wait never returns.
 *   cancel-ssend   MPI_Cancel of an MPI_Issend: mtl ofi's cancel reads the request's
 *                  communicator, which send requests never set: a crash or
 *                  MPI_ERR_OTHER depending on what the recycled request held.
 *   alltoallw      MPI_Alltoallw from MPI_BOTTOM with absolute-address struct types
 *                  (mpi4py's testAlltoallwBottom): the persistent sends of coll basic
 *                  reach the provider with a NULL buffer and a non-zero length.
 *   cswap          MPI_Compare_and_swap through osc rdma: a crash before any provider
 *                  is called (in mca_btl_ofi_acswap on btl ofi; on vader too).
 *
 * Prints "ok <case>" on every rank that got through. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *what = argc > 1 ? argv[1] : "";
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    int out[4] = { rank, 1, 2, 3 }, in[4];
    if (!strcmp(what, "mprobe-ssend")) {
        MPI_Request r;
        MPI_Message m;
        MPI_Issend(out, 4, MPI_INT, to, 7, MPI_COMM_WORLD, &r);
        MPI_Mprobe(from, 7, MPI_COMM_WORLD, &m, MPI_STATUS_IGNORE);
        MPI_Mrecv(in, 4, MPI_INT, &m, MPI_STATUS_IGNORE);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else if (!strcmp(what, "cancel-ssend")) {
        /* Either the cancel succeeds or the send completes, matched by the receive
         * posted before the wait; a receive left unmatched is cancelled after. */
        MPI_Request s, r;
        MPI_Status st;
        int cancelled, done;
        MPI_Issend(out, 4, MPI_INT, to, 9, MPI_COMM_WORLD, &s);
        MPI_Cancel(&s);
        MPI_Irecv(in, 4, MPI_INT, from, 9, MPI_COMM_WORLD, &r);
        MPI_Wait(&s, &st);
        MPI_Test_cancelled(&st, &cancelled);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (!done) {
            MPI_Cancel(&r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
    } else if (!strcmp(what, "alltoallw")) {
        int *sb = malloc(sizeof(int) * size), *rb = malloc(sizeof(int) * size);
        int *counts = malloc(sizeof(int) * size), *displs = calloc(size, sizeof(int));
        MPI_Datatype *st = malloc(sizeof(MPI_Datatype) * size), *rt = malloc(sizeof(MPI_Datatype) * size);
        for (int p = 0; p < size; p++) {
            int one = 1;
            MPI_Aint a;
            MPI_Datatype base = MPI_INT;
            sb[p] = rank * 100 + p;
            rb[p] = -1;
            counts[p] = 1;
            MPI_Get_address(&sb[p], &a);
            MPI_Type_create_struct(1, &one, &a, &base, &st[p]);
            MPI_Type_commit(&st[p]);
            MPI_Get_address(&rb[p], &a);
            MPI_Type_create_struct(1, &one, &a, &base, &rt[p]);
            MPI_Type_commit(&rt[p]);
        }
        MPI_Alltoallw(MPI_BOTTOM, counts, displs, st, MPI_BOTTOM, counts, displs, rt,
                      MPI_COMM_WORLD);
        for (int p = 0; p < size; p++)
            if (rb[p] != p * 100 + rank) {
                fprintf(stderr, "rank %d: wrong value from %d\n", rank, p);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
    } else if (!strcmp(what, "cswap")) {
        long *base, mine = rank + 100, cmp = 0, prev = -1;
        MPI_Win win;
        MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
        *base = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Compare_and_swap(&mine, &cmp, &prev, MPI_LONG, 0, 0, win);
        MPI_Win_unlock(0, win);
        MPI_Win_free(&win);
    } else {
        fprintf(stderr, "usage: ompi414 mprobe-ssend|cancel-ssend|alltoallw|cswap\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("ok %s\n", what);
    MPI_Finalize();
    return 0;
}
