//go:build rdma

package rdma

/*
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

// A write, on a thread Go did not start, to a socket whose peer is closed,
// as a provider's thread may make: it raises SIGPIPE on that thread.
static void *osp_sigpipe_thread(void *arg) {
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return (void *)1;
	close(sv[1]);
	char b = 0;
	ssize_t n = write(sv[0], &b, 1);
	close(sv[0]);
	return (void *)(long)(n < 0 ? 0 : 2);
}

static int osp_sigpipe_probe(void) {
	pthread_t t;
	void *rc;
	if (pthread_create(&t, NULL, osp_sigpipe_thread, NULL) != 0) return -1;
	pthread_join(t, &rc);
	return (int)(long)rc;
}
*/
import "C"

import (
	"os"
	"os/signal"
	"syscall"
)

// The process asks the Go runtime for SIGPIPE, so that a provider
// thread's write to a socket whose peer has gone (the sockets provider
// sends without MSG_NOSIGNAL) fails with EPIPE in the provider instead of
// killing the process: Go lets a SIGPIPE raised on a thread it did not
// start take the default action, death, unless someone asked for it
// (os/signal, "Go programs that use cgo"). A CI run's sockets conformance
// child died so. At init, not at the first domain: os/signal's goroutine
// then starts with the program, not in the middle of one that counts its
// goroutines. The channel is never read; signal.Notify drops what does not
// fit. A program built with the rdma tag therefore gets EPIPE from a write
// to a closed stdout instead of ending.
func init() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// sigpipeProbe makes a provider's kind of write to a closed socket on a
// thread of its own; 0 means the write failed and the process lives on
// (TestProviderSIGPIPE). Negative: no thread; 1: no socket pair; 2: the
// write succeeded.
func sigpipeProbe() int { return int(C.osp_sigpipe_probe()) }
