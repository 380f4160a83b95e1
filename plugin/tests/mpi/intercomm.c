/* Intercommunicators made and used in a loop: split MPI_COMM_WORLD by rank parity,
 * MPI_Intercomm_create, a rooted MPI_Gather, MPI_Allgather and MPI_Barrier on the
 * intercommunicator, free, repeat (argv[1] times, default 200). Prints "done" on rank 0.
 *
 * Open MPI inserts the peer's address again for each intercommunicator. When each insert
 * of the same name got a new address, a message resolved to the older one never matched
 * the directed receive posted for the newer one, and this loop hung at -n 2 whenever
 * the cores were busy with other work (two `yes > /dev/null`). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    for (int it = 0; it < iters; it++) {
        MPI_Comm local, inter;
        int color = rank % 2;
        MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local);
        MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, color ? 0 : 1, 0, &inter);
        int v = rank, out[64];
        int lrank; MPI_Comm_rank(local, &lrank);
        if (color == 0) MPI_Gather(&v, 1, MPI_INT, out, 1, MPI_INT, lrank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter);
        else MPI_Gather(&v, 1, MPI_INT, NULL, 0, MPI_INT, 0, inter);
        MPI_Allgather(&v, 1, MPI_INT, out, 1, MPI_INT, inter);
        MPI_Barrier(inter);
        MPI_Comm_free(&inter);
        MPI_Comm_free(&local);
        if (rank == 0 && it % 50 == 0) fprintf(stderr, "it %d\n", it);
    }
    if (rank == 0) printf("done\n");
    MPI_Finalize();
}
