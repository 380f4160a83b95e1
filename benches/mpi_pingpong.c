/* MPI ping-pong between ranks 0 and 1: half the round-trip time in microseconds for
 * each size given on the command line (bytes), after a warm-up. Prints
 * "size <bytes> usec <half-rtt>" per size on rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int iters = getenv("ITERS") ? atoi(getenv("ITERS")) : 10000;
	for (int a = 1; a < argc; a++) {
		size_t n = strtoull(argv[a], NULL, 10);
		char *buf = malloc(n ? n : 1);
		memset(buf, rank, n);
		int it = n >= (1 << 20) ? iters / 20 + 10 : iters;
		double t0 = 0;
		for (int i = -it / 10 - 10; i < it; i++) {
			if (i == 0) {
				MPI_Barrier(MPI_COMM_WORLD);
				t0 = MPI_Wtime();
			}
			if (rank == 0) {
				MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else if (rank == 1) {
				MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
			}
		}
		double t = MPI_Wtime() - t0;
		if (rank == 0)
			printf("size %zu usec %.3f\n", n, t / it / 2 * 1e6);
		free(buf);
	}
	MPI_Finalize();
	return 0;
}
