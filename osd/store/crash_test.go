package store_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// The crash test: a child process (this test binary, re-executed) writes
// and overwrites a few objects forever and prints each acknowledged
// (key, generation); the parent SIGKILLs it at a random ack, reopens the
// store and checks that every object is one whole generation, no older
// than the last acknowledged, and that no garbage is left.

const (
	crashDirEnv = "OSPREY_STORE_CRASH_DIR"
	// crashSelfKillEnv, when set, makes the child SIGKILL itself that many
	// microseconds after opening the store, at whatever point it is.
	crashSelfKillEnv = "OSPREY_STORE_CRASH_SELF_KILL_US"
	crashPG          = 3
	crashChunk       = 16 << 10
)

var crashKeys = []string{"k0", "k1", "k2", "dir/k3", "dir/k4"}

// crashFileThreshold puts objects of three chunks and more in data files,
// so the crash tests cover all three ways a put is written: inline, chunks
// in several unsynced batches, and a data file.
const crashFileThreshold = 3 * crashChunk

func crashOptions(dir string) store.Options {
	return store.Options{Dir: dir, ChunkSize: crashChunk, DataFileThreshold: crashFileThreshold, Logger: quietLogger()}
}

// crashBody is generation gen of key, with bytes that only (key, gen)
// produce: from empty and inline (one chunk), chunks written in several
// unsynced batches, up to data files of 48 chunks, so every phase of every
// kind of put gets crashed.
func crashBody(key string, gen uint64) []byte {
	h := fnv.New64a()
	h.Write([]byte(key))
	r := rand.New(rand.NewPCG(h.Sum64(), gen))
	var n int
	switch gen % 4 {
	case 0:
		n = r.IntN(10)
	case 1:
		n = r.IntN(crashChunk + 1)
	case 2:
		n = r.IntN(5 * crashChunk)
	default:
		n = r.IntN(48 * crashChunk)
	}
	return randBytes(r, n)
}

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process of TestCrash")
	}
	ctx := context.Background()
	s, err := store.Open(ctx, crashOptions(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	s.SetChunkBatchBytesForTest(2 * crashChunk)
	if us, _ := strconv.Atoi(os.Getenv(crashSelfKillEnv)); us > 0 {
		time.AfterFunc(time.Duration(us)*time.Microsecond, func() {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		})
	}
	last, _, err := s.PGInfo(ctx, crashPG)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pg info:", err)
		os.Exit(2)
	}
	seq := last.Seq
	if seq == 0 {
		seq++
		err := s.Apply(ctx, crashPG, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: seq},
			Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "crash"}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "create bucket:", err)
			os.Exit(2)
		}
	}
	for range 1_000_000 {
		seq++
		key := crashKeys[seq%uint64(len(crashKeys))]
		body := crashBody(key, seq)
		le := &osdpb.LogEntry{
			Version: &osdpb.Version{Epoch: 1, Seq: seq},
			Req:     &osdpb.ReqID{Client: 1, Tid: seq},
			Kind:    osdpb.OpKind_OP_PUT,
			Bucket:  "crash",
			Key:     key,
			Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc(body),
				UserMeta: map[string]string{"gen": strconv.FormatUint(seq, 10)}},
		}
		if err := s.Apply(ctx, crashPG, le, body); err != nil {
			fmt.Fprintln(os.Stderr, "apply:", err)
			os.Exit(2)
		}
		// One write(2) per ack, unbuffered: the parent sees only what was
		// acknowledged after the synced commit.
		fmt.Fprintf(os.Stdout, "ACK %s %d\n", key, seq)
	}
	os.Exit(3)
}

