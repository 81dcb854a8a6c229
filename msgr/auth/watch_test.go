package auth

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestWatchKeyring: a keyring rotated into the watched file is applied
// once; the same certificate again, another entity's keyring, a file
// being written (garbage) and a refused Apply are not, and a later good
// write still is.
func TestWatchKeyring(t *testing.T) {
	ca := mustCA(t)
	path := filepath.Join(t.TempDir(), "keyring")
	first := mustIssue(t, ca, "osd.3")
	write := func(data []byte) {
		t.Helper()
		if err := WriteKeyringFile(path, data); err != nil {
			t.Fatal(err)
		}
	}
	write(mustPEM(t, first))
	var (
		mu      sync.Mutex
		applied []*Keyring
		refuse  error
	)
	var logs bytes.Buffer
	var logMu sync.Mutex
	stop := watch(t, WatchOptions{Path: path, Current: first, Every: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil)),
		Apply: func(k *Keyring) error {
			mu.Lock()
			defer mu.Unlock()
			if refuse != nil {
				return refuse
			}
			applied = append(applied, k)
			return nil
		}})
	defer stop()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(applied)
	}
	logged := func(s string) bool {
		logMu.Lock()
		defer logMu.Unlock()
		return bytes.Contains(logs.Bytes(), []byte(s))
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waited 10 s for %s; applied %d; log:\n%s", what, count(), logs.String())
			}
			time.Sleep(time.Millisecond)
		}
	}

	write([]byte("-----BEGIN CERT"))
	waitFor("a torn file to be logged", func() bool { return logged("does not load") })
	write(mustPEM(t, mustIssue(t, ca, "osd.4")))
	waitFor("another entity's keyring to be logged", func() bool { return logged("another entity") })
	write(mustPEM(t, first)) // the same certificate: nothing to do
	mu.Lock()
	refuse = errors.New("refused by the messenger")
	mu.Unlock()
	second := mustIssue(t, ca, "osd.3")
	write(mustPEM(t, second))
	waitFor("a refused keyring to be logged", func() bool { return logged("refused by the messenger") })
	if n := count(); n != 0 {
		t.Fatalf("%d keyrings applied before a good, accepted one", n)
	}
	mu.Lock()
	refuse = nil
	mu.Unlock()
	third := mustIssue(t, ca, "osd.3")
	write(mustPEM(t, third))
	waitFor("the rotated keyring to be applied", func() bool { return count() == 1 })
	if !applied[0].Cert.Equal(third.Cert) {
		t.Fatal("applied a keyring other than the one written")
	}
}

// TestWatchKeyringFromTheStart: a keyring rotated between the daemon's
// load and the watch's start is taken up at the watch's first look.
func TestWatchKeyringFromTheStart(t *testing.T) {
	ca := mustCA(t)
	path := filepath.Join(t.TempDir(), "keyring")
	loaded, rotated := mustIssue(t, ca, "osd.3"), mustIssue(t, ca, "osd.3")
	if err := WriteKeyringFile(path, mustPEM(t, rotated)); err != nil {
		t.Fatal(err)
	}
	got := make(chan *Keyring, 1)
	stop := watch(t, WatchOptions{Path: path, Current: loaded, Every: time.Millisecond,
		Apply: func(k *Keyring) error { got <- k; return nil }})
	defer stop()
	select {
	case k := <-got:
		if !k.Cert.Equal(rotated.Cert) {
			t.Fatal("applied a keyring other than the file's")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the file's newer keyring was not applied")
	}
}

// watch runs WatchKeyring until the returned stop, which waits for it.
func watch(t *testing.T, o WatchOptions) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchKeyring(ctx, o)
	}()
	return func() {
		cancel()
		<-done
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
