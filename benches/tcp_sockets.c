/* The kernel's share of fab_tcp's RDM latency: a ping-pong of 72-byte messages (an RDM
 * frame header and 8 bytes) between two processes over loopback TCP, on one socket
 * for both directions (what MSG endpoints use) or one socket per direction (what RDM
 * endpoints use, providers/tcp/src/transport.rs). Both sides busy-poll recv with
 * MSG_DONTWAIT and set TCP_NODELAY, as the provider does.
 *
 *   cc -O2 -o /tmp/tcp_sockets benches/tcp_sockets.c
 *   for r in $(seq 10); do /tmp/tcp_sockets 1; /tmp/tcp_sockets 2; done
 */
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { LEN = 72, ITERS = 200000 };

static void die(const char *what) {
    perror(what);
    exit(1);
}

static struct sockaddr_in at(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int listener(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = at(port);
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(s, (void *)&a, sizeof a) || listen(s, 8))
        die("listen");
    return s;
}

static int nodelay(int s) {
    int one = 1;
    if (setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)) die("TCP_NODELAY");
    return s;
}

static int dial(int port) {
    struct sockaddr_in a = at(port);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (void *)&a, sizeof a)) die("connect");
    return nodelay(s);
}

static int take(int l) {
    int s = accept(l, NULL, NULL);
    if (s < 0) die("accept");
    return nodelay(s);
}

static void get(int s) {
    char b[LEN];
    for (size_t got = 0; got < LEN;) {
        ssize_t n = recv(s, b + got, LEN - got, MSG_DONTWAIT);
        if (n > 0) got += (size_t)n;
        else if (n == 0) die("peer closed");
    }
}

static void put(int s) {
    char b[LEN] = {1};
    if (send(s, b, LEN, 0) != LEN) die("send");
}

int main(int argc, char **argv) {
    int two = argc > 1 && atoi(argv[1]) == 2, base = 48100 + 2 * two;
    /* Both listen before the fork, so neither side's connect can come too early. */
    int l1 = listener(base), l2 = listener(base + 1);
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        int in = take(l1), out = two ? dial(base + 1) : in;
        for (int i = 0; i < ITERS; i++) {
            get(in);
            put(out);
        }
        return 0;
    }
    int out = dial(base), in = two ? take(l2) : out;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < ITERS; i++) {
        put(out);
        get(in);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    waitpid(child, NULL, 0);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("%s: %.2f us per one-way transfer\n", two ? "one socket per direction" : "one socket",
           ns / 1e3 / ITERS / 2);
    return 0;
}