func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("nested")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), 99))
	acked := map[string]uint64{}
	var maxAck uint64
	for round := range 8 {
		// Even rounds: the parent kills the child right after a random
		// number of acks. Odd rounds: the child kills itself at a random
		// time, so the kill lands anywhere inside a put, and the parent
		// reads every ack up to its death.
		selfKill := round%2 == 1
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		want := 5 + r.IntN(60)
		if selfKill {
			cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", crashSelfKillEnv, 2000+r.IntN(60000)))
			want = math.MaxInt
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		sc := bufio.NewScanner(out)
		n := 0
		for n < want && sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 || f[0] != "ACK" {
				continue
			}
			gen, err := strconv.ParseUint(f[2], 10, 64)
			must(t, err)
			acked[f[1]] = gen
			maxAck = max(maxAck, gen)
			n++
		}
		if !selfKill {
			must(t, cmd.Process.Kill()) // SIGKILL: no deferred code, no Close
		}
		err = cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v after %d acks, not SIGKILL: %s", round, err, n, stderr.String())
		}

		s, err := store.Open(context.Background(), crashOptions(dir))
		must(t, err)
		if err := s.CheckIntegrityForTest(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, key := range crashKeys {
			meta, body, err := s.ReadRange(context.Background(), "crash", key, 0, -1, nil)
			if errors.Is(err, store.ErrNoSuchKey) && acked[key] == 0 {
				continue
			}
			if err != nil {
				t.Fatalf("round %d: read %s: %v", round, key, err)
			}
			gen, err := strconv.ParseUint(meta.UserMeta["gen"], 10, 64)
			must(t, err)
			if gen < acked[key] {
				t.Fatalf("round %d: %s is generation %d, older than the acknowledged %d", round, key, gen, acked[key])
			}
			if want := crashBody(key, gen); !bytes.Equal(body, want) || meta.Size != uint64(len(want)) {
				t.Fatalf("round %d: %s generation %d: %d bytes do not match its %d", round, key, gen, len(body), len(want))
			}
		}
		last, _, err := s.PGInfo(context.Background(), crashPG)
		must(t, err)
		if last.Seq < maxAck {
			t.Fatalf("round %d: pg last %v, below the acknowledged %d", round, last, maxAck)
		}
		if e, ok, err := s.FindRequest(context.Background(), crashPG, &osdpb.ReqID{Client: 1, Tid: maxAck}); err != nil || !ok || e.Version.Seq != maxAck {
			t.Fatalf("round %d: acknowledged request %d not in the log: %v %v", round, maxAck, ok, err)
		}
		t.Logf("round %d: killed after %d acks (last %v); open collected %d data ids (interrupted puts, pooled and dead files)",
			round, n, last.Seq, s.Stats().GarbageCollected)
		must(t, s.Close())
	}
}

// TestPowerLoss is the stronger crash: Pebble's crashable in-memory
// filesystem keeps a random share of what was written but not synced, as
// a power cut would, while puts are in flight. Whatever survives must be
// whole objects, no older than what was acknowledged before the cut.
func TestPowerLoss(t *testing.T) { powerLoss(t, false) }

// TestPowerLossPipelined is TestPowerLoss with the OSD's pipeline: puts
// applied with ApplyAsync one behind the other, each acknowledged by
// another goroutine once its Durable returns, while later ones are
// applied and synced. No acknowledged put may be lost to the cut.
func TestPowerLossPipelined(t *testing.T) { powerLoss(t, true) }

func powerLoss(t *testing.T, pipelined bool) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	opts := store.WithFSForTest(crashOptions("/db"), fs)
	s, err := store.Open(ctx, opts)
	must(t, err)
	defer s.Close()
	s.SetChunkBatchBytesForTest(2 * crashChunk)
	must(t, s.Apply(ctx, crashPG, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 1},
		Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "crash"}, nil))

	var mu sync.Mutex
	acked := map[string]uint64{}
	var acks atomic.Int64
	ack := func(key string, seq uint64) {
		mu.Lock()
		acked[key] = seq
		mu.Unlock()
		acks.Add(1)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	type inFlight struct {
		key string
		seq uint64
		a   *store.Applied
	}
	syncing := make(chan inFlight, 16)
	acker := make(chan error, 1)
	go func() {
		var err error
		for f := range syncing {
			if err == nil {
				err = f.a.Durable()
				if err == nil {
					ack(f.key, f.seq)
				}
			} else {
				f.a.Durable()
			}
		}
		acker <- err
	}()
	go func() {
		defer close(syncing)
		for seq := uint64(2); ; seq++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			key := crashKeys[seq%uint64(len(crashKeys))]
			body := crashBody(key, seq)
			le := &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: seq}, Kind: osdpb.OpKind_OP_PUT,
				Bucket: "crash", Key: key, Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc(body),
					UserMeta: map[string]string{"gen": strconv.FormatUint(seq, 10)}}}
			if !pipelined {
				if err := s.Apply(ctx, crashPG, le, body); err != nil {
					done <- err
					return
				}
				ack(key, seq)
				continue
			}
			a, err := s.ApplyAsync(ctx, crashPG, le, body, nil)
			if err != nil {
				done <- err
				return
			}
			syncing <- inFlight{key, seq, a}
		}
	}()

	r := rand.New(rand.NewPCG(uint64(os.Getpid()), 7))
	for round := range 6 {
		// Wait for a few more acks (progress, not time) before each cut.
		for target := int64(round*8 + 5); acks.Load() < target; {
			runtime.Gosched()
		}
		mu.Lock()
		before := maps.Clone(acked)
		mu.Unlock()
		clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: r.IntN(101), RNG: r})
		c, err := store.Open(ctx, store.WithFSForTest(crashOptions("/db"), clone))
		if err != nil {
			t.Fatalf("round %d: open after power loss: %v", round, err)
		}
		if err := c.CheckIntegrityForTest(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, key := range crashKeys {
			meta, body, err := c.ReadRange(ctx, "crash", key, 0, -1, nil)
			if errors.Is(err, store.ErrNoSuchKey) && before[key] == 0 {
				continue
			}
			if err != nil {
				t.Fatalf("round %d: read %s: %v", round, key, err)
			}
			gen, err := strconv.ParseUint(meta.UserMeta["gen"], 10, 64)
			must(t, err)
			if gen < before[key] {
				t.Fatalf("round %d: %s is generation %d, older than the acknowledged %d", round, key, gen, before[key])
			}
			if !bytes.Equal(body, crashBody(key, gen)) {
				t.Fatalf("round %d: %s generation %d is not whole", round, key, gen)
			}
		}
		must(t, c.Close())
	}
	close(stop)
	must(t, <-done)
	must(t, <-acker)
}

