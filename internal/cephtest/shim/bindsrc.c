// LD_PRELOAD shim for tests: every IPv4 socket a process connects is first bound to the
// address in $BIND_SRC (e.g. 127.0.0.2), so Ceph sees that process's clients at another
// loopback address than the test's own. This is how one machine plays two nodes, and how a
// test fences a client without fencing itself or the cluster's daemons (127.0.0.1).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
	static int (*real)(int, const struct sockaddr *, socklen_t);
	if (!real)
		real = dlsym(RTLD_NEXT, "connect");
	const char *src = getenv("BIND_SRC");
	if (src && addr && addr->sa_family == AF_INET) {
		struct sockaddr_in sin = {0};
		sin.sin_family = AF_INET;
		if (inet_pton(AF_INET, src, &sin.sin_addr) == 1)
			bind(fd, (struct sockaddr *)&sin, sizeof sin);
	}
	return real(fd, addr, len);
}
