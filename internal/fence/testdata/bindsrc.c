/*
 * bindsrc.c: an LD_PRELOAD shim for the fencing tests. Every IPv4 TCP connection the process
 * opens leaves from the loopback address in $BIND_SRC (e.g. 127.0.0.2), so a Ceph client on
 * this machine looks to the cluster like another host, one that can be fenced without fencing
 * the test itself (127.0.0.1). Without $BIND_SRC it changes nothing.
 *
 * Build: gcc -shared -fPIC -o bindsrc.so bindsrc.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

static connect_fn next_connect;
static struct in_addr source;
static int have_source;

__attribute__((constructor)) static void init(void) {
	next_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
	const char *s = getenv("BIND_SRC");
	have_source = s != NULL && inet_pton(AF_INET, s, &source) == 1;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
	if (have_source && addr != NULL && addr->sa_family == AF_INET) {
		struct sockaddr_in local;
		memset(&local, 0, sizeof local);
		local.sin_family = AF_INET;
		local.sin_addr = source;
		/* port 0: the kernel picks one; a socket already bound keeps its address */
		(void)bind(fd, (const struct sockaddr *)&local, sizeof local);
	}
	return next_connect(fd, addr, len);
}