// TestSyncWALCoversEarlierApplies: an answer that rests on entries applied
// before (a resent request found in the log) waits for SyncWAL, which
// must leave every entry applied so far synced, even one whose own
// Durable has not returned yet.
func TestSyncWALCoversEarlierApplies(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	s, err := store.Open(ctx, store.WithFSForTest(crashOptions("/db"), fs))
	must(t, err)
	defer s.Close()
	must(t, s.Apply(ctx, crashPG, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 1},
		Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "crash"}, nil))
	var pending []*store.Applied
	defer func() { // before Close, which waits for them
		for _, a := range pending {
			a.Durable()
		}
	}()
	for seq := uint64(2); seq < 10; seq++ {
		key := crashKeys[seq%uint64(len(crashKeys))]
		body := crashBody(key, seq)
		a, err := s.ApplyAsync(ctx, crashPG, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: seq}, Kind: osdpb.OpKind_OP_PUT,
			Bucket: "crash", Key: key, Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc(body)}}, body, nil)
		must(t, err)
		pending = append(pending, a)
	}
	must(t, s.SyncWAL(ctx))
	c, err := store.Open(ctx, store.WithFSForTest(crashOptions("/db"), fs.CrashClone(vfs.CrashCloneCfg{})))
	must(t, err)
	last, _, err := c.PGInfo(ctx, crashPG)
	must(t, err)
	if last.Seq != 9 {
		t.Fatalf("after SyncWAL and a power cut the pg ends at %v, not at the last entry applied (9)", last)
	}
	must(t, c.Close())
}

// TestFirstStartSurvivesPowerLoss: a store opened for the first time in a
// directory it creates, given a bucket and a synced put and then a power cut that
// keeps nothing unsynced, still has its directory and the write. Pebble
// syncs only the entries it makes, and it finds the store's directory
// already made (store.Open's mkdirDurable).
func TestFirstStartSurvivesPowerLoss(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	s, err := store.Open(ctx, store.WithFSForTest(crashOptions("/data/osd.0/store"), fs))
	must(t, err)
	must(t, s.Apply(ctx, crashPG, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 1},
		Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "crash"}, nil))
	body := crashBody("k", 1)
	must(t, s.Apply(ctx, crashPG, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 2}, Kind: osdpb.OpKind_OP_PUT,
		Bucket: "crash", Key: "k", Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc(body)}}, body))
	clone := fs.CrashClone(vfs.CrashCloneCfg{})
	must(t, s.Close())
	if _, err := clone.Stat("/data/osd.0/store"); err != nil {
		t.Fatalf("after a power cut the store's directory is gone: %v", err)
	}
	c, err := store.Open(ctx, store.WithFSForTest(crashOptions("/data/osd.0/store"), clone))
	must(t, err)
	defer c.Close()
	last, _, err := c.PGInfo(ctx, crashPG)
	must(t, err)
	if last.Seq != 2 {
		t.Fatalf("after a power cut the pg ends at %v, not at the synced put (2)", last)
	}
}
